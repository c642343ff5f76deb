"""Everything one reachability evaluation reads: the cluster inventory, the topology and extra interfaces.

Interfaces and groups outside the cluster (FSx file servers, interface endpoints, a host the user named)
are added with :meth:`Network.with_extras`; the object itself is immutable, so checks running in parallel
can share one.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from fmdoctor.engine.inventory import Instance, Inventory, NetworkInterface, SecurityGroup, Subnet
from fmdoctor.net.model import Endpoint
from fmdoctor.net.space import Range, address_range, cidr_range, merge
from fmdoctor.net.topology import PrefixList, Topology

# Addresses that are not the public internet (RFC 1918, CGNAT, loopback, link-local, multicast, reserved).
NOT_INTERNET = ("0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
                "192.168.0.0/16", "224.0.0.0/4", "240.0.0.0/4")


def internet_ranges() -> tuple[Range, ...]:
    out: list[Range] = []
    cursor = 0
    for lo, hi in merge(cidr_range(c) for c in NOT_INTERNET):
        if cursor < lo:
            out.append((cursor, lo - 1))
        cursor = hi + 1
    if cursor <= 2**32 - 1:
        out.append((cursor, 2**32 - 1))
    return tuple(out)


INTERNET = internet_ranges()


@dataclass(frozen=True)
class Network:
    topology: Topology
    interfaces: dict[str, NetworkInterface] = field(default_factory=dict)
    security_groups: dict[str, SecurityGroup] = field(default_factory=dict)
    subnets: dict[str, Subnet] = field(default_factory=dict)
    instances: dict[str, Instance] = field(default_factory=dict)

    @classmethod
    def build(cls, inventory: Inventory | None, topology: Topology) -> Network:
        inv = inventory or Inventory(cluster="", region=topology.region)
        return cls(
            topology=topology,
            interfaces={**topology.interfaces, **inv.interfaces},
            security_groups={**topology.security_groups, **inv.security_groups},
            subnets={**topology.subnets, **inv.subnets},
            instances={i.id: i for i in inv.instances},
        )

    def with_extras(self, interfaces: Iterable[NetworkInterface] = (), groups: dict[str, SecurityGroup] | None = None,
                    prefix_lists: dict[str, PrefixList] | None = None, topology: Topology | None = None) -> Network:
        base = topology or self.topology
        if prefix_lists:
            base = dataclasses.replace(base, prefix_lists={**base.prefix_lists, **prefix_lists})
        return dataclasses.replace(
            self,
            topology=base,
            interfaces={**self.interfaces, **{e.id: e for e in interfaces}},
            security_groups={**self.security_groups, **(groups or {})},
            subnets={**base.subnets, **self.subnets},
        )

    def groups(self, ids: Iterable[str]) -> tuple[list[SecurityGroup], list[str]]:
        found, missing = [], []
        for gid in ids:
            (found.append(self.security_groups[gid]) if gid in self.security_groups else missing.append(gid))
        return found, missing

    def prefix_ranges(self, prefix_list_id: str) -> tuple[Range, ...] | None:
        return self.topology.prefix_list_ranges(prefix_list_id)

    def subnet_cidr(self, subnet_id: str | None) -> str | None:
        subnet = self.subnets.get(subnet_id or "")
        return subnet.cidr if subnet and subnet.cidr else None

    def vpc_of_address(self, ip: str) -> str | None:
        value = address_range(ip)[0]
        for vpc_id in self.topology.vpc_ids:
            if any(lo <= value <= hi for lo, hi in self.topology.vpc_ranges(vpc_id)):
                return vpc_id
        return None

    def interface_endpoint(self, eni: NetworkInterface, query: str = "") -> Endpoint:
        instance = self.instances.get(eni.instance_id or "")
        ip = eni.primary_ip or "?"
        if instance is not None:
            label = f"{instance.name} ({instance.id}, {eni.id} {ip})" if instance.name != instance.id \
                else f"{instance.id} ({eni.id} {ip})"
        else:
            label = f"{eni.id} ({ip}{', ' + eni.description if eni.description else ''})"
        return Endpoint(
            kind="interface",
            label=label,
            resource=eni.id,
            addresses=merge(address_range(a) for a in eni.private_ips),
            vpc_id=eni.vpc_id or self._vpc_of_subnet(eni.subnet_id),
            subnet_id=eni.subnet_id,
            group_ids=eni.security_group_ids,
            public_ip=eni.public_ip,
            interface_ids=(eni.id,),
            instance_ids=(eni.instance_id,) if eni.instance_id else (),
            query=query,
        )

    def class_endpoint(self, members: Sequence[NetworkInterface], label: str, resource: str) -> Endpoint:
        """One endpoint for interfaces alike (same subnet and groups): every member's address, one verdict."""
        base = self.interface_endpoint(members[0])
        if len(members) == 1:
            return dataclasses.replace(base, label=label, resource=resource)
        return dataclasses.replace(
            base,
            kind="class",
            label=label,
            resource=resource,
            addresses=merge(address_range(ip) for m in members for ip in m.private_ips),
            interface_ids=tuple(m.id for m in members),
            instance_ids=tuple(sorted({m.instance_id for m in members if m.instance_id})),
            public_ip=base.public_ip if all(m.public_ip for m in members) else None,
        )

    def _vpc_of_subnet(self, subnet_id: str) -> str | None:
        subnet = self.subnets.get(subnet_id)
        return subnet.vpc_id if subnet else None


ClassKey = tuple[str, tuple[str, ...], bool]


def group_interfaces(interfaces: Iterable[NetworkInterface], by_public_ip: bool = True
                     ) -> dict[ClassKey, list[NetworkInterface]]:
    """Interfaces by (subnet, security-group set, has a public IP), in a stable order."""
    grouped: dict[ClassKey, list[NetworkInterface]] = defaultdict(list)
    for eni in interfaces:
        grouped[(eni.subnet_id, eni.security_group_ids, bool(eni.public_ip) if by_public_ip else False)].append(eni)
    return dict(sorted(grouped.items()))


def primary_interface(inventory_interfaces: list[NetworkInterface]) -> NetworkInterface | None:
    """The interface an instance's own IP traffic uses: device 0 on network card 0."""
    ordered = sorted(inventory_interfaces, key=lambda e: (e.network_card_index or 0, e.device_index or 0, e.id))
    return ordered[0] if ordered else None
