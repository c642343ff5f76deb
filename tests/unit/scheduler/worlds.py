"""Hand-built inventories the scheduler tests map scheduler nodes onto, and a runner for a few checks."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from fmdoctor.config import ClusterSettings
from fmdoctor.engine.context import RunScope
from fmdoctor.engine.inventory import Instance, InstanceTypeInfo, Inventory, NetworkInterface
from fmdoctor.engine.model import Report
from fmdoctor.engine.registry import default_registry
from fmdoctor.engine.runner import run_checks

P5 = InstanceTypeInfo("p5.48xlarge", gpus=8, gpu_model="H100", efa_supported=True, max_efa_interfaces=32,
                      max_network_cards=32)


def instance(instance_id: str, ip: str, instance_type: str = "p5.48xlarge", efa: int = 0,
             state: str = "running") -> tuple[Instance, list[NetworkInterface]]:
    enis = [NetworkInterface(f"eni-{instance_id[2:]}{n:02d}"[:21], "subnet-1", "vpc-1", ("sg-1",),
                             (ip,) if n == 0 else (), interface_type="efa" if n < efa else "interface",
                             instance_id=instance_id, device_index=0 if n == 0 else 1, network_card_index=n)
            for n in range(max(efa, 1))]
    node = Instance(instance_id, instance_type, state, "subnet-1", "vpc-1", "us-west-2a", private_ip=ip,
                    private_dns=f"ip-{ip.replace('.', '-')}.us-west-2.compute.internal",
                    tags={"Name": f"gpu-{ip.rsplit('.', 1)[1]}"}, interface_ids=tuple(e.id for e in enis))
    return node, enis


def inventory(*nodes: tuple[Instance, list[NetworkInterface]]) -> Inventory:
    return Inventory("c", "us-west-2", instances=tuple(n for n, _ in nodes),
                     interfaces={e.id: e for _, enis in nodes for e in enis}, instance_types={"p5.48xlarge": P5})


def run(inv: Inventory, only: list[str], extras: dict[str, Any] | None = None, now: datetime | None = None,
        **settings: Any) -> Report:
    """The engine's runner over ``only`` (with the registry's annotators), as Doctor.check runs them."""
    from fmdoctor.engine.api import _report

    registry = default_registry()
    scope = RunScope(cluster="c", settings=ClusterSettings.model_validate(settings), aws=None, inventory=inv,
                     now=now or datetime.now(UTC), extras=extras or {})
    outcome = run_checks(scope, registry.select(only), 4, None, None, registry.annotators)
    return _report(scope, outcome, 0.0)
