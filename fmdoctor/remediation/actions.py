"""The automated actions fmdoctor can take, and how a finding's fix hint becomes one exact API call.

Each :class:`ActionSpec` names the one API operation it calls, whether EC2 ``DryRun`` can prove the
permission first, the error codes that mean "already done", the read actions used to recompute the plan
from the current state, and the resource ARN pattern for ``fmdoctor iam-policy``. Hints come from our own
checks (``evidence["fix"]``); they are still validated field by field, because whatever they say is sent
to AWS.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fmdoctor.engine.errors import FmdoctorError
from fmdoctor.remediation.route_actions import HintError, endpoint_params, route_params


class RemediationError(FmdoctorError):
    """A fix that cannot be planned or applied as asked (bad hint, unverifiable state, wrong account)."""


@dataclass(frozen=True)
class PlannedCall:
    """One API call of a plan: exactly what will be sent (boto3 parameters, without DryRun)."""

    service: str
    operation: str
    params: dict[str, Any]
    action: str  # the fix hint's action, e.g. 'authorize-security-group-egress'
    summary: str  # what it does, for people
    findings: tuple[str, ...] = ()  # ids of the findings it fixes

    @property
    def iam_action(self) -> str:
        return f"{self.service}:{self.operation}"

    def signature(self) -> tuple[str, str, str]:
        return self.service, self.operation, json.dumps(self.params, sort_keys=True)

    def to_json_dict(self) -> dict[str, Any]:
        spec = ACTIONS.get(self.action)
        return {"service": self.service, "operation": self.operation, "params": self.params,
                "action": self.action, "summary": self.summary, "findings": list(self.findings),
                "destructive": spec.destructive if spec else True, "idempotent": spec.idempotent if spec else False,
                "dry_run": spec.dry_run if spec else False}


@dataclass(frozen=True)
class CallStatus:
    """What happened (or would happen) to one planned call: a pre-flight check or an apply outcome."""

    call: PlannedCall
    status: str
    detail: str = ""
    code: str | None = None  # the AWS error code, when there was one
    iam_action: str | None = None  # the action that was denied, when it was

    def to_json_dict(self) -> dict[str, Any]:
        return {"call": self.call.to_json_dict(), "status": self.status, "detail": self.detail, "code": self.code,
                "iam_action": self.iam_action}


@dataclass(frozen=True)
class ActionSpec:
    name: str
    service: str
    operation: str
    build: Callable[[Mapping[str, Any], str], PlannedCall] = field(repr=False)
    resource_arn: str = "*"  # what the mutating action may touch (IAM resource-level permission)
    dry_run: bool = False  # EC2 DryRun proves the permission without change
    asynchronous: bool = False  # AWS completes it later (the finding clears minutes after)
    duplicate_codes: frozenset[str] = frozenset()  # error codes meaning "already in place"
    read_actions: tuple[str, ...] = ()  # used to recompute the plan from the current state
    # MCP's tool hints, per action: destructive = it can change or remove what is there (replace a route or a
    # node, reboot, overwrite a tag), not only add; idempotent = calling it again with the same arguments
    # changes nothing more (a rule that exists counts as done; a second reboot reboots again).
    destructive: bool = False
    idempotent: bool = True

    @property
    def iam_action(self) -> str:
        return f"{self.service}:{self.operation}"


_GROUP_ID = re.compile(r"^sg-[0-9a-f]{8,17}$")
_ACL_ID = re.compile(r"^acl-[0-9a-f]{8,17}$")
_INSTANCE_ID = re.compile(r"^i-[0-9a-f]{8,17}$")
_PREFIX_LIST_ID = re.compile(r"^pl-[0-9a-f]{8,17}$")
_HYPERPOD_CLUSTER = re.compile(r"^(arn:aws[a-z-]*:sagemaker:[a-z0-9-]*:[0-9]{12}:cluster/[a-z0-9]{12}"
                               r"|[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62})$")
_PROTOCOL_NUMBERS = {"-1": "-1", "all": "-1", "tcp": "6", "udp": "17", "icmp": "1", "icmpv6": "58"}
_PROTOCOL_NAMES = {"6": "tcp", "17": "udp", "1": "icmp", "58": "icmpv6", "-1": "-1"}


def _bad(hint: Mapping[str, Any], problem: str) -> RemediationError:
    return RemediationError(f"invalid fix hint {dict(hint)!r}: {problem}")


def _id(hint: Mapping[str, Any], key: str, pattern: re.Pattern[str]) -> str:
    value = hint.get(key)
    if not isinstance(value, str) or not pattern.match(value):
        raise _bad(hint, f"{key} must match {pattern.pattern}")
    return value


def _port(hint: Mapping[str, Any], key: str, default: int) -> int:
    value = hint.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not -1 <= value <= 65535:
        raise _bad(hint, f"{key} must be a port number (-1 to 65535)")
    return value


def _cidr(hint: Mapping[str, Any], value: Any) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    try:
        return ipaddress.ip_network(str(value), strict=True)
    except ValueError as exc:
        raise _bad(hint, f"cidr: {exc}") from None


def _sg_protocol(hint: Mapping[str, Any]) -> str:
    protocol = str(hint.get("ip_protocol", ""))
    protocol = _PROTOCOL_NAMES.get(protocol, protocol)
    if protocol not in {"-1", "tcp", "udp", "icmp", "icmpv6"}:
        raise _bad(hint, "ip_protocol must be -1, tcp, udp, icmp or icmpv6")
    return protocol


def _security_group_rule(egress: bool) -> Callable[[Mapping[str, Any], str], PlannedCall]:
    def build(hint: Mapping[str, Any], check_id: str) -> PlannedCall:
        group_id = _id(hint, "group_id", _GROUP_ID)
        protocol = _sg_protocol(hint)
        description = f"fmdoctor fix {check_id}"[:255]
        permission: dict[str, Any] = {"IpProtocol": protocol}
        if protocol != "-1":
            icmp = protocol.startswith("icmp")
            permission["FromPort"] = _port(hint, "from_port", -1 if icmp else 0)
            permission["ToPort"] = _port(hint, "to_port", -1 if icmp else 65535)
        peers = [k for k in ("cidr", "peer_group_id", "prefix_list_id") if hint.get(k) is not None]
        if len(peers) != 1:
            raise _bad(hint, "needs exactly one of cidr, peer_group_id, prefix_list_id")
        if peers == ["peer_group_id"]:
            peer = _id(hint, "peer_group_id", _GROUP_ID)
            permission["UserIdGroupPairs"] = [{"GroupId": peer, "Description": description}]
        elif peers == ["prefix_list_id"]:
            peer = _id(hint, "prefix_list_id", _PREFIX_LIST_ID)
            permission["PrefixListIds"] = [{"PrefixListId": peer, "Description": description}]
        else:
            network = _cidr(hint, hint["cidr"])
            peer = str(network)
            key, item = ("IpRanges", "CidrIp") if network.version == 4 else ("Ipv6Ranges", "CidrIpv6")
            permission[key] = [{item: peer, "Description": description}]
        what = "all traffic" if protocol == "-1" else _ports_text(protocol, permission)
        summary = (f"allow {what} out of {group_id} to {peer}" if egress
                   else f"allow {what} into {group_id} from {peer}")
        operation = "AuthorizeSecurityGroupEgress" if egress else "AuthorizeSecurityGroupIngress"
        return PlannedCall("ec2", operation, {"GroupId": group_id, "IpPermissions": [permission]},
                           hint["action"], summary)

    return build


def _ports_text(protocol: str, permission: Mapping[str, Any]) -> str:
    low, high = permission["FromPort"], permission["ToPort"]
    if protocol.startswith("icmp") or (low, high) in {(-1, -1), (0, 65535)}:
        return f"{protocol} (all)"
    return f"{protocol}/{low}" if low == high else f"{protocol}/{low}-{high}"


def _network_acl_entry(hint: Mapping[str, Any], check_id: str) -> PlannedCall:
    acl_id = _id(hint, "network_acl_id", _ACL_ID)
    rule_number = hint.get("rule_number")
    if isinstance(rule_number, bool) or not isinstance(rule_number, int) or not 1 <= rule_number <= 32766:
        raise _bad(hint, "rule_number must be 1 to 32766")
    egress = hint.get("egress")
    if not isinstance(egress, bool):
        raise _bad(hint, "egress must be true or false")
    if hint.get("rule_action") != "allow":
        raise _bad(hint, "fmdoctor only adds 'allow' entries")
    protocol = _PROTOCOL_NUMBERS.get(str(hint.get("protocol", "")).lower(), str(hint.get("protocol", "")))
    if not protocol.lstrip("-").isdigit() or not -1 <= int(protocol) <= 255:
        raise _bad(hint, "protocol must be a name (tcp, udp, icmp) or number, or -1 for all")
    network = _cidr(hint, hint.get("cidr"))
    params: dict[str, Any] = {"NetworkAclId": acl_id, "RuleNumber": rule_number, "Protocol": protocol,
                              "RuleAction": "allow", "Egress": egress}
    params["CidrBlock" if network.version == 4 else "Ipv6CidrBlock"] = str(network)
    if protocol in {"6", "17"}:
        params["PortRange"] = {"From": _port(hint, "from_port", 0), "To": _port(hint, "to_port", 65535)}
    elif protocol in {"1", "58"}:
        params["IcmpTypeCode"] = {"Type": -1, "Code": -1}
    ports = f"/{params['PortRange']['From']}-{params['PortRange']['To']}" if "PortRange" in params else ""
    what = "all traffic" if protocol == "-1" else f"{_PROTOCOL_NAMES.get(protocol, protocol)}{ports}"
    direction = f"out to {network}" if egress else f"in from {network}"
    return PlannedCall("ec2", "CreateNetworkAclEntry", params, hint["action"],
                       f"add entry {rule_number} to {acl_id}: allow {what} {direction}")


def _tag_instance(hint: Mapping[str, Any], check_id: str) -> PlannedCall:
    instance_id = _id(hint, "instance_id", _INSTANCE_ID)
    tags = hint.get("tags")
    if not isinstance(tags, Mapping) or not tags or len(tags) > 50:
        raise _bad(hint, "tags must be a mapping of 1 to 50 tags")
    for key, value in tags.items():
        if not isinstance(key, str) or not 1 <= len(key) <= 128 or key.lower().startswith("aws:"):
            raise _bad(hint, f"tag key {key!r} is not allowed (1-128 characters, not aws:)")
        if not isinstance(value, str) or len(value) > 256:
            raise _bad(hint, f"tag {key!r}: value must be a string of at most 256 characters")
    pairs = [{"Key": k, "Value": tags[k]} for k in sorted(tags)]
    text = ", ".join(f"{p['Key']}={p['Value']}" for p in pairs)
    return PlannedCall("ec2", "CreateTags", {"Resources": [instance_id], "Tags": pairs}, hint["action"],
                       f"tag {instance_id} with {text}")


def _hyperpod_node(operation: str, verb: str) -> Callable[[Mapping[str, Any], str], PlannedCall]:
    def build(hint: Mapping[str, Any], check_id: str) -> PlannedCall:
        cluster = _id(hint, "cluster_name", _HYPERPOD_CLUSTER)
        node = _id(hint, "node_id", _INSTANCE_ID)
        return PlannedCall("sagemaker", operation, {"ClusterName": cluster, "NodeIds": [node]}, hint["action"],
                           f"{verb} HyperPod node {node} of {cluster}")

    return build


def _ec2_call(operation: str, params_of: Callable[[Mapping[str, Any]], tuple[dict[str, Any], str]]
              ) -> Callable[[Mapping[str, Any], str], PlannedCall]:
    def build(hint: Mapping[str, Any], check_id: str) -> PlannedCall:
        try:
            params, summary = params_of(hint)
        except HintError as exc:
            raise _bad(hint, str(exc)) from None
        return PlannedCall("ec2", operation, params, hint["action"], summary)

    return build


# Scheduler node names: Slurm's NodeName characters; a Kubernetes node name is a DNS subdomain (RFC 1123).
_SLURM_NODE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_K8S_NODE = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
SLURM_SERVICE, KUBERNETES_SERVICE = "slurm", "kubernetes"
SCHEDULER_SERVICES = frozenset({SLURM_SERVICE, KUBERNETES_SERVICE})
MAX_DRAIN_REASON = 256


def _slurm_node(state: str) -> Callable[[Mapping[str, Any], str], PlannedCall]:
    """scontrol update NodeName=N State=DRAIN|RESUME [Reason=R] (or slurmrestd's node update): the values
    travel as argv items or a JSON body, never through a shell."""

    def build(hint: Mapping[str, Any], check_id: str) -> PlannedCall:
        node = _id(hint, "node", _SLURM_NODE)
        params: dict[str, Any] = {"NodeName": node, "State": state}
        if state == "DRAIN":
            reason = hint.get("reason")
            if not isinstance(reason, str) or not reason.strip() or len(reason) > MAX_DRAIN_REASON \
                    or any(c in reason for c in "\r\n\0"):
                raise _bad(hint, f"reason must be one line of 1 to {MAX_DRAIN_REASON} characters (Slurm requires one "
                                 "to drain)")
            params["Reason"] = reason
            return PlannedCall(SLURM_SERVICE, "UpdateNode", params, hint["action"],
                               f"drain Slurm node {node} (reason: {reason})")
        return PlannedCall(SLURM_SERVICE, "UpdateNode", params, hint["action"], f"resume Slurm node {node}")

    return build


def _k8s_cordon(unschedulable: bool, evict: bool = False) -> Callable[[Mapping[str, Any], str], PlannedCall]:
    """PATCH /api/v1/nodes/{name} spec.unschedulable, what kubectl cordon/uncordon send; a drain then evicts the
    node's pods through the Eviction API (PodDisruptionBudgets apply), DaemonSet pods left, as kubectl drain
    --ignore-daemonsets does."""

    def build(hint: Mapping[str, Any], check_id: str) -> PlannedCall:
        node = _id(hint, "node", _K8S_NODE)
        verb = "drain" if evict else "cordon" if unschedulable else "uncordon"
        params: dict[str, Any] = {"name": node, "unschedulable": unschedulable}
        if evict:
            params["evict"] = True
        return PlannedCall(KUBERNETES_SERVICE, "PatchNode", params, hint["action"], f"{verb} Kubernetes node {node}")

    return build


_SG_READS = ("ec2:DescribeSecurityGroups", "ec2:DescribeSecurityGroupRules")
_HYPERPOD_BUSY = frozenset({"InstanceIdInUse"})

ACTIONS: dict[str, ActionSpec] = {
    spec.name: spec
    for spec in (
        ActionSpec("authorize-security-group-ingress", "ec2", "AuthorizeSecurityGroupIngress",
                   _security_group_rule(egress=False), "arn:aws:ec2:*:*:security-group/*", dry_run=True,
                   duplicate_codes=frozenset({"InvalidPermission.Duplicate"}), read_actions=_SG_READS),
        ActionSpec("authorize-security-group-egress", "ec2", "AuthorizeSecurityGroupEgress",
                   _security_group_rule(egress=True), "arn:aws:ec2:*:*:security-group/*", dry_run=True,
                   duplicate_codes=frozenset({"InvalidPermission.Duplicate"}), read_actions=_SG_READS),
        ActionSpec("create-network-acl-entry", "ec2", "CreateNetworkAclEntry", _network_acl_entry,
                   "arn:aws:ec2:*:*:network-acl/*", dry_run=True,
                   duplicate_codes=frozenset({"NetworkAclEntryAlreadyExists"}),
                   read_actions=("ec2:DescribeNetworkAcls",)),
        ActionSpec("create-route", "ec2", "CreateRoute", _ec2_call("CreateRoute", route_params),
                   "arn:aws:ec2:*:*:route-table/*", dry_run=True, duplicate_codes=frozenset({"RouteAlreadyExists"}),
                   read_actions=("ec2:DescribeRouteTables",)),
        ActionSpec("replace-route", "ec2", "ReplaceRoute", _ec2_call("ReplaceRoute", route_params),
                   "arn:aws:ec2:*:*:route-table/*", dry_run=True, read_actions=("ec2:DescribeRouteTables",),
                   destructive=True),
        # Authorised on the endpoint and on each route table it adds: no single resource pattern fits.
        ActionSpec("modify-vpc-endpoint", "ec2", "ModifyVpcEndpoint", _ec2_call("ModifyVpcEndpoint", endpoint_params),
                   dry_run=True, read_actions=("ec2:DescribeVpcEndpoints",)),
        ActionSpec("tag-instance", "ec2", "CreateTags", _tag_instance, "arn:aws:ec2:*:*:instance/*",
                   dry_run=True, read_actions=("ec2:DescribeTags",), destructive=True),  # overwrites a value
        ActionSpec("reboot-hyperpod-node", "sagemaker", "BatchRebootClusterNodes",
                   _hyperpod_node("BatchRebootClusterNodes", "reboot"), "arn:aws:sagemaker:*:*:cluster/*",
                   asynchronous=True, duplicate_codes=_HYPERPOD_BUSY, read_actions=("sagemaker:ListClusterNodes",),
                   destructive=True, idempotent=False),
        ActionSpec("replace-hyperpod-node", "sagemaker", "BatchReplaceClusterNodes",
                   _hyperpod_node("BatchReplaceClusterNodes", "replace"), "arn:aws:sagemaker:*:*:cluster/*",
                   asynchronous=True, duplicate_codes=_HYPERPOD_BUSY, read_actions=("sagemaker:ListClusterNodes",),
                   destructive=True, idempotent=False),
        # Through the cluster's scheduler (scheduler.* in the config), not AWS: no DryRun, verified by reading the
        # node's state back; running jobs are left to finish (a Slurm drain and a cordon stop new work only).
        ActionSpec("drain-slurm-node", SLURM_SERVICE, "UpdateNode", _slurm_node("DRAIN"), destructive=True),
        ActionSpec("resume-slurm-node", SLURM_SERVICE, "UpdateNode", _slurm_node("RESUME"), destructive=True),
        ActionSpec("cordon-k8s-node", KUBERNETES_SERVICE, "PatchNode", _k8s_cordon(True), destructive=True),
        ActionSpec("uncordon-k8s-node", KUBERNETES_SERVICE, "PatchNode", _k8s_cordon(False), destructive=True),
        ActionSpec("drain-k8s-node", KUBERNETES_SERVICE, "PatchNode", _k8s_cordon(True, evict=True),
                   destructive=True),
    )
}


def spec_for(call: PlannedCall) -> ActionSpec:
    return ACTIONS[call.action]


def specs_for_iam_action(iam_action: str) -> list[ActionSpec]:
    return [s for s in ACTIONS.values() if s.iam_action == iam_action]


def build_call(hint: Mapping[str, Any], check_id: str, finding_id: str) -> PlannedCall | None:
    """The call a hint asks for; ``None`` for an action this fmdoctor does not know (left to the runbook)."""
    if not isinstance(hint, Mapping):
        raise RemediationError(f"invalid fix hint {hint!r}: not a mapping")
    spec = ACTIONS.get(str(hint.get("action")))
    if spec is None:
        return None
    call = spec.build(hint, check_id)
    return PlannedCall(call.service, call.operation, call.params, call.action, call.summary, (finding_id,))


def has_automated_fix(evidence: Mapping[str, Any]) -> bool:
    """Whether a finding's evidence carries a fix hint of an action this fmdoctor can take (:data:`ACTIONS`):
    the one test of "offer ``fmdoctor fix``" every front end and the incidents use. A hint of an unknown action
    is left to the runbook by :func:`build_call`, so it offers no fix."""
    hints = evidence.get("fix")
    return isinstance(hints, list) and any(isinstance(h, Mapping) and h.get("action") in ACTIONS for h in hints)
