"""One thing of a cluster that a question names: a node, an endpoint, a bucket, a security group or a HyperPod
instance group; which checks concern it, and which findings are about it.

:func:`find_entity` resolves what a person typed against the cluster's inventory, in this order:

1. a node: ``head``/``head-node`` for the head node, or any name :mod:`fmdoctor.engine.identity` knows for
   it: its ``Name`` tag, id, private DNS name (``ip-10-0-1-12.ec2.internal``, ``ip-10-0-1-12``), an address of
   any of its interfaces, an interface id, a HyperPod or Kubernetes node name;
2. a security group: its id or its name;
3. a SageMaker endpoint of the cluster: its name (or ``endpoint/NAME``);
4. a HyperPod instance group: its name;
5. an S3 bucket, or a prefix in it: ``s3://bucket[/prefix]`` only (a bare word is never taken for a bucket).

Nothing matched raises :class:`~fmdoctor.engine.errors.TargetNotFound` naming what was tried and what is
close. :func:`relation` tells a finding *on* the entity (its resource is the entity) from one that
*involves* it (names the entity's ids in its summary or evidence, or sits on its security group or subnet).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fmdoctor.engine.errors import AwsCallFailed, TargetNotFound
from fmdoctor.engine.identity import NodeIdentities
from fmdoctor.engine.inventory import HEAD, INFERENCE, Instance, Inventory
from fmdoctor.words import suggest

NODE, SECURITY_GROUP, ENDPOINT = "node", "security-group", "endpoint"
INSTANCE_GROUP, BUCKET = "instance-group", "bucket"
ON, INVOLVES = "on", "involves"
ORDER = ("a node's Name tag, id, DNS name, IP or interface id ({nodes} nodes), 'head', a security group id or name, an "
         "endpoint name ({endpoints} endpoints), a HyperPod instance group, or s3://bucket")

# The check families each kind of thing is looked at by (a node: everything about instances but checkpoints).
FAMILIES = {
    NODE: ("efa", "gpu", "spot", "network", "hyperpod"),
    SECURITY_GROUP: ("efa", "network"),
    ENDPOINT: ("inference",),
    INSTANCE_GROUP: ("hyperpod",),
    BUCKET: ("checkpoint",),
}
BUCKET_CHECKS = ("s3-unreachable",)  # the path to S3 concerns every bucket in the region


@dataclass(frozen=True)
class Entity:
    kind: str
    id: str  # instance id, group id, endpoint name, instance group name, bucket name
    label: str  # how answers name it: 'gpu-node-3 (i-0abc...)', 's3://bucket'
    tokens: tuple[str, ...] = ()  # ids whose mention in a finding ties it to the entity
    resources: tuple[str, ...] = ()  # resources a finding on the entity carries
    nearby: tuple[str, ...] = field(default=())  # resources it depends on (its security groups, its subnet)
    inference_node: bool = False

    def to_json_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "id": self.id, "label": self.label}


def find_entity(inventory: Inventory, text: str) -> Entity:
    """The node, group, endpoint, instance group or bucket ``text`` names in ``inventory`` (see the module).
    A part of the inventory AWS would not return is passed over, and a miss then says it could not be read."""
    query = text.strip()
    lowered = query.lower()
    node = _node(inventory, query)
    if node is not None:
        return node
    for group in _readable(lambda: list(inventory.security_groups.values())):
        if query in (group.id, group.name):
            return Entity(SECURITY_GROUP, group.id, f"security group {group.name} ({group.id})", (group.id,),
                          (group.id,))
    name = query.removeprefix("endpoint/")
    for endpoint in _readable(lambda: list(inventory.endpoints)):
        if name == endpoint.name:
            prefix = f"endpoint/{endpoint.name}"
            return Entity(ENDPOINT, endpoint.name, f"endpoint {endpoint.name}", (endpoint.name, prefix), (prefix,))
    for group in inventory.hyperpod.groups if inventory.hyperpod else ():
        if query == group.name:
            return Entity(INSTANCE_GROUP, group.name, f"HyperPod instance group {group.name}", (group.name,))
    if lowered.startswith("s3://") and len(lowered) > 5:
        bucket = query[5:].split("/", 1)[0]
        uri = query.rstrip("/")  # a prefix narrows it: s3://bucket/run-1 is not s3://bucket/run-2
        return Entity(BUCKET, bucket, query, (uri,), (uri,))
    raise _not_found(inventory, query)


def checks_for(entity: Entity, checks: Iterable[Any]) -> list[str]:
    """Ids of the checks (of ``checks``: the registry's cluster checks) that look at this kind of thing."""
    families = set(FAMILIES[entity.kind]) | ({"inference"} if entity.inference_node else set())
    return [c.id for c in checks if c.family in families or (entity.kind == BUCKET and c.id in BUCKET_CHECKS)]


def relation(entity: Entity, finding: Mapping[str, Any]) -> str | None:
    """``on`` (the finding's resource is the entity), ``involves`` (it names the entity, or sits on what the
    entity depends on), else None."""
    resource = str(finding.get("resource", ""))
    if any(resource == r or resource.startswith(r + "/") for r in entity.resources):
        return ON
    if resource in entity.nearby or (entity.kind == BUCKET and finding.get("check") in BUCKET_CHECKS):
        return INVOLVES
    text = " ".join((str(finding.get("summary", "")), json.dumps(finding.get("evidence", {}), default=str)))
    return INVOLVES if mentions(text, entity.tokens) else None


def concerns_error(entity: Entity, error: Mapping[str, Any], others: Iterable[str]) -> bool:
    """An error entry names the entity, or names none of the cluster's other things (so it is check-wide)."""
    text = f"{error.get('unverified', '')} {error.get('message', '')}"
    return mentions(text, entity.tokens) or not mentions(text, others)


def other_tokens(inventory: Inventory, entity: Entity) -> list[str]:
    """Ids of the other things of the entity's kind, to tell an error about another node from a check-wide one."""
    if entity.kind == NODE:
        return [i.id for i in inventory.instances if i.id != entity.id]
    if entity.kind == ENDPOINT:
        return [e.name for e in _readable(lambda: list(inventory.endpoints)) if e.name != entity.id]
    if entity.kind == SECURITY_GROUP:
        return [g for g in _readable(lambda: list(inventory.security_groups)) if g != entity.id]
    return []


def mentions(text: str, tokens: Iterable[str]) -> bool:
    """Any token appears as a whole id (``demo-llm-chat`` is not in ``demo-llm-chat-canary``)."""
    return any(re.search(rf"(?<![\w-]){re.escape(t)}(?![\w-])", text) for t in tokens if t)


def _node(inventory: Inventory, query: str) -> Entity | None:
    """The node any of its names means (:class:`~fmdoctor.engine.identity.NodeIdentities`: Name tag, id,
    private DNS name full or short, any address, interface id, HyperPod/Kubernetes node name)."""
    lowered = query.lower()
    heads = [i for i in inventory.instances if i.role == HEAD]
    if lowered in ("head", "head-node", "head node") and heads:
        return _node_entity(inventory, heads[0])
    match = NodeIdentities.of(inventory).resolve(query)
    if match.ambiguous:
        raise TargetNotFound(f"{len(match.candidates)} nodes go by {query!r} ({match.via}): name one by its id",
                             hint=", ".join(i.id for i in match.candidates[:5]))
    return _node_entity(inventory, match.instance) if match.instance is not None else None


def _readable(read: Callable[[], list[Any]]) -> list[Any]:
    try:
        return read()
    except AwsCallFailed:  # the part AWS would not return: _not_found says so
        return []


def _unreadable(inventory: Inventory) -> list[str]:
    """What of the inventory could not be read, so a name that matched nothing may still be there."""
    parts = [what for what, read in (("network interfaces", lambda: list(inventory.interfaces)),
                                     ("security groups", lambda: list(inventory.security_groups)))
             if _failed(read)]
    return parts + [gap.unverified for gap in inventory.endpoint_gaps]


def _failed(read: Callable[[], Any]) -> bool:
    try:
        read()
    except AwsCallFailed:
        return True
    return False


def _node_entity(inventory: Inventory, instance: Instance) -> Entity:
    interfaces = _readable(lambda: inventory.interfaces_of(instance))
    groups = {g for e in interfaces for g in e.security_group_ids}
    nearby = tuple(sorted(groups | ({instance.subnet_id} if instance.subnet_id else set())))
    return Entity(NODE, instance.id, inventory.label(instance.id), (instance.id, *(e.id for e in interfaces)),
                  (instance.id, *(e.id for e in interfaces)), nearby, inference_node=instance.role == INFERENCE)


def _not_found(inventory: Inventory, query: str) -> TargetNotFound:
    groups = _readable(lambda: list(inventory.security_groups.values()))
    endpoints = _readable(lambda: list(inventory.endpoints))
    names = NodeIdentities.of(inventory).all_names()
    names += [g.name for g in groups] + [e.name for e in endpoints]
    names += [g.name for g in inventory.hyperpod.groups] if inventory.hyperpod else []
    close = suggest(query, [n for n in names if n]) if len(query) <= 256 else []
    shown = query if len(query) <= 80 else f"{query[:77]}..."
    tried = ORDER.format(nodes=len(inventory.instances), endpoints=len(endpoints))
    unread = _unreadable(inventory)
    hidden = f"; not verified: {', '.join(unread)} could not be read, so it may be there" if unread else ""
    hint = f"did you mean {close[0]}?" + (f" (also close: {', '.join(close[1:])})" if close[1:] else "") \
        if close else None
    return TargetNotFound(f"{shown!r} is not a node, group, endpoint or bucket of cluster {inventory.cluster} "
                          f"(tried, in order: {tried}){hidden}", hint=hint)

