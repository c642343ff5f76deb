"""The GPU/EFA/node runbooks render, under StrictUndefined, from the findings their checks really produce."""

from __future__ import annotations

import shlex
from datetime import UTC, datetime
from pathlib import Path

import jinja2
import pytest
import yaml
from jinja2.sandbox import SandboxedEnvironment

import fmdoctor
from fmdoctor.config import Settings
from fmdoctor.demo.prometheus_server import binaries
from fmdoctor.engine.api import Doctor
from fmdoctor.node.replay import ReplayHost, files_from_head
from fmdoctor.runbooks.render import commands

ROOT = Path(fmdoctor.__file__).resolve().parent.parent
RUNBOOKS = ROOT / "runbooks"
FIXTURES = ROOT / "tests" / "fixtures" / "node"
CLUSTER_IDS = ["gpu-idle", "gpu-straggler", "gpu-memory-pressure", "gpu-metrics-missing", "efa-errors",
               "gpu-xid-metrics"]
NODE_IDS = ["node-gpu-health", "gpu-xid", "node-efa-provider"]

pytestmark = pytest.mark.skipif(not RUNBOOKS.exists(), reason="needs the source tree")


def render(finding, cluster: str, region: str) -> tuple[dict, str]:
    text = (RUNBOOKS / f"{finding.runbook}.md").read_text()
    _, front, body = text.split("---\n", 2)
    meta = yaml.safe_load(front)
    env = SandboxedEnvironment(undefined=jinja2.StrictUndefined, autoescape=False)
    env.filters["sh"] = lambda value: shlex.quote(str(value))
    page = env.from_string(body).render(finding=finding, evidence=finding.evidence, cluster=cluster, region=region,
                                        **commands(False))
    return meta, page


@pytest.fixture(scope="module")
def demo_findings(demo_check):
    return demo_check.of(CLUSTER_IDS)[0]


SXIDS = ("2025-03-04T02:10:00+0000 h kernel: nvidia-nvswitch0: SXid (PCI:0000:c3:00.0): 24007, Fatal, Link 28 "
         "sourcetrack timeout error (First)\n"
         "2025-03-04T02:10:01+0000 h kernel: nvidia-nvswitch1: SXid (PCI:0000:c4:00.0): 20001, Non-fatal, Link 04 "
         "TX Replay Error\n")
XIDS = "".join(f"2025-03-04T02:20:00+0000 h kernel: NVRM: Xid (PCI:0000:{bus}:00): {code}, pid=1, name=python3, x\n"
               for bus, code in (("11", 151), ("12", 54), ("13", 78), ("14", 159), ("15", 45), ("16", 163),
                                 ("17", 999)))


def node_findings():
    now = datetime(2025, 3, 4, 3, 0, tzinfo=UTC)

    def out(name):
        return (0, (FIXTURES / name).read_text(), "")

    def head(name, lines):
        return (0, "".join((FIXTURES / name).read_text().splitlines(True)[:lines]), "")

    memory = "nvidia-smi -q -d ROW_REMAPPER,PAGE_RETIREMENT"
    hosts = [
        ReplayHost({"nvidia-smi": out("nvidia-smi-p5-degraded.csv"), "journalctl": out("journalctl-k-xid.log"),
                    "fi_info": out("fi_info-efa-p4d.txt"), memory: out("nvidia-smi-q-memory-h100-faults.txt")}),
        ReplayHost({"fi_info": (1, "", "fi_getinfo: -61 (No data available)")}, instance_type="p4d.24xlarge"),
        ReplayHost({"nvidia-smi": (9, "NVIDIA-SMI has failed because it couldn't communicate with the driver", "")}),
        ReplayHost({"nvidia-smi": out("nvidia-smi-v100-p3dn.csv"), memory: out("nvidia-smi-q-memory-v100-retired.txt"),
                    "journalctl": (0, SXIDS + XIDS, "")}, instance_type="p3dn.24xlarge"),
        ReplayHost({"neuron-ls": (0, "[]", "")}, instance_type="trn1.32xlarge"),
        # A type fmdoctor does not know: the node's own PCI bus and /sys/class/infiniband give the counts.
        ReplayHost({"nvidia-smi": head("nvidia-smi-p5-healthy.csv", 6),  # 6 of its 8 GPUs, 1 of its 4 EFA devices
                    memory: out("nvidia-smi-q-memory-h100-healthy.txt"), "fi_info": head("fi_info-efa-trn1.txt", 6)},
                   files=files_from_head((FIXTURES / "pci-uevents-g7e.txt").read_text()), instance_type="g7e.48xlarge"),
    ]
    doctor = Doctor(settings=Settings(), clock=lambda: now)
    return [f for host in hosts for f in doctor.check_local(host=host).findings]


def test_every_new_check_has_a_runbook_with_the_format():
    for check_id in CLUSTER_IDS + NODE_IDS:
        text = (RUNBOOKS / f"{check_id}.md").read_text()
        meta = yaml.safe_load(text.split("---\n", 2)[1])
        assert meta["id"] == check_id and check_id in meta["checks"]
        assert meta["severity"] in {"critical", "warning", "info"} and meta["remediation_iam_actions"] == []
        for heading in ("## What it means", "## Confirm by hand", "## Fix", "## Verify"):
            assert heading in text, (check_id, heading)


def test_cluster_runbooks_render_with_real_values(demo_findings):
    rendered: dict[str, list[str]] = {}
    for finding in demo_findings:
        _, page = render(finding, "demo-llm-train", "us-west-2")
        assert finding.resource in page and "<" not in page  # real values, no <placeholders>
        rendered.setdefault(finding.check, []).append(page)
    # gpu-xid-metrics' finding comes from the demo's HyperPod cluster in its loopback Prometheus.
    expected = set(CLUSTER_IDS) - (set() if binaries() else {"gpu-xid-metrics"})
    assert set(rendered) == expected
    assert any("SELECT AVG(nvidia_smi_utilization_gpu) FROM CWAgent" in p for p in rendered["gpu-idle"])
    assert any("42 efa_retrans_timeout_events, 9 efa_impaired_remote_conn_events" in p for p in rendered["efa-errors"])
    if binaries():
        assert any("avg_over_time(DCGM_FI_DEV_GPU_UTIL[5m])" in p for p in rendered["gpu-idle"])
        assert any("max_over_time(DCGM_FI_DEV_XID_ERRORS[5m])" in p for p in rendered["gpu-xid-metrics"])


def test_node_runbooks_render_for_every_kind_of_finding():
    findings = node_findings()
    assert {f.check for f in findings} == set(NODE_IDS)
    for finding in findings:
        _, page = render(finding, "node/ip-10-0-1-23", "local")
        assert "ip-10-0-1-23" in page and "<" not in page
    xid_pages = [render(f, "node", "local")[1] for f in findings if f.check == "gpu-xid"]
    assert any("sudo nvidia-smi -r -i" in p for p in xid_pages) and any("only a reboot" in p for p in xid_pages)
    assert any("RESET_GPU" in p and "analyzing-xid-catalog" in p for p in xid_pages)
    actions = {f.evidence["action"] for f in findings if f.check == "gpu-xid"}
    assert actions >= {"reset-fabric", "restart-vm", "check-hardware", "update-driver", "check-uvm",
                       "restart-fabric-manager", "read-catalogue", "reset", "reboot", "restart-app", "monitor"}
    health = {f.evidence.get("action") for f in findings if f.check == "node-gpu-health"}
    assert health >= {"replace", "reset", "reboot", "free-memory", None}
    unknown = [render(f, "node", "local")[1] for f in findings if f.evidence.get("instance_type") == "g7e.48xlarge"]
    assert any("the expected count is its PCI bus's" in p for p in unknown)
    assert any("4 EFA devices expected by its /sys/class/infiniband" in p for p in unknown)
