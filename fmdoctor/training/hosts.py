"""From the names a job's logs use for a node (``ip-10-0-1-23``, its private DNS name, its IP, its instance id)
to the cluster's EC2 instance: private IPs of the instance and of every interface it has, and the instance ids
that ParallelCluster and HyperPod stream names carry."""

from __future__ import annotations

from fmdoctor.engine.inventory import Instance, Inventory
from fmdoctor.training.culprit import host_key


def instance_index(inventory: Inventory) -> dict[str, Instance]:
    index: dict[str, Instance] = {}
    for instance in inventory.instances:
        index[instance.id.lower()] = instance
        ips = [instance.private_ip] + [ip for eni in inventory.interfaces_of(instance) for ip in eni.private_ips]
        for ip in filter(None, ips):
            key = host_key(ip)
            if key:
                index.setdefault(key, instance)
        if instance.name != instance.id:
            index.setdefault(instance.name.lower(), instance)
    return index


def resolve(key: str, index: dict[str, Instance], stream_instances: dict[str, str | None]) -> Instance | None:
    """The instance a host key names: directly, or through the instance id a stream gave for that host."""
    found = index.get(key)
    if found is None and stream_instances.get(key):
        found = index.get(str(stream_instances[key]).lower())
    return found
