"""Where runbooks come from: the built-ins shipped in this package, then the user's ``runbooks_dir``.

A user runbook with the id of a built-in replaces it, so a team can keep its own procedure (its change
process, its Slurm partition names) under the same id every finding already names.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from fmdoctor.engine.errors import UsageError
from fmdoctor.runbooks.commands import lint_commands
from fmdoctor.runbooks.errors import RunbookError
from fmdoctor.runbooks.model import REQUIRED_SECTIONS, Runbook, parse_runbook

if TYPE_CHECKING:
    from fmdoctor.config import Settings
    from fmdoctor.engine.registry import Registry


@lru_cache(maxsize=1)
def builtin_runbooks() -> tuple[Runbook, ...]:
    """The runbooks shipped with fmdoctor (package data next to this module), parsed once per process."""
    found = []
    for entry in sorted(resources.files("fmdoctor.runbooks").iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".md") and entry.is_file():
            found.append(parse_runbook(entry.read_text(encoding="utf-8"), str(entry), builtin=True,
                                       stem=entry.name[:-3]))
    return tuple(found)


def user_runbooks_dir(settings: Settings | None) -> Path | None:
    """``runbooks_dir`` from the config; a relative path is relative to the config file that set it."""
    if settings is None or not settings.runbooks_dir:
        return None
    path = Path(settings.runbooks_dir).expanduser()
    if not path.is_absolute() and settings.source:
        path = Path(settings.source).parent / path
    return path


def load_user_runbooks(directory: Path) -> list[Runbook]:
    if not directory.is_dir():
        raise RunbookError(f"runbooks_dir {directory} is not a directory",
                           hint="fix runbooks_dir in fmdoctor.yaml, or create the directory")
    runbooks: dict[str, Runbook] = {}
    for path in sorted(directory.rglob("*.md")):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise RunbookError(f"{path}: cannot read runbook: {exc}") from None
        runbook = parse_runbook(text, str(path), builtin=False, stem=path.stem)
        if runbook.id in runbooks:
            raise RunbookError(f"{path}: runbook id {runbook.id!r} is also defined in {runbooks[runbook.id].source}")
        runbooks[runbook.id] = runbook
    return list(runbooks.values())


def list_runbooks(settings: Settings | None = None) -> list[Runbook]:
    """Every runbook by id: the built-ins, with the user's (``Settings.runbooks_dir``) overriding by id."""
    by_id = {r.id: r for r in builtin_runbooks()}
    directory = user_runbooks_dir(settings)
    if directory is not None:
        by_id.update({r.id: r for r in load_user_runbooks(directory)})
    return [by_id[i] for i in sorted(by_id)]


def get_runbook(runbook_id: str, settings: Settings | None = None) -> Runbook:
    runbooks = {r.id: r for r in list_runbooks(settings)}
    if runbook_id in runbooks:
        return runbooks[runbook_id]
    close = difflib.get_close_matches(runbook_id, list(runbooks), n=3)
    hint = f"did you mean {', '.join(close)}?" if close else "see 'fmdoctor runbook list'"
    raise UsageError(f"unknown runbook {runbook_id!r}", hint=hint)


def lint_runbooks(runbooks: Iterable[Runbook], registry: Registry) -> list[str]:
    """Problems a reviewer would flag: unknown check ids, missing sections, checks without a runbook, a runbook
    whose severity is not its check's declared one (the one ``checks list`` and the runbook's template view
    show; a finding may still be raised or lowered from it), values a command cannot carry as written
    (:func:`~fmdoctor.runbooks.commands.lint_commands`)."""
    runbooks = list(runbooks)
    known = set(registry.ids())
    problems = []
    for runbook in runbooks:
        for check_id in runbook.checks:
            if check_id not in known:
                problems.append(f"{runbook.source}: checks names {check_id!r}, which is not a registered check")
        for section in REQUIRED_SECTIONS:
            if f"\n{section}\n" not in f"\n{runbook.body}":
                problems.append(f"{runbook.source}: no '{section}' section")
        problems += [f"{runbook.source}: {p}" for p in lint_commands(runbook.body, runbook.body_line)]
    by_id = {r.id: r for r in runbooks}
    for check in registry:
        runbook = by_id.get(check.runbook_id())
        if runbook is None:
            problems.append(f"check {check.id} names runbook {check.runbook_id()!r}, which does not exist")
        elif check.id not in runbook.checks:
            problems.append(f"{runbook.source}: is the runbook of check {check.id} but its checks do not list it")
        elif runbook.severity != check.severity:
            problems.append(f"{runbook.source}: severity {runbook.severity.value}, but check {check.id} declares "
                            f"{check.severity.value}")
    return problems
