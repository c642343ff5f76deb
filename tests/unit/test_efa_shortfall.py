"""checks/_net.efa_shortfall, the one EFA interface rule efa-not-attached, efa-missing-interfaces and
scheduler-schedules-faulty-node share: one case per branch."""

from __future__ import annotations

import dataclasses

import pytest

from checks._net import EfaShortfall, efa_shortfall
from fmdoctor.engine.inventory import InstanceTypeInfo
from fmdoctor.engine.model import Status

from .scheduler.worlds import P5, instance, inventory, run

C6IN = InstanceTypeInfo("c6in.32xlarge", efa_supported=True, max_efa_interfaces=2)


def _inv(efa: int, info: InstanceTypeInfo | None, group: str | None = None):
    node, enis = instance("i-0000000000000000a", "10.0.0.10", instance_type=info.name if info else "p5.48xlarge",
                          efa=efa)
    if group:
        node = dataclasses.replace(node, tags={**node.tags, "eks:nodegroup-name": group})
    inv = inventory((node, enis))
    return dataclasses.replace(inv, instance_types={info.name: info} if info else {}), node


@pytest.mark.parametrize(("efa", "info", "group", "efa_groups", "expected"), [
    (0, dataclasses.replace(P5, efa_supported=False, max_efa_interfaces=0), None, set(), None),
    (0, P5, None, set(), EfaShortfall(0, 32, "accelerated")),
    (0, C6IN, "cpu", {"eks:nodegroup-name=cpu"}, EfaShortfall(0, 2, "node-group")),
    (0, C6IN, "cpu", {"eks:nodegroup-name=other"}, None),
    (0, C6IN, None, set(), None),
    (31, P5, None, set(), EfaShortfall(31, 32, "uses-efa")),
    (32, P5, None, set(), None),
    (1, C6IN, None, set(), EfaShortfall(1, 2, "uses-efa")),
], ids=["type-without-efa", "accelerated-none", "group-uses-efa", "group-does-not", "cpu-node-needs-none",
        "one-short", "all-there", "cpu-node-that-uses-efa"])
def test_shortfall_by_branch(efa, info, group, efa_groups, expected):
    inv, node = _inv(efa, info, group)
    assert efa_shortfall(inv, node, efa_groups) == expected


@pytest.mark.parametrize(("efa", "info", "says"), [
    (4, None, "did not return p5.48xlarge"),
    (4, dataclasses.replace(P5, max_efa_interfaces=0), "gives no EfaInfo.MaximumEfaInterfaces"),
    (4, dataclasses.replace(P5, efa_supported=False, max_efa_interfaces=0), "does not support EFA, yet"),
], ids=["type-not-returned", "no-maximum", "type-says-no-efa-node-has-it"])
def test_what_cannot_be_judged_raises(efa, info, says):
    inv, node = _inv(efa, info)
    with pytest.raises(LookupError, match=says):
        efa_shortfall(inv, node, set())


def test_missing_interfaces_reports_a_contradicting_type_as_not_verified_never_healthy():
    inv, _ = _inv(4, dataclasses.replace(P5, efa_supported=False, max_efa_interfaces=0))
    report = run(inv, ["efa-missing-interfaces"])
    assert not report.findings_for("efa-missing-interfaces")
    [error] = report.errors
    assert error.check == "efa-missing-interfaces"
    assert "does not support EFA, yet a node of it has EFA interfaces" in error.message
    assert error.unverified.startswith("EFA interface count of 1 node of type p5.48xlarge")
    assert report.status is Status.UNKNOWN
