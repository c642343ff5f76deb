"""Loads that need no inventory start with the run (fmdoctor.engine.prefetch, issue 39), and checks start as soon as
the inventory parts they read are in, against moto with calls held in flight.

The rules under test: a selected check's declared load is asked for before DescribeInstances has answered; a run
starts only its selected checks' loads; a run whose inventory fails or is cancelled makes no call of those loads
after its report and reports nothing they found; a denied load is reported, not verified, by every check that
reads it; a check reading no endpoints ends while the endpoint chain is still held; a failure of a later part
is the run's, as when the whole inventory was read first.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from botocore.awsrequest import AWSResponse
from botocore.credentials import Credentials

from fmdoctor.config import Settings
from fmdoctor.engine.api import Connection, Doctor, new_aws
from fmdoctor.engine.aws import Aws, AwsOptions
from fmdoctor.engine.check import Check, validate_check_class
from fmdoctor.engine.context import RegionLoads
from fmdoctor.engine.errors import TargetNotFound
from fmdoctor.engine.model import Severity, Status
from fmdoctor.engine.prefetch import EarlyLoad, prefetches
from fmdoctor.engine.registry import Registry, default_registry
from fmdoctor.metrics.nodes import early_specs

from ..conftest import CLUSTER, REGION

WAIT = 10  # seconds a held call waits for what it waits on; a regression fails the test instead of hanging it


class Calls:
    """The operations the run's sessions send ('ec2.DescribeInstances'), in order, each able to run ``on[name]``
    first (in the calling thread, before the request leaves: the call is in flight for the run)."""

    def __init__(self, base: Callable[..., Aws] = new_aws):
        self.sent: list[str] = []
        self.on: dict[str, Callable[[], None]] = {}
        self.seen: dict[str, threading.Event] = {}
        self._base = base
        self._lock = threading.Lock()

    def factory(self, options: AwsOptions, credentials: Any = None) -> Aws:
        aws = self._base(options, credentials)
        # After Aws's own before-call handler: a call the run refuses (cancelled) is never recorded here.
        aws.session.events.register("before-call", self._before_call)
        return aws

    def event(self, name: str) -> threading.Event:
        with self._lock:
            return self.seen.setdefault(name, threading.Event())

    def _before_call(self, model: Any, **_: Any) -> None:
        name = f"{model.service_model.service_name}.{model.name}"
        with self._lock:
            self.sent.append(name)
        self.event(name).set()
        hook = self.on.get(name)
        if hook is not None:
            hook()


def _doctor(calls: Calls, **cluster_settings: Any) -> Doctor:
    settings = Settings.model_validate({"clusters": {CLUSTER: cluster_settings}})
    return Doctor(settings=settings, connection=Connection(region=REGION), aws_factory=calls.factory)


def _loader_threads(key: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == f"fmdoctor-load-{key[:40]}" and t.is_alive()]


def _wait_gone(key: str) -> bool:
    deadline = time.monotonic() + WAIT
    while _loader_threads(key) and time.monotonic() < deadline:
        time.sleep(0.02)
    return not _loader_threads(key)


def test_a_prefetch_is_asked_for_before_describe_instances_answers(sg_fault_cluster):
    """DescribeInstances is held until DescribePlacementGroups has been sent: a run that read the inventory
    first would send it only afterwards (the wait then times out and the flag says so)."""
    calls = Calls()
    prefetched_first: list[bool] = []
    calls.on["ec2.DescribeInstances"] = lambda: prefetched_first.append(
        calls.event("ec2.DescribePlacementGroups").wait(WAIT))
    report = _doctor(calls).check(CLUSTER, only=["placement-group"])
    assert prefetched_first == [True]
    assert calls.sent.count("ec2.DescribePlacementGroups") == 1  # the check read the prefetched answer
    assert report.errors == [] and report.stats.checks_run == ["placement-group"]


def test_only_the_selected_checks_loads_start(sg_fault_cluster):
    """A checkpoint location and a Spot queue are configured; `--only efa` lists neither, and a checkpoint check
    alone asks for no placement group."""
    configured = {"checkpoints": {"locations": ["s3://ckpt-bucket/run-1/"]},
                  "spot": {"queue_url": "https://sqs.us-west-2.amazonaws.com/123456789012/spot-events"}}
    efa = Calls()
    _doctor(efa, **configured).check(CLUSTER, only=["efa"])
    assert "ec2.DescribePlacementGroups" in efa.sent
    assert not [c for c in efa.sent if c.startswith(("s3.", "sqs."))]
    checkpoints = Calls()
    _doctor(checkpoints, **configured).check(CLUSTER, only=["checkpoint-missing"])
    assert "s3.ListObjectsV2" in checkpoints.sent
    assert not [c for c in checkpoints.sent if c.startswith("sqs.") or c == "ec2.DescribePlacementGroups"]
    assert [load.name for load in prefetches(default_registry().select(["efa"]))] == [
        "ec2.placement-groups", "hyperpod.cluster", "hyperpod.nodes", "metrics.hyperpod-types", "metrics.sources",
        "cloudwatch.early-listings"]


@pytest.fixture
def spot_queue(aws):
    return aws.client("sqs").create_queue(QueueName="spot-events")["QueueUrl"]


@pytest.mark.parametrize("how", ["denied", "cancelled"])
def test_a_run_whose_inventory_fails_makes_no_prefetch_call_after_its_report(sg_fault_cluster, spot_queue, faults,
                                                                             how):
    """The Spot queue's GetQueueAttributes is held in flight until the report is back; its loader's next call
    (ReceiveMessage) is then refused, and the report holds nothing the queue said."""
    cancel = threading.Event()
    if how == "denied":
        faults.deny("ec2", "DescribeInstances", "UnauthorizedOperation")
    calls = Calls(faults.aws_factory)
    reported = threading.Event()
    calls.on["sqs.GetQueueAttributes"] = lambda: reported.wait(WAIT)
    if how == "cancelled":  # the user cancels while the instance listing is in flight
        calls.on["ec2.DescribeInstances"] = cancel.set
    report = _doctor(calls, spot={"queue_url": spot_queue}).check(
        CLUSTER, only=["spot-interruption", "placement-group"], cancel=cancel)
    in_flight = calls.event("sqs.GetQueueAttributes").is_set()
    reported.set()
    assert in_flight, "the queue's read was not under way while the inventory was read"
    assert _wait_gone("spot-queue"), "the queue's loader still runs"
    assert "sqs.ReceiveMessage" not in calls.sent
    assert report.findings == [] and report.status is Status.UNKNOWN
    if how == "denied":
        assert [(e.check, e.code) for e in report.errors] == [("inventory", "UnauthorizedOperation")]
    else:
        assert report.errors == []
        assert {(s.check, s.reason) for s in report.skipped} == {("spot-interruption", "cancelled"),
                                                                ("placement-group", "cancelled")}


def test_a_mistyped_cluster_name_makes_no_prefetch_call_after_it_is_not_found(sg_fault_cluster, spot_queue):
    """The settings (as a top-level default would) name a Spot queue and a checkpoint location; the cluster name
    is mistyped. The queue's first call is held until the run has raised TargetNotFound: its loader's next call
    (ReceiveMessage) is refused, and no load sends more than its first call."""
    settings = Settings.model_validate({"spot": {"queue_url": spot_queue},
                                        "checkpoints": {"locations": ["s3://ckpt-bucket/run-1/"]}})
    calls = Calls()
    raised = threading.Event()
    calls.on["sqs.GetQueueAttributes"] = lambda: raised.wait(WAIT)
    doctor = Doctor(settings=settings, connection=Connection(region=REGION), aws_factory=calls.factory)
    with pytest.raises(TargetNotFound, match="prod-trian"):
        doctor.check("prod-trian")
    in_flight = calls.event("sqs.GetQueueAttributes").is_set()
    raised.set()
    assert in_flight and _wait_gone("spot-queue")
    assert "sqs.ReceiveMessage" not in calls.sent
    prefetched = [c for c in calls.sent if not c.startswith(("ec2.DescribeInstances", "resourcegroupstaggingapi.",
                                                             "logs.DescribeLogGroups", "cloudwatch.ListMetrics"))]
    assert len(prefetched) == len(set(prefetched))  # one call per load, none repeated
    # the metric listings (one EarlyLoad, one listing per metric name): at most each name's first page
    assert calls.sent.count("cloudwatch.ListMetrics") <= len(early_specs(settings.cluster("prod-trian"), None))
    assert calls.sent.count("logs.DescribeLogGroups") <= 3  # one per log-group naming convention of the name


def test_a_prefetch_in_its_retries_stops_at_its_next_attempt_once_the_inventory_failed(sg_fault_cluster, faults):
    """DescribePlacementGroups is throttled at every attempt; its second attempt waits for the report (the
    inventory denied). botocore sends retries without a before-call, so only the send of the third attempt can
    see that the run has stopped: two attempts, not five. The inventory's denial waits for the first attempt, so
    a loaded machine that starts the prefetch late cannot end the run before it is sent."""
    faults.throttle("ec2", "DescribePlacementGroups")
    faults.deny("ec2", "DescribeInstances", "UnauthorizedOperation")
    calls = Calls(faults.aws_factory)
    reported, first_sent = threading.Event(), threading.Event()
    attempts = [0]

    def attempt(**_: Any) -> None:
        attempts[0] += 1
        first_sent.set()
        if attempts[0] == 2:
            reported.wait(WAIT)

    def after_first_attempt(**_: Any) -> None:  # a before-call handler's return would stand for the answer
        first_sent.wait(WAIT)

    base = calls.factory

    def factory(options: AwsOptions, credentials: Any = None) -> Aws:
        aws = base(options, credentials)
        aws.session.events.register("before-send.ec2.DescribePlacementGroups", attempt)
        aws.session.events.register("before-call.ec2.DescribeInstances", after_first_attempt)
        return aws

    calls.factory = factory  # type: ignore[method-assign]
    report = _doctor(calls).check(CLUSTER, only=["placement-group"])
    reported.set()
    assert _wait_gone("ec2.placement-groups"), "the placement groups' loader still runs"
    assert [(e.check, e.code) for e in report.errors] == [("inventory", "UnauthorizedOperation")]
    assert attempts[0] == 2 and faults.injected["ec2.DescribePlacementGroups"] == 2


def test_a_load_no_check_read_makes_no_call_after_the_report(sg_fault_cluster):
    """A check declares a two-call load and never reads it (as a check that turns out not applicable); the first
    call is held until the report is back, and the second is then refused: the run's loads end with it."""

    def two_calls(start: Any, _: str) -> int:
        ec2 = start.client("ec2")
        ec2.describe_placement_groups()
        ec2.describe_key_pairs()
        return 2

    load: EarlyLoad[int] = EarlyLoad("test.unread", two_calls, ("ec2:DescribePlacementGroups", "ec2:DescribeKeyPairs"))
    unread = _declaring(load, load.iam_actions)
    calls = Calls()
    reported = threading.Event()
    calls.on["ec2.DescribePlacementGroups"] = lambda: reported.wait(WAIT)
    doctor = _doctor(calls)
    doctor.registry = Registry([unread])
    report = doctor.check(CLUSTER)
    held = calls.event("ec2.DescribePlacementGroups").is_set()
    reported.set()
    assert held and _wait_gone("test.unread")
    assert report.stats.checks_run == ["declares"] and "ec2.DescribeKeyPairs" not in calls.sent


def test_a_denied_prefetch_is_not_verified_under_every_check_that_reads_it(sg_fault_cluster, faults):
    faults.deny("s3", "ListObjectsV2")
    faults.deny("ec2", "DescribePlacementGroups", "UnauthorizedOperation")
    calls = Calls(faults.aws_factory)
    readers = ["checkpoint-missing", "checkpoint-stale", "checkpoint-incomplete"]
    report = _doctor(calls, checkpoints={"locations": ["s3://ckpt-bucket/run-1/"]}).check(
        CLUSTER, only=[*readers, "placement-group"])
    by_check = {e.check: e for e in report.errors}
    assert set(by_check) == {*readers, "placement-group"}
    assert {by_check[c].iam_action for c in readers} == {"s3:ListBucket"}
    assert by_check["placement-group"].iam_action == "ec2:DescribePlacementGroups"
    assert calls.sent.count("s3.ListObjectsV2") == 1 and calls.sent.count("ec2.DescribePlacementGroups") == 1
    assert not set(readers) & set(report.stats.checks_run)  # none of them counts as verified
    assert report.status is not Status.OK


class _Body:
    def __init__(self, body: bytes):
        self._body = body

    def stream(self, **_: Any) -> Any:
        yield self._body


@pytest.mark.parametrize("how", ["cut-off", "not-implemented"])
def test_a_prefetch_that_breaks_is_named_by_its_own_call_under_the_check_that_reads_it(sg_fault_cluster,
                                                                                       monkeypatch, how):
    """DescribePlacementGroups answers a 200 whose XML is cut off (as a dropped connection leaves it), or the
    endpoint does not implement it (moto upstream). The load ran in a thread of its own; the check that reads it
    made no such call, yet its error names the permission of the call that broke, as when the check made it."""
    calls = Calls()
    if how == "cut-off":
        base = calls.factory

        def factory(options: AwsOptions, credentials: Any = None) -> Aws:
            aws = base(options, credentials)
            aws.session.events.register(
                "before-send.ec2.DescribePlacementGroups", lambda request, **_: AWSResponse(
                    request.url, 200, {"Content-Type": "text/xml"},
                    _Body(b"<DescribePlacementGroupsResponse><placementGroupSet><item>")))
            return aws

        calls.factory = factory  # type: ignore[method-assign]
    else:
        from moto.ec2.responses import EC2Response

        def not_implemented(self: Any) -> Any:
            raise NotImplementedError("The describe_placement_groups action has not been implemented")

        monkeypatch.setattr(EC2Response, "describe_placement_groups", not_implemented)
    report = _doctor(calls).check(CLUSTER, only=["placement-group", "efa-sg-self-reference"])
    [error] = report.errors
    assert (error.check, error.code) == ("placement-group",
                                         "CorruptResponse" if how == "cut-off" else "NotImplemented")
    assert error.iam_action == "ec2:DescribePlacementGroups"
    assert report.status is not Status.OK  # not verified, never healthy


def test_a_check_that_reads_no_endpoints_ends_while_the_endpoint_chain_is_held(sg_fault_cluster):
    calls = Calls()
    finished = threading.Event()
    ended_while_held: list[bool] = []
    calls.on["resourcegroupstaggingapi.GetResources"] = lambda: ended_while_held.append(finished.wait(WAIT))

    def progress(event: Any) -> None:
        if event.phase == "finished" and event.check_id == "efa-sg-self-reference":
            finished.set()

    report = _doctor(calls).check(CLUSTER, only=["efa-sg-self-reference", "endpoint-unhealthy"], progress=progress)
    assert ended_while_held and all(ended_while_held)
    assert [f.check for f in report.findings] == ["efa-sg-self-reference"]
    assert "endpoint-unhealthy" in {s.check for s in report.skipped}  # it ran, after the chain: no endpoint here


def test_a_later_part_that_fails_is_the_runs_failure(sg_fault_cluster):
    """A configured endpoint that does not exist ends the run as 'no such target', although the instances (and
    the checks that need no endpoint) came first."""
    calls = Calls()
    with pytest.raises(TargetNotFound, match="no-such-endpoint"):
        _doctor(calls, inference={"endpoints": ["no-such-endpoint"]}).check(
            CLUSTER, only=["efa-sg-self-reference", "endpoint-unhealthy"])


def _declaring(load: EarlyLoad[Any], actions: tuple[str, ...]) -> type[Check]:
    return type("Declares", (Check,), {"id": "declares", "family": "test", "severity": Severity.WARNING,
                                       "iam_actions": actions, "prefetch": (load,), "__doc__": "A test check.",
                                       "run": lambda self, ctx: []})


def test_a_check_must_hold_the_iam_actions_of_the_loads_it_prefetches():
    load: EarlyLoad[int] = EarlyLoad("test.load", lambda start, _: 1, ("ec2:DescribePlacementGroups",))
    assert validate_check_class(_declaring(load, ("ec2:DescribePlacementGroups",))) == []
    assert validate_check_class(_declaring(load, ("ec2:DescribeInstances",))) == [
        "declares: prefetch test.load calls ec2:DescribePlacementGroups, not in its iam_actions"]


def test_every_check_declares_the_loads_it_reads(monkeypatch):
    """A check that reads an EarlyLoad it does not list in ``prefetch`` gets it only after the inventory (with
    ``--only`` that check), and its IAM actions are checked against the loads it lists, not those it reads. Every
    check of the demo's world (EC2 cluster, its HyperPod cluster, Spot queue, Capacity Block, checkpoints) runs
    once and every load it reads must be one it declares."""
    from fmdoctor.demo.runtime import demo_environment, demo_settings

    reads: set[tuple[str, str]] = set()
    lock = threading.Lock()
    get = EarlyLoad.get

    def recorded(self: EarlyLoad[Any], ctx: Any, subject: str = "") -> Any:
        with lock:
            reads.add((ctx.check_id, self.name))
        return get(self, ctx, subject)

    monkeypatch.setattr(EarlyLoad, "get", recorded)
    registry = default_registry()
    with demo_environment() as world:
        doctor = Doctor(settings=demo_settings(world), connection=Connection(region=world.region),
                        registry=registry, extras={"demo": world})
        report = doctor.check(world.cluster)
    assert report.findings and {"spot-queue", "checkpoints", "ec2.placement-groups"} <= {name for _, name in reads}
    declared = {(check.id, load.name) for check in registry.select(None) for load in check.prefetch}
    assert sorted(reads - declared) == []


def test_a_fleets_clusters_share_the_loads_of_their_account_and_region(aws, monkeypatch):
    """Three clusters in one account and region: the region-wide answers (placement groups, scheduled events, file
    systems) are asked once for the scope, not once per cluster, and each cluster's report still reads them."""
    from fmdoctor.demo.fleet import account_ids, seed_fleet
    from fmdoctor.demo.runtime import LEAN_MOTO_ENV
    from fmdoctor.fleet import build_plan, scan_fleet

    for key, value in LEAN_MOTO_ENV.items():
        monkeypatch.setenv(key, value)
    accounts = account_ids(1)
    seed_fleet(aws, accounts, [REGION], 3)
    doctor = Doctor(settings=Settings())
    report = scan_fleet(doctor, build_plan(doctor.settings, regions=[REGION], accounts=accounts))
    assert len(report.clusters) == 3 and all(c.report is not None for c in report.clusters)
    calls = report.stats.api_calls
    assert {op: calls.get(op) for op in ("ec2.DescribePlacementGroups", "ec2.DescribeInstanceStatus",
                                         "fsx.DescribeFileSystems")} == dict.fromkeys(
        ("ec2.DescribePlacementGroups", "ec2.DescribeInstanceStatus", "fsx.DescribeFileSystems"), 1)
    assert calls["ec2.DescribeInstances"] >= 3  # each cluster's own inventory
    for cluster in report.clusters:
        assert cluster.report is not None and not [e for e in cluster.report.errors
                                                    if e.check in ("placement-group", "fsx-unreachable")]


def test_a_run_of_other_credentials_reads_no_region_loads_made_with_another_accounts(sg_fault_cluster, aws):
    """A fleet's region loads were made with account 111111111111's role, which has a 'spread' group named pg;
    the run signs as the default account, whose pg (its nodes') is a 'cluster' group. Reading the shared answer
    would judge this cluster's group by the other account's: a false warning, and another account's data in
    the report. The run loads its own instead (and a run of the same credentials still shares, as above)."""
    role = aws.client("sts").assume_role(RoleArn="arn:aws:iam::111111111111:role/fleet",
                                         RoleSessionName="fmdoctor-test")["Credentials"]
    theirs = new_aws(AwsOptions(region=REGION), Credentials(role["AccessKeyId"], role["SecretAccessKey"],
                                                            role["SessionToken"]))
    theirs.client("ec2").create_placement_group(GroupName="pg", Strategy="spread")
    calls = Calls()
    doctor = _doctor(calls)
    doctor.region_loads = RegionLoads(theirs)
    report = doctor.check(CLUSTER, only=["placement-group"])
    assert report.findings == [] and report.errors == [] and report.stats.checks_run == ["placement-group"]
    assert calls.sent.count("ec2.DescribePlacementGroups") == 1 and theirs.calls.snapshot() == {
        "ec2.CreatePlacementGroup": 1}


def test_the_demo_worlds_fleet_asks_no_region_level_request_twice():
    """The demo's EC2 cluster names the demo's HyperPod cluster, which the fleet also checks on its own: its
    DescribeCluster, ListClusterNodes, log groups, placement groups and file systems were asked by both. Only
    CloudWatch's metric listings (fmdoctor/metrics, shared there or not) may still repeat."""
    from fmdoctor.demo.runtime import demo_environment, demo_settings
    from fmdoctor.fleet import build_plan, scan_fleet

    from .test_concurrency_adversarial import Requests

    with demo_environment() as world:
        doctor = Doctor(settings=demo_settings(world), connection=Connection(region=world.region))
        requests = Requests()
        report = scan_fleet(doctor, build_plan(doctor.settings, regions=[world.region]),
                            session_factory=lambda scope, options, credentials: requests.factory(options, credentials))
    assert len(report.clusters) == 2 and all(c.report is not None and c.report.findings for c in report.clusters)
    assert {("sagemaker", "DescribeCluster"), ("sagemaker", "ListClusterNodes"), ("ec2", "DescribePlacementGroups"),
            ("fsx", "DescribeFileSystems"), ("logs", "DescribeLogGroups")} <= requests.operations()
    assert [(service, operation) for service, operation, _, _ in requests.repeated()
            if (service, operation) != ("cloudwatch", "ListMetrics")] == []
