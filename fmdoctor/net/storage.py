"""The cluster's file systems as network endpoints: FSx for Lustre in its VPCs or named in the config.

DescribeFileSystems has no VPC filter, so one paginated listing is filtered here; the file servers'
interfaces (and any security group the inventory lacks) then come in one batched describe each.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from fmdoctor.engine.inventory import NetworkInterface, SecurityGroup
from fmdoctor.engine.prefetch import EarlyLoad
from fmdoctor.net.fetch import fetch_interfaces, fetch_missing_groups, fetch_prefix_lists
from fmdoctor.net.topology import PrefixList

STORAGE_IAM_ACTIONS = ("fsx:DescribeFileSystems", "ec2:DescribeNetworkInterfaces", "ec2:DescribeSecurityGroups",
                       "ec2:DescribeSecurityGroupRules")


@dataclass(frozen=True)
class FileSystem:
    id: str
    type: str  # LUSTRE, ONTAP, OPENZFS, WINDOWS
    vpc_id: str | None
    interface_ids: tuple[str, ...]
    dns_name: str = ""
    lifecycle: str = ""
    name: str = ""
    deployment: str = ""
    efa_enabled: bool = False  # LustreConfiguration.EfaEnabled: EFA (and GPUDirect Storage) between clients and it

    @property
    def label(self) -> str:
        return f"{self.name} ({self.id})" if self.name else self.id


@dataclass(frozen=True)
class FileSystems:
    systems: tuple[FileSystem, ...] = ()
    interfaces: dict[str, NetworkInterface] = field(default_factory=dict)
    security_groups: dict[str, SecurityGroup] = field(default_factory=dict)
    prefix_lists: dict[str, PrefixList] = field(default_factory=dict)
    not_found: tuple[str, ...] = ()  # named in the config, absent from this account and region


def configured_file_system_ids(locations: Iterable[str]) -> list[str]:
    """fs-ids from checkpoint locations (``fsx://fs-0123.../path`` or a bare id)."""
    ids = []
    for location in locations:
        text = location[6:] if location.startswith("fsx://") else location
        if text.startswith("fs-"):
            ids.append(text.split("/", 1)[0])
    return sorted(set(ids))


def list_file_systems(fsx: Any) -> list[dict[str, Any]]:
    """Every file system of the account and region (DescribeFileSystems' pages, unfiltered)."""
    pages = fsx.get_paginator("describe_file_systems").paginate()
    return [raw for page in pages for raw in page.get("FileSystems", [])]


# The region's file systems, listed once per run and, needing no inventory, before it.
FILE_SYSTEMS: EarlyLoad[list[dict[str, Any]]] = EarlyLoad(
    "fsx.file-systems", lambda start, _: list_file_systems(start.client("fsx")), ("fsx:DescribeFileSystems",),
    regional=True)


def fetch_lustre_file_systems(fsx: Any, ec2: Any, vpc_ids: Iterable[str], wanted_ids: Sequence[str],
                              known_groups: dict[str, SecurityGroup], known_lists: Iterable[str] = (),
                              listed: list[dict[str, Any]] | None = None) -> FileSystems:
    """The Lustre file systems in ``vpc_ids`` or named in ``wanted_ids``, with their interfaces, groups and prefix
    lists; ``listed``: DescribeFileSystems' answer already read (:data:`FILE_SYSTEMS`)."""
    vpcs = set(vpc_ids)
    wanted = set(wanted_ids)
    systems = []
    seen = set()
    for raw in list_file_systems(fsx) if listed is None else listed:
        seen.add(raw["FileSystemId"])
        if raw.get("FileSystemType") != "LUSTRE":
            continue
        if raw.get("VpcId") not in vpcs and raw["FileSystemId"] not in wanted:
            continue
        tags = {t["Key"]: t.get("Value", "") for t in raw.get("Tags", [])}
        systems.append(FileSystem(
            id=raw["FileSystemId"],
            type=raw["FileSystemType"],
            vpc_id=raw.get("VpcId"),
            interface_ids=tuple(raw.get("NetworkInterfaceIds", [])),
            dns_name=raw.get("DNSName", ""),
            lifecycle=raw.get("Lifecycle", ""),
            name=tags.get("Name", ""),
            deployment=(raw.get("LustreConfiguration") or {}).get("DeploymentType", ""),
            efa_enabled=bool((raw.get("LustreConfiguration") or {}).get("EfaEnabled")),
        ))
    ids = [e for s in systems for e in s.interface_ids]
    interfaces = fetch_interfaces(ec2, ids=ids) if ids else {}
    groups = fetch_missing_groups(ec2, {g for e in interfaces.values() for g in e.security_group_ids}, known_groups)
    lists = sorted({r.prefix_list_id for g in groups.values() for r in g.rules if r.prefix_list_id} - set(known_lists))
    return FileSystems(
        systems=tuple(sorted(systems, key=lambda s: s.id)),
        interfaces=interfaces,
        security_groups=groups,
        prefix_lists=fetch_prefix_lists(ec2, lists) if lists else {},
        not_found=tuple(sorted(wanted - seen)),
    )
