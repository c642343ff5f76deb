"""Scan a fleet: every account/region discovered and every cluster checked, concurrently and bounded.

One pipeline, two bounded pools: account tasks (AssumeRole) and scope tasks (discovery) share the
scope pool; each discovered cluster goes to the cluster pool as soon as its scope is listed, and runs
:meth:`Doctor.check` with a Doctor and session of its own; what is the same for every cluster of a scope
(placement groups, file systems, scheduled events, a HyperPod cluster's nodes: the regional EarlyLoads of
fmdoctor.engine.prefetch) is loaded once for the scope, on its session, and read by each. Anything that goes
wrong is recorded for the account, scope or cluster it hit and the rest goes on; nothing here raises for one
bad scope.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from typing import Any

from fmdoctor.engine.api import Connection, Doctor
from fmdoctor.engine.aws import AwsOptions
from fmdoctor.engine.context import RegionLoads
from fmdoctor.engine.errors import CredentialsError, FmdoctorError, describe_aws_failure
from fmdoctor.engine.model import CheckError, Status
from fmdoctor.fleet.discovery import HYPERPOD, DiscoveredCluster, discover
from fmdoctor.fleet.model import (
    ASSUME_ROLE,
    CLUSTER,
    DISCOVERY,
    ClusterResult,
    FleetReport,
    FleetStats,
    ScopeResult,
    fleet_status,
)
from fmdoctor.fleet.sessions import (
    Scope,
    SessionFactory,
    SessionLedger,
    assume_role,
    caller_account,
    default_session_factory,
)
from fmdoctor.fleet.targets import AccountTarget, FleetPlan, resolve_targets

log = logging.getLogger(__name__)

# Codes AWS answers with in a region the account has not enabled (opt-in regions) or cannot use.
REGION_DISABLED_CODES = frozenset({"OptInRequired", "AuthFailure", "UnrecognizedClientException",
                                   "InvalidClientTokenId"})


@dataclass(frozen=True)
class FleetEvent:
    """Progress: one per cluster checked; ``total`` is the clusters known so far (discovery goes on)."""

    account: str
    region: str
    cluster: str
    status: Status
    done: int
    total: int


FleetProgress = Callable[[FleetEvent], None]


def scan_fleet(
    doctor: Doctor,
    plan: FleetPlan,
    only: Sequence[str] | None = None,
    concurrency: int | None = None,
    progress: FleetProgress | None = None,
    cancel: threading.Event | None = None,
    session_factory: SessionFactory = default_session_factory,
) -> FleetReport:
    """Check every cluster of the plan's accounts and regions; the template ``doctor`` gives settings,
    connection (source profile, endpoint), registry and clock. Raises only when the scan cannot start
    (bad ``only``, no source credentials, an organization that cannot be listed)."""
    doctor.registry.select(only)  # an unknown check id is a usage error before any AWS call
    run = _FleetRun(doctor, plan, only, concurrency or doctor.settings.fleet.concurrency, progress,
                    cancel or threading.Event(), SessionLedger(session_factory))
    return run.execute()


class _FleetRun:
    def __init__(self, doctor: Doctor, plan: FleetPlan, only: Sequence[str] | None, workers: int,
                 progress: FleetProgress | None, cancel: threading.Event, ledger: SessionLedger):
        self.doctor, self.plan, self.only, self.workers = doctor, plan, only, workers
        self.progress, self.cancel, self.ledger = progress, cancel, ledger
        self.tag_keys = plan.tag_keys or configured_tag_keys(doctor)
        self.duration_s = int(doctor.settings.fleet.session_duration.total_seconds())
        self.endpoint_url = doctor.connection.endpoint_url or doctor.settings.endpoint_url
        self.source_profile = doctor.connection.profile or doctor.settings.profile
        self._lock = threading.Lock()
        self._pending: set[Future[None]] = set()
        self.scopes: list[ScopeResult] = []
        self.clusters: list[ClusterResult] = []
        self._known = 0

    def execute(self) -> FleetReport:
        started = time.perf_counter()
        generated_at = self.doctor.clock()
        self.source = self.ledger.open(Scope(None, self.plan.sts_region), self._options(self.plan.sts_region, True))
        try:
            own_account = caller_account(self.source)
        except Exception as exc:
            failure = describe_aws_failure(exc)
            if failure is None:
                raise
            raise CredentialsError(f"the fleet's source credentials do not work ({failure.code}): {failure.message}",
                                   hint="check AWS_PROFILE / --profile, or run 'aws sts get-caller-identity'") from None
        targets = resolve_targets(self.plan, own_account, self.source)
        self.scope_pool = ThreadPoolExecutor(self.workers, thread_name_prefix="fmdoctor-scope")
        self.cluster_pool = ThreadPoolExecutor(self.workers, thread_name_prefix="fmdoctor-cluster")
        try:
            for target in targets:
                self._submit(self.scope_pool, self._account_task, target)
            self._drain()
        except BaseException:
            self.cancel.set()  # Ctrl-C: running checks stop between checks, queued ones never start
            raise
        finally:
            self.scope_pool.shutdown(wait=True, cancel_futures=True)
            self.cluster_pool.shutdown(wait=True, cancel_futures=True)
        scopes = sorted(self.scopes, key=lambda s: (s.account, s.region))
        clusters = sorted(self.clusters, key=lambda c: (c.account, c.region, c.cluster))
        calls = self.ledger.api_calls()
        return FleetReport(
            generated_at=generated_at,
            status=fleet_status(scopes, clusters),
            accounts=len(targets),
            scopes=scopes,
            clusters=clusters,
            stats=FleetStats(api_calls=calls, api_calls_total=sum(calls.values()),
                             duration_s=round(time.perf_counter() - started, 3), concurrency=self.workers),
        )

    # -- tasks: each records its own outcome and never raises for AWS trouble ---------------------------

    def _account_task(self, target: AccountTarget) -> None:
        credentials = None
        if target.role_arn:
            try:
                credentials = assume_role(self.source, target.role_arn, target.external_id, self.duration_s)
            except Exception as exc:
                error = scope_error(exc, ASSUME_ROLE, f"every region of account {target.account_id}: "
                                    f"role {target.role_arn} could not be assumed", "sts:AssumeRole")
                for region in target.regions:
                    self._record_scope(ScopeResult(account=target.account_id, region=region,
                                                   status=Status.UNKNOWN, error=error))
                return
        for region in target.regions:
            self._submit(self.scope_pool, self._scope_task, target, region, credentials)

    def _scope_task(self, target: AccountTarget, region: str, credentials: Any) -> None:
        scope = Scope(target.account_id, region)
        try:
            aws = self.ledger.open(scope, self._options(region, credentials is None), credentials)
            found = discover(aws, self.tag_keys, self.doctor.settings.fleet.hyperpod)
        except Exception as exc:
            error = scope_error(exc, DISCOVERY, f"which clusters run in account {target.account_id} {region}")
            self._record_scope(ScopeResult(account=target.account_id, region=region, status=Status.UNKNOWN,
                                           error=error))
            return
        self._record_scope(ScopeResult(account=target.account_id, region=region, status=Status.OK,
                                       clusters=len(found)))
        with self._lock:
            self._known += len(found)
        # The scope's clusters share what is the same for all of them (placement groups, file systems, a HyperPod
        # cluster's nodes...: regional EarlyLoads), made with the scope's session.
        aws.cancel = self.cancel
        region_loads = RegionLoads(aws)
        for cluster in found:
            self._submit(self.cluster_pool, self._cluster_task, scope, credentials, cluster, region_loads)

    def _cluster_task(self, scope: Scope, credentials: Any, cluster: DiscoveredCluster,
                      region_loads: RegionLoads | None = None) -> None:
        base = {"account": scope.account, "region": scope.region, "cluster": cluster.name,
                "kinds": list(cluster.kinds), "instances": cluster.instances}
        unverified = f"every check of cluster {cluster.name}"
        try:
            if self.cancel.is_set():
                raise FmdoctorError("the scan was cancelled before this cluster was checked")
            report = self._doctor_for(scope, credentials, cluster, region_loads).check(cluster.name, only=self.only,
                                                                         cancel=self.cancel)
            result = ClusterResult(**base, status=report.status, report=report)
        except FmdoctorError as exc:
            message = str(exc)
            if cluster.kinds == (HYPERPOD,):
                message = f"HyperPod cluster (its nodes are not EC2 instances of the account): {message}"
            error = CheckError(check=CLUSTER, code=type(exc).__name__, unverified=unverified, message=message)
            result = ClusterResult(**base, status=Status.UNKNOWN, error=error)
        except Exception as exc:
            result = ClusterResult(**base, status=Status.UNKNOWN, error=scope_error(exc, CLUSTER, unverified))
        with self._lock:
            self.clusters.append(result)
            event = FleetEvent(result.account, result.region, result.cluster, result.status, len(self.clusters),
                               self._known)
        if self.progress:
            self.progress(event)

    # -- plumbing ----------------------------------------------------------------------------------------

    def _doctor_for(self, scope: Scope, credentials: Any, cluster: DiscoveredCluster,
                    region_loads: RegionLoads | None = None) -> Doctor:
        """A Doctor of the cluster's own: its account's credentials, its region, a fresh session per check."""
        use_profile = credentials is None

        def factory(options: AwsOptions) -> Any:
            return self.ledger.open(scope, options if use_profile else replace(options, profile=None), credentials)

        template = self.doctor
        return Doctor(
            settings=template.settings,
            connection=Connection(region=scope.region, profile=self.source_profile if use_profile else None,
                                  endpoint_url=self.endpoint_url),
            registry=template.registry,
            aws_factory=factory,
            clock=template.clock,
            extras=dict(template.extras),
            overrides=cluster_overrides(template, cluster),
            region_loads=region_loads,
        )

    def _options(self, region: str, use_profile: bool) -> AwsOptions:
        # As a run's own (Doctor.connect): the scope's session carries its clusters' regional loads too.
        return self.doctor.aws_options(region, self.source_profile if use_profile else None, self.endpoint_url)

    def _record_scope(self, result: ScopeResult) -> None:
        with self._lock:
            self.scopes.append(result)

    def _submit(self, pool: ThreadPoolExecutor, task: Callable[..., None], *args: Any) -> None:
        future = pool.submit(task, *args)
        with self._lock:
            self._pending.add(future)

    def _drain(self) -> None:
        # A task submits its follow-ups before it returns, so when nothing is pending the scan is done.
        while True:
            with self._lock:
                pending = list(self._pending)
            if not pending:
                return
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            with self._lock:
                self._pending.difference_update(done)
            for future in done:
                future.result()  # tasks record their own failures: this re-raises only fmdoctor's own bugs


def configured_tag_keys(doctor: Doctor) -> tuple[str, ...]:
    """The top-level tag keys and every configured cluster's, in order, once each."""
    keys = list(doctor.settings.tag_keys)
    for section in doctor.settings.clusters.values():
        keys += section.tag_keys
    return tuple(dict.fromkeys(keys))


def cluster_overrides(doctor: Doctor, cluster: DiscoveredCluster) -> dict[str, Any]:
    """Make ``Doctor.check`` look where discovery looked: the tag keys that found it, the HyperPod name."""
    overrides = dict(doctor.overrides)
    settings = doctor.settings.cluster(cluster.name)
    missing = [k for k in cluster.tag_keys if k not in settings.tag_keys]
    if missing:
        overrides["tag_keys"] = [*settings.tag_keys, *missing]
    if HYPERPOD in cluster.kinds and not settings.hyperpod.cluster_name:
        overrides["hyperpod"] = {**overrides.get("hyperpod", {}), "cluster_name": cluster.name}
    return overrides


def scope_error(exc: BaseException, check: str, unverified: str, default_action: str | None = None) -> CheckError:
    failure = describe_aws_failure(exc)
    if failure is None:
        log.error("fleet %s failed", check, exc_info=exc)  # a bug: logged with its traceback, reported as data
        return CheckError(check=check, code="InternalError", unverified=unverified,
                          message=f"{type(exc).__name__}: {exc}")
    message = failure.message
    if check == DISCOVERY and failure.code in REGION_DISABLED_CODES:
        message += " (is this region enabled for the account? opt-in regions answer this way until enabled)"
    return CheckError(check=check, code=failure.code, iam_action=failure.iam_action or default_action,
                      unverified=unverified, message=message)
