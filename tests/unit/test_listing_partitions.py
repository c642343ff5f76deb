"""Issue 39: CloudWatch listings whose chain of sequential calls does not grow with the cluster.

A deep GPU listing is split by the agent's ``index`` dimension (aws/amazon-cloudwatch-agent
plugins/inputs/nvidia_smi/schema_v12/parser.go tags GPU i with ``"index": strconv.Itoa(i)``) into listings side by
side, only on evidence (:func:`fmdoctor.metrics.cloudwatch.decide`), with every node the partitions missed listed on
its own; and a run's namespace listings begin before its inventory is read. The series are shaped as the agent
publishes them (``InstanceId`` appended, ``index`` and ``name`` per GPU); moto answers ListMetrics, including its
``Dimensions`` filter with a value (checked here, as the partitions rely on it)."""

from __future__ import annotations

import contextlib
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import fmdoctor.metrics.cloudwatch as cw
from fmdoctor.config import Settings
from fmdoctor.demo.metrics import MetricsPublisher, launch_nodes
from fmdoctor.engine.api import Connection, Doctor, new_aws
from fmdoctor.engine.aws import AwsOptions
from fmdoctor.engine.model import Status
from fmdoctor.metrics.cloudwatch import (
    DEEP_PAGES,
    PROVEN_DEEP_PAGES,
    Evidence,
    ListingRun,
    ListingScope,
    Partitioning,
    Series,
    decide,
    decide_before_inventory,
    discover,
)

UTIL = "nvidia_smi_utilization_gpu"
INDICES = tuple(str(n) for n in range(8))
NOW = datetime.now(UTC)
GPU_IDS = ["gpu-metrics-missing", "gpu-idle", "gpu-straggler", "gpu-memory-pressure"]
SETTLED = {"gpu": {"startup_grace": "0s"}}


def agent(instance: str, index: str | None, host: str = "ip-10-0-0-1", with_id: bool = True) -> Series:
    """One series as the agent names it: index and name per GPU (none for a rollup), InstanceId when appended."""
    dims = [("host", host)]
    if index is not None:
        dims += [("index", index), ("name", "NVIDIA A100-SXM4-40GB")]
    if with_id:
        dims.append(("InstanceId", instance))
    return Series("CWAgent", UTIL, tuple(sorted(dims)))


def scope_of(nodes: list[str], expected: int, values: tuple[str, ...] = INDICES) -> ListingScope:
    ours = set(nodes)

    def owner(s: Series) -> str | None:
        found = s.dim("InstanceId") or next((n for n in ours if s.dim("host") == f"host-{n}"), None)
        return found if found in ours else None

    return ListingScope(owner, "InstanceId", tuple(nodes), Partitioning("index", values, expected))


def evidence(scope: ListingScope, series: list[Series]) -> Evidence:
    seen = Evidence()
    seen.add(series, scope)
    return seen


@pytest.fixture(autouse=True)
def raised_quota(monkeypatch):
    """moto answers a page in milliseconds: at CloudWatch's default ListMetrics quota (25 a second) no split would
    ever pay, so the tests of the split mechanism run as under a raised quota (the quota is adjustable); the
    quota's own rule is tested below with it restored."""
    monkeypatch.setattr(cw, "LIST_METRICS_RATE", float("inf"))


@pytest.mark.parametrize(("chains", "partitions", "seconds_a_page", "allowed"), [
    (1, 8, 0.32, True),  # one listing, 0.32 s a page: 8 partitions ask exactly 25 a second
    (1, 8, 0.31, False),  # a little faster: over the quota
    (5, 8, 0.10, False),  # five GPU names at 100 ms a page already ask 50 a second: no split
    (5, 8, 0.48, True),  # the same at 480 ms a page: 12 chains ask 25 a second
    (1, 1, 0.04, True),  # one chain at 40 ms: 25 a second
    (2, 8, 0.0, False),  # pages answered at once: any split is over
], ids=["one-at-the-quota", "one-just-over", "five-names-at-100ms", "five-names-slow", "single-chain", "instant"])
def test_a_split_must_keep_the_listings_under_list_metrics_quota(monkeypatch, chains, partitions, seconds_a_page,
                                                                  allowed):
    monkeypatch.setattr(cw, "LIST_METRICS_RATE", 25.0)
    assert cw.split_within_quota(chains, partitions, seconds_a_page) is allowed


def test_at_the_default_quota_a_deep_listing_of_fast_pages_stays_one_chain(cloudwatch, monkeypatch):
    """The same deep world that is split under a raised quota: moto's millisecond pages already ask far more than 25
    a second, so splitting would only add calls (each partition rounds up a page) and throttling."""
    monkeypatch.setattr(cw, "LIST_METRICS_RATE", 25.0)
    nodes = [*WORLD_NODES, ROLLUP, BEYOND, SILENT]
    scope = scope_of(nodes, expected=20_000)
    sent = calls_to(cloudwatch)
    chain = discover(cloudwatch, "CWAgent", UTIL, lambda s: scope.owner(s) is not None, "InstanceId", nodes,
                     partitioning=scope.partitioning, owner=scope.owner)
    assert chain.mode == "namespace" and chain.calls == len(sent) == 2
    assert all("Dimensions" not in p for p in sent)
    assert set(chain.series) == set(WORLD)


NODES = [f"i-{n:04d}" for n in range(2048)]
DEEP = 2048 * 8  # 33 pages of 500
PAGE = [agent(NODES[n // 8], str(n % 8)) for n in range(500)]  # the first page of a 2,048-node listing


@pytest.mark.parametrize(("name", "pages", "more", "series", "expected", "want"), [
    ("deep, every series per GPU: split by index", 1, True, PAGE, DEEP, ("partitions", INDICES)),
    ("the last page: nothing left to split", 1, False, PAGE, DEEP, None),
    ("shallow (256 nodes, 5 pages): the one chain", 1, True, PAGE, 256 * 8, None),
    ("just past the bound: split", 1, True, PAGE, (DEEP_PAGES + 1) * 500 + 1, ("partitions", INDICES)),
    ("at the bound: the chain", 1, True, PAGE, (DEEP_PAGES + 1) * 500, None),
    ("pages already read count against the depth", 25, True, PAGE, DEEP, None),
    ("a rollup without index on the page: the chain", 1, True, [*PAGE, agent(NODES[70], None)], DEEP, None),
    ("another account's series without index: the chain", 1, True, [*PAGE, agent("i-other", None)], DEEP, None),
    ("an index beyond G is listed too", 1, True, [*PAGE, agent(NODES[3], "8")], DEEP,
     ("partitions", (*INDICES, "8"))),
    ("host-only series (no InstanceId to list a missed node by): the chain", 1, True,
     [agent(NODES[0], "0", host=f"host-{NODES[0]}", with_id=False), *PAGE[1:]], DEEP, None),
    ("nothing of ours on the page yet: the chain", 1, True, [agent("i-other", "0")], DEEP, None),
])
def test_the_partition_decision(name, pages, more, series, expected, want):
    scope = scope_of(NODES, expected)
    assert decide(scope, pages, more, evidence(scope, series)) == want, name


def test_per_node_listing_still_comes_first_for_a_small_cluster_in_a_big_account():
    """Two nodes whose series are a few among many: after two pages, one listing per node (as before)."""
    scope = scope_of(NODES[:2], 16)  # their 16 GPUs: one page, were they alone
    seen = evidence(scope, [agent(NODES[0], "0"), agent("i-other", "0")])
    assert decide(scope, 1, True, seen) is None
    assert decide(scope, 2, True, seen) == ("per-value", tuple(NODES[:2]))
    host_only = evidence(scope, [agent(NODES[0], "0"), agent(NODES[1], "0", host=f"host-{NODES[1]}", with_id=False)])
    assert decide(scope, 2, True, host_only) is None  # listing per InstanceId would lose the host-only node's series


def test_a_scope_without_partitioning_never_splits():
    scope = ListingScope(scope_of(NODES, DEEP).owner, "InstanceId", tuple(NODES))
    assert decide(scope, 1, True, evidence(scope, PAGE)) is None


BLIND = ListingScope(lambda s: s.dim("InstanceId"), "InstanceId", (), Partitioning("index", (), 0))


@pytest.mark.parametrize(("name", "pages", "more", "series", "want"), [
    ("proven deep by its own pages: split by the indices seen", PROVEN_DEEP_PAGES, True, PAGE,
     ("partitions", INDICES)),
    ("one page short of the proof", PROVEN_DEEP_PAGES - 1, True, PAGE, None),
    ("the last page", PROVEN_DEEP_PAGES, False, PAGE, None),
    ("a rollup without index", PROVEN_DEEP_PAGES, True, [*PAGE, agent(NODES[9], None)], None),
    ("a host-only series (no InstanceId)", PROVEN_DEEP_PAGES, True,
     [*PAGE, agent(NODES[9], "0", with_id=False)], None),
    ("an index beyond the usual eight", PROVEN_DEEP_PAGES, True, [*PAGE, agent(NODES[9], "10")],
     ("partitions", (*INDICES, "10"))),
    ("nothing listed", PROVEN_DEEP_PAGES, True, [], None),
])
def test_the_decision_before_the_inventory_is_read(name, pages, more, series, want):
    assert decide_before_inventory(pages, more, evidence(BLIND, series)) == want, name


# ---- against moto ------------------------------------------------------------------------------------------------


def put(cloudwatch: Any, series: list[Series]) -> None:
    stamp = NOW - timedelta(minutes=5)
    data = [{"MetricName": s.name, "Dimensions": [{"Name": k, "Value": v} for k, v in s.dimensions],
             "Timestamp": stamp, "Value": 50.0} for s in series]
    for start in range(0, len(data), 1000):
        cloudwatch.put_metric_data(Namespace="CWAgent", MetricData=data[start:start + 1000])


WORLD_NODES = [f"i-{n:017x}" for n in range(80)]
ROLLUP, BEYOND, SILENT = "i-0000000000000r011", "i-0000000000000b0b0", "i-00000000000005117"
# 80 nodes x 8 GPUs (640 series: two namespace pages), then a node that publishes only a rollup without index and
# one whose only GPU series is index 8: both after the first page, so the first page alone decides.
WORLD = ([agent(i, str(g)) for i in WORLD_NODES for g in range(8)]
         + [agent(ROLLUP, None), agent(BEYOND, "8")])


@pytest.fixture
def cloudwatch(aws):
    client = aws.client("cloudwatch")
    put(client, WORLD)
    return client


def calls_to(client: Any) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []
    client.meta.events.register("before-parameter-build.cloudwatch.ListMetrics",
                                lambda params, **_: seen.append(dict(params)))
    return seen


def test_moto_filters_a_listing_by_a_dimension_value(cloudwatch):
    page = cloudwatch.list_metrics(Namespace="CWAgent", MetricName=UTIL,
                                   Dimensions=[{"Name": "index", "Value": "3"}])
    assert len(page["Metrics"]) == 80 and "NextToken" not in page
    assert {d["Value"] for m in page["Metrics"] for d in m["Dimensions"] if d["Name"] == "index"} == {"3"}


def test_a_deep_listing_finds_every_series_the_namespace_holds(cloudwatch):
    """Split after the first page: partitions 0-7, then the three nodes they found nothing for, each on its own: the
    rollup-only node and the index-8 node are found, the silent one has nothing. The same series as the chain."""
    nodes = [*WORLD_NODES, ROLLUP, BEYOND, SILENT]
    scope = scope_of(nodes, expected=20_000)  # as the inventory would say of a 2,500-node cluster: deep
    sent = calls_to(cloudwatch)
    split = discover(cloudwatch, "CWAgent", UTIL, lambda s: scope.owner(s) is not None, "InstanceId", nodes,
                     partitioning=scope.partitioning, owner=scope.owner)
    assert split.mode == "per-index"
    where = [tuple((d["Name"], d["Value"]) for d in p.get("Dimensions", [])) for p in sent]
    assert where[0] == () and sorted(where[1:9]) == [(("index", v),) for v in INDICES]
    assert sorted(where[9:]) == [(("InstanceId", n),) for n in sorted([ROLLUP, BEYOND, SILENT])]
    assert split.calls == len(sent) == 12  # 1 namespace page + 8 partitions + 3 nodes listed alone
    chain = discover(cloudwatch, "CWAgent", UTIL, lambda s: scope.owner(s) is not None, "InstanceId", nodes)
    assert chain.mode == "namespace" and chain.calls == 2
    assert set(split.series) == set(chain.series) == set(WORLD)


def test_a_listing_proven_deep_before_the_inventory_is_split_then_completed_by_it(cloudwatch, monkeypatch):
    """Split after its first page (PROVEN_DEEP_PAGES lowered to 1 for a two-page world), before anything says which
    nodes are ours; the inventory then adds the index its instance types have that no page showed ("8" here is
    listed because a node has it: a 9-GPU type is imagined) and the nodes the partitions missed."""
    monkeypatch.setattr(cw, "PROVEN_DEEP_PAGES", 1)
    sent = calls_to(cloudwatch)
    run = ListingRun(cloudwatch, "CWAgent", UTIL, timedelta(minutes=30), split=("index", "InstanceId"))
    deadline = time.monotonic() + 10
    while len(sent) < 9 and time.monotonic() < deadline:  # the namespace page, then the eight partitions
        time.sleep(0.01)
    where = [tuple((d["Name"], d["Value"]) for d in p.get("Dimensions", [])) for p in sent]
    assert where[0] == () and sorted(where[1:]) == [(("index", v),) for v in INDICES]  # no inventory yet
    nodes = [*WORLD_NODES, ROLLUP, BEYOND, SILENT]
    run.configure(scope_of(nodes, expected=20_000, values=(*INDICES, "8")))
    listing = run.listing(lambda s: True)
    where = [tuple((d["Name"], d["Value"]) for d in p.get("Dimensions", [])) for p in sent]
    assert where[9] == (("index", "8"),)  # the inventory's late partition: BEYOND is found there
    assert sorted(where[10:]) == [(("InstanceId", n),) for n in sorted([ROLLUP, SILENT])]
    assert listing.mode == "per-index" and listing.calls == len(sent) == 12
    assert set(listing.series) == set(WORLD)


def test_a_listing_split_before_an_inventory_that_fails_stops(cloudwatch, monkeypatch):
    monkeypatch.setattr(cw, "PROVEN_DEEP_PAGES", 1)
    run = ListingRun(cloudwatch, "CWAgent", UTIL, timedelta(minutes=30), split=("index", "InstanceId"))
    run.stop()
    with pytest.raises(Exception, match="stopped"):
        run.listing(lambda s: True)


def test_a_rollup_on_the_first_page_keeps_the_chain(aws):
    client = aws.client("cloudwatch")
    put(client, [agent(WORLD_NODES[0], None), *WORLD])  # the rollup listed first
    scope = scope_of(WORLD_NODES, expected=20_000)
    listing = discover(client, "CWAgent", UTIL, lambda s: scope.owner(s) is not None, "InstanceId", WORLD_NODES,
                       partitioning=scope.partitioning, owner=scope.owner)
    assert listing.mode == "namespace" and listing.calls == 2


def test_the_partitions_are_listed_side_by_side(cloudwatch):
    """Each partition's call is held 200 ms: they are in flight together, not one after another."""
    in_flight, peak, lock = [0], [0], threading.Lock()

    def hold(request: Any, **_: Any) -> None:
        if b"Dimensions" in (request.body or b""):
            with lock:
                in_flight[0] += 1
                peak[0] = max(peak[0], in_flight[0])
            time.sleep(0.2)
            with lock:
                in_flight[0] -= 1

    cloudwatch.meta.events.register_first("before-send.cloudwatch.ListMetrics", hold)
    scope = scope_of(WORLD_NODES, expected=20_000)
    listing = discover(cloudwatch, "CWAgent", UTIL, lambda s: scope.owner(s) is not None, "InstanceId",
                       WORLD_NODES, partitioning=scope.partitioning, owner=scope.owner)
    assert listing.mode == "per-index" and len(listing.series) == 640
    assert peak[0] >= 4  # held calls overlapped: not one partition after another


def test_a_denied_partition_fails_the_listing_with_its_own_error(cloudwatch):
    from botocore.exceptions import ClientError

    def deny(request: Any, **_: Any) -> None:
        if b'"Value":"5"' in (request.body or b"").replace(b" ", b""):
            raise ClientError({"Error": {"Code": "AccessDenied", "Message": "not this one"}}, "ListMetrics")

    cloudwatch.meta.events.register_first("before-send.cloudwatch.ListMetrics", deny)
    scope = scope_of(WORLD_NODES, expected=20_000)
    with pytest.raises(ClientError, match="AccessDenied"):
        discover(cloudwatch, "CWAgent", UTIL, lambda s: scope.owner(s) is not None, "InstanceId", WORLD_NODES,
                 partitioning=scope.partitioning, owner=scope.owner)


def test_a_listing_read_by_two_consumers_hands_each_every_page(cloudwatch):
    scope = scope_of(WORLD_NODES, expected=0)
    run = ListingRun(cloudwatch, "CWAgent", UTIL, timedelta(minutes=30))  # begun before anyone knows the scope
    run.configure(scope)
    pages: list[list[Series]] = []
    first = run.listing(lambda s: scope.owner(s) is not None, on_page=pages.append)
    second = run.listing(lambda s: s.dim("InstanceId") == WORLD_NODES[0])
    assert first.mode == "namespace" and first.calls == 2 and len(first.series) == 640
    assert sum(len(p) for p in pages) == 640 and len(second.series) == 8


# ---- through the engine ------------------------------------------------------------------------------------------


def hooked(hooks: dict[str, Any]) -> Any:
    """An aws_factory whose session runs ``hooks`` (event name -> handler) on every client it makes."""
    def factory(options: AwsOptions) -> Any:
        made = new_aws(options)
        for event, handler in hooks.items():
            made.session.events.register(event, handler)
        return made

    return factory


def doctor(cluster: str, factory: Any = None, **settings: Any) -> Doctor:
    config = Settings.model_validate({"clusters": {cluster: settings}})
    return Doctor(settings=config, connection=Connection(region="us-west-2"),
                  **({"aws_factory": factory} if factory else {}))


def test_the_listing_starts_before_describe_instances_answers(builder):
    nodes = launch_nodes(builder, 2)
    listed = threading.Event()
    waits: list[bool] = []

    def hold_inventory(**_: Any) -> None:  # answered only once a listing has been sent (or after 10 s: fails)
        waits.append(listed.wait(10))

    def listing(params: dict[str, Any], **_: Any) -> None:
        listed.set()

    factory = hooked({"before-send.ec2.DescribeInstances": hold_inventory,
                      "before-parameter-build.cloudwatch.ListMetrics": listing})
    report = doctor(builder.cluster, factory, **SETTLED).check(builder.cluster, only=["gpu-idle"])
    assert report.status is not Status.UNKNOWN and nodes
    assert waits and all(waits)  # every DescribeInstances page was held until a ListMetrics had been sent


def test_only_efa_lists_the_efa_counters_only(builder, aws):
    nodes = launch_nodes(builder, 2, efa_interfaces=1)
    publish = MetricsPublisher(aws.client("cloudwatch"), NOW)
    for node in nodes:
        publish.gpu_node(node.id, node.private_ip, 90.0)
    publish.flush()
    names: list[str] = []
    factory = hooked({"before-parameter-build.cloudwatch.ListMetrics":
                      lambda params, **_: names.append(params["MetricName"])})
    doctor(builder.cluster, factory, **SETTLED).check(builder.cluster, only=["efa-errors"])
    efa = set(Settings().cluster(builder.cluster).gpu.efa_metrics)
    assert set(names) == efa  # every EFA counter, and no nvidia_smi_* name


@pytest.mark.parametrize("ending", ["cancelled", "denied"])
def test_a_run_whose_inventory_ends_stops_its_listings(builder, aws, ending):
    """Each name's first page is held until the run has reported; a cancelled run or a failed inventory then reads
    no second page (the world has two pages a name), and no listing is sent after the cancel."""
    nodes = launch_nodes(builder, 1)
    put(aws.client("cloudwatch"), WORLD)
    cancel = threading.Event()
    reported = threading.Event()
    sent: list[bool] = []  # per ListMetrics let through the engine's cancel check: was the run cancelled already?

    def inventory(**_: Any) -> None:
        if ending == "cancelled":
            cancel.set()
            return
        from botocore.exceptions import ClientError
        raise ClientError({"Error": {"Code": "UnauthorizedOperation", "Message": "no"}}, "DescribeInstances")

    def started(model: Any, **_: Any) -> None:  # after the engine's own before-call (registered first)
        if model.name == "ListMetrics":
            sent.append(cancel.is_set())

    factory = hooked({"before-send.ec2.DescribeInstances": inventory, "before-call": started,
                      "before-send.cloudwatch.ListMetrics": lambda **_: reported.wait(10)})
    report = doctor(builder.cluster, factory).check(builder.cluster, only=["gpu-idle"], cancel=cancel)
    reported.set()
    assert report.status is Status.UNKNOWN and nodes
    deadline = time.monotonic() + 10
    while any(t.name.startswith("fmdoctor-list-") for t in threading.enumerate()) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not any(t.name.startswith("fmdoctor-list-") for t in threading.enumerate())
    assert len(sent) <= 5 and not any(sent)  # at most the five names' first pages, all sent before the cancel


def test_partitioned_and_chained_listings_give_the_same_findings(builder, aws, monkeypatch):
    """64 p5 nodes (512 series a name, two pages). Split even at two pages (DEEP_PAGES=0), the GPU checks find what
    the chain finds; denied partitions leave the GPU checks not verified, never healthy."""
    nodes = launch_nodes(builder, 64)
    publish = MetricsPublisher(aws.client("cloudwatch"), NOW)
    for n, node in enumerate(nodes):
        publish.gpu_node(node.id, node.private_ip, 5.0 if n == 7 else 95.0)
    publish.flush()

    def run(factory: Any = None) -> Any:
        return doctor(builder.cluster, factory, **SETTLED).check(builder.cluster, only=GPU_IDS)

    chained = run()
    monkeypatch.setattr(cw, "DEEP_PAGES", 0)
    # moto lists faster than the inventory is read: each name's first page is taken in only once the inventory has
    # told its listing the scope, as a 2,048-node listing (33 pages) would still be going then
    told = threading.Event()
    configure = ListingRun.configure

    def configured(self: ListingRun, scope: ListingScope) -> None:
        configure(self, scope)
        told.set()

    monkeypatch.setattr(ListingRun, "configure", configured)

    def first_page(parsed: dict[str, Any], **_: Any) -> None:
        if parsed.get("NextToken"):
            told.wait(10)

    hold = {"after-call.cloudwatch.ListMetrics": first_page}
    modes: list[tuple[tuple[str, str], ...]] = []
    factory = hooked({**hold, "before-parameter-build.cloudwatch.ListMetrics": lambda params, **_: modes.append(
        tuple((d["Name"], d["Value"]) for d in params.get("Dimensions", [])))})
    split = run(factory)
    assert any(m and m[0][0] == "index" for m in modes)  # the partitions were listed
    key = [(f.check, f.resource, f.severity) for f in chained.findings]
    assert key and key == [(f.check, f.resource, f.severity) for f in split.findings]
    assert chained.errors == split.errors

    def deny(request: Any, **_: Any) -> None:
        if b"Dimensions" in (request.body or b""):
            from botocore.exceptions import ClientError
            raise ClientError({"Error": {"Code": "AccessDenied", "Message": "no"}}, "ListMetrics")

    told.clear()
    denied = run(hooked({**hold, "before-send.cloudwatch.ListMetrics": deny}))
    assert denied.findings == [] and denied.status is Status.UNKNOWN
    assert {e.check for e in denied.errors} >= {"gpu-idle", "gpu-metrics-missing"}
    assert all(e.code == "AccessDenied" for e in denied.errors)


def test_a_split_listing_counts_each_partition_paging_against_the_quota(cloudwatch):
    """The quota rule (split_within_quota) is judged on the chains paging now: a listing split into 8 partitions is
    8 chains while they page, not 1, or five names each see 'one chain' beside them and all split (40 chains)."""
    baseline = ListingRun._chains
    barrier = threading.Barrier(len(INDICES), timeout=10)
    counted: list[int] = []

    def hold(request: Any, **_: Any) -> None:
        body = (request.body or b"").replace(b" ", b"")
        if b'"Name":"index"' in body or b"Dimensions.member.1.Name=index" in body:
            with contextlib.suppress(threading.BrokenBarrierError):
                barrier.wait()  # every partition in flight at once
            counted.append(ListingRun._chains - baseline)

    cloudwatch.meta.events.register_first("before-send.cloudwatch.ListMetrics", hold)
    scope = scope_of(WORLD_NODES, expected=20_000)
    listing = discover(cloudwatch, "CWAgent", UTIL, lambda s: scope.owner(s) is not None, "InstanceId",
                       WORLD_NODES, partitioning=scope.partitioning, owner=scope.owner)
    assert listing.mode == "per-index"
    assert max(counted) == len(INDICES)  # the eight partitions, the namespace chain no longer paging
    assert ListingRun._chains == baseline


def test_a_listing_an_asker_reads_is_not_stopped_by_the_inventory_that_names_no_node_for_it(aws):
    """A future's waiters wake before its callbacks run, so a check can ask for a listing before start_listings'
    callback has read the inventory. A HyperPod-only target's inventory has no instance (its nodes are not this
    account's), so that callback would stop the GPU listing the check is reading: the check failed with 'listing
    stopped' instead of reading the (empty) listing. Held here: the asker configures it, then the callback runs."""
    from concurrent.futures import Future

    from fmdoctor.config import ClusterSettings
    from fmdoctor.engine.context import SharedData
    from fmdoctor.engine.inventory import Inventory
    from fmdoctor.metrics.nodes import early_specs, shared_lister, start_listings

    client = aws.client("cloudwatch")
    release = threading.Event()

    def hold(**_: Any) -> None:  # the first page waits until the callback has run
        release.wait(10)

    client.meta.events.register_first("before-send.cloudwatch.ListMetrics", hold)
    settings, inventory, memo = ClusterSettings(), Inventory("hp", "us-west-2"), SharedData().get
    read: Future[Inventory] = Future()
    runs = start_listings(client, settings, frozenset({"accelerators"}), read, memo)
    spec = early_specs(settings, frozenset({"accelerators"}))[0]
    got: list[Any] = []

    def ask() -> None:
        try:
            got.append(shared_lister(client, inventory, settings, memo)(spec, None))
        except Exception as exc:  # the failure is the finding under test
            got.append(exc)

    asker = threading.Thread(target=ask)
    asker.start()
    run = runs[0]
    deadline = time.monotonic() + 10
    while run._scope is None and time.monotonic() < deadline:  # the asker has configured it and waits
        time.sleep(0.01)
    read.set_result(inventory)  # now the callback: no GPU node in this inventory
    release.set()
    asker.join(10)
    assert len(got) == 1 and not isinstance(got[0], Exception), got
    assert got[0].series == ()


def test_a_listing_stopped_between_an_askers_look_and_its_configuring_is_listed_anew(aws, monkeypatch):
    """The inventory's callback runs in another thread than the asker: placed here (deterministically) right as the
    asker configures the listing it found running, it stops that listing first (no node of the kind); the asker
    must list anew, not read the stopped listing and fail with 'listing stopped'."""
    from concurrent.futures import Future

    from fmdoctor.config import ClusterSettings
    from fmdoctor.engine.context import SharedData
    from fmdoctor.engine.inventory import Inventory
    from fmdoctor.metrics.nodes import early_specs, shared_lister, start_listings

    client = aws.client("cloudwatch")
    release = threading.Event()

    def hold(**_: Any) -> None:  # the early listing's first page waits until the callback has run
        release.wait(10)

    client.meta.events.register_first("before-send.cloudwatch.ListMetrics", hold)
    settings, inventory, memo = ClusterSettings(), Inventory("hp", "us-west-2"), SharedData().get
    read: Future[Inventory] = Future()
    start_listings(client, settings, frozenset({"accelerators"}), read, memo)
    spec = early_specs(settings, frozenset({"accelerators"}))[0]
    configure = ListingRun.configure

    def late_callback(self: ListingRun, scope: ListingScope) -> bool:
        if not read.done():
            read.set_result(inventory)  # start_listings' callback, in this window
            release.set()
        return configure(self, scope)

    monkeypatch.setattr(ListingRun, "configure", late_callback)
    listing = shared_lister(client, inventory, settings, memo)(spec, None)
    assert listing is not None and listing.series == ()
