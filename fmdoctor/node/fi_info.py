"""``fi_info -p efa``: what libfabric's EFA provider offers on this node.

Each EFA device shows up once per endpoint type, as domains ``rdmap16s27-rdm`` (FI_EP_RDM, what NCCL's
aws-ofi-nccl plugin uses) and ``rdmap16s27-dgrm`` (FI_EP_DGRAM); the device count is the number of distinct
names before the suffix. The same holds for every libfabric the EFA installer has shipped: older ones name the
device ``efa_0`` and the fabric ``EFA-fe80::...`` and add blocks of utility providers layered on EFA
(``provider: efa;ofi_rxd``), which are not counted; libfabric 2.1 and later list each RDM endpoint twice, under
the fabrics ``efa`` and ``efa-direct`` (fi_efa(7)), which is still one device.
"""

from __future__ import annotations

from dataclasses import dataclass, field

COMMANDS = (("fi_info", "-p", "efa"), ("/opt/amazon/efa/bin/fi_info", "-p", "efa"))  # the EFA installer's path


@dataclass(frozen=True)
class Provider:
    devices: list[str] = field(default_factory=list)
    endpoint_types: list[str] = field(default_factory=list)
    versions: list[str] = field(default_factory=list)

    @property
    def rdm(self) -> bool:
        return "FI_EP_RDM" in self.endpoint_types


def parse(output: str) -> Provider:
    devices: dict[str, None] = {}
    types: dict[str, None] = {}
    versions: dict[str, None] = {}
    provider = None
    for line in output.splitlines():
        key, _, value = line.strip().partition(":")
        value = value.strip()
        if key == "provider":
            provider = value
        elif provider != "efa":
            continue
        elif key == "domain":
            devices[value.rsplit("-", 1)[0] if value.endswith(("-rdm", "-dgrm")) else value] = None
        elif key == "type":
            types[value] = None
        elif key == "version":
            versions[value] = None
    return Provider(list(devices), list(types), list(versions))
