"""scheduler-schedules-faulty-node's judge, branch by branch: each fault kind alone (an Xid NVIDIA resolves by a
reset or worse, missing EFA, a Spot notice), each Slurm/Kubernetes state, a source that cannot be read (not
verified, never a pass), a healthy node, and a drained node with a fault (already out); then the whole check over
the real Slurm (slurm_cluster.py). The Xid rows are NVIDIA's catalogue as fmdoctor keeps it (data/xid_catalogue.csv:
79 is RESTART_BM, 13 RESTART_APP); the EFA counts are a p5.48xlarge's (DescribeInstanceTypes: 32 EFA interfaces)."""

from __future__ import annotations

import pytest

from checks._net import efa_shortfall, groups_using_efa
from checks.scheduler_schedules_faulty_node import EFA_FAULT, SPOT_FAULT, XID_FAULT, Fault, judge, xid_fault
from fmdoctor.engine.model import Severity
from fmdoctor.node.xid_catalogue import xid_verdict
from fmdoctor.scheduler.model import KUBERNETES, SLURM, SchedulerNode, SchedulerView

from .slurm_cluster import SlurmCluster
from .worlds import instance, inventory, run

FAULTY = "scheduler-schedules-faulty-node"
I11, I12, I13 = "i-0000000000000a011", "i-0000000000000a012", "i-0000000000000a013"


def xid(code: int, gpu: int = 0) -> dict:
    verdict = xid_verdict(code)
    return {"gpu": gpu, "xid": code, "meaning": verdict.description, "action": verdict.action}


XID_79 = xid_fault(I11, [xid(79)], "prometheus")
EFA_NONE = Fault(EFA_FAULT, I11, "it has 0 of the 32 EFA interfaces", "r")
SPOT = Fault(SPOT_FAULT, I11, "EC2 Spot will terminate it", "r")


@pytest.mark.parametrize(("states", "kind", "scheduled"), [
    ({"IDLE"}, SLURM, True),
    ({"MIXED"}, SLURM, True),
    ({"ALLOCATED"}, SLURM, True),
    ({"IDLE", "DRAIN"}, SLURM, False),
    ({"ALLOCATED", "DRAIN"}, SLURM, False),  # draining: its job finishes, nothing new starts
    ({"DOWN"}, SLURM, False),
    ({"IDLE", "FAIL"}, SLURM, False),
    ({"IDLE", "INVALID_REG"}, SLURM, False),
    ({"IDLE", "NOT_RESPONDING"}, SLURM, False),
    ({"READY"}, KUBERNETES, True),
    ({"READY", "CORDONED"}, KUBERNETES, False),
    ({"NOTREADY"}, KUBERNETES, False),
])
@pytest.mark.parametrize("fault", [XID_79, EFA_NONE, SPOT], ids=["xid", "efa", "spot"])
def test_each_fault_kind_alone_in_each_state(states, kind, scheduled, fault):
    node = SchedulerNode("n", frozenset(states))
    assert judge(node, kind, [fault]) == ([fault] if scheduled else [])


def test_a_scheduled_node_with_no_fault_is_nothing():
    assert judge(SchedulerNode("n", frozenset({"IDLE"})), SLURM, []) == []


def test_worst_fault_first():
    warning = Fault(EFA_FAULT, I11, "it has 4 of the 32 EFA interfaces", "r", Severity.WARNING)
    assert judge(SchedulerNode("n", frozenset({"MIXED"})), SLURM, [warning, SPOT]) == [SPOT, warning]


@pytest.mark.parametrize(("codes", "expected"), [
    ([79], 79),  # GPU fallen off the bus: RESTART_BM
    ([48], 48),  # double bit ECC: reset
    ([13], None),  # graphics engine exception: restart the application, not the node
    ([13, 79], 79),
    ([], None),
])
def test_only_xids_nvidia_resolves_by_a_reset_or_worse_are_faults(codes, expected):
    fault = xid_fault(I11, [xid(c) for c in codes], "logs")
    assert (fault.evidence["xids"][0]["xid"] if fault else None) == expected
    if fault:
        assert fault.kind == XID_FAULT and fault.severity is Severity.CRITICAL and f"Xid {expected}" in fault.reason


@pytest.mark.parametrize(("efa", "expected"), [(0, (0, "accelerated")), (4, (4, "uses-efa")), (32, None)])
def test_efa_shortfall_by_the_efa_checks_rules(efa, expected):
    inv = inventory(instance(I11, "10.0.1.11", efa=efa))
    short = efa_shortfall(inv, inv.instances[0], groups_using_efa(inv))
    assert ((short.have, short.why) if short else None) == expected


def test_an_instance_type_describe_instance_types_did_not_return_is_not_judged():
    inv = inventory(instance(I11, "10.0.1.11", instance_type="p5e.48xlarge"))
    with pytest.raises(LookupError):
        efa_shortfall(inv, inv.instances[0], set())


def _view(*nodes: tuple[str, set[str]]) -> SchedulerView:
    return SchedulerView(SLURM, "recorded", tuple(SchedulerNode(n, frozenset(s), addresses=(n,)) for n, s in nodes))


def _run(efa: dict[str, int], states: dict[str, set[str]], **kw):
    ips = {I11: "10.0.1.11", I12: "10.0.1.12", I13: "10.0.1.13"}
    world = inventory(*(instance(i, ips[i], efa=n, **kw) for i, n in efa.items()))
    view = _view(*((f"ip-{ips[i].replace('.', '-')}", s) for i, s in states.items()))
    return run(world, [FAULTY], extras={"scheduler_reader": lambda kind, settings: view},
               scheduler={"kind": "slurm"})


def test_unreadable_sources_are_not_verified_and_a_drained_faulty_node_is_already_out():
    """No AWS here: the Spot notices, the GPU metrics and the kernel logs cannot be read, so those fault kinds
    are not verified for the nodes Slurm schedules onto; the EFA counts come from the inventory and judge."""
    report = _run({I11: 0, I12: 32, I13: 0}, {I11: {"IDLE"}, I12: {"MIXED"}, I13: {"IDLE", "DRAIN"}})
    assert [(f.resource, f.severity, f.evidence["fault_kinds"]) for f in report.findings] == [
        (I11, Severity.CRITICAL, [EFA_FAULT])]  # I13 lacks EFA too, but Slurm already drains it
    assert report.findings[0].evidence["fix"] == [
        {"action": "drain-slurm-node", "node": "ip-10-0-1-11", "reason": "fmdoctor: 0 of 32 EFA interfaces"}]
    unverified = {e.unverified.split(":")[0] for e in report.errors if e.check == FAULTY}
    assert unverified == {
        "whether the scheduler schedules onto a node with Spot and interruption notices",
        "whether the scheduler schedules onto a node with Xid errors NVIDIA resolves by a reset, reboot or "
        "replacement"}
    [xids] = [e for e in report.errors if e.check == FAULTY and "Xid" in e.unverified]
    assert "2 nodes" in xids.unverified  # the two Slurm schedules onto; the drained one is not asked about


def test_healthy_nodes_give_nothing_but_what_was_not_read():
    report = _run({I11: 32, I12: 32}, {I11: {"IDLE"}, I12: {"ALLOCATED"}})
    assert report.findings == []
    assert any("Xid" in e.unverified for e in report.errors if e.check == FAULTY)


def test_a_type_without_efa_info_leaves_efa_not_verified():
    report = _run({I11: 4}, {I11: {"IDLE"}}, instance_type="p5e.48xlarge")
    assert report.findings == []
    assert any(e.code == "InstanceTypeNoEfaInfo" for e in report.errors if e.check == FAULTY)


def test_over_the_real_slurm(slurm: SlurmCluster):
    """Slurm's own states: ip-10-0-1-11 runs a job (ALLOCATED), ip-10-0-1-12 is drained, ip-10-0-1-13 idles,
    ip-10-0-1-14 is INVAL. Nodes 11 and 12 lack EFA; only 11, which Slurm still schedules onto, is reported."""
    world = inventory(instance(I11, "10.0.1.11"), instance(I12, "10.0.1.12"),
                      instance(I13, "10.0.1.13", efa=32))
    slurm.drain("ip-10-0-1-12", "Kill task failed")
    job = slurm.sbatch("llama-pretrain", ["ip-10-0-1-11"])
    report = run(world, [FAULTY], scheduler={"kind": "slurm"})
    [finding] = report.findings
    assert finding.resource == I11 and finding.severity is Severity.CRITICAL
    assert finding.evidence["scheduler_node"]["name"] == "ip-10-0-1-11"
    assert "DRAIN" not in finding.evidence["scheduler_node"]["states"]
    assert [j["id"] for j in finding.evidence["jobs"]] == [job]
    assert finding.evidence["fault"]["efa_interfaces"] == 0 and finding.evidence["fault"]["max_efa_interfaces"] == 32
    assert finding.evidence["fix"][0] == {"action": "drain-slurm-node", "node": "ip-10-0-1-11",
                                          "reason": "fmdoctor: 0 of 32 EFA interfaces"}
    assert any("Xid" in e.unverified for e in report.errors if e.check == FAULTY)


class _Ctx:
    """The little metric_xids reads of a CheckContext: the run's shared metrics snapshot."""

    def __init__(self, metrics):
        self.metrics = metrics

    def shared(self, key, loader):
        if isinstance(self.metrics, Exception):
            raise self.metrics
        return self.metrics


def _snapshot(series: dict[str, list[int]]):
    from datetime import UTC, datetime, timedelta

    from fmdoctor.metrics.model import XID, ClusterMetrics, DeviceMetrics, NodeMetrics

    start = datetime(2026, 4, 12, 8, tzinfo=UTC)
    points = {i: tuple((start + timedelta(minutes=5 * n), float(v)) for n, v in enumerate(values))
              for i, values in series.items()}
    nodes = {i: NodeMetrics(i, "gpu", 1, len(p), (DeviceMetrics("3", (90.0,) * len(p), signals={XID: p} if p else {}),),
                            source="prometheus") for i, p in points.items()}
    return ClusterMetrics(start, start + timedelta(minutes=15), timedelta(minutes=5), nodes, {}, {})


def test_xid_faults_from_dcgm_series_as_gpu_xid_metrics_judges_them():
    """DCGM_FI_DEV_XID_ERRORS holds the last Xid: a change to 79 in the window is a fault, a held 13 is not;
    a node whose metrics carry no Xid series is not among those the metrics verified."""
    from checks.scheduler_schedules_faulty_node import Faults, metric_xids

    faults = Faults()
    seen = metric_xids(_Ctx(_snapshot({I11: [0, 79, 79], I12: [13, 13, 13], I13: []})), faults)  # type: ignore[arg-type]
    assert seen == {I11, I12}
    assert list(faults.on) == [I11]
    [fault] = faults.on[I11]
    assert fault.evidence["source"] == "prometheus" and fault.evidence["xids"][0]["xid"] == 79
    assert fault.sentence.startswith("GPU 3 reported Xid 79")


def test_metrics_that_cannot_be_read_leave_the_xid_kind_unread():
    from checks.scheduler_schedules_faulty_node import Faults, metric_xids

    faults = Faults()
    assert metric_xids(_Ctx(RuntimeError("Prometheus answered 503")), faults) == set()  # type: ignore[arg-type]
    assert faults.on == {} and "Prometheus answered 503" in faults.unread["metrics"]


def test_the_runbook_for_a_kubernetes_node_with_missing_efa_names_the_cordon():
    from fmdoctor.engine.model import Finding
    from fmdoctor.runbooks import get_runbook

    efa = {"kind": EFA_FAULT, "efa_interfaces": 0, "max_efa_interfaces": 32, "instance_type": "p5.48xlarge",
           "expected_because": "accelerated", "rule": "efa-not-attached"}
    evidence = {"scheduler": "kubernetes", "scheduler_source": "kubernetes context c",
                "scheduler_node": {"name": "ip-10-0-1-11.ec2.internal", "states": ["READY"], "reason": ""},
                "instance": I11, "jobs": [], "job_count": 0, "fault": efa, "faults": [efa], "fault_kinds": ["efa"],
                "fix": [{"action": "cordon-k8s-node", "node": "ip-10-0-1-11.ec2.internal"}]}
    text = get_runbook(FAULTY).render(Finding(check=FAULTY, severity="critical", resource=I11, summary="s",
                                              evidence=evidence, runbook=FAULTY), cluster="c", region="us-west-2")
    assert "kubectl cordon ip-10-0-1-11.ec2.internal" in text and "scontrol update" not in text
    assert "0 of the 32 EFA" in text and "over TCP" in text and "{{" not in text and "⟨" not in text
