"""``fmdoctor runbook list`` and ``fmdoctor runbook show ID [--finding JSON|@FILE|-]``."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from fmdoctor.cli.json_input import read_json_arg
from fmdoctor.engine.errors import UsageError
from fmdoctor.safety.text import dumps_json

if TYPE_CHECKING:
    from fmdoctor.config import Settings
    from fmdoctor.runbooks import Runbook


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("runbook", help="list runbooks, or show one filled in from a finding")
    sub = parser.add_subparsers(dest="runbook_command", metavar="COMMAND")
    sub.required = True
    listing = sub.add_parser("list", help="every runbook: id, severity, title, the checks it answers")
    listing.add_argument("--format", choices=["text", "json"], default="text")
    listing.add_argument("--config", help="fmdoctor.yaml to read (its runbooks_dir adds or overrides runbooks)")
    listing.set_defaults(func=run_list)
    show = sub.add_parser("show", help="a runbook as Markdown, filled in from a finding's evidence",
                          description="Show a runbook. With --finding, every command carries the real ids from the "
                          "finding; without, the runbook marks each value it needs as ⟨evidence.KEY⟩.")
    show.add_argument("id", metavar="ID", help="runbook id (the 'runbook' of a finding)")
    show.add_argument("--finding", metavar="JSON",
                      help="a finding, or a whole 'fmdoctor check --format json' report (the findings of this "
                      "runbook are picked): a JSON string, @FILE, or - for stdin")
    show.add_argument("--resource", help="with a report, only the finding on this resource")
    show.add_argument("--cluster", help="cluster name used in the commands (default: the report's, the config's)")
    show.add_argument("--region", help="region used in the commands (default: the report's, the config's)")
    show.add_argument("--config", help="fmdoctor.yaml to read")
    show.add_argument("--format", choices=["markdown", "json"], default="markdown")
    show.add_argument("--demo", action="store_true",
                      help="the finding is the demo's (a demo report's JSON says so itself): its fix commands carry "
                      "--demo")
    show.set_defaults(func=run_show)


def run_list(args: argparse.Namespace) -> int:
    from fmdoctor.config import load_settings
    from fmdoctor.runbooks import list_runbooks

    runbooks = list_runbooks(load_settings(args.config))
    if args.format == "json":
        sys.stdout.write(json.dumps([r.to_json_dict() for r in runbooks], indent=2) + "\n")
        return 0
    for runbook in runbooks:
        tags = [runbook.severity.value] + (["automated fix"] if runbook.automated else [])
        sys.stdout.write(f"{runbook.id}  [{', '.join(tags)}]\n    {runbook.title}\n")
        sys.stdout.write(f"    checks: {', '.join(runbook.checks)}\n")
        if not runbook.builtin:
            sys.stdout.write(f"    from {runbook.source}\n")
    return 0


def run_show(args: argparse.Namespace) -> int:
    from fmdoctor.config import load_settings
    from fmdoctor.runbooks import get_runbook

    settings = load_settings(args.config)
    runbook = get_runbook(args.id, settings)
    report: Mapping[str, Any] = {}
    findings: list[dict[str, Any]] | None = None
    if args.finding is not None:
        data = read_json_arg(args.finding, "--finding")
        report = data if isinstance(data, Mapping) and "findings" in data else {}
        findings = _findings_for(runbook, data, args.resource)
    cluster = args.cluster or report.get("cluster") or os.environ.get("FMDOCTOR_CLUSTER") or settings.default_cluster()
    region = args.region or report.get("region") or _configured_region(settings, cluster)
    # a demo report's JSON says so; a finding taken out of one does not, so --demo says it
    demo = args.demo or bool(report.get("demo"))
    if findings is None:
        texts = [runbook.render(None, cluster=cluster, region=region, demo=demo)]
    else:
        texts = [runbook.render(f, cluster=cluster, region=region, demo=demo) for f in findings]
    if args.format == "json":
        sys.stdout.write(dumps_json({**runbook.to_json_dict(), "markdown": texts}, indent=2) + "\n")
    elif sys.stdout.isatty():  # a person reads it: rendered (headings, lists, code blocks); a pipe gets the Markdown
        from rich.markdown import Markdown

        from fmdoctor.report.text import make_console

        make_console(sys.stdout).print(Markdown("\n\n---\n\n".join(texts)))
    else:
        sys.stdout.write("\n---\n\n".join(texts))
    return 0


def _findings_for(runbook: Runbook, data: Any, resource: str | None) -> list[dict[str, Any]]:
    """The findings this runbook answers, from a finding, a list of findings or a whole report."""
    if isinstance(data, Mapping) and isinstance(data.get("findings"), list):
        candidates, source = data["findings"], "the report"
    elif isinstance(data, list):
        candidates, source = data, "the list"
    elif isinstance(data, Mapping):
        candidates, source = [data], "the finding"
    else:
        raise UsageError("--finding must be a finding object, a list of findings or a check report")
    if any(not isinstance(c, Mapping) for c in candidates):
        raise UsageError(f"--finding: {source} holds something that is not a finding object")
    mine = [dict(c) for c in candidates if c.get("runbook") == runbook.id or c.get("check") in runbook.checks]
    if resource is not None:
        mine = [c for c in mine if c.get("resource") == resource]
    if not mine:
        found = sorted({f"{c.get('check')} ({c.get('runbook')})" for c in candidates})
        what = f" on {resource}" if resource else ""
        raise UsageError(f"{source} has no finding for runbook {runbook.id}{what}",
                         hint=f"it has: {', '.join(found)}" if found else "it has no findings at all")
    return mine


def _configured_region(settings: Settings, cluster: str | None) -> str | None:
    env = os.environ.get("FMDOCTOR_REGION") or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if env:
        return env
    if cluster and cluster in settings.clusters and settings.clusters[cluster].region:
        return settings.clusters[cluster].region
    return settings.region
