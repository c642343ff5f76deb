"""Runbooks: one Markdown file per problem, with YAML front matter and a Jinja2 body filled from a finding.

Front matter: ``id``, ``title``, ``checks`` (the check ids it answers), ``severity`` and
``remediation_iam_actions`` (what ``fmdoctor fix`` needs for its automated fix; ``[]`` when the fix is
manual). The body has four sections: What it means, Confirm by hand, Fix, Verify; it sees ``finding``,
``evidence``, ``cluster`` and ``region``. Users add or override runbooks from ``runbooks_dir``.
"""

from fmdoctor.runbooks.errors import RunbookError, RunbookRenderError
from fmdoctor.runbooks.library import builtin_runbooks, get_runbook, lint_runbooks, list_runbooks
from fmdoctor.runbooks.model import REQUIRED_SECTIONS, Runbook, parse_runbook

__all__ = [
    "REQUIRED_SECTIONS",
    "Runbook",
    "RunbookError",
    "RunbookRenderError",
    "builtin_runbooks",
    "get_runbook",
    "lint_runbooks",
    "list_runbooks",
    "parse_runbook",
]
