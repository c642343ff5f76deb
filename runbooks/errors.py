"""Runbook errors: each names the runbook file, and exits 3 like any configuration mistake."""

from fmdoctor.engine.errors import ConfigError


class RunbookError(ConfigError):
    """A runbook file that cannot be loaded (bad front matter, bad template syntax); names the file."""


class RunbookRenderError(ConfigError):
    """A runbook that cannot be rendered with the finding given (e.g. evidence it needs is missing)."""
