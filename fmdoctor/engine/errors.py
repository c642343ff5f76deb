"""Typed errors, and the one place that turns botocore exceptions into something a person can act on.

Front ends catch :class:`FmdoctorError` (exit 3, one clear message). A failed AWS call inside a check
becomes a :class:`~fmdoctor.engine.model.CheckError` via :func:`describe_aws_failure`; it never escapes
as a traceback.
"""

from __future__ import annotations

import contextlib
import dataclasses
import http.client
import re
import threading
from dataclasses import dataclass


class FmdoctorError(Exception):
    """Anything fmdoctor reports as a plain message with exit status 3 ('unknown: could not run')."""

    exit_code = 3

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message


class ConfigError(FmdoctorError):
    """Bad configuration file, flag or environment value."""


class UsageError(FmdoctorError):
    """Bad command-line input (unknown check id, malformed argument)."""


class TargetNotFound(FmdoctorError):
    """The cluster/endpoint named does not exist in this account and region."""


class CredentialsError(FmdoctorError):
    """No usable AWS credentials, or they were rejected."""


class Cancelled(FmdoctorError):
    """The run was cancelled (Esc, quitting the app): the AWS call it was about to make was not made."""


class AwsUnavailable(FmdoctorError):
    """An AWS call needed before any check could run failed (inventory), so nothing could be verified."""


ACCESS_DENIED_CODES = frozenset(
    {"AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "UnauthorizedAccess", "Forbidden"}
)
# The codes botocore's standard and adaptive retry modes retry as throttling (so what fails with one has been
# backed off and retried), but LimitExceededException and TransactionInProgressException, which also name quota and
# conflict errors that no waiting fixes. tests/unit/test_engine_errors.py compares the list with botocore's.
THROTTLING_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestLimitExceeded",
        "TooManyRequestsException",
        "RequestThrottled",
        "RequestThrottledException",
        "SlowDown",
        "ProvisionedThroughputExceededException",
        "EC2ThrottledException",
        "BandwidthLimitExceeded",
        "PriorRequestNotComplete",
    }
)
BAD_CREDENTIAL_CODES = frozenset(
    {"AuthFailure", "InvalidClientTokenId", "ExpiredToken", "ExpiredTokenException", "SignatureDoesNotMatch",
     "UnrecognizedClientException", "InvalidAccessKeyId"}
)

# IAM actions whose name differs from the API operation (S3 is the usual offender).
_IAM_ACTION_OVERRIDES = {
    ("s3", "ListObjectsV2"): "s3:ListBucket",
    ("s3", "ListObjects"): "s3:ListBucket",
    ("s3", "HeadBucket"): "s3:ListBucket",
    ("s3", "HeadObject"): "s3:GetObject",
    ("s3", "GetBucketLocation"): "s3:GetBucketLocation",
}
# boto3 service names whose IAM prefix differs.
_IAM_PREFIX_OVERRIDES = {"resourcegroupstaggingapi": "tag"}
_NOT_AUTHORIZED = re.compile(r"not authorized to perform:?\s+([a-z0-9-]+:[A-Za-z0-9]+)")


def iam_action_for(service: str, operation: str) -> str:
    """The IAM action an API call needs: boto3's service name is the IAM prefix, bar a few overrides."""
    prefix = _IAM_PREFIX_OVERRIDES.get(service, service)
    return _IAM_ACTION_OVERRIDES.get((service, operation), f"{prefix}:{operation}")


_last_call = threading.local()


def remember_call(service: str, operation: str) -> None:
    """Called by the session's before-call hook so a ClientError (which lacks the service) can be named."""
    _last_call.value = (service, operation)


def note_failed_call(exc: BaseException) -> None:
    """Name on ``exc`` the call this thread made last, for a thread that re-raises it elsewhere (a shared load)."""
    last = getattr(_last_call, "value", None)
    if last is not None and getattr(exc, "_fmdoctor_call", None) is None:
        with contextlib.suppress(AttributeError, TypeError):
            exc._fmdoctor_call = last  # type: ignore[attr-defined]


def _failed_call(exc: BaseException | None) -> tuple[str, str] | None:
    """The call ``exc`` came from: the one named on it by the thread that made it (a shared load's, re-raised in
    each check that reads it), else this thread's last."""
    return getattr(exc, "_fmdoctor_call", None) or getattr(_last_call, "value", None)


def _service_of(operation: str | None, exc: BaseException | None = None) -> str | None:
    last = _failed_call(exc)
    if last and (operation is None or last[1] == operation):
        return str(last[0])
    return None


@dataclass(frozen=True)
class AwsFailure:
    """What went wrong with one AWS call, in the terms an error entry needs."""

    code: str
    message: str
    iam_action: str | None = None
    kind: str = "error"  # access-denied | throttled | timeout | credentials | not-found | bad-input | corrupt | error

    @property
    def fatal_for_run(self) -> bool:
        """Credential problems affect every call: no point running the other checks."""
        return self.kind == "credentials"


class AwsCallFailed(Exception):
    """An AWS failure met earlier (classified where it happened), raised again where it matters: a check that
    reads an inventory part discovery could not fetch."""

    def __init__(self, failure: AwsFailure, what: str):
        super().__init__(f"could not read {what}: {failure.message}")
        self.failure = failure


_NO_CREDENTIALS = {
    "NoCredentialsError": ("no AWS credentials found", "set AWS_PROFILE or pass --profile (or use environment keys, "
                           "SSO or an instance role), or try --demo to see fmdoctor without an account"),
    "PartialCredentialsError": ("incomplete AWS credentials", "set both the access key id and the secret key, or "
                                "use a profile"),
    "ProfileNotFound": ("no such AWS profile", "see 'aws configure list-profiles'"),
    "NoRegionError": ("no AWS region", "pass --region, set AWS_REGION, or set region in fmdoctor.yaml"),
}


def credentials_error(failure: AwsFailure) -> CredentialsError:
    """The error for a failure of kind ``credentials``: 'rejected' only when AWS saw credentials and refused
    them; missing or incomplete credentials (found before any call) say so instead."""
    if failure.code in _NO_CREDENTIALS:
        message, hint = _NO_CREDENTIALS[failure.code]
        return CredentialsError(f"{message}: {failure.message}", hint=hint)
    return CredentialsError(f"AWS rejected the credentials ({failure.code}): {failure.message}",
                            hint="check AWS_PROFILE / --profile, or run 'aws sts get-caller-identity'")


def describe_aws_failure(exc: BaseException) -> AwsFailure | None:
    """Classify a botocore/boto3 exception; ``None`` means it is not an AWS failure (a bug: let it surface)."""
    if isinstance(exc, AwsCallFailed):
        return dataclasses.replace(exc.failure, message=str(exc))
    # Imported here, not at the top: every command imports this module, and only those that call AWS need botocore.
    from botocore import exceptions as bex
    from botocore.parsers import ResponseParserError
    from urllib3.exceptions import ProtocolError

    from fmdoctor.engine.responses import CorruptResponse

    if isinstance(exc, bex.ClientError):
        error = exc.response.get("Error", {})
        code = str(error.get("Code") or "ClientError")
        message = str(error.get("Message") or exc)
        operation = getattr(exc, "operation_name", None)
        service = _service_of(operation, exc)
        action = iam_action_for(service, operation) if service and operation else None
        match = _NOT_AUTHORIZED.search(message)
        if match:
            action = match.group(1)
        if code in ACCESS_DENIED_CODES:
            return AwsFailure(code, message, action, "access-denied")
        if code in THROTTLING_CODES:
            return AwsFailure(code, f"still throttled after retries: {message}", action, "throttled")
        if code in BAD_CREDENTIAL_CODES:
            return AwsFailure(code, message, action, "credentials")
        if code.endswith(("NotFound", ".NotFound", "NoSuchBucket", "NoSuchKey")) or "NonExistent" in code:
            return AwsFailure(code, message, action, "not-found")
        if code.startswith(("InvalidParameter", "ValidationError", "ValidationException", "Invalid")):
            return AwsFailure(code, message, action, "bad-input")
        return AwsFailure(code, message, action, "error")
    if isinstance(exc, bex.NoCredentialsError | bex.PartialCredentialsError | bex.NoRegionError):
        return AwsFailure(type(exc).__name__, str(exc), None, "credentials")
    if isinstance(exc, bex.ProfileNotFound):
        return AwsFailure("ProfileNotFound", str(exc), None, "credentials")
    if isinstance(exc, bex.ConnectTimeoutError | bex.ReadTimeoutError):
        return AwsFailure("Timeout", str(exc), None, "timeout")
    if isinstance(exc, bex.EndpointConnectionError | bex.ConnectionClosedError | bex.ConnectionError):
        return AwsFailure("ConnectionError", str(exc), None, "timeout")
    if isinstance(exc, bex.ParamValidationError):
        return AwsFailure("ParamValidationError", str(exc), None, "bad-input")
    if isinstance(exc, ResponseParserError):  # its text carries the whole raw body: never repeat that
        first = str(exc).split("\n", 1)[0][:200]
        return AwsFailure("CorruptResponse", f"{_call_name(exc)}the response could not be parsed ({first})",
                          _last_action(exc), "corrupt")
    if isinstance(exc, CorruptResponse):
        return AwsFailure("CorruptResponse", str(exc), _last_action(exc), "corrupt")
    if isinstance(exc, bex.BotoCoreError):
        return AwsFailure(type(exc).__name__, _bounded(str(exc)), None, "error")
    if isinstance(exc, ProtocolError | http.client.IncompleteRead):  # the body ended before its Content-Length
        return AwsFailure("CorruptResponse", f"{_call_name(exc)}the response ended before its Content-Length "
                          f"({type(exc).__name__})", _last_action(exc), "corrupt")
    if isinstance(exc, NotImplementedError):
        # moto (the demo and tests) raises this for APIs it does not emulate.
        last = _failed_call(exc)
        action = iam_action_for(*last) if last else None
        return AwsFailure("NotImplemented", str(exc) or "API not implemented by this endpoint", action, "error")
    return None


def _last_action(exc: BaseException) -> str | None:
    last = _failed_call(exc)
    return iam_action_for(*last) if last else None


def _call_name(exc: BaseException) -> str:
    last = _failed_call(exc)
    return f"{last[0]}.{last[1]}: " if last else ""


def _bounded(message: str, limit: int = 1000) -> str:
    return message if len(message) <= limit else message[:limit] + f"… ({len(message) - limit} more characters)"
