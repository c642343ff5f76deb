"""A runbook: YAML front matter (what it answers, what its fix needs) over a Jinja2 Markdown body.

The front matter is validated on load and the body compiled then, so a broken runbook fails with its
file and line when fmdoctor starts using it, not half-way through an incident.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml
from jinja2 import Template, TemplateSyntaxError
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from fmdoctor.engine.check import CHECK_ID, IAM_ACTION
from fmdoctor.engine.model import Finding, Severity
from fmdoctor.runbooks.errors import RunbookError
from fmdoctor.runbooks.render import compile_body, render_runbook

REQUIRED_SECTIONS = ("## What it means", "## Confirm by hand", "## Fix", "## Verify")
_FRONT_MATTER = re.compile(r"\A---[ \t]*\n(.*?\n)---[ \t]*(?:\n|\Z)", re.S)


class RunbookMeta(BaseModel):
    """The front matter, exactly: unknown keys are mistakes, not extensions."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    title: str = Field(min_length=1)
    checks: tuple[str, ...] = Field(min_length=1)
    severity: Severity
    remediation_iam_actions: tuple[str, ...] = ()

    @field_validator("id")
    @classmethod
    def _kebab_id(cls, value: str) -> str:
        if not CHECK_ID.match(value):
            raise ValueError(f"{value!r} is not a kebab-case id like 'efa-sg-self-reference'")
        return value

    @field_validator("checks")
    @classmethod
    def _check_ids(cls, values: tuple[str, ...]) -> tuple[str, ...]:
        bad = [v for v in values if not CHECK_ID.match(v)]
        if bad:
            raise ValueError(f"{', '.join(map(repr, bad))} is not a check id")
        return values

    @field_validator("remediation_iam_actions")
    @classmethod
    def _iam_actions(cls, values: tuple[str, ...]) -> tuple[str, ...]:
        bad = [v for v in values if not IAM_ACTION.match(v)]
        if bad:
            raise ValueError(f"{', '.join(map(repr, bad))} is not an IAM action like 'ec2:CreateTags'")
        return values


@dataclass(frozen=True)
class Runbook:
    id: str
    title: str
    checks: tuple[str, ...]
    severity: Severity
    remediation_iam_actions: tuple[str, ...]
    body: str  # the Jinja2 source, after the front matter
    source: str  # file path, or 'builtin:<name>.md'
    builtin: bool = True
    body_line: int = 1  # line of the file where the body starts (for error messages)
    template: Template | None = field(default=None, repr=False, compare=False)

    @property
    def automated(self) -> bool:
        """Its fix can be applied by ``fmdoctor fix`` (the runbook declares the IAM actions that needs)."""
        return bool(self.remediation_iam_actions)

    def render(self, finding: Finding | dict[str, Any] | None = None, cluster: str | None = None,
               region: str | None = None, demo: bool = False) -> str:
        """Markdown for one finding (strict: evidence the body needs but the finding lacks is an error),
        or, with no finding, the runbook with each value it needs marked where it goes; ``demo``: the finding is
        the demo's (its ``fmdoctor fix`` commands carry ``--demo``)."""
        return render_runbook(self, finding, cluster, region, demo)

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "title": self.title,
            "checks": list(self.checks),
            "severity": self.severity.value,
            "remediation_iam_actions": list(self.remediation_iam_actions),
            "automated": self.automated,
            "source": self.source,
            "builtin": self.builtin,
        }


def parse_runbook(text: str, source: str, builtin: bool, stem: str | None = None) -> Runbook:
    """Parse and validate one runbook file; every problem is a :class:`RunbookError` naming ``source``."""
    match = _FRONT_MATTER.match(text)
    if not match:
        raise RunbookError(f"{source}: no front matter: a runbook starts with '---', YAML keys, then '---'")
    try:
        data = yaml.safe_load(match.group(1))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 2}" if mark else ""
        problem = getattr(exc, "problem", None) or exc
        raise RunbookError(f"{source}{where}: front matter is not valid YAML ({problem})") from None
    if not isinstance(data, dict):
        raise RunbookError(f"{source}: front matter must be a mapping of keys (id, title, checks, severity, ...)")
    try:
        meta = RunbookMeta.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(_describe(e) for e in exc.errors()[:5])
        raise RunbookError(f"{source}: front matter: {problems}") from None
    if stem is not None and stem != meta.id:
        raise RunbookError(f"{source}: id {meta.id!r} does not match the file name (expected {meta.id}.md)")
    body = text[match.end():]
    body_line = text[: match.end()].count("\n") + 1
    try:
        template = compile_body(body)
    except TemplateSyntaxError as exc:
        line = (exc.lineno or 1) + body_line - 1
        raise RunbookError(f"{source}:{line}: template syntax error: {exc.message}") from None
    return Runbook(
        id=meta.id,
        title=meta.title,
        checks=meta.checks,
        severity=meta.severity,
        remediation_iam_actions=meta.remediation_iam_actions,
        body=body,
        source=source,
        builtin=builtin,
        body_line=body_line,
        template=template,
    )


def _describe(error: Any) -> str:
    key = ".".join(str(p) for p in error["loc"]) or "(top level)"
    if error["type"] == "extra_forbidden":
        return f"unknown key {key!r}"
    if error["type"] == "missing":
        return f"missing key {key!r}"
    return f"{key}: {error['msg'].removeprefix('Value error, ')}"
