"""Sessions of a fleet scan: the source credentials, one assumed role per account, one session per use.

The source session (the standard chain: ``--profile``/``AWS_PROFILE``, environment, SSO, IRSA, instance
role) calls STS once per account. The role's credentials refresh themselves before they expire and are
shared by every session opened in that account, so a long scan never calls AssumeRole per cluster.
Every session counts its own calls; :class:`SessionLedger` adds them up for the fleet's stats.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from botocore.credentials import Credentials, RefreshableCredentials

from fmdoctor.engine.api import new_aws
from fmdoctor.engine.aws import ApiCallCounter, Aws, AwsOptions

SESSION_NAME = "fmdoctor-fleet"


@dataclass(frozen=True)
class Scope:
    """Where a session points: an account and region of the fleet (account ``None``: the source itself)."""

    account: str | None
    region: str


# (scope, options, credentials or None for the standard chain) -> Aws. Tests wrap it to inject faults per scope.
SessionFactory = Callable[[Scope, AwsOptions, Credentials | None], Aws]


def default_session_factory(scope: Scope, options: AwsOptions, credentials: Credentials | None) -> Aws:
    return new_aws(options, credentials)


class SessionLedger:
    """Opens sessions through the factory and keeps only their call counters (not the clients)."""

    def __init__(self, factory: SessionFactory = default_session_factory):
        self.factory = factory
        self._lock = threading.Lock()
        self._counters: list[ApiCallCounter] = []

    def open(self, scope: Scope, options: AwsOptions, credentials: Credentials | None = None) -> Aws:
        aws = self.factory(scope, options, credentials)
        with self._lock:
            self._counters.append(aws.calls)
        return aws

    def api_calls(self) -> dict[str, int]:
        total: Counter[str] = Counter()
        with self._lock:
            counters = list(self._counters)
        for counter in counters:
            total.update(counter.snapshot())
        return dict(sorted(total.items()))


def caller_account(source: Aws) -> str:
    """The source credentials' account (sts:GetCallerIdentity needs no permission)."""
    return str(source.client("sts").get_caller_identity()["Account"])


def assume_role(source: Aws, role_arn: str, external_id: str | None = None,
                duration_s: int = 3600) -> RefreshableCredentials:
    """AssumeRole now (so a denied role fails here, once per account), refreshed later as needed."""
    params: dict[str, Any] = {"RoleArn": role_arn, "RoleSessionName": SESSION_NAME, "DurationSeconds": duration_s}
    if external_id:
        params["ExternalId"] = external_id

    def fetch() -> dict[str, str]:
        raw = source.client("sts").assume_role(**params)["Credentials"]
        return {
            "access_key": raw["AccessKeyId"],
            "secret_key": raw["SecretAccessKey"],
            "token": raw["SessionToken"],
            "expiry_time": raw["Expiration"].isoformat(),
        }

    return RefreshableCredentials.create_from_metadata(fetch(), refresh_using=fetch, method="assume-role")
