"""Incidents: the demo's findings grouped by the thing at fault and ranked by time to harm, and worlds of our own
made of real findings (the demo's, recombined; an on-node gpu-xid from a recorded kernel log)."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fmdoctor.config import Settings
from fmdoctor.engine.api import Doctor
from fmdoctor.engine.incidents import EXPLAINS, HARM_NOW, FindingRef, build_incidents, incident_id, title_of
from fmdoctor.engine.model import Finding, Report, Severity
from fmdoctor.engine.registry import default_registry
from fmdoctor.node.replay import ReplayHost
from fmdoctor.report.markdown import render_markdown
from fmdoctor.report.text import ACT_FIRST_LINES, render_text

NODE_FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "node"
XID_LOG_TIME = datetime(2025, 3, 4, 3, 0, tzinfo=UTC)  # the clock the recorded kernel log is current at


@pytest.fixture(scope="module")
def demo(demo_check):
    report = demo_check.report
    return demo_check.facts, report, report.incidents()


def one(findings: list[Finding], check: str, resource: str | None = None) -> Finding:
    [found] = [f for f in findings if f.check == check and (resource is None or f.resource == resource)]
    return found


def incident_of(incidents, check: str, resource: str):
    [found] = [i for i in incidents if any((f.check, f.resource) == (check, resource) for f in i.findings)]
    return found


def refs(incident) -> set[tuple[str, str]]:
    return {(f.check, f.resource) for f in incident.findings}


# --- the demo ------------------------------------------------------------------------------------------------

def test_every_demo_finding_is_in_exactly_one_incident(demo):
    _, report, incidents = demo
    listed = [(f.check, f.resource) for i in incidents for f in i.findings]
    assert sorted(listed) == sorted((f.check, f.resource) for f in report.findings)
    assert len(incidents) < len(report.findings)  # the shared causes are counted once


def test_the_demo_leads_with_the_spot_deadline_then_the_capacity_block_then_the_stalled_job(demo):
    facts, report, incidents = demo
    spot, block, stalled = incidents[:3]
    node = facts["spot"]["interrupted"]
    assert refs(spot) >= {("spot-interruption", node), ("spot-interruption-unprotected", node)}
    assert spot.cause.check == "spot-interruption" and spot.urgency == "deadline"
    notice = one(report.findings, "spot-interruption", node)
    assert spot.deadline == datetime.fromisoformat(notice.evidence["action_time"])
    assert spot.impact.jobs == 1 and spot.impact.nodes == 1
    reservation = facts["capacity_block"]["reservation"]
    assert (block.cause.check, block.cause.resource) == ("capacity-block-expiring", reservation)
    assert block.deadline is not None and spot.deadline is not None and spot.deadline < block.deadline
    assert block.impact.nodes == 2
    culprit = facts["training"]["culprit"]
    assert stalled.cause.check == "training-stalled" and stalled.cause.resource == culprit
    assert stalled.urgency == "now" and stalled.harm == HARM_NOW["training-stalled"]
    stall = one(report.findings, "training-stalled", culprit)
    assert stalled.since == datetime.fromisoformat(stall.evidence["stall_start"])
    assert all(f.resource == culprit for f in stalled.findings)  # its node's other findings are with it


def test_one_security_group_is_one_incident_whose_fix_is_the_missing_rule(demo):
    facts, _, incidents = demo
    group = facts["groups"]["demo-efa"]
    incident = incident_of(incidents, "efa-sg-self-reference", group)
    assert refs(incident) == {("efa-sg-self-reference", group), ("efa-peer-unreachable", group)}
    assert incident.cause.check == "efa-sg-self-reference" and incident.impact.nodes == 4
    assert incident.next.runbook == "efa-sg-self-reference"
    assert incident.next.fix == ("fmdoctor fix --cluster demo-llm-train --region us-west-2 "
                                 f"--check efa-sg-self-reference --resource {group}")


def test_an_endpoint_at_its_scaling_maximum_explains_its_saturation_and_its_latency(demo):
    facts, _, incidents = demo
    name = facts["endpoints"]["slow_at_max"]
    incident = incident_of(incidents, "autoscaling-at-max", f"endpoint/{name}/variant/AllTraffic")
    assert {c for c, _ in refs(incident)} == {"autoscaling-at-max", "accelerator-saturation", "inference-latency-slo"}
    assert incident.cause.check == "autoscaling-at-max"
    assert incident.severity == "critical"  # the latency breach is critical, the limit behind it a warning
    assert incident.urgency == "now" and incident.impact.endpoints == 1 and incident.impact.nodes == 0


def test_an_incident_without_a_fix_points_at_its_runbook(demo):
    _, _, incidents = demo
    [capacity] = [i for i in incidents if i.cause.check == "capacity-block-expiring"]
    assert capacity.next.fix is None
    assert capacity.next_words() == "fmdoctor runbook show capacity-block-expiring"


def test_an_incident_offers_the_fix_one_of_its_findings_has(demo):
    """The Spot node Slurm still schedules onto: its incident's runbook is the cause's, and its first automated
    step is the member's drain through the scheduler (spot-interruption itself has no fix)."""
    facts, _, incidents = demo
    node = facts["spot"]["interrupted"]
    spot = incident_of(incidents, "spot-interruption", node)
    assert ("scheduler-schedules-faulty-node", node) in [(f.check, f.resource) for f in spot.findings]
    assert spot.next.runbook == "spot-interruption"
    assert spot.next.fix is not None
    assert spot.next.fix.endswith(f"--check scheduler-schedules-faulty-node --resource {node}")


def test_the_json_report_carries_the_incidents_contract(demo):
    _, report, incidents = demo
    data = json.loads(json.dumps(report.to_json_dict()))
    assert {"cluster", "region", "generated_at", "status", "findings", "errors", "skipped", "stats"} <= set(data)
    assert [i["id"] for i in data["incidents"]] == [i.id for i in incidents]
    for raw in data["incidents"]:
        assert re.fullmatch(r"inc-[0-9a-f]{12}", raw["id"])
        assert isinstance(raw["title"], str) and raw["title"]
        assert raw["severity"] in {"critical", "warning", "info"}
        assert raw["deadline"] is None or datetime.fromisoformat(raw["deadline"]).tzinfo is not None
        assert set(raw["impact"]) == {"nodes", "jobs", "endpoints"}
        assert all(isinstance(n, int) and n >= 0 for n in raw["impact"].values())
        assert raw["resources"] and all(isinstance(r, str) for r in raw["resources"])
        assert raw["findings"] and all(set(f) == {"check", "resource"} for f in raw["findings"])
        assert raw["cause"] in raw["findings"] and raw["findings"][0] == raw["cause"]
        assert set(raw["next"]) == {"runbook", "fix"}
        assert raw["next"]["fix"] is None or raw["next"]["fix"].startswith("fmdoctor fix ")
    first = data["incidents"][0]
    assert first["deadline"] == incidents[0].deadline.isoformat()


def test_the_text_report_opens_with_the_incidents_on_one_screen(demo):
    facts, report, incidents = demo
    text = render_text(report)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80
    start = next(n for n, line in enumerate(lines) if line.startswith("ACT FIRST"))
    end = lines.index("CRITICAL")
    assert start == 3 and end - start <= ACT_FIRST_LINES + 1
    section = "\n".join(lines[start:end])
    assert f"{len(incidents)} incidents" in lines[start]
    assert lines[start + 1].startswith(" 1 ✗ ") and "will be terminated by EC2 Spot" in lines[start + 1]
    assert "deadline" in lines[start + 2] and "next: fmdoctor fix --cluster demo-llm-train" in section
    assert re.search(r"\+ \d+ more incidents", section)  # the rest are counted, not dropped
    assert text.index("ACT FIRST") < text.index("efa-sg-self-reference  ")  # the details follow as before


def test_the_markdown_report_opens_with_the_incidents(demo):
    _, report, incidents = demo
    text = render_markdown(report)
    assert text.index("## Act first") < text.index("| Severity | Check |")
    assert f"1. **critical** {incidents[0].title}" in text


# --- worlds of our own, from real findings -------------------------------------------------------------------

def test_a_spot_deadline_outranks_a_warning_only_node_whatever_the_order(demo):
    facts, report, _ = demo
    notice = one(report.findings, "spot-interruption", facts["spot"]["interrupted"])
    warning = one(report.findings, "gpu-straggler")
    for findings in ([warning, notice], [notice, warning]):
        first, second = build_incidents(findings, now=report.generated_at)
        assert first.cause.check == "spot-interruption" and second.cause.check == "gpu-straggler"
        assert second.urgency == "later" and second.deadline is None


def test_a_critical_deadline_comes_before_harm_under_way_and_a_warning_deadline_after_any_critical(demo):
    _, report, _ = demo
    notice = one(report.findings, "spot-interruption")
    stalled = one(report.findings, "training-stalled")
    rebalance = one(report.findings, "spot-rebalance")
    block = one(report.findings, "capacity-block-expiring").model_copy(update={"severity": Severity.WARNING})
    ranked = build_incidents([block, rebalance, stalled, notice], now=report.generated_at)
    assert [i.cause.check for i in ranked] == ["spot-interruption", "training-stalled", "capacity-block-expiring",
                                               "spot-rebalance"]


def test_spot_notice_and_the_unprotected_work_on_its_node_are_one_incident(demo):
    facts, report, _ = demo
    node = facts["spot"]["interrupted"]
    unprotected = one(report.findings, "spot-interruption-unprotected", node)
    notice = one(report.findings, "spot-interruption", node)
    [incident] = build_incidents([unprotected, notice], now=report.generated_at)
    assert incident.cause.check == "spot-interruption" and incident.findings[1].check == "spot-interruption-unprotected"
    # without the notice the unprotected work still carries the deadline on its own
    [alone] = build_incidents([unprotected], now=report.generated_at)
    assert alone.urgency == "deadline" and alone.deadline == incident.deadline and alone.impact.jobs == 1


def xid_on(host_name: str, instance_id: str | None) -> list[Finding]:
    """gpu-xid run on a node whose kernel log is the recorded one (Xid 79 and three more GPUs)."""
    metadata = None if instance_id else {"latest/meta-data/instance-type": None, "latest/meta-data/instance-id": None}
    host = ReplayHost({"journalctl": (0, (NODE_FIXTURES / "journalctl-k-xid.log").read_text(), "")},
                      name=host_name, instance_id=instance_id or "i-unused", metadata=metadata,
                      imds_error=None if instance_id else "IMDS did not answer")
    report = Doctor(settings=Settings(), clock=lambda: XID_LOG_TIME).check_local(only=["gpu-xid"], host=host)
    assert report.findings
    return report.findings


def test_a_stalled_job_its_culprit_and_the_culprits_xids_are_one_incident(demo):
    _, report, _ = demo
    stalled = one(report.findings, "training-stalled")
    culprit = stalled.evidence["culprits"][0]
    elsewhere = xid_on("ip-10-9-9-9", "i-0aaaaaaaaaaaaaaaa")
    for xids in (xid_on(culprit["host"], culprit["instance"]), xid_on(culprit["host"], None)):
        incidents = build_incidents([*xids, stalled, *elsewhere], now=report.generated_at)
        joined = incident_of(incidents, "training-stalled", stalled.resource)
        assert refs(joined) == {(f.check, f.resource) for f in [stalled, *xids]}
        assert joined.cause.check == "gpu-xid"  # the Xid explains the stall
        assert joined.impact.jobs == 1 and joined.urgency == "now"  # the job is still losing work
        assert len(incidents) == 2  # the other node's Xids stay apart


def test_a_culprit_named_differently_meets_its_xid_through_the_identity_module(demo):
    _, report, _ = demo
    stalled = one(report.findings, "training-stalled")
    culprit = stalled.evidence["culprits"][0]
    # one spelling of an EC2 host name under any domain (identity.canonical): no inventory needed
    [incident] = build_incidents([*xid_on(f"{culprit['host']}.us-west-2.compute.internal", None), stalled],
                                 now=report.generated_at)
    assert incident.cause.check == "gpu-xid"
    # a name only the inventory knows (a Slurm node name) meets it through the resolver
    xids = xid_on("queue1-st-p5-2", None)
    assert len(build_incidents([*xids, stalled], now=report.generated_at)) == 2
    resolve = {"queue1-st-p5-2": culprit["instance"]}.get
    [incident] = build_incidents([*xids, stalled], now=report.generated_at, node_of=resolve)
    assert incident.cause.check == "gpu-xid"


def test_ids_stay_for_the_same_cause_when_times_and_wording_change(demo):
    _, report, incidents = demo
    later = report.generated_at + timedelta(minutes=7)
    moved = [f.model_copy(update={"summary": f.summary + " (again)",
                                  "evidence": {**f.evidence, "seconds_left": 1}}) for f in report.findings]
    again = build_incidents(list(reversed(moved)), now=later, cluster=report.cluster, region=report.region)
    assert {i.id for i in again} == {i.id for i in incidents}
    assert incidents[0].id == incident_id(one(report.findings, "spot-interruption"))


def test_every_check_the_tables_name_is_a_check():
    known = set(default_registry().ids())
    named = set(EXPLAINS) | {c for explained in EXPLAINS.values() for c in explained} | set(HARM_NOW)
    assert named <= known, named - known


# --- every finding in exactly one incident, whatever the findings ---------------------------------------------

POOL_RESOURCES = ["i-0aaaaaaaaaaaaaaa1", "i-0aaaaaaaaaaaaaaa2", "sg-01", "endpoint/chat/variant/A",
                  "endpoint/chat/variant/B", "node/ip-10-0-0-1", "s3://b/run/step-1/", "cr-01", "rtb-01"]


@st.composite
def findings(draw, demo_findings):
    checks = sorted(set(default_registry().ids()))
    made = []
    for _ in range(draw(st.integers(0, 12))):
        evidence = {}
        if draw(st.booleans()):
            evidence["blocking_resource"] = draw(st.sampled_from(POOL_RESOURCES))
        if draw(st.booleans()):
            evidence["culprits"] = [{"host": draw(st.sampled_from(["ip-10-0-0-1", "ip-10-0-0-2"])),
                                     "instance": draw(st.sampled_from(POOL_RESOURCES[:2]))}]
        if draw(st.booleans()):
            evidence["action_time"] = (datetime(2026, 1, 1, tzinfo=UTC)
                                       + timedelta(seconds=draw(st.integers(-3600, 3600)))).isoformat()
        if draw(st.booleans()):
            evidence["location"] = "s3://b/run/"
        made.append(Finding(check=draw(st.sampled_from(checks)), severity=draw(st.sampled_from(list(Severity))),
                            resource=draw(st.sampled_from(POOL_RESOURCES)), summary=draw(st.text(max_size=80)),
                            evidence=evidence, runbook="r"))
    made += draw(st.lists(st.sampled_from(demo_findings), max_size=8, unique_by=lambda f: f.id))
    return draw(st.permutations(made))


@pytest.fixture(scope="module")
def demo_findings(demo):
    return demo[1].findings


def test_every_finding_is_in_exactly_one_incident_and_the_order_ignores_the_input_order(demo_findings):
    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(findings(demo_findings), st.randoms())
    def check(found, rnd):
        now = datetime(2026, 1, 1, tzinfo=UTC)
        incidents = build_incidents(found, now=now)
        listed = sorted((f.check, f.resource) for i in incidents for f in i.findings)
        assert listed == sorted((f.check, f.resource) for f in found)
        assert all(i.findings and i.cause == i.findings[0] for i in incidents)
        shuffled = list(found)
        rnd.shuffle(shuffled)
        assert [i.id for i in build_incidents(shuffled, now=now)] == [i.id for i in incidents]
        report = Report(cluster="c", region="us-west-2", generated_at=now, status="critical", findings=found)
        assert [i["id"] for i in report.to_json_dict()["incidents"]] == [i.id for i in incidents]

    check()


# --- the front ends lead with the same ranking ----------------------------------------------------------------

def test_slack_report_opens_with_the_incidents_before_the_findings(demo):
    from fmdoctor.slack.blocks import report_messages

    _, report, incidents = demo
    texts = [b["text"]["text"] for m in report_messages(report) for b in m["blocks"] if b["type"] == "section"]
    act = next(n for n, t in enumerate(texts) if t.startswith("*Act first*"))
    first_severity = next(n for n, t in enumerate(texts) if t.startswith(":red_circle: *Critical*"))
    assert act < first_severity
    assert f"1. :red_circle: *{incidents[0].title}*" in texts[act]
    assert "next: `fmdoctor fix --cluster demo-llm-train" in texts[act]
    assert f"+ {len(incidents) - 5} more" in texts[act]


def test_serve_names_the_incident_behind_an_alarm_and_its_root(demo):
    from fmdoctor.serve.investigate import likely_cause, likely_incident

    facts, report, incidents = demo
    name = facts["endpoints"]["slow_at_max"]
    incident = likely_incident(incidents, {f"endpoint/{name}/variant/AllTraffic"})
    assert incident is not None and incident.cause.check == "autoscaling-at-max"
    cause, related = likely_cause(report.findings, {f"endpoint/{name}/variant/AllTraffic"}, report.generated_at)
    assert cause is not None and cause.check == "autoscaling-at-max" and len(related) == 3
    nothing_named = likely_incident(incidents, {"i-0000000000000000"})
    assert nothing_named is incidents[0]


def test_the_assistant_reads_and_answers_with_the_same_incidents(demo):
    from fmdoctor.assistant.compose import act_first_lines, by_incident
    from fmdoctor.assistant.digest import incidents_of, parse
    from fmdoctor.assistant.results import ToolResult

    facts, report, incidents = demo
    result = ToolResult.from_report("check_all", report)
    again = incidents_of(result.findings, report.generated_at, report.cluster, report.region)
    assert [i.id for i in again] == [i.id for i in incidents]  # from the tools' finding JSON, the same ranking
    lines = result.text().splitlines()
    # the tool's text ranks at the time it is read: a demo older than its Spot notice's 97 s (a loaded machine)
    # has that deadline behind it, and a passed deadline ranks after those still ahead
    now = incidents_of(result.findings, datetime.now(UTC), report.cluster, report.region)[0]
    heading = next(n for n, line in enumerate(lines) if line.startswith("incidents ("))
    node = facts["spot"]["interrupted"]
    assert lines[heading + 1].startswith(f"1. {now.severity} | {now.cause.check}/{now.cause.resource}")
    if now.cause == FindingRef("spot-interruption", node):  # the notice is still ahead: its work is in it
        assert f"spot-interruption-unprotected/{node}" in lines[heading + 1] and "deadline" in lines[heading + 1]
    assert len(parse(lines)["findings"]) == len(report.findings)  # incident lines are not read back as findings
    answer = act_first_lines(again, report.generated_at)
    assert answer[0] == f"Act first ({len(incidents)} incidents, most urgent first):"
    assert answer[1].startswith(f"1. [critical] {incidents[0].title} (deadline ")
    assert f"findings: spot-interruption/{node}, " in answer[1] and f"spot-interruption-unprotected/{node}" in answer[1]
    ordered = by_incident(result.findings, again)
    first = [f["id"] for f in ordered[:len(incidents[0].findings)]]
    assert first[0] == f"spot-interruption/{node}" and f"spot-interruption-unprotected/{node}" in first


@pytest.mark.parametrize("summary, title", [
    ("gpu-node-3 (i-0123456789abcdef0) will be terminated by EC2 Spot in about 1m38s (at 2026-12-05T00:14:12+00:00)"
     ": checkpoint now.", "gpu-node-3 will be terminated by EC2 Spot in about 1m38s"),
    ("Capacity Block cr-0b8a of 2 nodes (gpu-node-1 (i-0123456789abcdef0), gpu-node-2 (i-0123456789abcdef1)) ends "
     "in 1h49m; EC2 begins terminating", "Capacity Block cr-0b8a of 2 nodes ends in 1h49m"),
    ("SageMaker endpoint chat is Failed and serves no requests (The primary container for production variant "
     "AllTraffic did not pass the ping health check.)", "SageMaker endpoint chat is Failed and serves no requests"),
    ("gpu-node-4 (i-0123456789abcdef0, p5.48xlarge) has 4 of its 32 EFA interfaces (400 of 3200 Gbps)",
     "gpu-node-4 has 4 of its 32 EFA interfaces (400 of 3200 Gbps)"),  # a short aside stays
    ("p90 latency of chat/AllTraffic is 1600.0 ms over 15m (SLO 500 ms)", "p90 latency of chat/AllTraffic is "
     "1600.0 ms over 15m (SLO 500 ms)"),
    ("Short: then the rest", "Short: then the rest"),  # a break before 24 characters is kept
    ("x" * 130, "x" * 99 + "…"),
])
def test_a_title_is_the_causes_first_clause_without_its_lists_and_ids(summary, title):
    cause = Finding(check="c", severity=Severity.WARNING, resource="r", summary=summary, runbook="c")
    assert title_of(cause) == title


def test_every_front_end_groups_through_the_runs_own_node_identities(demo):
    """An Xid on-node finding names its node by its Name tag (``node/gpu-node-2``), a name only the inventory
    knows; the stalled job names the same node by host and id. The run's report carries its resolver, so its
    incidents (JSON, text, Markdown, Slack, the TUI, serve all read ``report.incidents()``) and the assistant's
    regrouping of its tool result meet them as one incident, without any caller passing ``node_of``."""
    from fmdoctor.assistant.digest import incident_head
    from fmdoctor.assistant.results import ToolResult
    from fmdoctor.report.markdown import render_markdown
    from fmdoctor.report.text import render_text

    _, report, _ = demo
    stalled = one(report.findings, "training-stalled")
    name = stalled.evidence["culprits"][0]["names"][0]
    assert not name.startswith(("i-", "ip-"))  # the Name tag: canonical() alone cannot tie it to the node
    xids = xid_on(name, None)
    alone = build_incidents([*xids, stalled], now=report.generated_at)
    assert len(alone) == 2  # without the inventory's answer the two do not meet
    ours = report.model_copy(update={"findings": [*xids, stalled]})
    [incident] = ours.incidents()
    assert incident.cause.check == "gpu-xid"
    [as_json] = ours.to_json_dict()["incidents"]
    assert as_json["cause"]["check"] == "gpu-xid" and len(as_json["findings"]) == len(xids) + 1
    assert "## Act first: 1 incident," in render_markdown(ours)
    assert "ACT FIRST" in render_text(ours) and "1 incident" in render_text(ours)
    result = ToolResult.from_report("check_all", ours)
    assert result.data["nodes"][name] == stalled.resource
    head = incident_head(result.findings, 4000, cluster=report.cluster, nodes=result.data["nodes"])
    assert head[0].startswith("incidents (all 1,"), head
