"""``fmdoctor fix``: plan -> pre-flight -> approve -> apply -> verify, every step in the audit log.

Exit status: 0 the fix was applied and verified (or there was nothing to fix, or --dry-run found the
plan permitted); 2 it failed, was declined or denied, or the finding is still there; 3 it could not run,
including no --yes and no terminal to ask on.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from fmdoctor.cli.common import add_connection_args, add_target_args, open_target
from fmdoctor.cli.confirm import confirm
from fmdoctor.cli.json_input import read_json_arg
from fmdoctor.engine.errors import UsageError

if TYPE_CHECKING:
    from fmdoctor.remediation.approval import Approval
    from fmdoctor.remediation.audit import AuditLog
    from fmdoctor.remediation.plan import FixPlan

FIXED, NOT_FIXED = 0, 2


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "fix",
        help="fix a check's findings: plan, pre-flight, approve, apply, verify",
        description="Plan the API calls that fix a check's findings, prove the permissions with EC2 DryRun, ask "
        "for approval (or --yes), apply them, then re-run the check. Every step goes to the audit log. Exit "
        "status: 0 fixed and verified (or nothing to fix), 2 not fixed, 3 could not run.",
    )
    add_target_args(parser)
    add_connection_args(parser)
    parser.add_argument("--check", required=True, metavar="CHECK_ID", help="the check whose findings to fix")
    parser.add_argument("--resource", metavar="ID", help="only the finding on this resource")
    parser.add_argument("--report", metavar="FILE",
                        help="only findings of this 'fmdoctor check --format json' report (- for stdin) that "
                        "are still raised")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="stop after the plan and the pre-flight")
    mode.add_argument("--yes", action="store_true", help="approve without asking (automation)")
    parser.add_argument("--audit-log", metavar="FILE",
                        help="JSONL audit log (default: $FMDOCTOR_AUDIT_LOG, else "
                        "$XDG_STATE_HOME/fmdoctor/audit.jsonl, ~/.local/state/fmdoctor/audit.jsonl)")
    parser.add_argument("--format", choices=["text", "json"], default="text")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from fmdoctor.engine.registry import default_registry
    from fmdoctor.remediation.apply import apply_fix
    from fmdoctor.remediation.audit import AuditLog
    from fmdoctor.remediation.plan import plan_fix
    from fmdoctor.remediation.preflight import preflight
    from fmdoctor.report.fix import plan_lines, preflight_lines, result_lines

    default_registry().get(args.check)  # an unknown check id: exit 3 before the demo is seeded or AWS is called
    report = read_json_arg(args.report, "--report", allow_inline=False) if args.report else None
    audit = AuditLog(args.audit_log)
    out = _Output(args.format)
    with open_target(args) as target:
        doctor = target.doctor
        plan = plan_fix(doctor, target.cluster, args.check, resource=args.resource, report=report, audit=audit)
        out.section("plan", plan.to_json_dict(), plan_lines(plan))
        if plan.empty:
            nothing_left = not plan.findings and not plan.manual and not plan.unverified
            return out.done(FIXED if nothing_left else NOT_FIXED)
        checked = preflight(doctor, plan, audit=audit)
        out.section("preflight", checked.to_json_dict(), preflight_lines(checked))
        if not checked.passed:
            out.say("not applying: the pre-flight shows it would fail")
            return out.done(NOT_FIXED)
        if args.dry_run:
            out.say("--dry-run: nothing was changed")
            return out.done(FIXED)
        approval = _approve(plan, args.yes, audit)
        if approval is None:
            out.say("declined: nothing was changed")
            return out.done(NOT_FIXED)
        result = apply_fix(doctor, plan, approval, audit=audit)
        out.section("result", result.to_json_dict(), result_lines(result))
        out.say(f"audit log: {audit.path}")
        return out.done(FIXED if result.ok else NOT_FIXED)


def _approve(plan: FixPlan, yes: bool, audit: AuditLog) -> Approval | None:
    """--yes, or a y/N question on the terminal; with neither, refuse (exit 3) before anything changes."""
    from fmdoctor.remediation.approval import Approval
    from fmdoctor.remediation.audit import local_user, plan_fields, who

    user = local_user()
    if yes:
        return Approval.grant(plan, approver=user, channel="cli --yes")
    if not sys.stdin.isatty():
        audit.record("approval-refused", **plan_fields(plan), who=who(plan.identity), outcome="refused",
                     reason="no --yes and no terminal to ask on")
        raise UsageError("refusing to change AWS without approval: there is no terminal to ask on",
                         hint="re-run with --yes to approve this plan, or --dry-run to only plan and pre-flight")
    if confirm(plan):
        return Approval.grant(plan, approver=user, channel="terminal")
    audit.record("declined", **plan_fields(plan), who=who(plan.identity), outcome="declined",
                 approver=user, channel="terminal")
    return None


class _Output:
    """Text as each step happens (a person watches it), or one JSON object at the end (a machine reads it)."""

    def __init__(self, fmt: str):
        self.json = fmt == "json"
        self.data: dict[str, Any] = {}
        self.messages: list[str] = []

    def section(self, name: str, data: dict[str, Any], lines: list[str]) -> None:
        self.data[name] = data
        if not self.json:
            sys.stdout.write("\n".join(lines) + "\n")
            sys.stdout.flush()

    def say(self, message: str) -> None:
        self.messages.append(message)
        if not self.json:
            sys.stdout.write(message + "\n")

    def done(self, code: int) -> int:
        if self.json:
            sys.stdout.write(json.dumps({**self.data, "messages": self.messages, "exit": code}, indent=2,
                                        default=str) + "\n")
        return code
