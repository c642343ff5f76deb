"""Issue 39's concurrent loading, attacked: a request made twice, a failure swallowed by a loader another check
started, results that move with thread timing, a listing page failing after GetMetricData batches left.

The rules under test: every AWS request is made once per run; a call that failed for good is reported (not
verified) under every check that needed it, never healthy; the same world gives the same report whatever order
the answers come back in.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from fmdoctor.engine.api import Connection, Doctor, new_aws
from fmdoctor.engine.aws import Aws, AwsOptions



class Requests:
    """Every request the sessions it makes send, as (service, operation, parameters): a request made twice in one
    run is the same round trip paid twice."""

    def __init__(self, then: Callable[[AwsOptions], Aws] | None = None):
        self.seen: Counter[tuple[str, str, str]] = Counter()
        self._lock = threading.Lock()
        self._then = then

    def factory(self, options: AwsOptions, credentials: Any = None) -> Aws:
        aws = self._then(options) if self._then else new_aws(options, credentials)
        aws.session.events.register("provide-client-params", self._record)
        return aws

    def _record(self, model: Any, params: dict[str, Any], **_: Any) -> None:
        key = (model.service_model.service_name, model.name, json.dumps(params, sort_keys=True, default=str))
        with self._lock:
            self.seen[key] += 1

    def repeated(self) -> list[tuple[str, str, str, int]]:
        return [(s, o, p[:200], n) for (s, o, p), n in self.seen.items() if n > 1]

    def operations(self) -> set[tuple[str, str]]:
        return {(s, o) for s, o, _ in self.seen}


@pytest.fixture(scope="module")
def demo():
    from fmdoctor.demo.runtime import demo_environment, demo_settings

    with demo_environment() as world:
        yield world, demo_settings(world)


def _demo_doctor(demo, factory: Callable[..., Aws]) -> Doctor:
    world, settings = demo
    return Doctor(settings=settings, connection=Connection(region=world.region), aws_factory=factory)


def test_the_demo_check_makes_no_request_twice(demo):
    """The demo holds every kind of target (EC2 nodes, a HyperPod cluster, endpoints, queues, logs); each request
    is made once. DescribeCluster and ListClusterNodes were made twice, by checks keeping their own memo keys."""
    requests = Requests()
    report = _demo_doctor(demo, requests.factory).check(demo[0].cluster)
    assert report.findings and requests.seen
    assert requests.repeated() == []
    assert {("sagemaker", "DescribeCluster"), ("sagemaker", "ListClusterNodes")} <= requests.operations()
