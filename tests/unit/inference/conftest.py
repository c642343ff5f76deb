"""Fixtures for the inference checks: endpoints in moto, their metrics, and a run at a chosen moment.

Runs happen at ``at`` (30 minutes after the endpoints were created in moto), so endpoints have existed
for the whole 15-minute window; metrics are published for the 10 minutes before ``at``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from fmdoctor.config import Settings
from fmdoctor.demo.endpoint_builder import EndpointBuilder
from fmdoctor.engine.api import Connection, Doctor
from fmdoctor.engine.model import Report

REGION = "us-west-2"
CLUSTER = "serving"
ACCOUNT = "123456789012"


@pytest.fixture
def at() -> datetime:
    return datetime.now(UTC).replace(microsecond=0) + timedelta(minutes=30)


@pytest.fixture
def endpoints(aws) -> EndpointBuilder:
    return EndpointBuilder(aws, CLUSTER)


@pytest.fixture
def infer(aws, at) -> Callable[..., Report]:
    """Run the engine at ``at``; keyword arguments are the cluster's settings."""

    def run(only: list[str] | None = None, cluster: str | None = CLUSTER, overrides: dict[str, Any] | None = None,
            clock: datetime | None = None, aws_factory: Any = None, **cluster_settings: Any) -> Report:
        settings = Settings.model_validate({"clusters": {cluster: cluster_settings}} if cluster else {})
        kwargs = {"aws_factory": aws_factory} if aws_factory else {}
        doctor = Doctor(settings=settings, connection=Connection(region=REGION), clock=lambda: clock or at,
                        overrides=overrides or {}, **kwargs)
        return doctor.check(cluster, only=only)

    return run


@pytest.fixture
def endpoint_state() -> Callable[..., None]:
    """moto keeps every endpoint InService: set the status a real endpoint would be in (tests only)."""

    def set_state(name: str, status: str, failure_reason: str | None = None, modified: datetime | None = None) -> None:
        from moto.sagemaker.models import sagemaker_backends

        endpoint = sagemaker_backends[ACCOUNT][REGION].endpoints[name]
        endpoint.endpoint_status = status
        endpoint.failure_reason = failure_reason
        if modified is not None:
            endpoint.last_modified_time = modified

    return set_state

