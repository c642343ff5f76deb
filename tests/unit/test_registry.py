"""The catalogue: unique kebab ids, docstrings, IAM actions, module named after the id, runbook ids."""

from __future__ import annotations

import importlib

import pytest

from fmdoctor.engine.check import METRIC_FAMILIES, Check, NotApplicable, inventory_parts, metric_families
from fmdoctor.engine.errors import UsageError
from fmdoctor.engine.inventory import INVENTORY_PARTS
from fmdoctor.engine.model import Severity
from fmdoctor.engine.registry import Registry, default_registry


def test_every_check_is_well_declared():
    registry = default_registry()
    assert len(registry) >= 5
    for check in registry:
        module = type(check).__module__
        assert module == "fmdoctor.checks." + check.id.replace("-", "_"), f"{check.id} lives in {module}"
        assert check.proves().endswith(".")
        assert check.iam_actions or check.targets == {"node"}  # node-only checks read the node, not AWS
        assert importlib.import_module(module)


def test_select_by_id_family_and_unknown():
    registry = default_registry()
    assert [c.id for c in registry.select(["placement-group"])] == ["placement-group"]
    assert {c.family for c in registry.select(["efa"])} == {"efa"}
    with pytest.raises(UsageError, match="did you mean placement-group"):
        registry.select(["placement-grop"])


def test_registry_refuses_bad_declarations():
    class NoDoc(Check):
        id = "Bad_Id"
        family = "x"
        severity = Severity.INFO
        iam_actions = ("ec2.describe",)
        inventory = frozenset({"instances", "gpus"})

        def run(self, ctx):
            raise NotApplicable("never")

    with pytest.raises(ValueError) as caught:
        Registry([NoDoc])
    message = str(caught.value)
    assert "not kebab-case" in message and "no docstring" in message and "not an IAM action" in message
    assert "inventory parts must be a subset of ['endpoints', 'hyperpod', 'instances']" in message


def test_selection_names_the_inventory_parts_it_reads():
    registry = default_registry()
    # efa-errors reads a HyperPod cluster's nodes too (looked up only when no EC2 instance carries the name).
    assert inventory_parts(registry.select(["efa"])) == {"instances", "hyperpod"}
    assert inventory_parts(registry.select(["hyperpod"])) == {"hyperpod"}
    assert inventory_parts(registry.select(["endpoint-unhealthy", "inference-errors"])) == {"endpoints"}
    assert inventory_parts(registry.select(["inference"])) == {"endpoints", "instances"}
    assert inventory_parts(registry.select()) == INVENTORY_PARTS  # a full run discovers everything


def test_selection_names_the_metric_families_it_reads():
    """The shared metric snapshot fetches what the run's checks declare (Check.metrics): --only efa no GPU series."""
    registry = default_registry()
    assert metric_families(registry.select(["efa"])) == {"efa"}
    assert metric_families(registry.select(["gpu"])) == {"accelerators"}
    assert metric_families(registry.select(["ssh-unreachable"])) == set()
    assert metric_families(registry.select()) == METRIC_FAMILIES
    readers = {c.id for c in registry if c.metrics}  # every check that reads the snapshot, and only those
    assert readers == {"efa-errors", "training-stalled", "gpu-idle", "gpu-memory-pressure", "gpu-metrics-missing",
                       "gpu-straggler", "gpu-xid-metrics",
                       "scheduler-schedules-faulty-node"}  # its Xid faults: the snapshot's DCGM_FI_DEV_XID_ERRORS


def test_iam_actions_union_is_sorted_and_unique():
    actions = default_registry().iam_actions()
    assert actions == sorted(set(actions))
    assert "ec2:DescribeInstances" in actions
