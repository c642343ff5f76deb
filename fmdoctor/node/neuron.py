"""``neuron-ls --json-output``: the Trainium/Inferentia devices the Neuron driver exposes on this node.

The tool prints a JSON array with one object per device (``neuron_device``, ``bdf``, ``nc_count``,
``memory_size`` in bytes, ``connected_to``, ``neuron_processes``), as the Neuron SDK's "Amazon EC2 Trn1
Architecture" page shows for ``neuron-ls -j``. The Neuron installer puts the tool in /opt/aws/neuron/bin, often
not on PATH; without it the driver's /dev/neuronN nodes still say how many devices it bound.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

COMMANDS = (("neuron-ls", "--json-output"), ("/opt/aws/neuron/bin/neuron-ls", "--json-output"))
DEVICE_NODE = re.compile(r"^neuron\d+$")


@dataclass(frozen=True)
class NeuronDevice:
    index: int
    bdf: str
    cores: int | None
    memory_bytes: int | None


def parse(output: str) -> list[NeuronDevice] | None:
    """The devices listed, or None when the output is not neuron-ls's JSON array."""
    try:
        data = json.loads(output)
    except ValueError:
        return None
    if not isinstance(data, list) or not all(isinstance(d, dict) and "neuron_device" in d for d in data):
        return None
    return [NeuronDevice(int(d["neuron_device"]), str(d.get("bdf", "")), d.get("nc_count"), d.get("memory_size"))
            for d in data]


def device_nodes(names: list[str] | None) -> list[str] | None:
    """/dev entries the Neuron driver creates, one per device."""
    return None if names is None else [n for n in names if DEVICE_NODE.match(n)]
