"""Accelerator and EFA counts of common training/inference instance types, for on-node mode.

On a node fmdoctor may have no EC2 API access, but IMDS names the instance type; these counts (the same
as DescribeInstanceTypes reports) say how many GPUs, Neuron devices and EFA interfaces it should see.
Unknown types are not guessed at: the count comparison is skipped and the evidence says so.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TypeFacts:
    gpus: int = 0
    neuron_devices: int = 0
    max_efa_interfaces: int = 0


KNOWN_TYPES: dict[str, TypeFacts] = {
    "p3dn.24xlarge": TypeFacts(gpus=8, max_efa_interfaces=1),
    "p4d.24xlarge": TypeFacts(gpus=8, max_efa_interfaces=4),
    "p4de.24xlarge": TypeFacts(gpus=8, max_efa_interfaces=4),
    "p5.4xlarge": TypeFacts(gpus=1, max_efa_interfaces=1),
    "p5.48xlarge": TypeFacts(gpus=8, max_efa_interfaces=32),
    "p5e.48xlarge": TypeFacts(gpus=8, max_efa_interfaces=32),
    "p5en.48xlarge": TypeFacts(gpus=8, max_efa_interfaces=16),
    "p6-b200.48xlarge": TypeFacts(gpus=8, max_efa_interfaces=8),
    "g5.48xlarge": TypeFacts(gpus=8, max_efa_interfaces=1),
    "g6.48xlarge": TypeFacts(gpus=8, max_efa_interfaces=1),
    "g6e.48xlarge": TypeFacts(gpus=8, max_efa_interfaces=4),
    "trn1.2xlarge": TypeFacts(neuron_devices=1),
    "trn1.32xlarge": TypeFacts(neuron_devices=16, max_efa_interfaces=8),
    "trn1n.32xlarge": TypeFacts(neuron_devices=16, max_efa_interfaces=16),
    "trn2.48xlarge": TypeFacts(neuron_devices=16, max_efa_interfaces=16),
    "inf2.48xlarge": TypeFacts(neuron_devices=12),
}


def facts_for(instance_type: str | None) -> TypeFacts | None:
    return KNOWN_TYPES.get(instance_type or "")
