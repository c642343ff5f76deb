"""``fmdoctor checks list``: the catalogue, with what each check proves and the IAM actions it needs.

The listing reads ``checks_catalogue.json``, generated from the registry and shipped with the package, so it
starts without importing every check (and pydantic, boto3 and the engine with them). A test regenerates it
and fails when it differs from the registry; after changing a check, regenerate it, with the docs' checks
page and the other generated docs, by ``python -m fmdoctor.cli.docs_gen`` (``python -m fmdoctor.cli.checks_cmd``
does the same).
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from pathlib import Path

CATALOGUE_FILE = Path(__file__).with_name("checks_catalogue.json")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("checks", help="the check catalogue")
    sub = parser.add_subparsers(dest="checks_command", metavar="COMMAND")
    sub.required = True
    listing = sub.add_parser("list", help="list every check: id, severity, what it proves, IAM actions")
    listing.add_argument("--format", choices=["text", "json"], default="text")
    listing.set_defaults(func=run_list)


def registry_catalogue() -> list[dict[str, object]]:
    """The catalogue from the registry itself: the source of truth ``checks_catalogue.json`` is generated from."""
    from fmdoctor.engine.registry import default_registry

    return [
        {
            "id": c.id,
            "family": c.family,
            "severity": c.severity.value,
            "proves": c.proves(),
            "iam_actions": list(c.iam_actions),
            "runbook": c.runbook_id(),
            "concerns": sorted(c.concerns),  # what a question may name that its findings can be about
        }
        for c in default_registry()
    ]


def catalogue_text(entries: list[dict[str, object]]) -> str:
    """The JSON of ``checks list --format json``, which is also the shipped file's exact content."""
    return json.dumps(entries, indent=2) + "\n"


def catalogue() -> list[dict[str, object]]:
    return json.loads(CATALOGUE_FILE.read_text(encoding="utf-8"))


def run_list(args: argparse.Namespace) -> int:
    if args.format == "json":
        sys.stdout.write(CATALOGUE_FILE.read_text(encoding="utf-8"))
        return 0
    for entry in catalogue():
        sys.stdout.write(f"{entry['id']}  [{entry['family']}, {entry['severity']}]\n")
        for line in textwrap.wrap(str(entry["proves"]), width=76):
            sys.stdout.write(f"    {line}\n")
        actions = ", ".join(entry["iam_actions"]) or "none (reads the node itself)"  # type: ignore[arg-type]
        for line in textwrap.wrap(f"IAM: {actions}", width=76, subsequent_indent="     ", break_on_hyphens=False):
            sys.stdout.write(f"    {line}\n")
        sys.stdout.write("\n")
    return 0


if __name__ == "__main__":  # regenerate the shipped catalogue and the generated docs pages from the code
    import runpy  # docs_gen imports this module: run it by name, so the two never import each other

    runpy.run_module("fmdoctor.cli.docs_gen", run_name="__main__", alter_sys=True)
