"""What an instance type has, for on-node mode: its GPUs, Neuron devices and EFA interfaces, from AWS's documents.

On a node fmdoctor may have no EC2 API access, but IMDS names the instance type. The counts below are AWS's
documented figures: GPUs and accelerators from "Specifications for Amazon EC2 accelerated computing instances"
(docs.aws.amazon.com/ec2/latest/instancetypes/ac.html) and the high-performance computing page (hpc.html); EFA
interfaces from the same pages' network tables and the EFA guide's rule that "instance types that support
multiple network cards can be configured with one EFA per network card. All other supported instance types
support only one EFA per instance" (docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa.html). Trainium2 device
counts (16 per trn2.48xlarge and trn2u.48xlarge) are the Neuron "Amazon EC2 Trn2 Architecture" page's.

Where the pages give a type's network cards but not how many of them carry EFA, DescribeInstanceTypes decides
(``NetworkInfo.EfaInfo.MaximumEfaInterfaces``): p6-b300.48xlarge has 17 cards, card 0 without EFA, so 16. A type
neither says (p6e-gb200.36xlarge) has the count None: EFA is supported, the count is not verified. Unknown types
are not guessed at; the checks read the node itself instead (:mod:`fmdoctor.node.sysfs`). A unit test holds the
table to DescribeInstanceTypes' answers as moto serves them (generated from real responses).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources


@dataclass(frozen=True)
class TypeFacts:
    gpus: int = 0
    neuron_devices: int = 0
    max_efa_interfaces: int | None = 0  # None: EFA supported, the number of EFA-capable cards undocumented
    efa_expected: bool = False  # P and Trn training types carry every EFA they support; on others EFA is optional

    @property
    def accelerated(self) -> bool:
        return bool(self.gpus or self.neuron_devices)


def _training(gpus: int = 0, efa: int | None = 0, neuron: int = 0) -> TypeFacts:
    return TypeFacts(gpus=gpus, neuron_devices=neuron, max_efa_interfaces=efa, efa_expected=True)


def _sizes(family: str, table: dict[str, tuple[int, int]]) -> dict[str, TypeFacts]:
    """G-family sizes: (GPUs, EFA interfaces) each; EFA is optional on them (single-node inference needs none)."""
    return {f"{family}.{size}": TypeFacts(gpus=gpus, max_efa_interfaces=efa) for size, (gpus, efa) in table.items()}


_G5_G6 = {"xlarge": (1, 0), "2xlarge": (1, 0), "4xlarge": (1, 0), "8xlarge": (1, 1), "12xlarge": (4, 1),
          "16xlarge": (1, 1), "24xlarge": (4, 1), "48xlarge": (8, 1)}
_G6E = {**_G5_G6, "24xlarge": (4, 2), "48xlarge": (8, 4)}  # 2 and 4 network cards

KNOWN_TYPES: dict[str, TypeFacts] = {
    "p3dn.24xlarge": _training(gpus=8, efa=1),
    "p4d.24xlarge": _training(gpus=8, efa=4),
    "p4de.24xlarge": _training(gpus=8, efa=4),
    "p5.4xlarge": _training(gpus=1, efa=1),
    "p5.48xlarge": _training(gpus=8, efa=32),
    "p5e.48xlarge": _training(gpus=8, efa=32),
    "p5en.48xlarge": _training(gpus=8, efa=16),
    "p6-b200.48xlarge": _training(gpus=8, efa=8),
    "p6-b300.48xlarge": _training(gpus=8, efa=16),
    "p6e-gb200.36xlarge": _training(gpus=4, efa=None),
    **_sizes("g5", _G5_G6),
    **_sizes("g6", _G5_G6),
    **_sizes("g6e", _G6E),
    "trn1.2xlarge": TypeFacts(neuron_devices=1),
    "trn1.32xlarge": _training(neuron=16, efa=8),
    "trn1n.32xlarge": _training(neuron=16, efa=16),
    "trn2.3xlarge": _training(neuron=1, efa=1),
    "trn2.48xlarge": _training(neuron=16, efa=16),
    "trn2u.48xlarge": _training(neuron=16, efa=16),
    "inf2.xlarge": TypeFacts(neuron_devices=1),
    "inf2.8xlarge": TypeFacts(neuron_devices=1),
    "inf2.24xlarge": TypeFacts(neuron_devices=6),
    "inf2.48xlarge": TypeFacts(neuron_devices=12),
    "hpc6a.48xlarge": TypeFacts(max_efa_interfaces=1),
    "hpc6id.32xlarge": TypeFacts(max_efa_interfaces=2),
    **{f"hpc7a.{size}": TypeFacts(max_efa_interfaces=2) for size in ("12xlarge", "24xlarge", "48xlarge", "96xlarge")},
    **{f"hpc7g.{size}": TypeFacts(max_efa_interfaces=1) for size in ("4xlarge", "8xlarge", "16xlarge")},
    "hpc8a.96xlarge": TypeFacts(max_efa_interfaces=2),
}


def _canonical(instance_type: str | None) -> str:
    """HyperPod names its instances 'ml.p5.48xlarge': the same hardware as the EC2 type."""
    return (instance_type or "").removeprefix("ml.")


def facts_for(instance_type: str | None) -> TypeFacts | None:
    return KNOWN_TYPES.get(_canonical(instance_type))


@functools.cache
def efa_capable_types() -> frozenset[str]:
    text = resources.files("fmdoctor.node").joinpath("data", "efa_instance_types.txt").read_text(encoding="utf-8")
    return frozenset(line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#"))


_TYPE_NAME = re.compile(r"^[a-z][a-z0-9-]*\.[a-z0-9-]+$")  # "c6i.32xlarge", "p6-b300.48xlarge", "m7i.metal-48xl"


def efa_capable(instance_type: str | None) -> bool | None:
    """Whether AWS lists the type as supporting EFA; None when there is no instance type name to look up."""
    name = _canonical(instance_type)
    if not _TYPE_NAME.match(name):
        return None
    return name in efa_capable_types()
