from __future__ import annotations

from collections import defaultdict

from fmdoctor.engine.check import Check, NotApplicable, Unverified
from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.entities import NODE
from fmdoctor.engine.inventory import Instance, InstanceTypeInfo, Inventory
from fmdoctor.engine.model import Finding, Severity

from ._common import id_list, plural
from ._net import efa_shortfall


class EfaMissingInterfaces(Check):
    """Every node that uses EFA has as many EFA interfaces as its instance type supports
    (DescribeInstanceTypes' NetworkInfo.EfaInfo.MaximumEfaInterfaces).

    The EC2 guide (docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-acc-inst-types.html): "For each additional
    network interface, use the next unused network card index", one EFA per network card. A p5.48xlarge gets
    its 3,200 Gbps only with all 32; the share of bandwidth a node has is the sum of the PeakBandwidthInGbps of
    the cards its EFA interfaces sit on over that of every card that can carry EFA (InterfaceTypes), since
    cards of one type can differ (p6-b300's card 0 carries no EFA). A type DescribeInstanceTypes does not
    return is reported as not judged, never skipped. (Nodes with no EFA at all are ``efa-not-attached``.)
    """

    id = "efa-missing-interfaces"
    family = "efa"
    concerns = frozenset({NODE})
    severity = Severity.WARNING
    iam_actions = ("ec2:DescribeInstances", "ec2:DescribeInstanceTypes")

    def run(self, ctx: CheckContext) -> list[Finding]:
        inv = ctx.inventory
        findings = []
        checked = 0
        unjudged: dict[str, list[str]] = defaultdict(list)
        why_unjudged: dict[str, str] = {}
        for node in inv.compute_nodes():
            if not any(e.is_efa for e in inv.interfaces_of(node)):
                continue  # no EFA at all is efa-not-attached's
            try:
                shortfall = efa_shortfall(inv, node, efa_groups=set())
            except LookupError as exc:
                unjudged[node.instance_type].append(inv.label(node.id))
                why_unjudged[node.instance_type] = str(exc)
                continue
            checked += 1
            if shortfall is not None:
                findings.append(self._finding(inv, node, inv.instance_types[node.instance_type], shortfall.have))
        for instance_type, nodes in sorted(unjudged.items()):
            known = instance_type in inv.instance_types
            ctx.unverified(
                f"EFA interface count of {plural(len(nodes), 'node')} of type {instance_type} ({id_list(nodes)})",
                "InstanceTypeNoEfaInfo" if known else "InstanceTypeUnknown",
                f"{why_unjudged[instance_type]} in {ctx.region}, so how many EFA interfaces it takes is not known",
            )
        if not checked:
            if unjudged:
                raise Unverified()
            raise NotApplicable("no compute node has EFA interfaces")
        return findings

    def _finding(self, inv: Inventory, node: Instance, info: InstanceTypeInfo, have: int) -> Finding:
        cards_used = sorted({e.network_card_index or 0 for e in inv.interfaces_of(node) if e.is_efa})
        used_gbps, max_gbps = _bandwidth(info, cards_used)
        if used_gbps is not None and max_gbps:
            share = used_gbps / max_gbps
            bandwidth = f"{used_gbps:g} of {max_gbps:g} Gbps of EFA bandwidth"
        else:
            share = have / info.max_efa_interfaces
            bandwidth = f"about {share:.0%} of its EFA bandwidth"
        return self.finding(
            resource=node.id,
            summary=(
                f"{node.name} ({node.id}, {node.instance_type}) has {have} of its {info.max_efa_interfaces} EFA "
                f"interfaces ({bandwidth}); add the missing interfaces at next launch."
            ),
            evidence={
                "instance": node.id,
                "instance_type": node.instance_type,
                "efa_interfaces": have,
                "max_efa_interfaces": info.max_efa_interfaces,
                "network_cards_used": cards_used,
                "efa_cards": _efa_card_indexes(info),
                "efa_bandwidth_gbps": used_gbps,
                "max_efa_bandwidth_gbps": max_gbps,
                "bandwidth_share": round(share, 4),
                "share_by": "card bandwidth" if used_gbps is not None and max_gbps else "interface count",
            },
        )


def _bandwidth(info: InstanceTypeInfo, cards_used: list[int]) -> tuple[float | None, float | None]:
    """(Gbps of the cards in use, Gbps of every EFA-capable card), each card at its own PeakBandwidthInGbps;
    (None, None) when the type's response does not say which cards carry EFA or how fast they are."""
    efa_cards = info.efa_cards()
    if not efa_cards or any(c.peak_gbps is None for c in efa_cards):
        return None, None
    speed = {c.index: c.peak_gbps or 0.0 for c in efa_cards}
    if any(index not in speed for index in cards_used):
        return None, None
    return sum(speed[i] for i in cards_used), sum(speed.values())


def _efa_card_indexes(info: InstanceTypeInfo) -> list[int]:
    """The cards that take an EFA interface (from InterfaceTypes), else the first MaximumEfaInterfaces cards."""
    cards = info.efa_cards()
    return [c.index for c in cards] if cards else list(range(info.max_efa_interfaces))
