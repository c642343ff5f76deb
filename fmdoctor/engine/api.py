"""The engine's front door. The CLI, the agent's tools, the TUI, Slack and MCP all call :class:`Doctor`."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import threading
import time
import weakref
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

import boto3
import botocore.hooks
import botocore.session
from botocore.client import ClientCreator
from botocore.credentials import CredentialProvider, CredentialResolver, Credentials
from botocore.hooks import EventAliaser
from botocore.loaders import JSONFileLoader, Loader
from botocore.model import ServiceModel

from fmdoctor.config import ClusterSettings, Settings
from fmdoctor.engine import timestamps
from fmdoctor.engine.aws import Aws, AwsOptions, RunStop
from fmdoctor.engine.check import Check, inventory_parts, metric_families
from fmdoctor.engine.context import RegionLoads, RunScope, RunStart, SharedData
from fmdoctor.engine.discovery import has_tagged_instance, stage_inventory
from fmdoctor.engine.endpoints import endpoint_target_name
from fmdoctor.engine.errors import (
    AwsUnavailable,
    Cancelled,
    ConfigError,
    CredentialsError,
    TargetNotFound,
    credentials_error,
    describe_aws_failure,
)
from fmdoctor.engine.host import Host, LocalHost
from fmdoctor.engine.identity import NodeIdentities
from fmdoctor.engine.inventory import ENDPOINTS, HYPERPOD, INVENTORY_PARTS, Inventory, StagedInventory
from fmdoctor.engine.model import CheckError, Report, RunStats, Skipped, Status, status_for
from fmdoctor.engine.prefetch import start_prefetches
from fmdoctor.engine.regions import check_region
from fmdoctor.engine.registry import Registry, default_registry
from fmdoctor.engine.runner import ProgressCallback, RunOutcome, run_checks

INVENTORY = "inventory"
T = TypeVar("T")


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class Connection:
    """Connection flags shared by every command (``--region``, ``--profile``, ``--endpoint-url``)."""

    region: str | None = None
    profile: str | None = None
    endpoint_url: str | None = None


class PlainJSONFileLoader(JSONFileLoader):  # type: ignore[misc]  # botocore is untyped
    """botocore's JSON file loader with each JSON object read as a dict rather than an OrderedDict (botocore's
    ``object_pairs_hook``): dicts keep the file's order, the models are only read, and botocore builds its own
    ordered members from them. Parsing EC2's model takes less than half the time, and the models (EC2's alone has
    over 100,000 objects) take less memory for the collector to walk. Any other reading is botocore's own."""

    def _load_file(self, full_path: str, open_method: Any) -> Any:
        if not os.path.isfile(full_path):
            return None
        with open_method(full_path, "rb") as fp:
            payload = fp.read().decode("utf-8")
        return json.loads(payload)


class _OneKeyLoader(Loader):  # type: ignore[misc]  # botocore is untyped
    """botocore asks its loader for a service model with ``type_name`` as a keyword in one place and positionally in
    another, which the loader's cache keys apart (EC2's megabytes of JSON parsed twice); this loader asks one way."""

    FILE_LOADER_CLASS = PlainJSONFileLoader if hasattr(JSONFileLoader, "_load_file") else JSONFileLoader

    def load_service_model(self, service_name: str, type_name: str, api_version: str | None = None) -> Any:
        return super().load_service_model(service_name, type_name, api_version)


# Parsing botocore's service models is the slow part of making clients; one loader serves every session.
_SHARED_LOADER = _OneKeyLoader()


class _GivenCredentials(CredentialProvider):  # type: ignore[misc]  # botocore is untyped
    METHOD = "fmdoctor-given"

    def __init__(self, credentials: Credentials):
        super().__init__()
        self._credentials = credentials

    def load(self) -> Credentials:
        return self._credentials


# What :func:`new_session`'s sessions build once and share, by (loader, service, API version): the parsed
# service model and the client class made from it.
_SERVICE_MODELS: dict[tuple[Loader, str, str | None], ServiceModel] = {}
_CLIENT_CLASSES: dict[tuple[Loader, str, str], type] = {}
_SHARES_MODELS = "_fmdoctor_shares_service_models"
_originals: dict[str, Callable[..., Any]] = {}
_sharing_lock = threading.Lock()


def _shares_models(creator: ClientCreator) -> bool:
    return getattr(creator._event_emitter, _SHARES_MODELS, False)


def _built_once(table: dict[Any, T], key: Any, build: Callable[[], T]) -> T:
    """``table[key]``, built on first use; two threads may both build it, and the first one stored is kept."""
    found = table.get(key)
    return found if found is not None else table.setdefault(key, build())


def _shared_service_model(creator: ClientCreator, service_name: str, api_version: str | None = None) -> ServiceModel:
    """botocore wraps the loaded model in a new ServiceModel for every client, so each client works out again what
    the model's properties memoise (its operations, its endpoint-discovery operation: a walk over EC2's 800).
    ServiceModel is read-only once built."""
    load = _originals["_load_service_model"]
    if not _shares_models(creator):
        return load(creator, service_name, api_version)
    return _built_once(_SERVICE_MODELS, (creator._loader, service_name, api_version),
                       lambda: load(creator, service_name, api_version))


def _shared_client_class(creator: ClientCreator, service_name: str, service_model: ServiceModel) -> type:
    """botocore builds a new class for every client, one method per operation (EC2 has about 800). The sessions of
    :func:`new_session` have the same class-building handlers (boto3's and botocore's defaults), so the classes
    they would build for one model are the same, and one is built. Any other session builds its own."""
    build = _originals["_create_client_class"]
    if not _shares_models(creator):
        built: type = build(creator, service_name, service_model)
        return built
    return _built_once(_CLIENT_CLASSES, (creator._loader, service_name, service_model.api_version),
                       lambda: build(creator, service_name, service_model))


# The event names botocore's own aliases give, worked out once for every emitter that uses those aliases.
_DEFAULT_ALIAS_NAMES: dict[str, str] = {}
# Whether a handler takes keyword arguments, by the function behind it (the handler may be a bound method).
_ACCEPTS_KWARGS: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()


def _init_sharing_alias_names(emitter: EventAliaser, event_emitter: Any, event_aliases: Any = None) -> None:
    """botocore rewrites every event name through its aliases and remembers each answer on the emitter, so every
    new session (each run makes one) worked out again the names of the 130 handlers it registers. With
    botocore's own aliases the answers are the same for all of them."""
    _originals["EventAliaser.__init__"](emitter, event_emitter, event_aliases)
    if event_aliases is None:
        emitter._alias_name_cache = _DEFAULT_ALIAS_NAMES


def _copy_sharing_alias_names(emitter: EventAliaser) -> EventAliaser:
    """Every client gets a copy of its session's emitter, with the same aliases and nothing remembered, so
    short-lived clients worked the names out again on every call; the copy shares the answers."""
    clone: EventAliaser = _originals["EventAliaser.__copy__"](emitter)
    clone._alias_name_cache = emitter._alias_name_cache
    return clone


def _remembered_accepts_kwargs(handler: Any) -> bool:
    """botocore reads each handler's signature when it is registered, 130 times for each new session, for the
    same functions."""
    function = getattr(handler, "__func__", handler)  # a bound method takes keywords exactly when its function does
    try:
        return _ACCEPTS_KWARGS[function]
    except (KeyError, TypeError):
        answer: bool = _originals["accepts_kwargs"](handler)
        with contextlib.suppress(TypeError):  # not weakly referable: read again next time
            _ACCEPTS_KWARGS[function] = answer
        return answer


def _install_botocore_sharing() -> None:
    with _sharing_lock:
        if _originals or not all(hasattr(ClientCreator, name) for name in ("_load_service_model",
                                                                          "_create_client_class")):
            return  # installed already, or a botocore without these steps: its clients build as usual
        if all(hasattr(EventAliaser, name) for name in ("__init__", "__copy__")) and hasattr(
                EventAliaser(None), "_alias_name_cache"):
            _originals["EventAliaser.__init__"] = EventAliaser.__init__
            _originals["EventAliaser.__copy__"] = EventAliaser.__copy__
            EventAliaser.__init__ = _init_sharing_alias_names
            EventAliaser.__copy__ = _copy_sharing_alias_names
        if callable(getattr(botocore.hooks, "accepts_kwargs", None)):
            _originals["accepts_kwargs"] = botocore.hooks.accepts_kwargs
            botocore.hooks.accepts_kwargs = _remembered_accepts_kwargs
        _originals["_load_service_model"] = ClientCreator._load_service_model
        _originals["_create_client_class"] = ClientCreator._create_client_class
        ClientCreator._load_service_model = _shared_service_model
        ClientCreator._create_client_class = _shared_client_class


def new_session(profile: str | None = None, region: str | None = None,
                credentials: Credentials | None = None) -> boto3.Session:
    """A boto3 session that reads models through the process-wide loader and shares what clients build from them.

    ``credentials`` (e.g. an assumed role's refreshable credentials) replace the standard provider chain;
    without them the chain runs as usual."""
    _install_botocore_sharing()
    core = botocore.session.Session(profile=profile)
    core.register_component("data_loader", _SHARED_LOADER)
    # Every client of the process (the demo's seeders and the test fixtures too) reads times as the engine's do,
    # without a dateutil parse per value: a p5 node's DescribeInstances entry carries 34 of them.
    timestamps.install(core)
    if credentials is not None:
        core.register_component("credential_provider", CredentialResolver([_GivenCredentials(credentials)]))
    if region:
        core.set_config_variable("region", region)
    session = boto3.Session(botocore_session=core)  # registers boto3's class-building handlers
    setattr(core.get_component("event_emitter"), _SHARES_MODELS, True)
    return session


def new_aws(options: AwsOptions, credentials: Credentials | None = None) -> Aws:
    """A fresh session (its own call counter) that reuses the process-wide model loader.

    ``credentials`` (e.g. an assumed role's refreshable credentials, shared by the sessions of one fleet
    account) replace the standard provider chain; without them the chain runs as usual.
    """
    return Aws(new_session(options.profile, options.region, credentials), options)


@dataclass
class Doctor:
    settings: Settings = field(default_factory=lambda: Settings())
    connection: Connection = field(default_factory=Connection)
    registry: Registry = field(default_factory=default_registry)
    aws_factory: Callable[[AwsOptions], Aws] = new_aws
    clock: Callable[[], datetime] = utc_now
    extras: dict[str, Any] = field(default_factory=dict)
    # Per-run settings from flags (e.g. {"checkpoints": {"locations": [...]}}), deep-merged over the config.
    overrides: dict[str, Any] = field(default_factory=dict)
    # Loads shared with other runs in the same account and region (a fleet scan's clusters): regional EarlyLoads.
    region_loads: RegionLoads | None = None

    @property
    def demo(self) -> bool:
        """It runs against the demo's in-process AWS (``--demo``): what it renders to paste (fix commands) says so."""
        return "demo" in self.extras

    def resolve_cluster(self, cluster: str | None) -> str:
        if cluster:
            return cluster
        default = self.settings.default_cluster()
        if default:
            return default
        endpoints = self.cluster_settings("").inference.endpoints  # --endpoint alone: a target of endpoints only
        if endpoints:
            return endpoint_target_name(endpoints)
        known = ", ".join(self.settings.clusters) or "none configured"
        raise ConfigError("no cluster given", hint=f"pass --cluster NAME (clusters in config: {known})")

    def cluster_settings(self, cluster: str) -> ClusterSettings:
        return self.settings.cluster(cluster, self.overrides)

    def aws_options(self, region: str | None, profile: str | None, endpoint_url: str | None) -> AwsOptions:
        """The options of every session this doctor's work opens (a run's, a fleet scope's, whose session its
        clusters' regional loads ride on): the settings' read timeout and a pool for its workers."""
        return AwsOptions(region=region, profile=profile, endpoint_url=endpoint_url,
                          max_pool_connections=max(10, self.settings.max_workers * 4),
                          read_timeout=self.settings.aws.read_timeout.total_seconds())

    def connect(self, cluster_settings: ClusterSettings) -> Aws:
        # The AWS SDKs' precedence: a flag, then the environment, then the file (AWS_REGION is what most SDKs and
        # Lambda set, AWS_DEFAULT_REGION what botocore reads; both beat the file's region).
        env = os.environ
        options = self.aws_options(
            region=self.connection.region or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
            or cluster_settings.region,
            profile=self.connection.profile or env.get("AWS_PROFILE") or env.get("AWS_DEFAULT_PROFILE")
            or cluster_settings.profile,
            # AWS_ENDPOINT_URL and AWS_ENDPOINT_URL_<SERVICE> beat the file: botocore resolves them itself (the
            # service's own first), so the file's endpoint is passed only when none is set.
            endpoint_url=self.connection.endpoint_url or (
                None if any(k.startswith("AWS_ENDPOINT_URL") for k in env) else self.settings.endpoint_url),
        )
        try:
            aws = self.aws_factory(options)
            region = aws.region
        except Exception as exc:
            failure = describe_aws_failure(exc)
            if failure is None:
                raise
            if failure.kind == "credentials":
                raise credentials_error(failure) from None
            raise CredentialsError(f"cannot set up AWS access: {failure.message}") from None
        if not (options.endpoint_url or os.environ.get("AWS_ENDPOINT_URL")):  # custom endpoints take any name
            check_region(region, _region_source(self.connection, cluster_settings))
        return aws

    def inventory(self, cluster: str | None = None, aws: Aws | None = None,
                  parts: Collection[str] | None = None) -> Inventory:
        """The target's inventory: every part by default, or only ``parts`` (see Check.inventory)."""
        name = self.resolve_cluster(cluster)
        settings = self.cluster_settings(name)
        aws = aws or self.connect(settings)
        staged = self._staged_inventory(name, settings, aws, parts)
        return _discovered(staged.whole)

    def _staged_inventory(self, name: str, settings: ClusterSettings, aws: Aws, parts: Collection[str] | None,
                          early: RunStart | None = None) -> StagedInventory:
        """The inventory's first stage once it is read (fmdoctor.engine.discovery.stage_inventory); a target it
        does not find waits for the later parts, which may find it. Raises TargetNotFound, or _InventoryFailed
        for what AWS would not answer."""
        wanted = INVENTORY_PARTS if parts is None else frozenset(parts)
        staged = _discovered(lambda: stage_inventory(
            aws, name, settings.tag_keys, settings.head_nodes, hyperpod_name=settings.hyperpod.cluster_name,
            endpoint_names=settings.inference.endpoints, parts=wanted, hostname_tags=settings.gpu.hostname_tags,
            early=early))
        if staged.first.is_empty() and _discovered(staged.whole).is_empty():
            raise TargetNotFound(
                f"no running or pending instances tagged with cluster {name!r} in {aws.region}",
                hint=_not_found_hint(settings.tag_keys, wanted),
            )
        return staged

    def confirm_target(self, cluster: str | None = None) -> None:
        """Fail as :meth:`inventory` does when the target is not there (an unknown cluster, bad credentials, a
        denied listing), for one small DescribeInstances per tag key instead of the whole inventory, which the
        checks that follow read anyway. A target no tagged instance names (a HyperPod cluster, endpoints only),
        or a probe that fails, is confirmed by :meth:`inventory` itself, with its errors and hints."""
        name = self.resolve_cluster(cluster)
        settings = self.cluster_settings(name)
        aws = self.connect(settings)
        if not has_tagged_instance(aws.client("ec2"), name, settings.tag_keys):
            self.inventory(name, aws)

    def check(
        self,
        cluster: str | None = None,
        only: Sequence[str] | None = None,
        progress: ProgressCallback | None = None,
        cancel: threading.Event | None = None,
    ) -> Report:
        """Run the selected checks against one cluster; AWS trouble becomes ``errors[]``, not exceptions."""
        name = self.resolve_cluster(cluster)
        checks = self.registry.select(only)
        settings = self.cluster_settings(name)
        aws = self.connect(settings)
        # Checks under way stop at their next AWS call, not only those not yet started; so do the run's loads
        # when its inventory fails (what they would bring reaches no report).
        stop = RunStop(cancel)
        aws.cancel = stop
        started = time.perf_counter()
        now = self.clock()
        shared = SharedData()  # before the inventory: the checks' inventory-free loads start now
        first_part: Future[Inventory] = Future()  # the inventory's first part, for loads it configures later
        # Loads shared with other runs only where this run signs as they were made (never across accounts).
        region_loads = self.region_loads if self.region_loads is not None and self.region_loads.serves(aws) else None
        families = metric_families(checks)
        start = RunStart(name, settings, aws, now, shared, extras=self.extras, region_loads=region_loads,
                         metrics=families, inventory=first_part)
        try:
            try:
                start_prefetches(start, checks)  # inside: a failure here stops what had started, as below
                staged = self._staged_inventory(name, settings, aws, inventory_parts(checks), start)
            except BaseException as exc:
                stop.set()
                first_part.set_exception(exc)  # what it started stops: nothing it brings reaches a report
                raise
        except Cancelled:
            return self._cancelled(name, aws, now, checks, started)
        except _InventoryFailed as failed:
            return self._failed(name, aws, now, failed, started)
        first_part.set_result(staged.first)
        scope = RunScope(cluster=name, settings=settings, aws=aws, inventory=staged.first, now=now,
                         shared=shared, extras=self.extras, metrics=families, staged=staged,
                         region_loads=region_loads)
        staged.on_failure(stop.set)  # the later parts failed: the run reports that, not its checks
        try:
            outcome = run_checks(scope, checks, self.settings.max_workers, progress, stop, self.registry.annotators)
        except BaseException as exc:  # the later parts' discovery failed (RunScope.settle): as if the first had
            stop.set()
            try:
                _discovered(functools.partial(_reraise, exc))
            except Cancelled:
                return self._cancelled(name, aws, now, checks, started)
            except _InventoryFailed as failed:
                return self._failed(name, aws, now, failed, started)
            raise
        stop.set()  # a load no check read (its checks not applicable) ends with the run, at its next call
        return _report(scope, outcome, started)

    def _cancelled(self, name: str, aws: Aws, now: datetime, checks: Sequence[Check], started: float) -> Report:
        return Report(cluster=name, region=aws.region, generated_at=now, status=Status.UNKNOWN,
                      skipped=[Skipped(check=c.id, reason="cancelled") for c in checks],
                      stats=RunStats(api_calls=aws.calls.snapshot(), duration_s=time.perf_counter() - started),
                      demo=self.demo)

    def _failed(self, name: str, aws: Aws, now: datetime, failed: _InventoryFailed, started: float) -> Report:
        return Report(
            cluster=name,
            region=aws.region,
            generated_at=now,
            status=Status.UNKNOWN,
            errors=[failed.error],
            stats=RunStats(api_calls=aws.calls.snapshot(), duration_s=time.perf_counter() - started),
            demo=self.demo,  # a demo run's report says so however far it got
        )

    def check_local(
        self,
        only: Sequence[str] | None = None,
        progress: ProgressCallback | None = None,
        host: Host | None = None,
    ) -> Report:
        """Run the on-node checks (GPU driver, Xid, EFA provider, IMDS Spot notices) on this machine."""
        checks = self.registry.select(only, target="node")
        host = host or self.extras.get("host") or LocalHost()
        name = f"node/{host.name}"
        settings = self.cluster_settings(self.settings.default_cluster() or name)
        started = time.perf_counter()
        now = self.clock()
        scope = RunScope(cluster=name, settings=settings, aws=None, inventory=Inventory(name, "local"), now=now,
                         host=host, extras=self.extras)
        outcome = run_checks(scope, checks, self.settings.max_workers, progress)
        return _report(scope, outcome, started)


def _region_source(connection: Connection, cluster_settings: ClusterSettings) -> str:
    if connection.region:
        return "--region"
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        if os.environ.get(name):
            return name
    if cluster_settings.region:
        return "region in fmdoctor.yaml"
    return "the AWS profile"


def _not_found_hint(tag_keys: Sequence[str], parts: frozenset[str]) -> str:
    searched = "EC2 instances and SageMaker endpoints" if ENDPOINTS in parts else "EC2 instances"
    hint = f"tag keys searched on {searched}: {', '.join(tag_keys)}; check --region and the tag_keys setting"
    skipped = [what for part, what in ((ENDPOINTS, "SageMaker endpoints"), (HYPERPOD, "SageMaker HyperPod clusters"))
               if part not in parts]
    if skipped:
        hint += f"; the selected checks read no {' or '.join(skipped)}, so none were looked up"
    return hint


def _report(scope: RunScope, outcome: RunOutcome, started: float) -> Report:
    inventory, tags = scope.inventory, tuple(scope.settings.gpu.hostname_tags)

    def node_of(name: str) -> str | None:  # built on first use: most reports' incidents name no host
        return NodeIdentities.of(inventory, tags).node_of(name)

    return Report(
        cluster=scope.cluster,
        region=scope.aws.region if scope.aws else "local",
        generated_at=scope.now,
        status=status_for(outcome.findings, outcome.errors, ran_any=bool(outcome.completed)),
        findings=outcome.findings,
        errors=outcome.errors,
        skipped=outcome.skipped,
        stats=RunStats(
            api_calls=scope.aws.calls.snapshot() if scope.aws else {},
            queries=scope.queries.snapshot(),
            duration_s=round(time.perf_counter() - started, 3),
            checks_run=outcome.completed,
        ),
        demo="demo" in scope.extras,
    ).with_node_of(node_of if inventory.instances else None)


def _reraise(exc: BaseException) -> Any:
    raise exc


def _discovered(read: Callable[[], T]) -> T:
    """``read()``, an AWS failure of discovery turned into _InventoryFailed (credentials into CredentialsError)."""
    try:
        return read()
    except _InventoryFailed:
        raise
    except Exception as exc:
        failure = describe_aws_failure(exc)
        if failure is None:
            raise
        if failure.kind == "credentials":
            raise credentials_error(failure) from None
        error = CheckError(
            check=INVENTORY,
            code=failure.code,
            iam_action=failure.iam_action,
            unverified="the cluster's instances, interfaces and security groups, so no check could run",
            message=failure.message,
        )
        raise _InventoryFailed(error) from None


class _InventoryFailed(AwsUnavailable):
    def __init__(self, error: CheckError):
        super().__init__(f"could not read the cluster inventory: {error.code}: {error.message}")
        self.error = error
