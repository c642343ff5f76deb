"""On-node mode: only node checks run, against an injected host; no AWS is touched."""

from __future__ import annotations

from fmdoctor.config import Settings
from fmdoctor.engine.api import Doctor
from fmdoctor.engine.check import Check
from fmdoctor.engine.host import CommandResult
from fmdoctor.engine.model import Severity, Status
from fmdoctor.engine.registry import Registry


class FakeHost:
    name = "gpu-node-1"

    def __init__(self, outputs):
        self.outputs = outputs

    def run(self, argv, timeout=15.0):
        if argv[0] not in self.outputs:
            return CommandResult(tuple(argv), 127, missing=True)
        return CommandResult(tuple(argv), 0, self.outputs[argv[0]])

    def read_text(self, path):
        return None

    def imds(self, path):
        return None


class ToolPresent(Check):
    """The 'probe' tool is installed on the node."""

    id = "probe-present"
    family = "node"
    severity = Severity.WARNING
    iam_actions = ("ec2:DescribeInstances",)
    targets = frozenset({"node"})

    def run(self, ctx):
        result = ctx.host.run(["probe"])
        if result.missing:
            return [self.finding(f"node/{ctx.host.name}", "probe is not installed.", {"argv": list(result.argv)})]
        return []


class ClusterOnly(ToolPresent):
    """A cluster check that must not run on the node."""

    id = "cluster-only"
    targets = frozenset({"cluster"})


def test_local_runs_only_node_checks_against_the_host():
    doctor = Doctor(settings=Settings(), registry=Registry([ToolPresent, ClusterOnly]))
    missing = doctor.check_local(host=FakeHost({}))
    assert [f.check for f in missing.findings] == ["probe-present"]
    assert missing.stats.checks_run == ["probe-present"] and missing.stats.api_calls == {}
    healthy = doctor.check_local(host=FakeHost({"probe": "ok"}))
    assert healthy.status is Status.OK and healthy.cluster == "node/gpu-node-1"


def test_selecting_a_cluster_check_in_local_mode_is_a_usage_error():
    import pytest

    from fmdoctor.engine.errors import UsageError

    doctor = Doctor(settings=Settings(), registry=Registry([ToolPresent, ClusterOnly]))
    with pytest.raises(UsageError, match="cluster-only runs only against a cluster"):
        doctor.check_local(only=["cluster-only"], host=FakeHost({}))
