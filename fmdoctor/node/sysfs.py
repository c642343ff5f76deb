"""What the node's own kernel says it has: EFA devices, NVIDIA GPUs on the PCI bus, GPUs the NVIDIA driver bound.

Used where the instance type is unknown, so a count can still be compared against the hardware instead of
guessed. Every reader answers None when it could not look (no /sys in a container, a permission), which the
checks report as not verified, and an empty list when it looked and found nothing.

- EFA: each RDMA device in /sys/class/infiniband whose ``device/uevent`` names the ``efa`` driver or an Amazon
  EFA PCI id (1d0f:efa0-efa3). No /sys/class/infiniband at all, with /sys/class readable, means no RDMA device.
- GPUs: PCI functions with NVIDIA's vendor id 10de and a display-controller class (0x03xxxx); NVSwitches
  (class 0x0680) are not GPUs. Read from each ``/sys/bus/pci/devices/*/uevent``.
- Driver: one entry per GPU the NVIDIA kernel module probed, in /proc/driver/nvidia/gpus.
"""

from __future__ import annotations

from dataclasses import dataclass

from fmdoctor.engine.host import Host

INFINIBAND = "/sys/class/infiniband"
PCI_DEVICES = "/sys/bus/pci/devices"
NVIDIA_DRIVER_GPUS = "/proc/driver/nvidia/gpus"
NVIDIA_VENDOR, AMAZON_VENDOR = 0x10DE, 0x1D0F
EFA_DEVICE_IDS = frozenset({0xEFA0, 0xEFA1, 0xEFA2, 0xEFA3})


@dataclass(frozen=True)
class PciDevice:
    slot: str  # "0000:53:00.0"
    vendor: int
    device: int
    pci_class: int  # 0x030200
    driver: str | None

    @property
    def is_nvidia_gpu(self) -> bool:
        return self.vendor == NVIDIA_VENDOR and self.pci_class >> 16 == 0x03

    @property
    def is_efa(self) -> bool:
        return self.driver == "efa" or (self.vendor == AMAZON_VENDOR and self.device in EFA_DEVICE_IDS)


def parse_uevent(slot: str, text: str) -> PciDevice | None:
    fields = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    try:
        vendor, device = (int(part, 16) for part in fields["PCI_ID"].split(":"))
        pci_class = int(fields.get("PCI_CLASS", "0"), 16)
    except (KeyError, ValueError):
        return None
    return PciDevice(fields.get("PCI_SLOT_NAME", slot), vendor, device, pci_class, fields.get("DRIVER"))


def efa_devices(host: Host) -> list[str] | None:
    """Names of the EFA devices the kernel registered (e.g. 'rdmap16s27'); None when /sys could not be read."""
    names = host.list_dir(INFINIBAND)
    if names is None:
        return [] if (host.list_dir("/sys/class") or []) else None
    found = []
    for name in names:
        device = parse_uevent(name, host.read_text(f"{INFINIBAND}/{name}/device/uevent") or "")
        if device is not None and device.is_efa:
            found.append(name)
    return found


def pci_devices(host: Host) -> list[PciDevice] | None:
    slots = host.list_dir(PCI_DEVICES)
    if not slots:
        return None
    devices = []
    for slot in slots:
        device = parse_uevent(slot, host.read_text(f"{PCI_DEVICES}/{slot}/uevent") or "")
        if device is not None:
            devices.append(device)
    return devices or None


def nvidia_gpus_on_pci(host: Host) -> list[str] | None:
    devices = pci_devices(host)
    return None if devices is None else [d.slot for d in devices if d.is_nvidia_gpu]


def driver_gpus(host: Host) -> list[str] | None:
    return host.list_dir(NVIDIA_DRIVER_GPUS)
