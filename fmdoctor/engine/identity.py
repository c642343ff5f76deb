"""Which node of the inventory a name means, and every name a report should show for a node.

Every part of fmdoctor that meets a node's name (a question, ``why-not``, a log stream, a metric's labels, an
alert's labels, a training log's host) resolves it here, so a node is one node whatever it was called:

* EC2's own names: the instance id, the ``Name`` tag, the private DNS name (``ip-10-0-1-12.us-west-2.compute.
  internal``, ``i-0abc....compute.internal`` with resource-based naming) and its short ``ip-10-0-1-12`` form
  under any domain (``.ec2.internal`` in us-east-1, a cluster's own), every private IPv4 and IPv6 address of
  every interface (a VPC CNI pod IP is a secondary address of one), public IPs and interface ids;
* the platforms': Kubernetes node names on EKS are the private DNS name; SageMaker HyperPod names its EKS nodes
  ``hyperpod-<instance id>`` after ListClusterNodes' InstanceId and may give a NodeLogicalId; ParallelCluster's
  Slurm node names (``queue1-st-p5-1``) live in its DynamoDB table and Slurm itself, not in EC2, so they come
  from tags the configuration names (``gpu.hostname_tags``) or from the scheduler through :meth:`with_aliases`;
* telemetry's: the CloudWatch agent's ``InstanceId`` and ``host`` dimensions, Container Insights' ``NodeName``,
  DCGM exporter's ``Hostname`` and Prometheus's ``instance`` (``host:port``), log streams whose name carries the
  instance id (ParallelCluster's ``<host>.<instance-id>.<log>``).

A node's own names (its id, addresses, DNS names, interfaces) are EC2's and decide over labels (tags, aliases),
which anyone with CreateTags writes: a label spelling another node's identity (a Name tag holding the id of the node
it replaced, an address) is no name of either node. A name two nodes share resolves to both as candidates, never to
one of them; a name that resolves to nothing
comes back with the close names. A name in the form of an instance id or a private address that is not one of
ours is *foreign* (another node's), which metrics tell from a name nothing knows. ``localhost`` and loopback
addresses name every node, so they name none.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from fmdoctor.engine.errors import AwsCallFailed
from fmdoctor.engine.hyperpod import HyperPodNode
from fmdoctor.engine.inventory import Instance, Inventory, NetworkInterface
from fmdoctor.words import suggest

INSTANCE_ID, NAME_TAG, PRIVATE_DNS, SHORT_DNS = "instance-id", "name-tag", "private-dns", "short-dns"
IPV4, IPV6, INTERFACE_ID, PUBLIC_IP = "ipv4", "ipv6", "interface-id", "public-ip"
SLURM_NODE, K8S_NODE, HYPERPOD_NODE, HOSTNAME_TAG = "slurm-node", "k8s-node", "hyperpod-node", "hostname-tag"
LOG_STREAM, DCGM_INSTANCE, ALIAS, LOOPBACK = "log-stream", "dcgm-instance", "alias", "loopback"
HYPERPOD_GROUP_TAG = "sagemaker:instance-group-name"  # marks a node with_hyperpod_nodes added (its group)

_ID = r"i-[0-9a-f]{8,17}"
_INSTANCE_ID = re.compile(rf"^{_ID}$")
_EMBEDDED_ID = re.compile(rf"(?:^|[^0-9a-z])({_ID})(?=$|[^0-9a-z])")
_HYPERPOD_ID = re.compile(rf"^hyperpod-({_ID})$")
_SHORT = re.compile(r"^ip-(\d{1,3})-(\d{1,3})-(\d{1,3})-(\d{1,3})(?=$|\.)")
_HOST_PORT = re.compile(r"^(?:\[(?P<v6>[0-9a-f:.]+)\]|(?P<host>[^:\[\]]+)):\d{1,5}$")
_LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})
_FOREIGN_FORMS = frozenset({INSTANCE_ID, IPV4, IPV6, SHORT_DNS, HYPERPOD_NODE, LOG_STREAM, DCGM_INSTANCE})
# Names EC2 (or HyperPod) gives a node; a tag or alias is a label anyone with CreateTags can write
_IDENTITY_FORMS = frozenset({INSTANCE_ID, PRIVATE_DNS, SHORT_DNS, IPV4, IPV6, INTERFACE_ID, PUBLIC_IP, HYPERPOD_NODE})
_INTERFACE = re.compile(r"^eni-[0-9a-f]{8,17}$")
_MAX_NAME = 512  # longer is no name: matched against nothing, suggested nothing


@dataclass(frozen=True)
class NodeMatch:
    """What a name resolved to. ``via`` is the form that matched (or, with nothing matched, the form the name
    was recognised as: ``instance-id``, ``ipv4``... then ``foreign`` says it is another node's)."""

    query: str
    instance: Instance | None  # the node when exactly one matched
    candidates: tuple[Instance, ...]  # every node matched (>1: ambiguous)
    close: tuple[str, ...]  # close names when nothing matched
    via: str
    foreign: bool = False  # an instance id or private address that is none of ours

    @property
    def ambiguous(self) -> bool:
        return len(self.candidates) > 1

    @property
    def found(self) -> bool:
        return self.instance is not None

    def describe(self) -> str:
        """One sentence for a person when nothing (or more than one node) matched."""
        if self.instance is not None:
            return f"{self.query!r} is {self.instance.id} (by {self.via})"
        if self.ambiguous:
            return (f"{self.query!r} names {len(self.candidates)} nodes ({self.via}): "
                    f"{', '.join(i.id for i in self.candidates[:5])}")
        if self.foreign:
            return f"{self.query!r} names a node that is not in this cluster ({self.via})"
        hint = f"; did you mean {', '.join(self.close)}?" if self.close else ""
        return f"{self.query!r} names no node of this cluster{hint}"


class NodeIdentities:
    """Every name of every node of one inventory (see the module). Build with :meth:`of`."""

    def __init__(self, inventory: Inventory | None, nodes: Iterable[Instance],
                 table: Mapping[str, Mapping[str, str]], shown: Mapping[str, tuple[str, ...]],
                 unreadable: tuple[str, ...] = (), skipped: tuple[str, ...] = ()):
        self.inventory = inventory
        self.nodes: dict[str, Instance] = {n.id: n for n in nodes}
        self._table = {k: dict(v) for k, v in table.items()}  # lowercased name -> {instance id: via}
        self._shown = dict(shown)  # instance id -> names for reports, best first
        self.unreadable = unreadable  # parts of the inventory that could not be read (interfaces)
        self.skipped = skipped  # aliases whose target named no single node
        self._by_node: dict[str, tuple[str, ...]] | None = None  # every_name's index, built on first use

    # -- building -----------------------------------------------------------------------------------------

    @classmethod
    def of(cls, inventory: Inventory, hostname_tags: Iterable[str] | None = None) -> NodeIdentities:
        """The identities of ``inventory``'s instances, built once per inventory and tag list; ``hostname_tags``
        defaults to the inventory's own (the configuration's ``gpu.hostname_tags``), so every caller resolves a
        node's hostname tag alike."""
        tags = tuple(inventory.hostname_tags if hostname_tags is None else hostname_tags)
        cache: dict[tuple[str, ...], NodeIdentities] = inventory.__dict__.setdefault("_node_identities", {})
        found = cache.get(tags)
        if found is None:
            found = cls._build(inventory, inventory.instances, tags)
            cache[tags] = found
        return found

    @classmethod
    def _build(cls, inventory: Inventory, instances: Iterable[Instance], hostname_tags: tuple[str, ...]
               ) -> NodeIdentities:
        table: dict[str, dict[str, str]] = {}
        shown: dict[str, tuple[str, ...]] = {}
        unreadable: tuple[str, ...] = ()
        try:
            interfaces = dict(inventory.interfaces.items())
        except AwsCallFailed:
            interfaces, unreadable = {}, ("network interfaces",)
        instances = list(instances)
        every = {instance.id: _names_of(instance, [interfaces[e] for e in instance.interface_ids if e in interfaces],
                                        hostname_tags) for instance in instances}
        owner = {name.lower(): node for node, names in every.items() for name, via in names if via in _IDENTITY_FORMS}
        for instance in instances:
            for name, via in _own_labels(every[instance.id], instance.id, owner):
                table.setdefault(name.lower(), {}).setdefault(instance.id, via)
            shown[instance.id] = _shown(instance, hostname_tags)
        return cls(inventory, instances, table, shown, unreadable)

    @classmethod
    def of_names(cls, nodes: Mapping[str, Iterable[str]]) -> NodeIdentities:
        """Nodes a data source knows only by names, without an inventory (``{instance id: its addresses, DNS
        names and hostnames}``): HyperPod's ListClusterNodes, a fleet's metric identities."""
        table: dict[str, dict[str, str]] = {}
        shown: dict[str, tuple[str, ...]] = {}
        instances = []
        for node_id, names in nodes.items():
            instances.append(Instance(id=node_id, instance_type="", state="", subnet_id=None, vpc_id=None,
                                      availability_zone=None))
            pairs = [(node_id, INSTANCE_ID)] + [pair for name in names if name for pair in _classify(name)]
            for name, via in pairs:
                table.setdefault(name.lower(), {}).setdefault(node_id, via)
            shown[node_id] = tuple(dict.fromkeys(name for name, _ in pairs))
        return cls(None, instances, table, shown)

    def with_aliases(self, aliases: Mapping[str, str], via: str = ALIAS) -> NodeIdentities:
        """These identities plus extra names: ``{name: what it stands for}`` where what it stands for is any
        name this resolver knows (an instance id, a Slurm NodeAddr IP, a private DNS name). An alias whose
        target resolves to no single node is left out (``skipped`` lists them)."""
        table = {k: dict(v) for k, v in self._table.items()}
        shown = dict(self._shown)
        skipped = []
        own: dict[str, set[str]] = {}
        for key, owners in self._table.items():
            for node, form in owners.items():
                if form in _IDENTITY_FORMS:
                    own.setdefault(node, set()).add(key)
        for name, target in aliases.items():
            match = self.resolve(target)
            spelled = _spelled_identity(name)
            if match.instance is None or not name.strip() or (
                    spelled is not None and spelled not in own.get(match.instance.id, ())):
                skipped.append(name)  # names no single node, or spells another node's identity
                continue
            table.setdefault(name.strip().lower(), {}).setdefault(match.instance.id, via)
            shown[match.instance.id] = tuple(dict.fromkeys((*shown.get(match.instance.id, ()), name.strip())))
        return NodeIdentities(self.inventory, self.nodes.values(), table, shown, self.unreadable, tuple(skipped))

    def with_hyperpod_nodes(self, nodes: Iterable[HyperPodNode],
                            logical_ids: Mapping[str, str] | None = None) -> NodeIdentities:
        """Plus a HyperPod cluster's nodes (ListClusterNodes), which are no EC2 instances of this account:
        each by its InstanceId, ``hyperpod-<InstanceId>`` (its EKS node name), PrivateDnsHostname and its
        address, and the NodeLogicalId ``logical_ids`` gives for it."""
        extra = [Instance(id=n.node_id, instance_type=n.instance_type, state=n.status, subnet_id=None, vpc_id=None,
                          availability_zone=None, private_ip=_ip_of_short(n.private_dns or ""),
                          private_dns=n.private_dns, launch_time=n.launch_time,
                          tags={HYPERPOD_GROUP_TAG: n.group})
                 for n in nodes if n.node_id not in self.nodes]
        table = {k: dict(v) for k, v in self._table.items()}
        shown = dict(self._shown)
        for instance in extra:
            names = [*_names_of(instance, [], ()), (f"hyperpod-{instance.id}", HYPERPOD_NODE)]
            logical = (logical_ids or {}).get(instance.id)
            if logical:
                names.append((logical, HYPERPOD_NODE))
            for name, via in names:
                table.setdefault(name.lower(), {}).setdefault(instance.id, via)
            shown[instance.id] = tuple(dict.fromkeys(
                (*_shown(instance, ()), f"hyperpod-{instance.id}", *([logical] if logical else []))))
        return NodeIdentities(self.inventory, [*self.nodes.values(), *extra], table, shown, self.unreadable)

    # -- asking ---------------------------------------------------------------------------------------------

    def resolve(self, name: str, *, suggest_close: bool = True) -> NodeMatch:
        """The node ``name`` means, tried as: the exact name; ``host:port`` without the port; ``hyperpod-<id>``;
        an instance id inside a longer name (a log stream, a resource-based DNS name); ``ip-a-b-c-d`` under
        any domain as its address; the first label of a dotted name. ``suggest_close=False`` skips the close
        names of a miss (a data source matching many labels, where nobody reads them)."""
        query = (name or "").strip()
        if not query or len(query) > _MAX_NAME:
            return NodeMatch(query, None, (), (), "")
        lowered = query.lower()
        if _is_loopback(lowered):
            return NodeMatch(query, None, (), (), LOOPBACK)
        port = _HOST_PORT.match(lowered)
        host = (port.group("v6") or port.group("host")) if port else lowered
        if port and _is_loopback(host):
            return NodeMatch(query, None, (), (), LOOPBACK)
        if ":" in host:
            host = _canonical_v6(host)
        for key, via in self._keys(host, bool(port)):
            if key is None:  # an instance id in the name that is none of ours: it is another node's
                return NodeMatch(query, None, (), (), via or LOG_STREAM, foreign=True)
            owners = self._table.get(key)
            if owners:
                return self._match(query, owners, via)
        form = _form(host)
        if form:
            return NodeMatch(query, None, (), (), DCGM_INSTANCE if port else form, foreign=form in _FOREIGN_FORMS)
        return NodeMatch(query, None, (), tuple(suggest(query, self._suggestable())) if suggest_close else (), "")

    def find(self, name: str) -> Instance | None:
        """The node ``name`` names when exactly one does."""
        return self.resolve(name).instance

    def node_of(self, name: str) -> str | None:
        """The instance id of the node ``name`` names when exactly one does: the lookup incidents group by
        (:func:`fmdoctor.engine.incidents.build_incidents`' ``node_of``)."""
        found = self.resolve(name, suggest_close=False).instance
        return found.id if found is not None else None

    def names(self, instance_id: str) -> tuple[str, ...]:
        """Every name a report should show for the node, best first: Name tag, id, private DNS name, its short
        form, hostnames from tags and aliases, addresses, interface ids."""
        return self._shown.get(instance_id, (instance_id,))

    def label(self, instance_id: str) -> str:
        """'gpu-node-3 (i-0abc...)' with a Name tag (or another name people use), else the id."""
        instance = self.nodes.get(instance_id)
        if instance is None:
            return instance_id
        if instance.name != instance.id:
            return f"{instance.name} ({instance.id})"
        other = next((n for n in self.names(instance_id) if n != instance_id and not _INSTANCE_ID.match(n)), None)
        return f"{other} ({instance_id})" if other and not _HYPERPOD_ID.match(other) else instance_id

    def every_name(self, instance_id: str) -> tuple[str, ...]:
        """Every name the node is known by here (for a source that matches names itself, e.g. a metric query
        narrowed to a node's hostnames), in no particular order."""
        if self._by_node is None:
            by_node: dict[str, list[str]] = {}
            for name, owners in self._table.items():
                for owner in owners:
                    by_node.setdefault(owner, []).append(name)
            self._by_node = {node: tuple(names) for node, names in by_node.items()}
        return self._by_node.get(instance_id, ())

    def all_names(self) -> list[str]:
        return [n for names in self._shown.values() for n in names]

    # -- inside -----------------------------------------------------------------------------------------------

    def _keys(self, host: str, had_port: bool) -> Iterable[tuple[str | None, str | None]]:
        """(table key, the via to report, or None for the table's own), most specific first; a None key ends
        the search: the name carries an instance id that is not ours, which decides over its other parts."""
        yield host, (DCGM_INSTANCE if had_port else None)
        embedded = _HYPERPOD_ID.match(host) or _EMBEDDED_ID.search(host)
        if embedded:
            via = HYPERPOD_NODE if host.startswith("hyperpod-") else (
                INSTANCE_ID if host.startswith(embedded.group(1)) else LOG_STREAM)
            yield embedded.group(1), via
            if embedded.group(1) not in self._table:
                yield None, via
        if short := _SHORT.match(host):
            yield ".".join(short.groups()), SHORT_DNS
        first = host.split(".", 1)[0]
        if first != host and not _is_ip(host):
            yield first, None

    def _match(self, query: str, owners: Mapping[str, str], via: str | None) -> NodeMatch:
        # a node's own id, address or DNS name decides over another's label that spells the same
        owners = {i: v for i, v in owners.items() if v in _IDENTITY_FORMS} or owners
        found = tuple(self.nodes[i] for i in owners if i in self.nodes)
        how = via or next(iter(owners.values()))
        if len(found) == 1:
            return NodeMatch(query, found[0], found, (), how)
        return NodeMatch(query, None, found, (), how)

    def _suggestable(self) -> list[str]:
        return [n for names in self._shown.values() for n in names[:4]]


def _names_of(instance: Instance, interfaces: list[NetworkInterface], hostname_tags: tuple[str, ...]
              ) -> list[tuple[str, str]]:
    """(name, form) pairs for one instance, most telling form first (a key seen twice keeps its first form)."""
    names: list[tuple[str, str]] = [(instance.id, INSTANCE_ID)]
    if instance.tags.get("Name"):
        names.append((instance.tags["Name"], NAME_TAG))
    for tag in hostname_tags:
        if instance.tags.get(tag):
            names += [(name, HOSTNAME_TAG) for name, _ in _classify(instance.tags[tag])]
    if instance.private_dns:
        names.append((instance.private_dns, PRIVATE_DNS))
        short = instance.private_dns.split(".", 1)[0]
        if short != instance.private_dns:
            names.append((short, SHORT_DNS))
    if instance.private_ip:
        names.append((instance.private_ip, IPV4))
    for eni in interfaces:
        names.append((eni.id, INTERFACE_ID))
        names += [(ip, IPV4) for ip in eni.private_ips]
        names += [(_canonical_v6(ip), IPV6) for ip in eni.ipv6_ips]
        if eni.public_ip:
            names.append((eni.public_ip, PUBLIC_IP))
    if instance.public_ip:
        names.append((instance.public_ip, PUBLIC_IP))
    return names


def _own_labels(names: list[tuple[str, str]], node: str, owner: Mapping[str, str]) -> list[tuple[str, str]]:
    """``names`` less the labels (Name tag, hostname tags) spelling an identity that is not this node's: a tag
    holding another node's id or address (a launch template copying the node it replaced) names neither node.
    A hostname tag the configuration names (``gpu.hostname_tags``: the user said it carries the host name, as a
    Slurm node name ``ip-10-0-1-13`` does) may also spell an address no node of the inventory has; never another
    node's, and never an instance, interface or HyperPod id."""
    own = {name.lower() for name, via in names if via in _IDENTITY_FORMS}

    def kept(name: str, via: str) -> bool:
        if via in _IDENTITY_FORMS or (spelled := _spelled_identity(name)) is None or spelled in own:
            return True
        return via == HOSTNAME_TAG and _is_ip(spelled) and owner.get(spelled, node) == node
    return [(name, via) for name, via in names if kept(name, via)]


def _spelled_identity(name: str) -> str | None:
    """The table key of the identity ``name`` spells (an instance id, ``hyperpod-<id>``, an interface id, an
    address, ``ip-a-b-c-d`` under any domain), else None (a label free to be anything)."""
    lowered = name.strip().lower().rstrip(".")
    if hyperpod := _HYPERPOD_ID.match(lowered):
        return hyperpod.group(1)
    if _INSTANCE_ID.match(lowered) or _INTERFACE.match(lowered):
        return lowered
    if _is_ip(lowered):
        return _canonical_v6(lowered) if ":" in lowered else lowered
    if short := _SHORT.match(lowered):
        return ".".join(short.groups())
    return None


def _classify(name: str) -> list[tuple[str, str]]:
    """(name, form) pairs a bare name stands for: an address, a private DNS name and its short form, a
    HyperPod node name, else a hostname (and its first label, as a cluster domain's FQDN)."""
    name = name.strip()
    if _is_ip(name):
        return [(_canonical_v6(name), IPV6)] if ":" in name else [(name, IPV4)]
    if _HYPERPOD_ID.match(name.lower()):
        return [(name, HYPERPOD_NODE)]
    first = name.split(".", 1)[0]
    if _SHORT.match(name.lower()):
        return [(name, PRIVATE_DNS)] + ([(first, SHORT_DNS)] if first != name else [])
    return [(name, HOSTNAME_TAG)] + ([(first, HOSTNAME_TAG)] if first != name else [])


def _shown(instance: Instance, hostname_tags: tuple[str, ...]) -> tuple[str, ...]:
    names = [instance.tags.get("Name"), instance.id,
             *(instance.tags.get(t) for t in hostname_tags), instance.private_dns,
             instance.private_dns.split(".", 1)[0] if instance.private_dns else None, instance.private_ip]
    return tuple(dict.fromkeys(n for n in names if n))


def _form(host: str) -> str:
    """What kind of name ``host`` is when the table has no such name."""
    if _HYPERPOD_ID.match(host):
        return HYPERPOD_NODE
    if _INSTANCE_ID.match(host):
        return INSTANCE_ID
    if _EMBEDDED_ID.search(host):
        return LOG_STREAM
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return SHORT_DNS if _SHORT.match(host) else ""
    return IPV4 if address.version == 4 else IPV6


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _is_loopback(host: str) -> bool:
    if host in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _canonical_v6(ip: str) -> str:
    try:
        return str(ipaddress.IPv6Address(ip))
    except ValueError:
        return ip


def _ip_of_short(host: str) -> str | None:
    """10.0.1.23 for ip-10-0-1-23[.anything]."""
    match = _SHORT.match(host.lower())
    return ".".join(match.groups()) if match else None


def canonical(name: str | None) -> str | None:
    """One spelling for a node name no inventory knows (a HyperPod node, another account's), so names of one node
    compare equal: the instance id it carries (``hyperpod-i-...``, ``host.i-....log``, resource-based DNS), else
    ``ip-a-b-c-d`` for a name or address that spells one (any domain), else its lowercased first label."""
    if not name or not name.strip():
        return None
    host = name.strip().lower()
    port = _HOST_PORT.match(host)
    host = (port.group("v6") or port.group("host")) if port else host
    if embedded := _EMBEDDED_ID.search(host):
        return embedded.group(1)
    if _is_ip(host):
        return f"ip-{host.replace('.', '-')}" if "." in host else _canonical_v6(host)
    if short := _SHORT.match(host):
        return "ip-" + "-".join(short.groups())
    return host.split(".", 1)[0]


def ip_of_hostname(host: str) -> str | None:
    """The address an EC2 hostname (``ip-10-0-1-23[.domain]``) spells, else None."""
    return _ip_of_short(host)

