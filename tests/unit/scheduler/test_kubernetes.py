"""Kubernetes as a source and its checks, through the official client against a loopback API answering EKS
shapes (tests/fixtures/kubernetes/README.md): nodes map to instances by providerID, allocatable devices are
compared with what the instance has, NotReady and HyperPod's health label are reported, pending GPU pods too."""

from __future__ import annotations

import pytest

from fmdoctor.engine.model import Severity, Status
from fmdoctor.scheduler import kubernetes as k8s
from fmdoctor.scheduler.model import SchedulerUnavailable

from .k8s_server import k8s_api, write_kubeconfig
from .worlds import instance, inventory, run

N1, N2 = "ip-10-0-1-21.us-west-2.compute.internal", "ip-10-0-1-22.us-west-2.compute.internal"
HP = "hyperpod-i-0a1b2c3d4e5f60023"
IDS = ["k8s-node-not-ready", "k8s-device-plugin-missing", "k8s-gpu-pods-pending"]


@pytest.fixture
def world():
    return inventory(instance("i-0a1b2c3d4e5f60021", "10.0.1.21", efa=32),
                     instance("i-0a1b2c3d4e5f60022", "10.0.1.22", efa=32))


def settings(kubeconfig):
    return {"scheduler": {"kind": "kubernetes", "kubernetes": {"kubeconfig": str(kubeconfig), "context": "eks-test"}}}


def test_the_client_reads_nodes_devices_labels_and_pods(tmp_path):
    with k8s_api() as (url, api):
        view = k8s.read(k8s.api_client("eks-test", str(write_kubeconfig(tmp_path / "kc", url))), "test")
    assert api.seen == ["GET /api/v1/nodes", "GET /api/v1/pods"]
    whole, short, gone = (view.node(n) for n in (N1, N2, HP))
    assert whole.states == {"READY"} and whole.allocatable == {"nvidia.com/gpu": 8, "vpc.amazonaws.com/efa": 32}
    assert short.configured == {"nvidia.com/gpu": 8} and short.allocatable == {"nvidia.com/gpu": 7}
    assert gone.states == {"UNKNOWN"} and gone.reason == "NodeStatusUnknown: Kubelet stopped posting node status."
    assert gone.labels[k8s.HEALTH_LABEL] == "UnschedulablePendingReplacement"
    assert "node.kubernetes.io/unreachable=:NoExecute" in gone.taints
    assert k8s.instance_of_provider_id(gone.provider_id) == "i-0a1b2c3d4e5f60023"
    assert [(j.id, j.user) for j in view.jobs_on(N1)] == [("training/llama-train-worker-0", "PyTorchJob/llama-train")]
    assert [p.id for p in view.pending] == ["training/llama-train-worker-2", "default/web-5d9c7b6f8-abcde"]
    assert {(p.name, p.state) for p in view.device_plugins if HP in p.nodes} == {
        ("nvidia-device-plugin-daemonset-zz81c", "not-ready (Running)"),
        ("aws-efa-k8s-device-plugin-daemonset-w2m5x", "not-ready (Running)")}


@pytest.mark.parametrize(("provider_id", "instance_id"), [
    ("aws:///us-west-2a/i-0a1b2c3d4e5f60021", "i-0a1b2c3d4e5f60021"),
    ("aws:////i-0a1b2c3d", "i-0a1b2c3d"),  # no zone (Fargate-less self-managed nodes may leave it out)
    ("gce://project/zone/name", None),
    ("aws:///us-west-2a/not-an-instance", None),
    (None, None),
])
def test_provider_ids(provider_id, instance_id):
    assert k8s.instance_of_provider_id(provider_id) == instance_id


def test_broken_cluster_findings_name_the_instance_and_the_pods_on_it(tmp_path, world):
    with k8s_api() as (url, _):
        report = run(world, IDS, **settings(write_kubeconfig(tmp_path / "kc", url)))
    assert report.errors == []
    by = {(f.check, f.resource): f for f in report.findings}
    not_ready = by[("k8s-node-not-ready", "kubernetes:" + HP)]  # a HyperPod node is no EC2 instance of ours
    assert not_ready.severity is Severity.CRITICAL
    assert "Kubelet stopped posting node status" in not_ready.summary and "UnschedulablePendingReplacement" in \
        not_ready.summary
    assert [j["id"] for j in not_ready.evidence["jobs"]] == ["training/llama-train-worker-1"]
    plugin = by[("k8s-device-plugin-missing", "i-0a1b2c3d4e5f60022")]
    assert plugin.evidence["expected"] == {"nvidia.com/gpu": 8, "vpc.amazonaws.com/efa": 32}
    assert plugin.evidence["plugins_absent"] == ["aws-efa-k8s-device-plugin"]
    assert "nvidia.com/gpu 7 of 8" in plugin.summary and "vpc.amazonaws.com/efa 0 of 32" in plugin.summary
    pending = by[("k8s-gpu-pods-pending", "pod/training/llama-train-worker-2")]
    assert "Insufficient nvidia.com/gpu" in pending.summary and pending.evidence["requests"]["nvidia.com/gpu"] == "8"
    assert not any("web-" in f.resource for f in report.findings)  # no device asked: not ours to report
    assert ("k8s-device-plugin-missing", "i-0a1b2c3d4e5f60021") not in by  # the whole node


def test_healthy_cluster_passes_every_check(tmp_path, world):
    with k8s_api("eks-gpu-nodes-healthy.json", "eks-gpu-pods-healthy.json") as (url, _):
        report = run(world, IDS, **settings(write_kubeconfig(tmp_path / "kc", url)))
    assert report.findings == [] and report.errors == [] and report.status is Status.OK
    assert set(report.stats.checks_run) == set(IDS)


def test_a_wrong_token_is_not_verified_with_how_to_grant_never_a_pass(tmp_path, world):
    with k8s_api() as (url, _):
        report = run(world, IDS, **settings(write_kubeconfig(tmp_path / "kc", url, token="wrong")))
    assert report.findings == [] and report.status is Status.UNKNOWN
    assert {e.check for e in report.errors} == set(IDS)
    assert all(e.code == "AccessDenied" and "get/list nodes and pods" in e.message for e in report.errors)


def test_pods_forbidden_is_a_gap_and_nodes_still_judged(tmp_path, world):
    with k8s_api() as (url, api):
        api.deny.add("/api/v1/pods")
        report = run(world, ["k8s-node-not-ready"], **settings(write_kubeconfig(tmp_path / "kc", url)))
    assert [f.resource for f in report.findings] == ["kubernetes:" + HP]
    assert [e.code for e in report.errors] == ["SchedulerPartial"]
    assert report.findings[0].severity is Severity.CRITICAL  # its pods unread: no proof nothing is evicted


def test_no_kubeconfig_named_that_exists_is_not_verified(tmp_path, world):
    report = run(world, ["k8s-node-not-ready"], **settings(tmp_path / "absent"))
    assert report.status is Status.UNKNOWN and report.errors[0].code == "NoKubeconfig"


def test_a_slurm_cluster_skips_the_kubernetes_checks(world):
    report = run(world, IDS, scheduler={"kind": "none"})
    assert {s.check for s in report.skipped} == set(IDS) and report.errors == []


def test_unreachable_api_server_raises_unavailable(tmp_path):
    kubeconfig = write_kubeconfig(tmp_path / "kc", "http://127.0.0.1:9")
    with pytest.raises(SchedulerUnavailable) as raised:
        k8s.read(k8s.api_client("eks-test", str(kubeconfig)), "test")
    assert raised.value.code == "KubernetesUnreachable"


BOOTING = "ip-10-0-1-31.us-west-2.compute.internal"


def _booting_node() -> dict:
    """A node Karpenter has just launched, as the API serves it before its CNI is up: Ready False with the
    kubelet's KubeletNotReady "container runtime network not ready ... cni plugin not initialized" (kubelet's
    runtime-network check; https://kubernetes.io/docs/reference/node/node-status/#condition), the
    node.kubernetes.io/not-ready taint the node lifecycle controller adds and Karpenter's karpenter.sh/unregistered
    (https://karpenter.sh/docs/concepts/disruption/, node registration). Only DaemonSet pods (aws-node) are bound
    to it yet."""
    return {
        "metadata": {"name": BOOTING, "creationTimestamp": "2026-12-04T23:58:01Z",
                     "labels": {"karpenter.sh/nodepool": "gpu", "node.kubernetes.io/instance-type": "p5.48xlarge",
                                "kubernetes.io/hostname": BOOTING}},
        "spec": {"providerID": "aws:///us-west-2a/i-0a1b2c3d4e5f60031",
                 "taints": [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"},
                            {"key": "karpenter.sh/unregistered", "effect": "NoExecute"}]},
        "status": {"capacity": {"cpu": "192", "pods": "100"}, "allocatable": {"cpu": "191450m", "pods": "100"},
                   "conditions": [{"type": "Ready", "status": "False", "lastHeartbeatTime": "2026-12-04T23:58:31Z",
                                   "lastTransitionTime": "2026-12-04T23:58:21Z", "reason": "KubeletNotReady",
                                   "message": "container runtime network not ready: NetworkReady=false "
                                              "reason:NetworkPluginNotReady message:Network plugin returns error: "
                                              "cni plugin not initialized"}],
                   "addresses": [{"type": "InternalIP", "address": "10.0.1.31"}]}}


def _daemonset_pod(name: str, node: str) -> dict:
    return {"metadata": {"name": name, "namespace": "kube-system",
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "aws-node",
                                              "uid": "0d1e2f", "controller": True}]},
            "spec": {"nodeName": node, "containers": [{"name": "aws-node", "image": "amazon-k8s-cni:v1.19.0"}]},
            "status": {"phase": "Pending"}}


def test_a_booting_node_with_only_daemonset_pods_is_a_warning_not_a_critical(tmp_path):
    """A not-Ready node hurts through the pods the node controller evicts from it; one still booting, with
    only its DaemonSet pods bound, is every scale-up and evicts nothing (Slurm's side: critical only when
    losing jobs)."""
    world = inventory(instance("i-0a1b2c3d4e5f60031", "10.0.1.31"))
    with k8s_api("eks-gpu-nodes-healthy.json", "eks-gpu-pods-healthy.json") as (url, api):
        api.nodes["items"] = [_booting_node()]
        api.pods["items"] = [_daemonset_pod("aws-node-7hx2q", BOOTING)]
        report = run(world, ["k8s-node-not-ready"], **settings(write_kubeconfig(tmp_path / "kc", url)))
        assert report.errors == []
        [finding] = report.findings
        assert finding.severity is Severity.WARNING and "cni plugin not initialized" in finding.summary
        assert "no workload pod" in finding.summary
        # the same node with a training worker bound to it: that worker is what the node controller evicts
        worker = _daemonset_pod("llama-train-worker-3", BOOTING)
        worker["metadata"].update(namespace="training", ownerReferences=[
            {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "llama-train", "uid": "1a2b",
             "controller": True}])
        worker["status"]["phase"] = "Running"
        api.pods["items"].append(worker)
        report = run(world, ["k8s-node-not-ready"], **settings(write_kubeconfig(tmp_path / "kc", url)))
    [finding] = report.findings
    assert finding.severity is Severity.CRITICAL


def test_the_helm_charts_plugin_pods_are_known_under_their_release_prefix(tmp_path, world):
    """NVIDIA's README installs the plugin as ``helm upgrade -i nvdp nvdp/nvidia-device-plugin``: the chart's
    fullname is release-chart, so the DaemonSet and its pods are ``nvdp-nvidia-device-plugin-*``
    (https://github.com/NVIDIA/k8s-device-plugin, deployments/helm). A crash-looping one must be named as the
    cause, not reported absent."""
    with k8s_api() as (url, api):
        for pod in api.pods["items"]:
            if pod["metadata"]["name"] == "nvidia-device-plugin-daemonset-m4r8d":  # the one on ip-10-0-1-22
                pod["metadata"]["name"] = "nvdp-nvidia-device-plugin-m4r8d"
                pod["status"]["conditions"] = [{"type": "Ready", "status": "False", "reason": "ContainersNotReady"}]
        report = run(world, ["k8s-device-plugin-missing"], **settings(write_kubeconfig(tmp_path / "kc", url)))
    finding = next(f for f in report.findings if f.resource == "i-0a1b2c3d4e5f60022")
    assert [p["name"] for p in finding.evidence["device_plugins"]] == ["nvdp-nvidia-device-plugin-m4r8d"]
    assert finding.evidence["plugins_absent"] == ["aws-efa-k8s-device-plugin"]  # the EFA one truly is absent
    assert all(j["id"] != "kube-system/nvdp-nvidia-device-plugin-m4r8d" for j in finding.evidence["jobs"])


def test_a_pod_held_by_a_scheduling_gate_is_queued_not_unplaceable(tmp_path, world):
    """A pod with spec.schedulingGates (Kueue's kueue.x-k8s.io/admission for plain pods) waits by design: the
    API reports PodScheduled False with reason SchedulingGated, "Scheduling is blocked due to non-empty
    scheduling gates" (https://kubernetes.io/docs/concepts/scheduling-eviction/pod-scheduling-readiness/). Only
    reason Unschedulable is the scheduler failing to place it."""
    with k8s_api() as (url, api):
        for pod in api.pods["items"]:
            if pod["metadata"]["name"] == "llama-train-worker-2":
                pod["spec"]["schedulingGates"] = [{"name": "kueue.x-k8s.io/admission"}]
                pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated",
                                                "message": "Scheduling is blocked due to non-empty scheduling gates"}]
        report = run(world, ["k8s-gpu-pods-pending"], **settings(write_kubeconfig(tmp_path / "kc", url)))
    assert report.errors == [] and report.findings == []


@pytest.mark.parametrize(("taint", "placeable"), [
    # Karpenter v1 taints a node it is disrupting (Spot interruption included) before draining it, without
    # setting spec.unschedulable (https://karpenter.sh/docs/concepts/disruption/, Control Flow)
    ({"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}, False),
    ({"key": "karpenter.sh/disruption", "value": "disrupting", "effect": "NoSchedule"}, False),  # v0.32-v0.37
    # aws-node-termination-handler's taint on a Spot interruption notice (its README, taint-node option)
    ({"key": "aws-node-termination-handler/spot-itn", "value": "1700000000", "effect": "NoSchedule"}, False),
    # a GPU node's own taint, which GPU pods tolerate: still where they are placed
    ({"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}, True),
])
def test_a_node_its_autoscaler_is_taking_away_is_not_placeable(tmp_path, taint, placeable):
    from checks.scheduler_schedules_faulty_node import schedulable

    with k8s_api("eks-gpu-nodes-healthy.json", "eks-gpu-pods-healthy.json") as (url, api):
        api.nodes["items"][0]["spec"]["taints"] = [taint]
        view = k8s.read(k8s.api_client("eks-test", str(write_kubeconfig(tmp_path / "kc", url))), "test")
    assert schedulable(view.nodes[0], "kubernetes") is placeable


@pytest.fixture
def without_the_client(monkeypatch):
    """A `pip install fmdoctor` without the [kubernetes] extra: importing the client fails."""
    import sys

    for name in [m for m in sys.modules if m == "kubernetes" or m.startswith("kubernetes.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "kubernetes", None)


def test_without_the_kubernetes_extra_the_checks_are_not_verified_and_say_what_to_install(
        tmp_path, world, without_the_client):
    report = run(world, IDS, **settings(tmp_path / "kc"))
    assert report.findings == [] and report.status is Status.UNKNOWN
    assert {e.check for e in report.errors} == set(IDS)
    assert all(e.code == "MissingExtra" and "pip install 'fmdoctor[kubernetes]'" in e.message
               for e in report.errors), [(e.code, e.message) for e in report.errors]


def test_without_the_kubernetes_extra_a_cordon_fails_saying_what_to_install(without_the_client):
    from fmdoctor.config import SchedulerSettings
    from fmdoctor.scheduler.changes import change_node
    from fmdoctor.scheduler.model import KUBERNETES

    result = change_node(SchedulerSettings(), KUBERNETES, {"name": N1, "unschedulable": True})
    assert result.code == "MissingExtra" and "fmdoctor[kubernetes]" in result.detail, result
