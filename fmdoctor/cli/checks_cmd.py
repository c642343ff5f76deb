"""``fmdoctor checks list``: the catalogue, with what each check proves and the IAM actions it needs."""

from __future__ import annotations

import argparse
import json
import sys
import textwrap

from fmdoctor.engine.registry import default_registry


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("checks", help="the check catalogue")
    sub = parser.add_subparsers(dest="checks_command", metavar="COMMAND")
    sub.required = True
    listing = sub.add_parser("list", help="list every check: id, severity, what it proves, IAM actions")
    listing.add_argument("--format", choices=["text", "json"], default="text")
    listing.set_defaults(func=run_list)


def catalogue() -> list[dict[str, object]]:
    return [
        {
            "id": c.id,
            "family": c.family,
            "severity": c.severity.value,
            "proves": c.proves(),
            "iam_actions": list(c.iam_actions),
            "runbook": c.runbook_id(),
        }
        for c in default_registry()
    ]


def run_list(args: argparse.Namespace) -> int:
    entries = catalogue()
    if args.format == "json":
        sys.stdout.write(json.dumps(entries, indent=2) + "\n")
        return 0
    for entry in entries:
        sys.stdout.write(f"{entry['id']}  [{entry['family']}, {entry['severity']}]\n")
        for line in textwrap.wrap(str(entry["proves"]), width=76):
            sys.stdout.write(f"    {line}\n")
        actions = ", ".join(entry["iam_actions"]) or "none (reads the node itself)"  # type: ignore[arg-type]
        for line in textwrap.wrap(f"IAM: {actions}", width=76, subsequent_indent="     ", break_on_hyphens=False):
            sys.stdout.write(f"    {line}\n")
        sys.stdout.write("\n")
    return 0
