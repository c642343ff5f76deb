"""The demo's scheduler view: a slurmrestd and a Kubernetes API on 127.0.0.1 answering recorded shapes.

Slurm: the training nodes gpu-node-1..6 are ParallelCluster-style Slurm nodes ``train-st-p5-N`` (NodeAddr their
private IP, so the one node identity maps them). The answers are real Slurm 22.05 records (``slurm-22.05-
answers.json``, recorded from the real Slurm the tests start) rewritten per node: job 4242 ``llama-70b-pretrain``
runs on nodes 1-4, the training-stalled culprit (gpu-node-2) and the Spot node AWS is about to interrupt
(gpu-node-3, which Slurm still schedules onto) among them; gpu-node-5 is INVAL with "gres/gpu count reported
lower than configured (7 < 8)"; gpu-node-6 has been drained for five hours, "Kill task failed", idle.

Kubernetes: a HyperPod-EKS inference node group whose nodes are no EC2 instances of the demo account, in the
shapes of tests/fixtures/kubernetes (its README cites them): one whole node, one whose EFA device plugin is
missing and one GPU unhealthy, one NotReady that HyperPod is replacing, and a worker pod pending for GPUs.

Nothing here is a Slurm or Kubernetes: the servers only replay; the token checks are what the real ones do.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import secrets
import tempfile
import time
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from typing import Any

from fmdoctor.demo.scenario import DemoWorld
from fmdoctor.loopback import KeepAliveHandler, serve_in_background

TOKEN_ENV = "FMDOCTOR_DEMO_SLURM_JWT_"  # + the demo slurmrestd's port: demos that overlap never share one
JOB_ID = 4242
JOB_NODES = ("gpu-node-1", "gpu-node-2", "gpu-node-3", "gpu-node-4")
API = "v0.0.38"  # the data parser of Slurm 22.05's slurmrestd


def slurm_name(demo_name: str) -> str:
    return "train-st-p5-" + demo_name.rsplit("-", 1)[1]


def _recorded() -> dict[str, Any]:
    text = resources.files("fmdoctor.demo").joinpath("slurm-22.05-answers.json").read_text(encoding="utf-8")
    return dict(json.loads(text))


def slurm_answers(world: DemoWorld, now: float | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(GET /nodes, GET /jobs) of the demo's Slurm, in 22.05's shapes."""
    now = now or time.time()
    recorded = _recorded()
    nodes = []
    for demo_name, launched in sorted(world.launched_nodes().items()):
        if not demo_name.startswith("gpu-node-"):
            continue
        node = copy.deepcopy(recorded["node"])
        name = slurm_name(demo_name)
        node.update(name=name, hostname="ip-" + launched.private_ip.replace(".", "-"), address=launched.private_ip,
                    partitions=["train"], gres="gpu:8", gres_used="gpu:8" if demo_name in JOB_NODES else "gpu:0",
                    state="allocated" if demo_name in JOB_NODES else "idle", state_flags=[], reason="",
                    reason_set_by_user="", reason_changed_at=0, boot_time=int(now - 86400),
                    slurmd_start_time=int(now - 86400))
        if demo_name == "gpu-node-5":
            node.update(state="unknown", state_flags=["DRAIN", "INVALID_REG"], gres_used="gpu:0",
                        reason="gres/gpu count reported lower than configured (7 < 8)", reason_set_by_user="root",
                        reason_changed_at=int(now - 3600))
        if demo_name == "gpu-node-6":
            node.update(state="idle", state_flags=["DRAIN"], reason="Kill task failed", reason_set_by_user="root",
                        reason_changed_at=int(now - 5 * 3600))
        nodes.append(node)
    job = copy.deepcopy(recorded["job"])
    names = [slurm_name(n) for n in JOB_NODES]
    job.update(job_id=JOB_ID, name="llama-70b-pretrain", user_name="mlops", user_id=1001, partition="train",
               nodes=f"train-st-p5-[{JOB_NODES[0][-1]}-{JOB_NODES[-1][-1]}]", node_count=len(names),
               job_state="RUNNING", start_time=int(now - 3 * 3600), submit_time=int(now - 3 * 3600 - 60),
               batch_host=names[0], command="/fsx/jobs/llama-70b/train.sbatch")
    job["job_resources"] = {"nodes": job["nodes"], "allocated_hosts": len(names),
                            "allocated_nodes": [{"nodename": n} for n in names]}
    return ({"meta": recorded["meta"], "errors": [], "nodes": nodes},
            {"meta": recorded["meta"], "errors": [], "jobs": [job]})


def _json_handler(routes: dict[str, Any], authorised: Any) -> type[KeepAliveHandler]:
    class Handler(KeepAliveHandler):
        def do_GET(self) -> None:  # noqa: N802
            path = self.path.split("?")[0]
            status, body = (401, {"errors": [{"error": "Authentication failure"}]}) if not authorised(self.headers) \
                else (200, routes[path]) if path in routes else (404, {"errors": [{"error": "not found"}]})
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler


# ---- Kubernetes ------------------------------------------------------------------------------------------------

def _k8s_node(name: str, instance: str, capacity: dict[str, str], allocatable: dict[str, str], ready: bool,
              health: str = "Schedulable") -> dict[str, Any]:
    status = ("True", "KubeletReady", "kubelet is posting ready status") if ready else \
        ("Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status.")
    spec: dict[str, Any] = {"providerID": f"aws:///us-west-2a/{instance}"}
    if not ready:
        spec["taints"] = [{"key": "node.kubernetes.io/unreachable", "effect": effect} for effect in
                          ("NoSchedule", "NoExecute")]
    return {"metadata": {"name": name, "labels": {
                "node.kubernetes.io/instance-type": "ml.p5.48xlarge",
                "sagemaker.amazonaws.com/compute-type": "hyperpod",
                "sagemaker.amazonaws.com/instance-group-name": "inference", "kubernetes.io/hostname": name,
                "sagemaker.amazonaws.com/node-health-status": health}},
            "spec": spec,
            "status": {"capacity": {"cpu": "192", "pods": "100", **capacity},
                       "allocatable": {"cpu": "191450m", "pods": "100", **allocatable},
                       "conditions": [{"type": "Ready", "status": status[0], "reason": status[1],
                                       "message": status[2]}],
                       "addresses": [{"type": "Hostname", "address": name}]}}


def _k8s_pod(ns: str, name: str, node: str | None, owner: tuple[str, str], ready: bool,
             requests: dict[str, str] | None = None, unschedulable: str | None = None) -> dict[str, Any]:
    conditions = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": unschedulable}] \
        if unschedulable else [{"type": "Ready", "status": "True" if ready else "False"},
                               {"type": "PodScheduled", "status": "True"}]
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "public.ecr.aws/example/serve:1",
                                            "resources": {"requests": requests, "limits": requests} if requests
                                            else {}}]}
    if node:
        spec["nodeName"] = node
    status: dict[str, Any] = {"phase": "Pending" if unschedulable else "Running", "conditions": conditions}
    if not unschedulable:
        status["startTime"] = "2026-01-01T00:00:00Z"
    return {"metadata": {"name": name, "namespace": ns, "ownerReferences": [
        {"apiVersion": "apps/v1", "kind": owner[0], "name": owner[1], "uid": "u", "controller": True}]},
        "spec": spec, "status": status}


K8S_WHOLE, K8S_SHORT, K8S_GONE = ("hyperpod-i-0d3e0a1b2c3d40001", "hyperpod-i-0d3e0a1b2c3d40002",
                                  "hyperpod-i-0d3e0a1b2c3d40003")


def k8s_answers() -> tuple[dict[str, Any], dict[str, Any]]:
    gpu, efa = "nvidia.com/gpu", "vpc.amazonaws.com/efa"
    nodes = [_k8s_node(K8S_WHOLE, K8S_WHOLE[9:], {gpu: "8", efa: "32"}, {gpu: "8", efa: "32"}, True),
             _k8s_node(K8S_SHORT, K8S_SHORT[9:], {gpu: "8", efa: "32"}, {gpu: "7"}, True),
             _k8s_node(K8S_GONE, K8S_GONE[9:], {gpu: "8", efa: "32"}, {gpu: "8", efa: "32"}, False,
                       "UnschedulablePendingReplacement")]
    plugin, efa_plugin = ("DaemonSet", "nvidia-device-plugin-daemonset"), ("DaemonSet",
                                                                          "aws-efa-k8s-device-plugin-daemonset")
    serve = {gpu: "8", efa: "32"}
    pods = [_k8s_pod("kube-system", "nvidia-device-plugin-daemonset-7xk2p", K8S_WHOLE, plugin, True),
            _k8s_pod("kube-system", "aws-efa-k8s-device-plugin-daemonset-q9tbn", K8S_WHOLE, efa_plugin, True),
            _k8s_pod("kube-system", "nvidia-device-plugin-daemonset-m4r8d", K8S_SHORT, plugin, True),
            _k8s_pod("inference", "llama-serve-0", K8S_WHOLE, ("StatefulSet", "llama-serve"), True, serve),
            _k8s_pod("inference", "llama-serve-1", K8S_GONE, ("StatefulSet", "llama-serve"), False, serve),
            _k8s_pod("inference", "llama-serve-2", None, ("StatefulSet", "llama-serve"), False, serve,
                     "0/3 nodes are available: 1 Insufficient nvidia.com/gpu, 1 Insufficient vpc.amazonaws.com/efa, "
                     "1 node(s) had untolerated taint {node.kubernetes.io/unreachable: }. preemption: 0/3 nodes are "
                     "available: 1 Preemption is not helpful for scheduling, 2 No preemption victims found for "
                     "incoming pod.")]
    return ({"kind": "NodeList", "apiVersion": "v1", "metadata": {}, "items": nodes},
            {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": pods})


def _kubernetes_installed() -> bool:
    try:
        import kubernetes  # noqa: F401
    except ImportError:
        return False
    return True


@contextlib.contextmanager
def demo_scheduler(world: DemoWorld) -> Iterator[None]:
    """Serve the demo's Slurm and Kubernetes answers on 127.0.0.1 and point the demo's settings at them."""
    if "gpu-node-1" not in (world.builder.launched if world.builder else {}):
        yield
        return
    token = secrets.token_urlsafe(24)
    nodes, jobs = slurm_answers(world)
    slurm_routes = {"/openapi/v3": {"paths": {f"/slurm/{API}/nodes": {}, f"/slurm/{API}/jobs": {}}},
                    f"/slurm/{API}/nodes": nodes, f"/slurm/{API}/jobs": jobs}
    servers = [ThreadingHTTPServer(("127.0.0.1", 0), _json_handler(
        slurm_routes, lambda h: h.get("X-SLURM-USER-TOKEN") == token and h.get("X-SLURM-USER-NAME") == "fmdoctor"))]
    k8s_nodes, k8s_pods = k8s_answers()
    with_k8s = _kubernetes_installed()
    if with_k8s:
        servers.append(ThreadingHTTPServer(("127.0.0.1", 0), _json_handler(
            {"/api/v1/nodes": k8s_nodes, "/api/v1/pods": k8s_pods},
            lambda h: h.get("Authorization") == f"Bearer {token}")))
    else:
        world.notes.append("demo: the Kubernetes view needs the kubernetes client (pip install 'fmdoctor[kubernetes]')")
    workdir = Path(tempfile.mkdtemp(prefix="fmdoctor-demo-scheduler-"))
    token_env = f"{TOKEN_ENV}{servers[0].server_address[1]}"
    try:
        for server in servers:
            serve_in_background(server, "demo-scheduler")
        scheduler: dict[str, Any] = {"kind": "auto", "held_out_after": "1h", "slurm": {
            "via": "slurmrestd", "url": f"http://127.0.0.1:{servers[0].server_address[1]}", "token_env": token_env,
            "user": "fmdoctor"}}
        if with_k8s:
            kubeconfig = workdir / "kubeconfig"
            kubeconfig.write_text(json.dumps({
                "apiVersion": "v1", "kind": "Config", "current-context": "demo-eks",
                "clusters": [{"name": "demo",
                              "cluster": {"server": f"http://127.0.0.1:{servers[1].server_address[1]}"}}],
                "users": [{"name": "demo", "user": {"token": token}}],
                "contexts": [{"name": "demo-eks", "context": {"cluster": "demo", "user": "demo"}}]}), encoding="utf-8")
            kubeconfig.chmod(0o600)
            scheduler["kubernetes"] = {"kubeconfig": str(kubeconfig), "context": "demo-eks"}
        os.environ[token_env] = token
        world.settings["scheduler"] = scheduler
        world.facts["scheduler"] = {"slurm_job": str(JOB_ID), "slurm_nodes": {n: slurm_name(n) for n in JOB_NODES},
                                    "drained": slurm_name("gpu-node-6"), "inval": slurm_name("gpu-node-5")}
        yield
    finally:
        world.settings.pop("scheduler", None)
        os.environ.pop(token_env, None)
        for server in servers:
            server.shutdown()
            server.server_close()
        for child in workdir.iterdir():
            child.unlink()
        workdir.rmdir()
