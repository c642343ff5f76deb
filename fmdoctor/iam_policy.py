"""The least-privilege IAM policy fmdoctor needs, derived from what its checks and remediations declare.

Checks declare ``iam_actions`` (all reads); discovery adds what finding the checks' inventory parts calls.
A check's runbook declares ``remediation_iam_actions``: the mutating actions of its automated fix; each maps
to an :class:`~fmdoctor.remediation.actions.ActionSpec`, which adds the reads that recompute the plan and the
resource ARN pattern the action can be limited to.
Actions without resource-level permissions (EC2 and SageMaker describes/lists) get ``"Resource": "*"``.
``sts:GetCallerIdentity`` (who is applying a fix) needs no permission and is not listed.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from fmdoctor.engine.check import Check, inventory_parts
from fmdoctor.engine.discovery import discovery_iam_actions
from fmdoctor.remediation.actions import SCHEDULER_SERVICES, specs_for_iam_action
from fmdoctor.runbooks import Runbook

_SERVICE_NAMES = {"ec2": "Ec2", "s3": "S3", "sts": "Sts", "fsx": "Fsx", "sqs": "Sqs", "iam": "Iam",
                  "cloudwatch": "CloudWatch", "sagemaker": "SageMaker", "eks": "Eks", "ssm": "Ssm"}


def _resource_type(arn: str) -> str:
    if arn == "*":
        return ""
    tail = arn.split(":")[-1].split("/")[0]
    return "".join(part.capitalize() for part in re.split(r"[-_]", tail))


def iam_policy(checks: Iterable[Check], runbooks: Iterable[Runbook], remediation: bool = False,
               partition: str = "aws", extra: Iterable[tuple[str, str]] = ()) -> tuple[dict[str, Any], list[str]]:
    """``(policy, warnings)``: a policy document, one statement per service and resource pattern; ``extra``
    adds ``(action, resource)`` grants (e.g. :func:`serve_grants`)."""
    checks = list(checks)
    by_id = {r.id: r for r in runbooks}
    grants: dict[tuple[str, str], set[str]] = defaultdict(set)
    warnings: list[str] = []

    def grant(action: str, resource: str = "*") -> None:
        grants[(action.split(":", 1)[0], resource.replace("arn:aws:", f"arn:{partition}:", 1))].add(action)

    for action in discovery_iam_actions(inventory_parts(checks)):  # finding the target comes first
        grant(action)
    for check in checks:
        for action in check.iam_actions:
            grant(action)
    for action, resource in extra:
        grant(action, resource)
    if remediation:
        for check in checks:
            runbook = by_id.get(check.runbook_id())
            for action in runbook.remediation_iam_actions if runbook else ():
                specs = specs_for_iam_action(action)
                if specs and all(spec.service in SCHEDULER_SERVICES for spec in specs):
                    continue  # a permission in Slurm or Kubernetes (see the README's scheduler section), not IAM
                if not specs:
                    warnings.append(f"runbook {runbook.id} ({runbook.source}) declares {action}, which no fmdoctor "
                                    "remediation calls; left out")
                for spec in specs:
                    grant(spec.iam_action, spec.resource_arn)
                    for read in spec.read_actions:
                        grant(read)
    statements = []
    for (service, resource), actions in sorted(grants.items(), key=lambda kv: (kv[0][0], kv[0][1] != "*", kv[0][1])):
        sid = _SERVICE_NAMES.get(service, service.capitalize().replace("-", "")) + _resource_type(resource)
        statements.append({"Sid": sid, "Effect": "Allow", "Action": sorted(actions), "Resource": resource})
    return {"Version": "2012-10-17", "Statement": statements}, warnings


SERVE_QUEUE_ACTIONS = ("sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility", "sqs:SendMessage")


def queue_arn(queue_url: str | None, partition: str = "aws") -> str | None:
    """``https://sqs.REGION.amazonaws.com/ACCOUNT/NAME`` -> ``arn:PARTITION:sqs:REGION:ACCOUNT:NAME``."""
    match = re.match(r"^https://sqs\.([a-z0-9-]+)\.amazonaws\.com(?:\.cn)?/(\d{12})/([A-Za-z0-9_.-]+)$",
                     queue_url or "")
    return f"arn:{partition}:sqs:{match[1]}:{match[2]}:{match[3]}" if match else None


def serve_grants(queue_url: str | None, topic_arn: str | None, partition: str = "aws",
                 dedupe_table: str | None = None) -> tuple[list[tuple[str, str]], list[str]]:
    """What ``fmdoctor serve`` needs beyond its checks: its queue (receive, delete, extend and release
    visibility, and send for forwarded webhooks), its SNS topic, its shared dedupe table (get, conditional put,
    delete of one table's items), and DescribeInstances to find an instance's cluster from its tags.
    ``(grants, warnings)``."""
    warnings = []
    queue = queue_arn(queue_url, partition)
    if queue is None:
        queue = f"arn:{partition}:sqs:*:*:*"
        warnings.append("no serve.queue_url in the config: the SQS statement allows every queue; set it to "
                        "limit the policy to the one queue")
    grants = [(action, queue) for action in SERVE_QUEUE_ACTIONS]
    grants.append(("ec2:DescribeInstances", "*"))
    if topic_arn:
        grants.append(("sns:Publish", topic_arn))
    if dedupe_table:
        from fmdoctor.serve.dedupe import DEDUPE_ACTIONS

        _, _, _, region, account, _ = (queue.split(":", 5) + ["*"] * 6)[:6]
        table = f"arn:{partition}:dynamodb:{region}:{account}:table/{dedupe_table}"
        grants += [(action, table) for action in DEDUPE_ACTIONS]
    return grants, warnings
