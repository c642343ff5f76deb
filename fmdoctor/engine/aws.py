"""One boto3 session per run, with standard retries, bounded timeouts and a count of every API call.

Checks never build clients themselves: they ask :meth:`Aws.client`, so tests inject moto or a Stubber
and the report can show ``stats.api_calls`` by ``service.Operation``. Every answer is checked whole
before botocore parses it (:mod:`fmdoctor.engine.responses`).
"""

from __future__ import annotations

import os
import threading
from collections import Counter
from dataclasses import dataclass
from typing import Any, Protocol

import boto3
import botocore.handlers
from botocore.client import BaseClient
from botocore.config import Config

from fmdoctor import __version__
from fmdoctor.engine import slots, timestamps
from fmdoctor.engine.errors import Cancelled, ConfigError, remember_call
from fmdoctor.engine.responses import check_response

# Services whose requests fmdoctor alone builds, in bulk, from shapes botocore's model already fixes: CloudWatch's
# GetMetricData carries 500 queries a call, and botocore's walk of each against the model before sending was a
# tenth of a 256-node run's CPU. Requests are still serialized by botocore (a wrong type fails there).
UNVALIDATED = frozenset({"cloudwatch"})


@dataclass(frozen=True)
class AwsOptions:
    region: str | None = None
    profile: str | None = None
    endpoint_url: str | None = None
    max_attempts: int = 5
    connect_timeout: float = 5.0
    read_timeout: float = 30.0
    max_pool_connections: int = 32


class CancelFlag(Protocol):
    def is_set(self) -> bool: ...


class RunStop:
    """A run's stop flag: set by the run itself (its inventory failed, so what its loads would bring reaches no
    report) or by the caller's cancel event (Esc, quitting the app)."""

    def __init__(self, cancel: CancelFlag | None = None):
        self._cancel = cancel
        self._own = threading.Event()

    def set(self) -> None:
        self._own.set()

    def is_set(self) -> bool:
        return self._own.is_set() or (self._cancel is not None and self._cancel.is_set())


class ApiCallCounter:
    """Thread-safe tally of API calls (one per operation invoked, retries not double-counted)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()

    def record(self, service: str, operation: str) -> None:
        with self._lock:
            self._counts[f"{service}.{operation}"] += 1

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(sorted(self._counts.items()))

    def total(self) -> int:
        with self._lock:
            return sum(self._counts.values())


def retry_defaults(session: boto3.Session, max_attempts: int) -> dict[str, Any]:
    """fmdoctor's retries (adaptive mode, ``max_attempts``) only where the user set none: ``AWS_RETRY_MODE`` /
    ``AWS_MAX_ATTEMPTS`` or the profile's ``retry_mode`` / ``max_attempts`` win, as the SDKs document. Adaptive is
    standard's retries and backoff plus a client-side send rate that drops when AWS throttles and climbs back
    (botocore's token bucket), so the runs' concurrent calls need no fixed pool size."""
    try:
        profile: dict[str, Any] = dict(session._session.get_scoped_config())
    except Exception:  # no such profile: the client creation reports it
        profile = {}
    retries: dict[str, Any] = {}
    if not (os.environ.get("AWS_RETRY_MODE") or profile.get("retry_mode")):
        retries["mode"] = "adaptive"
    if not (os.environ.get("AWS_MAX_ATTEMPTS") or profile.get("max_attempts")):
        retries["total_max_attempts"] = max_attempts
    return retries


class Aws:
    """Clients for one account/region, created lazily, shared by every check of a run (they are thread-safe)."""

    def __init__(self, session: boto3.Session, options: AwsOptions | None = None):
        self.options = options or AwsOptions()
        self.session = session
        self.calls = ApiCallCounter()
        self.cancel: CancelFlag | None = None  # once set, every further call raises Cancelled
        self._clients: dict[str, BaseClient] = {}
        self._lock = threading.Lock()
        self._config = Config(
            retries=retry_defaults(session, self.options.max_attempts),
            connect_timeout=self.options.connect_timeout,
            read_timeout=self.options.read_timeout,
            max_pool_connections=self.options.max_pool_connections,
            user_agent_extra=f"fmdoctor/{__version__}",
        )
        # Registered before any client exists: clients copy the session's handlers and parser defaults.
        session.events.register("before-call", self._on_before_call)
        # A retry is sent again without a before-call: a stopped run's call in its retries stops at the next attempt.
        session.events.register("before-send", self._on_before_send)
        # A check waiting for AWS's answer gives its worker slot to another check (fmdoctor.engine.slots).
        session.events.register("after-call", _resume)
        session.events.register("after-call-error", _resume)
        timestamps.install(session._session)
        # A 200 whose body is cut off or unreadable is an error for the checks reading it, never empty data.
        session.events.register_first("before-parse", check_response)

    @classmethod
    def from_options(cls, options: AwsOptions) -> Aws:
        session = boto3.Session(profile_name=options.profile, region_name=options.region)
        return cls(session, options)

    @property
    def region(self) -> str:
        region = self.options.region or self.session.region_name
        if not region:
            raise ConfigError("no AWS region", hint="pass --region, set AWS_REGION, or set region in fmdoctor.yaml")
        return region

    def client(self, service: str) -> BaseClient:
        with self._lock:
            client = self._clients.get(service)
            if client is None:
                config = self._config
                if service in UNVALIDATED:
                    config = config.merge(Config(parameter_validation=False))
                kwargs: dict[str, Any] = {"region_name": self.region, "config": config}
                if self.options.endpoint_url:
                    kwargs["endpoint_url"] = self.options.endpoint_url
                client = self.session.client(service, **kwargs)
                if service == "s3":
                    _check_s3_first(client)
                self._clients[service] = client
            return client

    def _on_before_call(self, model: Any, **_: Any) -> None:
        if self.cancel is not None and self.cancel.is_set():  # a cancelled run stops at its next call
            raise Cancelled(f"cancelled before {model.service_model.service_name}.{model.name}")
        service = model.service_model.service_name
        self.calls.record(service, model.name)
        remember_call(service, model.name)
        slots.pause()

    def _on_before_send(self, request: Any = None, **_: Any) -> None:
        if self.cancel is not None and self.cancel.is_set():
            raise Cancelled("cancelled before sending a request")


def _resume(**_: Any) -> None:
    slots.resume()


def _check_s3_first(client: BaseClient) -> None:
    """botocore's S3 handler (first on ``before-parse.s3.*``) turns a 200 it cannot read into a bare "500
    Internal Server Error"; the body check goes ahead of it so the error says what was wrong."""
    handler = getattr(botocore.handlers, "_handle_200_error", None)
    if handler is None:
        return
    client.meta.events.unregister("before-parse.s3.*", handler)
    client.meta.events.register_first("before-parse.s3.*", check_response)
    client.meta.events.register("before-parse.s3.*", handler)
