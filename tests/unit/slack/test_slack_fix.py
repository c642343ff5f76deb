"""Runbook and Fix buttons: the confirm dialog with the exact plan, approvers only, applied in moto, audited."""

from __future__ import annotations

import json
import time

import pytest

from fmdoctor.slack.testing import APPROVER, CHANNEL, GROUP_MEMBER, STRANGER, buttons, texts

# End to end, so out of the fast tier (`pytest -m "not e2e"`): the Slack app end to end: a fix from the button
# to the audited apply, over the seeded demo.
pytestmark = pytest.mark.e2e


CHECK = "efa-sg-self-reference"


def rules(world, group):
    found = world.session.client("ec2").describe_security_group_rules(
        Filters=[{"Name": "group-id", "Values": [group]}])["SecurityGroupRules"]
    return sorted(json.dumps(r, sort_keys=True, default=str) for r in found)


def posted_report(app, fake_slack, cluster):
    app.command(f"check {cluster} --only {CHECK}")
    [message] = fake_slack.wait_for("chat.postMessage")
    [fix] = buttons([message], "fmdoctor_fix")
    [runbook] = buttons([message], "fmdoctor_runbook")
    return fix, runbook, json.loads(fix["value"])["resource"]


def test_runbook_button_answers_privately_with_the_findings_values(demo, make_app, fake_slack):
    world, doctor = demo
    app = make_app(doctor, world.cluster)
    _, runbook, group = posted_report(app, fake_slack, world.cluster)
    assert app.click(runbook, STRANGER).status == 200  # reading a runbook needs no approval
    answers = fake_slack.wait_for("response_url")
    text = "\n".join(texts(a) for a in answers)
    assert answers[0]["response_type"] == "ephemeral" and answers[0]["replace_original"] is False
    assert "Runbook `efa-sg-self-reference`" in text and group in text
    assert "aws ec2 authorize-security-group-egress" in text


def test_approver_sees_the_exact_plan_then_applies_it_and_the_audit_names_them(demo, make_app, fake_slack):
    world, doctor = demo
    app = make_app(doctor, world.cluster)
    fix, _, group = posted_report(app, fake_slack, world.cluster)
    before = rules(world, group)

    reply = app.click(fix, APPROVER, message_ts="1700000000.000777")
    assert reply.status == 200 and reply.seconds < 3
    [opened] = fake_slack.wait_for("views.open")
    assert opened["trigger_id"] == "9.9.trig" and "submit" not in opened["view"]  # "planning…" first
    [updated] = fake_slack.wait_for("views.update")
    view = updated["view"]
    plan_text = texts({"blocks": view["blocks"]})
    assert "AuthorizeSecurityGroupEgress" in plan_text and group in plan_text  # the exact calls
    assert "pre-flight" in plan_text and "allowed" in plan_text  # and their DryRun
    assert view["submit"]["text"] == "Approve and apply"
    meta = json.loads(view["private_metadata"])
    assert meta["check"] == CHECK and meta["channel"] == CHANNEL and len(meta["digest"]) == 64
    assert rules(world, group) == before, "opening the dialog changes nothing"

    assert app.submit(view, APPROVER).status == 200
    [result] = fake_slack.wait_for("chat.postMessage", 2)[1:]
    assert result["channel"] == CHANNEL and result["thread_ts"] == "1700000000.000777"
    assert "fixed and verified" in texts(result) and f"<@{APPROVER}>" in texts(result)
    assert rules(world, group) != before
    assert doctor.check(world.cluster, only=[CHECK]).findings_for(CHECK) == []

    audit = app.service.audit.read()
    approval = next(e for e in audit if e["event"] == "approval")
    assert approval["approval"]["approver"] == APPROVER and approval["approval"]["channel"] == "slack"
    assert approval["plan_digest"] == meta["digest"]
    assert [e["event"] for e in audit][-3:] == ["approval", "apply", "verify"]


def test_a_stranger_cannot_open_the_dialog(demo, make_app, fake_slack):
    world, doctor = demo
    app = make_app(doctor, world.cluster)
    fix, _, group = posted_report(app, fake_slack, world.cluster)
    app.click(fix, STRANGER)
    [refusal] = fake_slack.wait_for("chat.postEphemeral")
    assert refusal["user"] == STRANGER and "not on the fix approvers list" in refusal["text"]
    assert fake_slack.of("views.open") == []
    [refused] = [e for e in app.service.audit.read() if e["event"] == "approval-refused"]
    assert refused["approver"] == STRANGER and refused["channel"] == "slack"


def test_a_stranger_submitting_the_dialog_is_refused_and_nothing_changes(demo, make_app, fake_slack):
    world, doctor = demo
    app = make_app(doctor, world.cluster)
    fix, _, group = posted_report(app, fake_slack, world.cluster)
    app.click(fix, APPROVER)
    view = fake_slack.wait_for("views.update")[0]["view"]
    before = rules(world, group)

    app.submit(view, STRANGER)  # e.g. a forwarded or crafted payload: the submitter is checked again
    [refusal] = fake_slack.wait_for("chat.postEphemeral")
    assert refusal["user"] == STRANGER
    time.sleep(0.5)
    assert rules(world, group) == before
    events = [e["event"] for e in app.service.audit.read()]
    assert "approval-refused" in events and "approval" not in events and "apply" not in events


def test_a_plan_other_than_the_one_shown_is_not_applied(demo, make_app, fake_slack):
    world, doctor = demo
    app = make_app(doctor, world.cluster)
    fix, _, group = posted_report(app, fake_slack, world.cluster)
    app.click(fix, APPROVER)
    view = fake_slack.wait_for("views.update")[0]["view"]
    meta = json.loads(view["private_metadata"])
    before = rules(world, group)

    app.submit({**view, "private_metadata": json.dumps({**meta, "digest": "0" * 64})}, APPROVER)
    [refusal] = fake_slack.wait_for("chat.postEphemeral")
    assert "plan changed" in refusal["text"]
    assert rules(world, group) == before
    assert "apply" not in [e["event"] for e in app.service.audit.read()]


def test_a_member_of_an_approver_group_may_approve(demo, make_app, fake_slack):
    world, doctor = demo
    app = make_app(doctor, world.cluster)
    fix, _, _ = posted_report(app, fake_slack, world.cluster)
    app.click(fix, GROUP_MEMBER)
    fake_slack.wait_for("views.update")
    assert fake_slack.of("usergroups.users.list")[0]["usergroup"] == "SOPSGROUP1"
    assert fake_slack.of("chat.postEphemeral") == []


def test_a_fix_that_cannot_be_planned_says_why_in_the_dialog(demo, make_app, fake_slack):
    world, doctor = demo
    app = make_app(doctor, world.cluster)
    fix = {"action_id": "fmdoctor_fix", "value": json.dumps({"cluster": world.cluster, "check": "efa-sg-self-ref",
                                                              "resource": None})}
    app.click(fix, APPROVER)
    [updated] = fake_slack.wait_for("views.update")
    text = texts({"blocks": updated["view"]["blocks"]})
    assert "unknown check" in text and "efa-sg-self-reference" in text  # with the suggestion
    assert "submit" not in updated["view"]
