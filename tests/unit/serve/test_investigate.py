"""The likeliest cause, the plain narrative, the optional model narrative, and one run shared by a burst."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime

from fmdoctor.engine.errors import TargetNotFound
from fmdoctor.engine.model import Finding, Report, RunStats, Severity, Status
from fmdoctor.serve.investigate import Investigator, likely_cause
from fmdoctor.serve.routing import Route

from .test_events import one

NODE = "i-12345678abcdefghi"


def finding(check: str, resource: str, severity: Severity = Severity.WARNING) -> Finding:
    return Finding(check=check, severity=severity, resource=resource, summary=f"{check} on {resource}",
                   runbook=check)


class StubDoctor:
    def __init__(self, findings=(), error=None, delay=0.0):
        self.findings, self.error, self.delay, self.calls = list(findings), error, delay, []

    def check(self, cluster, only=None, cancel=None):
        self.calls.append((cluster, only))
        time.sleep(self.delay)
        if self.error:
            raise self.error
        return Report(cluster=cluster, region="us-west-2", generated_at=datetime.now(UTC), status=Status.CRITICAL,
                      findings=self.findings, stats=RunStats(checks_run=["hyperpod-node-unhealthy", "gpu-xid"]))


ROUTE = Route("llm-train", ("hyperpod", "gpu", "efa"), "HyperPod cluster sample-cluster")


def test_a_finding_on_the_events_node_beats_a_worse_one_elsewhere():
    on_node = finding("hyperpod-node-unhealthy", NODE)
    elsewhere = finding("efa-sg-self-reference", "sg-0abc", Severity.CRITICAL)
    cause, related = likely_cause([elsewhere, on_node], {NODE})
    assert cause is on_node and related == [on_node]
    cause, related = likely_cause([elsewhere, on_node], {"i-somewhere-else"})
    assert cause is elsewhere and related == []


def test_result_names_cause_runbook_and_narrative():
    doctor = StubDoctor([finding("hyperpod-node-unhealthy", NODE, Severity.CRITICAL)])
    result = Investigator(doctor).investigate(one("hyperpod-node-health.json"), ROUTE)
    assert doctor.calls == [("llm-train", ["hyperpod", "gpu", "efa"])]
    assert result.runbook == "hyperpod-node-unhealthy" and not result.fixable
    assert "Most likely cause (on a resource the event names)" in result.narrative
    assert result.to_json()["cause"]["resource"] == NODE


def test_could_not_check_is_said_not_hidden():
    doctor = StubDoctor(error=TargetNotFound("no running or pending instances tagged with cluster 'llm-train'"))
    result = Investigator(doctor).investigate(one("hyperpod-node-health.json"), ROUTE)
    assert result.report is None and result.status == "unknown"
    assert "could not check llm-train" in result.narrative and "Nothing was verified" in result.narrative


def test_the_model_narrative_is_used_and_its_failure_falls_back():
    doctor = StubDoctor([finding("hyperpod-node-unhealthy", NODE)])
    told = Investigator(doctor, narrator=lambda result: "The node lost a GPU; replace it.")
    assert told.investigate(one("hyperpod-node-health.json"), ROUTE).narrative == "The node lost a GPU; replace it."

    def down(result):
        raise TimeoutError("model endpoint timed out")

    fallback = Investigator(doctor, reuse_s=0, narrator=down).investigate(one("hyperpod-node-health.json"), ROUTE)
    assert fallback.narrative.startswith("HyperPod sample-cluster node")


def test_a_burst_for_one_cluster_shares_one_run():
    doctor = StubDoctor([finding("hyperpod-node-unhealthy", NODE)], delay=0.3)
    investigator = Investigator(doctor, reuse_s=60)
    threads = [threading.Thread(target=investigator.investigate, args=(one("hyperpod-node-health.json"), ROUTE))
               for _ in range(5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(doctor.calls) == 1 and investigator.runs == 1
