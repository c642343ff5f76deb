"""RunInstances handed to moto's EC2 handler in this process, for worlds moto keeps here.

A p5 launch with 32 network interfaces is a request of hundreds of parameters that botocore serialises and moto
parses back, and an answer of 32 interfaces that moto serialises and botocore parses; moto's own work (the
instance, its interfaces and addresses) is a sixth of it. :func:`run_instances` calls moto's ``run_instances``
handler (with every wrapper ``moto_compat``, ``moto_capacity`` and ``moto_health`` put on it: placement groups,
Capacity Blocks, Spot requests) with the parameters moto's parser makes of a client's request: the client's
arguments and the ``ClientToken`` botocore generates. What comes back is the part of RunInstances' answer the
demo's builder reads. tests/unit/test_demo_seeding.py compares what DescribeInstances, DescribeNetworkInterfaces
and the rest answer for both routes.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any


def handler(account: str, region: str) -> Any:
    """moto's EC2 request handler, set up as its dispatch sets it up for a parsed request to ``account`` in
    ``region`` (the attributes its ``run_instances`` and the demo's wrappers read)."""
    from moto.ec2.responses import EC2Response
    from moto.utilities.utils import get_partition

    response = EC2Response()
    response.region = region
    response.partition = get_partition(region)
    response.current_account = account
    response.uri_match = {}
    response.headers = {}
    response.querystring = {}
    return response


def run_instances(response: Any, arguments: Mapping[str, Any]) -> list[dict[str, Any]]:
    """RunInstances with a client's ``arguments`` through moto's handler ``response`` (:func:`handler`); the
    instances as RunInstances' answer has them, reduced to their ids, private addresses and interfaces."""
    params = dict(arguments)
    params.setdefault("ClientToken", str(uuid.uuid4()))  # an idempotency token: botocore makes one per call
    response.params = params
    reservation = response.run_instances().result
    return [_answered(instance) for instance in reservation.instances]


def _answered(instance: Any) -> dict[str, Any]:
    interfaces = []
    for nic in instance.nics.values():
        attachment: dict[str, Any] = {"DeviceIndex": nic.device_index}
        if nic.attachment is not None:
            attachment["NetworkCardIndex"] = nic.attachment.network_card_index
        interfaces.append({"NetworkInterfaceId": nic.id, "InterfaceType": nic.interface_type,
                           "PrivateIpAddress": nic.private_ip_address, "Attachment": attachment})
    return {"InstanceId": instance.id, "PrivateIpAddress": instance.private_ip, "NetworkInterfaces": interfaces}
