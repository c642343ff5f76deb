"""Recompute a plan from the current state: drop calls whose change is already in place, flag conflicts.

This is what makes ``fmdoctor fix`` idempotent before it calls anything: a second run finds the rule,
entry or tag already there and plans nothing. Reads are batched (one describe per kind, not per call).
A read that fails leaves the call in the plan with a warning; applying it is still safe, because every
action treats "already exists" as done.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from fmdoctor.engine.aws import Aws
from fmdoctor.engine.discovery import FILTER_VALUES_MAX, fetch_security_groups
from fmdoctor.engine.errors import describe_aws_failure
from fmdoctor.engine.inventory import SgRule, chunked
from fmdoctor.remediation.actions import PlannedCall
from fmdoctor.remediation.route_actions import judge_endpoints, judge_routes

# HyperPod node states in which a reboot or replacement is already under way (or the node is gone).
HYPERPOD_IN_PROGRESS = frozenset({"Pending", "ShuttingDown", "SystemUpdating", "DeepHealthCheckInProgress",
                                  "DetachInProgress", "AttachInProgress"})
HYPERPOD_BATCH_MAX = 25


@dataclass
class Reconciled:
    calls: list[PlannedCall] = field(default_factory=list)  # still needed
    satisfied: list[tuple[PlannedCall, str]] = field(default_factory=list)  # already in place, and why we know
    conflicts: list[tuple[PlannedCall, str]] = field(default_factory=list)  # cannot be applied as planned
    warnings: list[str] = field(default_factory=list)


Verdict = tuple[str, str] | None  # ("satisfied" | "conflict", reason), or None: the call is needed


def reconcile(aws: Aws, calls: Sequence[PlannedCall]) -> Reconciled:
    out = Reconciled()
    by_operation: dict[str, list[PlannedCall]] = defaultdict(list)
    for call in calls:
        by_operation[call.operation].append(call)
    for operation, group in by_operation.items():
        judge = _JUDGES.get(operation)
        verdicts: dict[int, Verdict] = {}
        if judge is not None:
            try:
                verdicts = judge(aws, group)
            except Exception as exc:
                failure = describe_aws_failure(exc)
                if failure is None:
                    raise
                action = f", {failure.iam_action}" if failure.iam_action else ""
                out.warnings.append(f"could not read the current state for {operation} ({failure.code}{action}): "
                                    "planned from the finding alone; an existing change is treated as done")
        for index, call in enumerate(group):
            verdict = verdicts.get(index)
            if verdict is None:
                out.calls.append(call)
            elif verdict[0] == "satisfied":
                out.satisfied.append((call, verdict[1]))
            else:
                out.conflicts.append((call, verdict[1]))
    out.calls = merge_hyperpod_batches(out.calls)
    return out


def _security_group_rules(aws: Aws, calls: list[PlannedCall]) -> dict[int, Verdict]:
    groups = fetch_security_groups(aws.client("ec2"), sorted({c.params["GroupId"] for c in calls}))
    verdicts: dict[int, Verdict] = {}
    for index, call in enumerate(calls):
        group = groups.get(call.params["GroupId"])
        if group is None:
            verdicts[index] = ("conflict", f"security group {call.params['GroupId']} no longer exists")
            continue
        egress = call.operation == "AuthorizeSecurityGroupEgress"
        wanted = call.params["IpPermissions"][0]
        existing = next((r for r in group.rules if r.egress == egress and _same_rule(r, wanted)), None)
        if existing is not None:
            verdicts[index] = ("satisfied", f"already present as {existing.describe()}")
    return verdicts


def _same_rule(rule: SgRule, permission: dict[str, Any]) -> bool:
    """AWS's own duplicate test: same protocol, ports and peer (descriptions do not count)."""
    if rule.protocol != permission["IpProtocol"]:
        return False
    if rule.protocol != "-1" and (rule.from_port, rule.to_port) != (permission["FromPort"], permission["ToPort"]):
        return False
    peers = {
        "UserIdGroupPairs": ("GroupId", rule.referenced_group_id),
        "IpRanges": ("CidrIp", rule.cidr_ipv4),
        "Ipv6Ranges": ("CidrIpv6", rule.cidr_ipv6),
        "PrefixListIds": ("PrefixListId", rule.prefix_list_id),
    }
    for key, (item, have) in peers.items():
        if key in permission:
            return bool(permission[key][0][item] == have)
    return False


def _network_acl_entries(aws: Aws, calls: list[PlannedCall]) -> dict[int, Verdict]:
    ec2 = aws.client("ec2")
    entries: dict[str, list[dict[str, Any]]] = {}
    for batch in chunked(sorted({c.params["NetworkAclId"] for c in calls}), FILTER_VALUES_MAX):
        pages = ec2.get_paginator("describe_network_acls").paginate(Filters=[{"Name": "network-acl-id",
                                                                             "Values": batch}])
        for page in pages:
            for acl in page.get("NetworkAcls", []):
                entries[acl["NetworkAclId"]] = acl.get("Entries", [])
    verdicts: dict[int, Verdict] = {}
    for index, call in enumerate(calls):
        p = call.params
        if p["NetworkAclId"] not in entries:
            verdicts[index] = ("conflict", f"network ACL {p['NetworkAclId']} no longer exists")
            continue
        taken = next((e for e in entries[p["NetworkAclId"]]
                      if e.get("RuleNumber") == p["RuleNumber"] and bool(e.get("Egress")) == p["Egress"]), None)
        if taken is None:
            continue
        if _same_entry(taken, p):
            verdicts[index] = ("satisfied", f"entry {p['RuleNumber']} is already in place")
        else:
            verdicts[index] = ("conflict", f"rule number {p['RuleNumber']} is already used by a different entry "
                                           f"({_entry_text(taken)}); pick a free number")
    return verdicts


def _same_entry(entry: dict[str, Any], params: dict[str, Any]) -> bool:
    wanted_range = params.get("PortRange")
    have_range = entry.get("PortRange")
    same_ports = wanted_range is None or (have_range is not None and
                                          (have_range.get("From"), have_range.get("To")) ==
                                          (wanted_range["From"], wanted_range["To"]))
    return (str(entry.get("Protocol")) == params["Protocol"] and entry.get("RuleAction") == params["RuleAction"]
            and entry.get("CidrBlock") == params.get("CidrBlock")
            and entry.get("Ipv6CidrBlock") == params.get("Ipv6CidrBlock") and same_ports)


def _entry_text(entry: dict[str, Any]) -> str:
    ports = entry.get("PortRange")
    port_text = f" ports {ports.get('From')}-{ports.get('To')}" if ports else ""
    return (f"{entry.get('RuleAction')} protocol {entry.get('Protocol')}{port_text} "
            f"{entry.get('CidrBlock') or entry.get('Ipv6CidrBlock')}")


def _instance_tags(aws: Aws, calls: list[PlannedCall]) -> dict[int, Verdict]:
    ec2 = aws.client("ec2")
    tags: dict[str, dict[str, str]] = defaultdict(dict)
    instance_ids = sorted({r for c in calls for r in c.params["Resources"]})
    for batch in chunked(instance_ids, FILTER_VALUES_MAX):
        for page in ec2.get_paginator("describe_tags").paginate(Filters=[{"Name": "resource-id", "Values": batch}]):
            for tag in page.get("Tags", []):
                tags[tag["ResourceId"]][tag["Key"]] = tag.get("Value", "")
    verdicts: dict[int, Verdict] = {}
    for index, call in enumerate(calls):
        have = tags.get(call.params["Resources"][0], {})
        if all(have.get(t["Key"]) == t["Value"] for t in call.params["Tags"]):
            verdicts[index] = ("satisfied", "the instance already has these tags")
    return verdicts


def _hyperpod_nodes(aws: Aws, calls: list[PlannedCall]) -> dict[int, Verdict]:
    sagemaker = aws.client("sagemaker")
    status: dict[str, dict[str, str]] = {}
    for cluster in sorted({c.params["ClusterName"] for c in calls}):
        nodes: dict[str, str] = {}
        for page in sagemaker.get_paginator("list_cluster_nodes").paginate(ClusterName=cluster):
            for node in page.get("ClusterNodeSummaries", []):
                nodes[node["InstanceId"]] = (node.get("InstanceStatus") or {}).get("Status", "")
        status[cluster] = nodes
    verdicts: dict[int, Verdict] = {}
    for index, call in enumerate(calls):
        node_id = call.params["NodeIds"][0]
        state = status[call.params["ClusterName"]].get(node_id)
        if state is None:
            verdicts[index] = ("satisfied", f"node {node_id} is no longer in the cluster (already replaced?)")
        elif state in HYPERPOD_IN_PROGRESS:
            verdicts[index] = ("satisfied", f"node {node_id} is {state}: a reboot or replacement is under way")
    return verdicts


def merge_hyperpod_batches(calls: Iterable[PlannedCall]) -> list[PlannedCall]:
    """One Batch*ClusterNodes call per cluster and operation (25 nodes at most), not one per node."""
    merged: list[PlannedCall] = []
    batches: dict[tuple[str, str], list[PlannedCall]] = defaultdict(list)
    for call in calls:
        if call.service == "sagemaker" and call.operation.startswith("Batch"):
            batches[(call.operation, call.params["ClusterName"])].append(call)
        else:
            merged.append(call)
    for (operation, cluster), group in batches.items():
        for chunk in [group[i:i + HYPERPOD_BATCH_MAX] for i in range(0, len(group), HYPERPOD_BATCH_MAX)]:
            nodes = list(dict.fromkeys(n for c in chunk for n in c.params["NodeIds"]))
            findings = tuple(dict.fromkeys(f for c in chunk for f in c.findings))
            verb = "reboot" if operation == "BatchRebootClusterNodes" else "replace"
            what = f"HyperPod node{'' if len(nodes) == 1 else 's'} {', '.join(nodes)}"
            merged.append(PlannedCall("sagemaker", operation, {"ClusterName": cluster, "NodeIds": nodes},
                                      chunk[0].action, f"{verb} {what} of {cluster}", findings))
    return merged


_JUDGES: dict[str, Callable[[Aws, list[PlannedCall]], dict[int, Verdict]]] = {
    "AuthorizeSecurityGroupIngress": _security_group_rules,
    "AuthorizeSecurityGroupEgress": _security_group_rules,
    "CreateNetworkAclEntry": _network_acl_entries,
    "CreateTags": _instance_tags,
    "CreateRoute": judge_routes,
    "ReplaceRoute": judge_routes,
    "ModifyVpcEndpoint": judge_endpoints,
    "BatchRebootClusterNodes": _hyperpod_nodes,
    "BatchReplaceClusterNodes": _hyperpod_nodes,
}
