"""The CloudWatch layer and the statistics under the GPU checks: listing strategy, batching, pages, robust z."""

from __future__ import annotations

import math
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
from botocore.stub import ANY, Stubber

from fmdoctor.demo.metrics import MetricsPublisher, launch_nodes
from fmdoctor.engine.inventory import Instance
from fmdoctor.metrics.cloudwatch import Query, Series, discover, fetch, lower_bound_calls, queries_per_call
from fmdoctor.metrics.identity import NodeIdentity
from fmdoctor.metrics.robust import low_outliers, median_and_mad
from fmdoctor.metrics.series import NodeResolver, missing_devices, select_series

NOW = datetime(2025, 3, 4, 3, 0, tzinfo=UTC)
UTIL = "nvidia_smi_utilization_gpu"


def counted(client) -> Counter[str]:
    calls: Counter[str] = Counter()
    client.meta.events.register("before-call", lambda model, **_: calls.update([model.name]))
    return calls


# --- robust statistics -----------------------------------------------------------------------------------

def test_modified_z_finds_one_low_node_among_many():
    values = {f"n{i}": v for i, v in enumerate([95, 96, 94, 95, 97, 93, 55])}
    [outlier] = low_outliers(values, z_threshold=3.5, min_gap=15)
    assert outlier.key == "n6" and outlier.median == 95 and outlier.gap == 40 and outlier.z < -3.5


@pytest.mark.parametrize(
    "values, expected",
    [
        ([95, 40], []),  # two nodes: the median sits halfway, nobody can be named
        ([95], []),
        ([], []),
        ([90, 90, 90, 90], []),  # identical: MAD 0, nothing differs
        ([95, 95, 50], ["n2"]),  # MAD 0 but a 45-point gap: the MAD floor keeps the score finite, not silent
        ([95, 95, 95, 50, 50, 50], []),  # half and half: two jobs, not one straggler
        ([95, 94, 96, 85], []),  # far in MAD units, but under the minimum gap
    ],
)
def test_low_outliers_edge_cases(values, expected):
    found = low_outliers({f"n{i}": float(v) for i, v in enumerate(values)}, z_threshold=3.5, min_gap=15)
    assert [o.key for o in found] == expected


def test_median_and_mad():
    assert median_and_mad([1.0, 2.0, 3.0, 4.0, 100.0]) == (3.0, 1.0)


# --- which series belong to whom ---------------------------------------------------------------------------

def series(**dims: str) -> Series:
    return Series("CWAgent", UTIL, tuple(sorted(dims.items())))


def test_resolver_uses_instance_dimension_then_hostname():
    nodes = [Instance("i-0123456789abcdef0", "p5.48xlarge", "running", None, None, None, private_ip="10.0.1.23")]
    resolve = NodeResolver(nodes, "InstanceId", "host").instance_of
    assert resolve(series(InstanceId="i-0123456789abcdef0", index="0")) == "i-0123456789abcdef0"
    assert resolve(series(host="ip-10-0-1-23.us-west-2.compute.internal", index="0")) == "i-0123456789abcdef0"
    assert resolve(series(host="i-0123456789abcdef0.us-west-2.compute.internal")) == "i-0123456789abcdef0"
    assert resolve(series(host="ip-10-0-1-24.ec2.internal")) is None
    # An InstanceId that is not ours wins over a host that happens to match: that series is someone else's.
    assert resolve(series(InstanceId="i-0fffffffffffffff0", host="ip-10-0-1-23")) is None


def test_select_series_prefers_per_gpu_over_aggregate_and_merges_renamed_hosts():
    per_gpu = [series(InstanceId="i-1", index=str(g), name="H100", host="a") for g in range(8)]
    renamed = series(InstanceId="i-1", index="3", name="H100", host="b")
    aggregate = series(InstanceId="i-1")
    chosen = select_series([aggregate, *per_gpu, renamed], ["index"])
    assert sorted(chosen, key=int) == [str(g) for g in range(8)]
    assert chosen["3"] == sorted([per_gpu[3], renamed], key=lambda s: s.dimensions)
    assert select_series([aggregate], ["index"]) == {"": [aggregate]}


def test_missing_devices_only_for_numbered_devices():
    assert missing_devices(["0", "1", "3"], 4) == ["2"]
    assert missing_devices(["GPU-ab", "GPU-cd"], 8) == []


# --- listing strategy (moto) -------------------------------------------------------------------------------

@pytest.fixture
def cloudwatch(aws):
    return aws.client("cloudwatch")


def publish_fleet(cloudwatch, ours: list[str], foreign: int, host_only: bool = False) -> None:
    publish = MetricsPublisher(cloudwatch, NOW, periods=1)
    for n, instance_id in enumerate(ours):  # first, so the first pages already show our series' dimensions
        publish.gpu_node(instance_id, f"10.0.0.{n + 1}", 90.0, append_instance_id=not host_only)
    for n in range(foreign):
        publish.gpu_node(f"i-{n:017x}", f"10.1.{n // 250}.{n % 250}", 90.0)
    publish.flush()


def test_small_cluster_in_a_big_account_switches_to_per_instance_listing(cloudwatch):
    ours = ["i-00000000000aaaa01", "i-00000000000aaaa02"]
    publish_fleet(cloudwatch, ours, foreign=150)  # 16 + 1,200 series: 3 namespace pages vs 2 instances
    calls = counted(cloudwatch)
    listing = discover(cloudwatch, "CWAgent", UTIL, lambda s: s.dim("InstanceId") in ours, "InstanceId", ours)
    assert listing.mode == "per-InstanceId" and len(listing.series) == 16
    # 2 namespace pages (the per-instance cost) before switching, then 1 per instance: at most twice the best.
    assert calls["ListMetrics"] == listing.calls == 4


def test_host_only_series_keep_the_namespace_listing(cloudwatch):
    ours = ["i-00000000000aaaa01", "i-00000000000aaaa02"]
    publish_fleet(cloudwatch, ours, foreign=150, host_only=True)
    hosts = {"ip-10-0-0-1.us-west-2.compute.internal", "ip-10-0-0-2.us-west-2.compute.internal"}
    calls = counted(cloudwatch)
    listing = discover(cloudwatch, "CWAgent", UTIL, lambda s: s.dim("host") in hosts, "InstanceId", ours)
    # Listing per InstanceId would miss series without one: the whole namespace is listed instead.
    assert listing.mode == "namespace" and len(listing.series) == 16 and calls["ListMetrics"] == 3


def test_cluster_metrics_scale_with_pages_not_nodes(builder, aws, run_checks):
    nodes = launch_nodes(builder, 63)
    publish = MetricsPublisher(aws.client("cloudwatch"), datetime.now(UTC))
    for node in nodes:
        publish.gpu_node(node.id, node.private_ip, 95.0)
    publish.flush()
    report = run_checks(["gpu-idle"], gpu={"startup_grace": "0s"})
    assert report.findings == [] and report.errors == []
    # 504 series per metric: 2 pages x 5 metrics; 2,520 queries in ceil(2520 / 500) = 6 GetMetricData calls.
    assert report.stats.api_calls["cloudwatch.ListMetrics"] == 10
    assert report.stats.api_calls["cloudwatch.GetMetricData"] == 6 == lower_bound_calls(
        2520, NOW - timedelta(minutes=30), NOW, timedelta(minutes=5))


# --- fetching: batching, pages and per-query failures (Stubber: moto does not paginate GetMetricData) -------

def test_queries_per_call_respects_the_datapoint_limit():
    assert queries_per_call(NOW - timedelta(minutes=30), NOW, timedelta(minutes=5)) == 500
    assert queries_per_call(NOW - timedelta(hours=24), NOW, timedelta(minutes=1)) == 69  # 100,800 // 1,441


def test_fetch_follows_pages_and_keeps_failed_queries_apart(aws):
    client = aws.client("cloudwatch")
    one, two = series(InstanceId="i-1", index="0"), series(InstanceId="i-1", index="1")
    t1, t2 = NOW - timedelta(minutes=20), NOW - timedelta(minutes=10)
    stub = Stubber(client)
    stub.add_response("get_metric_data", {
        "MetricDataResults": [{"Id": "q0", "Label": UTIL, "Timestamps": [t2], "Values": [80.0],
                               "StatusCode": "PartialData"}],
        "NextToken": "page-2",
    }, {"MetricDataQueries": ANY, "StartTime": ANY, "EndTime": ANY, "ScanBy": "TimestampAscending"})
    stub.add_response("get_metric_data", {
        "MetricDataResults": [
            {"Id": "q0", "Label": UTIL, "Timestamps": [t1], "Values": [70.0], "StatusCode": "Complete"},
            {"Id": "q1", "Label": UTIL, "Timestamps": [], "Values": [], "StatusCode": "InternalError"},
        ],
    }, {"MetricDataQueries": ANY, "StartTime": ANY, "EndTime": ANY, "ScanBy": "TimestampAscending",
        "NextToken": "page-2"})
    with stub:
        fetched = fetch(client, [Query(one, "Average"), Query(two, "Average")], NOW - timedelta(minutes=30), NOW,
                        timedelta(minutes=5))
    stub.assert_no_pending_responses()
    assert fetched.values[0] == [(t1, 70.0), (t2, 80.0)]
    assert fetched.failed == {1: "InternalError"} and fetched.calls == 2


# --- settings ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(
    "gpu, message",
    [
        ("period: 90s", "clusters.a.gpu.period: must be a whole number of minutes"),
        ("window: 1m", "clusters.a.gpu: window (1m) is shorter than period (5m)"),
        ("straggler_robust_z: 0", "clusters.a.gpu.straggler_robust_z"),
    ],
)
def test_bad_gpu_settings_name_the_key(gpu, message):
    from fmdoctor.config import parse_settings
    from fmdoctor.engine.errors import ConfigError

    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_settings(f"clusters:\n  a:\n    gpu: {{{gpu}}}\n")


# --- naming nodes: every name the agents publish --------------------------------------------------------

def test_node_index_resolves_every_name_the_agents_publish():
    from fmdoctor.metrics.identity import NodeIdentity, NodeIndex

    index = NodeIndex([
        NodeIdentity("i-0123456789abcdef0", ("10.0.1.23", "10.0.1.99"),
                     ("ip-10-0-1-23.us-west-2.compute.internal", "train-st-p5-1")),
        NodeIdentity("i-0fedcba9876543210", ("10.0.1.24",), ("shared-name",)),
        NodeIdentity("i-0aaaaaaaaaaaaaaa1", ("10.0.1.25",), ("shared-name",)),
    ])
    mine = "i-0123456789abcdef0"
    assert index.resolve(mine).node == mine
    assert index.resolve(f"hyperpod-{mine}").node == mine  # HyperPod's Kubernetes node name
    assert index.resolve(f"{mine}.us-west-2.compute.internal").node == mine  # resource-based naming
    assert index.resolve("ip-10-0-1-23").node == mine  # the short hostname
    assert index.resolve("ip-10-0-1-23.corp.example.com").node == mine  # a custom DHCP domain
    assert index.resolve("10.0.1.99:9400").node == mine  # Prometheus's instance: a VPC CNI pod IP of the node
    assert index.resolve("train-st-p5-1").node == mine  # a Slurm hostname from a tag
    assert index.resolve("TRAIN-ST-P5-1.cluster.pcluster").node == mine
    other = index.resolve("ip-10-9-9-9.ec2.internal")
    assert other.node is None and other.foreign  # another node's: ignored, not unmatched
    assert index.resolve("i-0bbbbbbbbbbbbbbb2").foreign
    assert not index.resolve("shared-name").recognised  # two nodes carry it: neither is guessed
    assert not index.resolve("queue1-dy-p5-7").recognised
    resolved, identity = index.resolve_labels({"InstanceId": "i-0bbbbbbbbbbbbbbb2", "host": "train-st-p5-1"},
                                              ["InstanceId"], ["host"])
    assert resolved.foreign and identity is None  # an instance id decides, whatever the hostname says
    resolved, identity = index.resolve_labels({"Hostname": "queue1-dy-p5-7", "instance": "10.0.1.23:9400"},
                                              [], ["Hostname", "instance"])
    assert resolved.node == mine  # the first recognised name decides
    assert index.resolve_labels({"host": "queue1-dy-p5-7"}, ["InstanceId"], ["host"]) == (
        type(resolved)(), "host=queue1-dy-p5-7")


# --- memory: trouble, not fullness --------------------------------------------------------------------------

def device(utilization, memory, total=80.0):
    from fmdoctor.metrics.model import MEMORY_USED, UTILIZATION, DeviceMetrics

    times = [NOW - timedelta(minutes=5 * (len(utilization) - k)) for k in range(len(utilization))]
    return DeviceMetrics("0", tuple(utilization), max(memory) * total / 100, total, times[-1], {
        UTILIZATION: tuple(zip(times, utilization, strict=True)),
        MEMORY_USED: tuple(zip(times, (m * total / 100 for m in memory), strict=True)),
    })


@pytest.mark.parametrize("utilization, memory, basis", [
    ([95, 95, 95, 95, 95, 95], [99, 99, 99, 99, 99, 99], None),  # full and busy: an allocator's cache
    ([95, 96, 94, 95, 40, 35], [97, 98, 98, 99, 99, 99], "ceiling-and-collapse"),
    ([95, 96, 94, 95, 40, 35], [80, 80, 80, 80, 80, 80], None),  # slower, but memory is not why
    ([95, 95, 95, 95, 95, 95], [60, 63, 66, 69, 72, 75], "steady-growth"),
    ([95, 95, 95, 95, 95, 95], [0, 70, 80, 80, 80, 80], None),  # a job that started in the window
    ([95, 95, 95, 95, 95, 95], [60, 65, 70, 75, 80, 80], None),  # grew, then stopped growing
    ([95, 95], [60, 99], None),  # too few periods for a trend
])
def test_memory_trouble(utilization, memory, basis):
    from fmdoctor.metrics.memory import memory_trouble

    found = memory_trouble(device(utilization, memory), ceiling=95, collapse_percent=50, growth_points=10)
    assert (found.basis if found else None) == basis


_T = [datetime(2026, 1, 1, 0, m, tzinfo=UTC) for m in range(4)]
PER_PERIOD_CASES = {  # (points of one device and signal, the peak's answer, the mean's answer)
    "one series, in order": ([(_T[0], 1.0), (_T[1], 3.0)], ((_T[0], 1.0), (_T[1], 3.0)),
                             ((_T[0], 1.0), (_T[1], 3.0))),
    "no points": ([], (), ()),
    "one point": ([(_T[2], 7.5)], ((_T[2], 7.5),), ((_T[2], 7.5),)),
    "a -0.0 mean is 0.0, its peak is kept": ([(_T[0], -0.0), (_T[1], 2.0)], ((_T[0], -0.0), (_T[1], 2.0)),
                                             ((_T[0], 0.0), (_T[1], 2.0))),
    "two series of a renamed host, one shared period": (
        [(_T[0], 1.0), (_T[1], 2.0), (_T[1], 4.0), (_T[2], 5.0)],
        ((_T[0], 1.0), (_T[1], 4.0), (_T[2], 5.0)), ((_T[0], 1.0), (_T[1], 3.0), (_T[2], 5.0))),
    "out of order": ([(_T[1], 2.0), (_T[0], 1.0)], ((_T[0], 1.0), (_T[1], 2.0)), ((_T[0], 1.0), (_T[1], 2.0))),
}


@pytest.mark.parametrize("found,peak,mean", PER_PERIOD_CASES.values(), ids=PER_PERIOD_CASES.keys())
def test_per_period_values(found, peak, mean):
    """One value a period: the larger of a peak's, the mean of the others'; a single ordered series is its own."""
    from fmdoctor.metrics.cluster import _per_period

    assert _per_period(found, max) == peak
    got = _per_period(found)
    assert got == mean and [math.copysign(1.0, v) for _, v in got] == [math.copysign(1.0, v) for _, v in mean]


def test_a_series_is_resolved_once_and_hashes_as_its_fields():
    """The resolver answers a series from its memo the second time; a series' hash (kept) is its fields'."""
    import pickle

    resolver = NodeResolver([NodeIdentity("i-1", ("10.0.0.1",), ())], "InstanceId", "host")
    series = Series("CWAgent", "m", (("host", "ip-10-0-0-1"),))
    first = resolver.classify(series)
    assert first[0].node == "i-1" and resolver.classify(Series("CWAgent", "m", (("host", "ip-10-0-0-1"),))) is first
    assert hash(series) == hash(("CWAgent", "m", (("host", "ip-10-0-0-1"),)))
    assert pickle.loads(pickle.dumps(series)) == series and {series: 1}[pickle.loads(pickle.dumps(series))] == 1


def test_a_slotted_series_keeps_equality_hash_copies_and_replace():
    """Series and Query carry no instance dictionary (81,920 series at 2,048 p4d nodes); equality ignores the kept
    hash, a copy or ``replace`` hashes its own fields, and the repr names the fields only."""
    import copy
    import dataclasses

    series = Series("CWAgent", "m", (("InstanceId", "i-1"), ("index", "0")))
    query = Query(series, "Average")
    assert not hasattr(series, "__dict__") and not hasattr(query, "__dict__")
    assert series == Series("CWAgent", "m", (("InstanceId", "i-1"), ("index", "0")))
    assert series != Series("CWAgent", "m", (("InstanceId", "i-1"), ("index", "1")))
    assert copy.copy(series) == series and hash(copy.deepcopy(series)) == hash(series)
    renamed = dataclasses.replace(series, name="n")
    assert renamed == Series("CWAgent", "n", series.dimensions) and hash(renamed) == hash(("CWAgent", "n",
                                                                                            series.dimensions))
    assert {query: 1}[Query(copy.copy(series), "Average")] == 1 and query != Query(series, "Maximum")
    assert "_hash" not in repr(series)
    with pytest.raises(dataclasses.FrozenInstanceError):
        series.name = "x"  # type: ignore[misc]


def test_owners_of_the_same_nodes_share_one_resolver_and_its_answers():
    """The shared listing's owners and the snapshot's: one name table and one series memo while both live; other
    nodes or dimensions get their own; a memo's answers are one object per distinct answer."""
    import gc

    nodes = [NodeIdentity("i-1", ("10.0.0.1",), ()), NodeIdentity("i-2", ("10.0.0.2",), ())]
    first = NodeResolver.shared(nodes, "InstanceId", "host")
    assert NodeResolver.shared([NodeIdentity(n.id, n.ips, n.names) for n in nodes], "InstanceId", "host") is first
    assert NodeResolver.shared(nodes[:1], "InstanceId", "host") is not first
    assert NodeResolver.shared(nodes, "InstanceId", "hostname") is not first
    a = first.classify(Series("CWAgent", "m", (("InstanceId", "i-1"), ("index", "0"))))
    b = first.classify(Series("CWAgent", "m", (("InstanceId", "i-1"), ("index", "1"))))
    assert a is b and a[0].node == "i-1"
    assert first.classify(Series("CWAgent", "m", (("host", "ip-10-0-0-2"),)))[0].node == "i-2"
    assert first._classified
    del first, a, b
    gc.collect()
    assert not NodeResolver.shared(nodes, "InstanceId", "host")._classified  # none alive: a new one, memo empty


# --- a sweep's points: one shared grid of period starts, values as doubles ---------------------------------

def test_points_read_as_the_tuple_of_their_points():
    import pickle

    from fmdoctor.metrics.model import DeviceMetrics, Points

    points = Points((_T[0], _T[1], _T[2]), [1.0, -0.0, 2.5])
    as_tuples = ((_T[0], 1.0), (_T[1], -0.0), (_T[2], 2.5))
    assert points == as_tuples and points == list(as_tuples) and tuple(points) == as_tuples
    assert points != as_tuples[:2] and points != ((_T[0], 1.0), (_T[1], 0.5), (_T[2], 2.5))
    assert len(points) == 3 and points[1] == (_T[1], -0.0) and points[-1] == (_T[2], 2.5)
    assert points[1:] == as_tuples[1:] and isinstance(points[1:], Points)
    assert bool(points) and not Points() and Points() == ()
    assert hash(points) == hash(as_tuples) and pickle.loads(pickle.dumps(points)) == points
    assert max(t for t, _ in points) == _T[2]
    device = DeviceMetrics("0", signals={"power": points})
    assert device.values("power") == [1.0, -0.0, 2.5] and device.mean("power") == 3.5 / 3
    with pytest.raises(ValueError):
        Points((_T[0],), [1.0, 2.0])


SWEEP_POINTS_CASES = {  # one query's times and values as its pages brought them -> its points
    "in order": ([_T[0], _T[1]], [1.0, 2.0], ((_T[0], 1.0), (_T[1], 2.0))),
    "pages out of order": ([_T[2], _T[0], _T[1]], [3.0, 1.0, 2.0], ((_T[0], 1.0), (_T[1], 2.0), (_T[2], 3.0))),
    "a time twice: sorted as pairs": ([_T[1], _T[1], _T[0]], [5.0, 4.0, 1.0],
                                      ((_T[0], 1.0), (_T[1], 4.0), (_T[1], 5.0))),
    "none": ([], [], ()),
}


@pytest.mark.parametrize("times,values,expected", SWEEP_POINTS_CASES.values(), ids=SWEEP_POINTS_CASES.keys())
def test_a_querys_points_are_sorted_as_pairs_on_a_shared_grid(times, values, expected):
    from fmdoctor.metrics.cloudwatch import _points

    grids: dict = {}
    first = _points(list(times), list(values), grids)
    again = _points(list(times), [v + 1 for v in values], grids)
    assert first == expected and first.times is again.times  # one tuple of times for every series on the grid


@pytest.mark.parametrize("found,peak,mean", PER_PERIOD_CASES.values(), ids=PER_PERIOD_CASES.keys())
def test_per_period_values_of_a_sweeps_points(found, peak, mean):
    """The same answers from a sweep's Points as from tuples; one ordered series' Points is kept, not copied."""
    from fmdoctor.metrics.cluster import _per_period
    from fmdoctor.metrics.model import Points

    points = Points(tuple(t for t, _ in found), [v for _, v in found])
    assert _per_period(points, max) == peak
    got = _per_period(points)
    assert got == mean and [math.copysign(1.0, v) for _, v in got] == [math.copysign(1.0, v) for _, v in mean]
    if list(found) == sorted(found) and len({t for t, _ in found}) == len(found):
        assert _per_period(points, max) is points


def test_fetch_rejects_an_answer_whose_timestamps_and_values_differ_in_number():
    from fmdoctor.metrics.cloudwatch import Fetched, _collect

    with pytest.raises(ValueError, match="2 timestamps and 1 values for q0"):
        _collect([{"Id": "q0", "Timestamps": [_T[0], _T[1]], "Values": [1.0]}], Fetched(), {})


def test_listings_of_several_metric_names_share_each_dimension_set():
    """One node's dimension set is one tuple under every metric name listed with the same ``shared`` (each listing
    decodes its own strings); without it each listing keeps its own."""

    class Listed:  # ListMetrics' answer shape (one page), as the JSON reader leaves it
        def get_paginator(self, _name):
            return self

        def paginate(self, Namespace, MetricName, **_):
            yield {"Metrics": [{"Namespace": Namespace, "MetricName": MetricName,
                                "Dimensions": [{"Name": "index", "Value": "0"},
                                               {"Name": "InstanceId", "Value": "i-" + "1" * 17}]}]}

    shared: dict = {}
    [util] = discover(Listed(), "CWAgent", UTIL, lambda s: True, shared=shared).series
    [power] = discover(Listed(), "CWAgent", "nvidia_smi_power_draw", lambda s: True, shared=shared).series
    [alone] = discover(Listed(), "CWAgent", "nvidia_smi_power_draw", lambda s: True).series
    assert util.dimensions == (("InstanceId", "i-" + "1" * 17), ("index", "0")) and util.name == UTIL
    assert power.dimensions is util.dimensions and alone.dimensions is not util.dimensions
    assert alone == power
