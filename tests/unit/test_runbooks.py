"""Runbooks: every check has one, each renders strictly from real demo findings, and bad ones fail loudly."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fmdoctor.config import Settings
from fmdoctor.engine.model import Finding
from fmdoctor.engine.registry import default_registry
from fmdoctor.runbooks import (
    RunbookError,
    RunbookRenderError,
    builtin_runbooks,
    get_runbook,
    lint_runbooks,
    list_runbooks,
    parse_runbook,
)

REGISTRY = default_registry()
GOOD = """---
id: {id}
title: A test runbook
checks: [efa-sg-self-reference]
severity: critical
remediation_iam_actions: []
---
## What it means
Group {{{{ evidence.security_group }}}}.
## Confirm by hand
## Fix
## Verify
"""


@pytest.fixture(scope="module")
def demo_report(demo_check):
    """Every check's findings on the demo cluster (the findings people will actually see)."""
    return demo_check.report


def test_builtin_runbooks_are_valid_and_answer_registered_checks():
    runbooks = builtin_runbooks()
    assert {r.id for r in runbooks} >= {"efa-sg-self-reference", "efa-subnet-spread", "efa-not-attached",
                                         "efa-missing-interfaces", "placement-group"}
    assert lint_runbooks(runbooks, REGISTRY) == []


@pytest.mark.parametrize("check_id", REGISTRY.ids())
def test_every_check_has_a_runbook_that_renders_its_demo_findings_strictly(check_id, demo_report):
    check = REGISTRY.get(check_id)
    runbook = get_runbook(check.runbook_id())
    assert check_id in runbook.checks
    if "cluster" not in check.targets:
        pytest.skip(f"{check_id} runs only on a node: no demo finding to render (the template view is tested)")
    findings = demo_report.findings_for(check_id)
    assert findings, f"the demo plants no {check_id} finding, so its runbook is never rendered with real evidence"
    for finding in findings:
        text = runbook.render(finding, cluster=demo_report.cluster, region=demo_report.region)
        assert finding.resource in text
        assert "⟨" not in text and "{{" not in text and "{%" not in text
        assert not re.search(r"<[a-z][a-z-]*-id>", text), "placeholder left in rendered text"
        assert f"--region {demo_report.region}" in text
        for section in ("## What it means", "## Confirm by hand", "## Fix", "## Verify"):
            assert section in text


def test_real_values_land_in_the_commands(demo_report):
    [finding] = demo_report.findings_for("efa-sg-self-reference")
    group = finding.evidence["security_group"]
    text = get_runbook("efa-sg-self-reference").render(finding, cluster="demo-llm-train", region="us-west-2")
    assert f"aws ec2 authorize-security-group-egress --region us-west-2 --group-id {group}" in text
    assert f"UserIdGroupPairs=[{{GroupId={group}," in text
    assert "authorize-security-group-ingress" not in text  # ingress is fine in the demo: no command for it
    assert f"fmdoctor fix --cluster demo-llm-train --check efa-sg-self-reference --resource {group}" in text


@pytest.mark.parametrize("runbook", builtin_runbooks(), ids=lambda r: r.id)
def test_template_view_marks_every_value_it_needs(runbook):
    text = runbook.render()
    assert "source follows" not in text, "the body must render over placeholders, not fall back to its source"
    assert "⟨evidence." in text and "--finding -" in text
    assert "{{" not in text
    # Placeholders name evidence keys; one named after a method (`.get` defaults, string methods) means the
    # body computes on evidence and would show the reader nothing they can fill in.
    assert not re.search(r"⟨[^⟩]*\.(get|rsplit|rstrip|split|replace|startswith)\b", text)


def test_missing_evidence_is_an_error_not_blank_text(demo_report):
    [finding] = demo_report.findings_for("efa-not-attached")
    thin = finding.model_copy(update={"evidence": {k: v for k, v in finding.evidence.items() if k != "instance_type"}})
    with pytest.raises(RunbookRenderError, match="instance_type"):
        get_runbook("efa-not-attached").render(thin, cluster="c", region="us-west-2")


def test_placement_group_variants_render_from_their_own_evidence():
    runbook = get_runbook("placement-group")

    def finding(resource, evidence):
        return Finding(check="placement-group", severity="warning", resource=resource, summary="s",
                       evidence=evidence, runbook="placement-group")

    strategy = runbook.render(finding("pg", {"placement_group": "pg", "strategy": "spread", "members": 3}),
                              cluster="c", region="us-west-2")
    assert "NEW_GROUP=pg-cluster" in strategy and "`spread` strategy" in strategy
    none = runbook.render(finding("cluster/c", {"nodes_without_group": 4, "groups": {"none": 4}, "node_group": None,
                                                "scope": "cluster c", "instances": ["i-1", "i-2", "i-3", "i-4"]}),
                          cluster="c", region="us-west-2")
    assert "4 GPU nodes of cluster c (i-1, i-2, i-3, i-4) are\nin no placement group" in none
    assert "NEW_GROUP=c-pg" in none


def test_evidence_is_shell_quoted_and_the_sandbox_holds():
    body = "{{ evidence.name | sh }} {{ evidence.name.__class__ }}"
    runbook = parse_runbook(GOOD.format(id="quoting").replace("Group {{ evidence.security_group }}.", body),
                            "t.md", builtin=False)
    finding = {"check": "efa-sg-self-reference", "severity": "critical", "resource": "sg-1", "summary": "s",
               "evidence": {"name": "x; rm -rf /"}, "runbook": "quoting"}
    with pytest.raises(RunbookRenderError):  # private attributes are undefined in the sandbox, and strict
        runbook.render(finding)
    ok = parse_runbook(GOOD.format(id="quoting").replace("Group {{ evidence.security_group }}.",
                                                         "{{ evidence.name | sh }}"), "t.md", builtin=False)
    assert "'x; rm -rf /'" in ok.render(finding, cluster="c", region="r")


def test_unknown_cluster_and_region_become_shell_variables(demo_report):
    [finding] = demo_report.findings_for("efa-subnet-spread")
    text = get_runbook("efa-subnet-spread").render(finding)
    assert '--region "$AWS_REGION"' in text and 'Values="$FMDOCTOR_CLUSTER"' in text  # one word each
    assert "are not known" in text


@pytest.mark.parametrize(
    "text, message",
    [
        ("no front matter\n", "no front matter"),
        ("---\nid: [unclosed\n---\n", "not valid YAML"),
        ("---\nid: x\ntitle: t\nchecks: [a]\nseverity: fatal\n---\n", "severity"),
        ("---\nid: x\ntitle: t\nchecks: [a]\nseverity: info\nowner: me\n---\n", "unknown key 'owner'"),
        ("---\nid: x\ntitle: t\nseverity: info\n---\n", "missing key 'checks'"),
        ("---\nid: x\ntitle: t\nchecks: [a]\nseverity: info\nremediation_iam_actions: [ec2.Foo]\n---\n",
         "not an IAM action"),
        ("---\nid: Not_Kebab\ntitle: t\nchecks: [a]\nseverity: info\n---\n", "kebab-case"),
        ("---\nid: x\ntitle: t\nchecks: [a]\nseverity: info\n---\n## Fix\n{{ evidence.x \n", "bad.md:8: template"),
    ],
)
def test_bad_front_matter_names_the_file(text, message):
    with pytest.raises(RunbookError, match=re.escape(message)) as caught:
        parse_runbook(text, "bad.md", builtin=False)
    assert "bad.md" in str(caught.value)


def test_file_name_must_match_id():
    with pytest.raises(RunbookError, match="does not match the file name"):
        parse_runbook(GOOD.format(id="one"), "dir/two.md", builtin=False, stem="two")


def test_user_runbooks_add_and_override_by_id(tmp_path):
    (tmp_path / "efa-sg-self-reference.md").write_text(GOOD.format(id="efa-sg-self-reference"))
    (tmp_path / "team-extra.md").write_text(GOOD.format(id="team-extra"))
    # A relative runbooks_dir is relative to the config file that set it.
    settings = Settings(runbooks_dir=".", source=str(tmp_path / "fmdoctor.yaml"))
    runbooks = {r.id: r for r in list_runbooks(settings)}
    assert runbooks["efa-sg-self-reference"].title == "A test runbook" and not runbooks["efa-sg-self-reference"].builtin
    assert "team-extra" in runbooks and runbooks["efa-not-attached"].builtin
    assert get_runbook("team-extra", settings).source == str(tmp_path / "team-extra.md")


def test_bad_user_runbook_is_a_clear_error(tmp_path):
    (tmp_path / "broken.md").write_text("---\nid: broken\ntitle: t\nchecks: [x]\nseverity: severe\n---\n")
    with pytest.raises(RunbookError, match=re.escape(f"{tmp_path / 'broken.md'}: front matter: severity")):
        list_runbooks(Settings(runbooks_dir=str(tmp_path)))
    with pytest.raises(RunbookError, match="is not a directory"):
        list_runbooks(Settings(runbooks_dir=str(tmp_path / "missing")))


def test_unknown_runbook_suggests_close_ids():
    from fmdoctor.engine.errors import UsageError

    with pytest.raises(UsageError) as caught:
        get_runbook("efa-sg-self-refrence")
    assert "efa-sg-self-reference" in str(caught.value)


def test_lint_flags_unregistered_checks_and_missing_sections():
    runbook = parse_runbook("---\nid: x\ntitle: t\nchecks: [no-such-check]\nseverity: info\n---\n## Fix\n", "x.md",
                            builtin=False)
    problems = lint_runbooks([*builtin_runbooks(), runbook], REGISTRY)
    assert any("'no-such-check', which is not a registered check" in p for p in problems)
    assert any("x.md: no '## Verify' section" in p for p in problems)
    without = [r for r in builtin_runbooks() if r.id != "placement-group"]
    assert any("names runbook 'placement-group', which does not exist" in p for p in lint_runbooks(without, REGISTRY))


def test_demo_fix_hints_are_valid_and_their_runbooks_declare_the_permissions(demo_report):
    """A finding's fix hints must build into calls, and its runbook must name the IAM actions they need
    (that is what 'fmdoctor iam-policy --remediation' grants)."""
    from fmdoctor.remediation.actions import ACTIONS, build_call

    with_hints = [f for f in demo_report.findings if f.evidence.get("fix")]
    assert with_hints, "the demo has no automatically fixable finding"
    for finding in with_hints:
        declared = set(get_runbook(finding.runbook).remediation_iam_actions)
        for hint in finding.evidence["fix"]:
            assert hint["action"] in ACTIONS, f"{finding.id}: unknown fix action {hint['action']!r}"
            call = build_call(hint, finding.check, finding.id)
            assert call.iam_action in declared, f"runbook {finding.runbook} does not declare {call.iam_action}"


def test_lint_flags_a_runbook_whose_severity_is_not_its_checks():
    """The template view shows the runbook's severity; a runbook that says critical for a check declared as a
    warning tells the reader the wrong thing before any finding is filled in."""
    efa_errors = get_runbook("efa-errors")
    assert efa_errors.severity == REGISTRY.get("efa-errors").severity
    text = Path(efa_errors.source).read_text(encoding="utf-8")
    louder = parse_runbook(text.replace("severity: warning", "severity: critical", 1), "efa-errors.md", builtin=False)
    others = [r for r in builtin_runbooks() if r.id != "efa-errors"]
    assert lint_runbooks([*others, louder], REGISTRY) == [
        "efa-errors.md: severity critical, but check efa-errors declares warning"]
