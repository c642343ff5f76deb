"""Fix buttons: a confirm dialog with the exact plan, then apply, only for configured approvers.

1. "Fix" on a finding: the clicker must be an approver (else refused, audited, told privately). A modal
   opens at once (Slack's trigger ids expire in 3 s), then shows the plan (``plan_fix``) and its DryRun
   pre-flight; its "Approve and apply" button exists only when the pre-flight passed.
2. Submitting the modal: the submitter is checked again (the authoritative check; a crafted payload gets
   no further), the plan is recomputed from the current state and must have the digest that was shown,
   then ``Approval.grant(plan, approver=<Slack user id>, channel="slack")`` and ``apply_fix``: the audit
   log records the approval with the Slack user id. The result is posted where the finding was.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from fmdoctor.engine.errors import FmdoctorError
from fmdoctor.remediation.apply import apply_fix
from fmdoctor.remediation.approval import Approval
from fmdoctor.remediation.audit import record_decision, who
from fmdoctor.remediation.plan import FixPlan, plan_fix
from fmdoctor.remediation.preflight import PreflightResult, preflight
from fmdoctor.report.fix import plan_lines, preflight_lines, result_lines
from fmdoctor.slack import blocks
from fmdoctor.slack.auth import pick_cluster
from fmdoctor.slack.service import SlackService, Where

log = logging.getLogger(__name__)


def _view(title: str, body: list[blocks.Block], metadata: dict[str, Any] | None = None,
          submit: str | None = None) -> dict[str, Any]:
    view: dict[str, Any] = {"type": "modal", "callback_id": blocks.FIX_CALLBACK,
                            "title": {"type": "plain_text", "text": title[:24]},
                            "close": {"type": "plain_text", "text": "Cancel"}, "blocks": body[:100]}
    if metadata is not None:
        view["private_metadata"] = json.dumps(metadata, separators=(",", ":"))
    if submit:
        view["submit"] = {"type": "plain_text", "text": submit[:24]}
    return view


def plan_view(plan: FixPlan, checked: PreflightResult | None, metadata: dict[str, Any]) -> dict[str, Any]:
    body = blocks.code_sections("\n".join(plan_lines(plan)))
    if checked is not None:
        body += blocks.code_sections("\n".join(preflight_lines(checked)))
    if plan.empty:
        return _view("fmdoctor fix", body + [blocks.context("Nothing to apply.")])
    if checked is None or not checked.passed:
        return _view("fmdoctor fix", body + [blocks.context("Not applicable: the pre-flight shows it would fail.")])
    body.append(blocks.context(f"Applying changes {plan.cluster} ({plan.region}) with plan "
                               f"`{plan.digest[:12]}`. Your approval is audited with your Slack user id."))
    return _view("fmdoctor fix", body, {**metadata, "digest": plan.digest}, submit="Approve and apply")


class FixFlow:
    def __init__(self, service: SlackService):
        self.service = service

    def refuse(self, user: str, channel: str | None, cluster: str | None, check: str | None, reason: str,
               digest: str | None = None) -> None:
        """Audit the refusal and tell only the person who asked."""
        self.service.audit.record("approval-refused", cluster=cluster, check=check, plan_digest=digest,
                                  who=who(None), approver=user, channel="slack", outcome="refused", reason=reason)
        if channel:
            self.service.client.chat_postEphemeral(channel=channel, user=user, text=f":no_entry: {reason}")

    def open(self, body: dict[str, Any]) -> None:
        """The Fix button: authorize, open the dialog, then fill it with the plan and its pre-flight."""
        service = self.service
        user = body["user"]["id"]
        channel = (body.get("channel") or {}).get("id")
        value = json.loads(body["actions"][0]["value"])
        cluster = pick_cluster(service.settings, channel, value.get("cluster"))
        check, resource = value["check"], value.get("resource")
        if not service.approvers.allows(user):
            self.refuse(user, channel, cluster, check, "you are not on the fix approvers list (slack.approvers)")
            return
        opened = service.client.views_open(trigger_id=body["trigger_id"], view=_view(
            "fmdoctor fix", [blocks.section(f":hourglass_flowing_sand: Planning the fix for `{check}` on "
                                            f"`{blocks.escape(resource or cluster)}`…")]))
        view_id = opened["view"]["id"]
        message = body.get("message") or {}
        metadata = {"cluster": cluster, "check": check, "resource": resource, "channel": channel,
                    "thread_ts": message.get("thread_ts") or message.get("ts")}
        try:
            plan = plan_fix(service.doctor, cluster, check, resource=resource, audit=service.audit)
            checked = preflight(service.doctor, plan, audit=service.audit) if not plan.empty else None
        except FmdoctorError as exc:  # cannot plan (state unreadable, unknown check): say so in the dialog
            hint = f"\n_{blocks.escape(exc.hint)}_" if exc.hint else ""
            service.client.views_update(view_id=view_id, view=_view("fmdoctor fix", [
                blocks.section(f":x: {blocks.escape(exc.message)}{hint}")]))
            return
        service.client.views_update(view_id=view_id, view=plan_view(plan, checked, metadata))

    def submit(self, body: dict[str, Any]) -> None:
        """The dialog's "Approve and apply": authorize again, re-plan, compare digests, approve, apply."""
        service = self.service
        user = body["user"]["id"]
        meta = json.loads(body["view"].get("private_metadata") or "{}")
        channel, digest = meta.get("channel"), meta.get("digest")
        cluster = pick_cluster(service.settings, channel, meta.get("cluster"))
        check = meta["check"]
        if not service.approvers.allows(user):
            self.refuse(user, channel, cluster, check, "you are not on the fix approvers list (slack.approvers)",
                        digest)
            return
        where = Where(channel, meta.get("thread_ts"))
        plan = plan_fix(service.doctor, cluster, check, resource=meta.get("resource"), audit=service.audit)
        if plan.empty or plan.digest != digest:
            self.refuse(user, channel, cluster, check, "the plan changed since it was shown (or there is nothing "
                        "left to apply); nothing was changed: press Fix again", digest)
            return
        checked = preflight(service.doctor, plan, audit=service.audit)
        if not checked.passed:
            record_decision(service.doctor, "refused", "the pre-flight shows it would fail", plan=plan, approver=user,
                            channel="slack", audit=service.audit)
            service.post(where, blocks.text_messages(
                ":x: not applying: the pre-flight shows it would fail", "\n".join(preflight_lines(checked))))
            return
        approval = Approval.grant(plan, approver=user, channel="slack")
        result = apply_fix(service.doctor, plan, approval, audit=service.audit)
        mark = ":white_check_mark: fixed and verified" if result.ok else ":x: not fixed"
        title = f"{mark}: `{check}` on {blocks.escape(cluster)}, approved by <@{user}>"
        service.post(where, blocks.text_messages(title, "\n".join(result_lines(result)), service.settings.max_blocks))
