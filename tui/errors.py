"""Turn whatever a worker raised into a notification a person can act on, never a traceback."""

from __future__ import annotations

import logging

from botocore.exceptions import NoCredentialsError, PartialCredentialsError

from fmdoctor.engine.errors import FmdoctorError, describe_aws_failure

log = logging.getLogger(__name__)


def explain(exc: BaseException) -> tuple[str, str | None]:
    """(message, what to do) for an exception from the engine, the assistant or remediation."""
    if isinstance(exc, FmdoctorError):
        return exc.message, exc.hint
    if isinstance(exc, NoCredentialsError | PartialCredentialsError):
        return "no AWS credentials found", "set AWS_PROFILE or pass --profile, or try 'fmdoctor chat --demo'"
    failure = describe_aws_failure(exc) if isinstance(exc, Exception) else None
    if failure is not None:
        action = f" (needs {failure.iam_action})" if failure.iam_action else ""
        return f"AWS refused: {failure.code}{action}: {failure.message}", _hint(failure.kind)
    log.debug("unexpected error in the TUI", exc_info=exc)
    return f"unexpected error: {type(exc).__name__}: {exc}", "run 'fmdoctor -vv chat' to log details to stderr"


def _hint(kind: str) -> str | None:
    return {
        "credentials": "check AWS_PROFILE / --profile, or run 'aws sts get-caller-identity'",
        "access-denied": "grant the action (see 'fmdoctor iam-policy') and press r to re-run",
        "throttled": "AWS is throttling; wait a moment and press r to re-run",
        "timeout": "AWS did not answer in time; check the network and press r to re-run",
    }.get(kind)
