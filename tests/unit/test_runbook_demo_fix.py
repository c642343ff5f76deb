"""Every fix command a runbook renders starts with the run's fix words (fmdoctor.engine.incidents.fix_words): with
--demo for the demo's findings, without it otherwise. A runbook that wrote 'fmdoctor fix' itself would send a demo
user's pasted command to the real account of their shell (scheduler-node-held-out, scheduler-node-down and
scheduler-schedules-faulty-node did)."""

from __future__ import annotations

import json
import re

import pytest

from fmdoctor.cli.main import main
from fmdoctor.runbooks.library import builtin_runbooks

BARE_FIX = re.compile(r"fmdoctor fix(?! --demo)")


# A command fmdoctor renders for a person to paste: the words up to where the shell command ends.
COMMAND = re.compile(r"\bfmdoctor (check|fix|why-not|ask|fleet|export|runbook)\b[^`|;&\n]*")


def bare_commands(text: str) -> list[str]:
    """The fmdoctor commands of a demo rendering that would not ask the demo (a line with one without --demo),
    and those that look at AWS (check, fix, why-not) without --demo among their own words."""
    lines = [line for line in text.splitlines() if COMMAND.search(line) and "--demo" not in line]
    words = [m.group(0) for m in COMMAND.finditer(text) if m.group(1) in ("check", "fix", "why-not")
             and "--demo" not in m.group(0).split()]
    return lines + words


@pytest.mark.parametrize("runbook", builtin_runbooks(), ids=lambda r: r.id)
def test_every_runbooks_fmdoctor_commands_carry_demo_for_the_demo_only(runbook):
    """Verify lines (``fmdoctor check --cluster ...``), on-node checks and why-not traces included: a Verify line
    copied from the demo without --demo fails in the user's shell (no such cluster) or reads their account."""
    demo = runbook.render(None, cluster="demo-llm-train", region="us-west-2", demo=True)
    real = runbook.render(None, cluster="llm-train", region="us-west-2")
    assert not bare_commands(demo), bare_commands(demo)
    assert "--demo" not in real
    assert len(COMMAND.findall(demo)) == len(COMMAND.findall(real))  # the same commands, less --demo


@pytest.mark.parametrize("runbook", builtin_runbooks(), ids=lambda r: r.id)
def test_every_runbooks_fix_commands_carry_demo_for_the_demo_only(runbook):
    demo = runbook.render(None, cluster="demo-llm-train", region="us-west-2", demo=True)
    real = runbook.render(None, cluster="llm-train", region="us-west-2")
    assert not BARE_FIX.findall(demo), [m.group(0) for m in re.finditer(r"fmdoctor fix.{0,60}", demo)]
    assert "--demo" not in real
    if "fmdoctor fix" in real:  # the same commands, less --demo
        assert demo.count("fmdoctor fix --demo") == real.count("fmdoctor fix")


def test_a_demo_runbooks_way_to_fill_it_in_asks_the_demo(capsys):
    assert main(["runbook", "show", "scheduler-node-held-out", "--demo", "--cluster", "demo-llm-train"]) == 0
    text = capsys.readouterr().out
    assert "fmdoctor check --demo --only scheduler-node-held-out --format json | fmdoctor runbook show" in text
    assert "fmdoctor fix --demo --cluster demo-llm-train --check scheduler-node-held-out" in text


@pytest.mark.usefixtures("one_demo_per_module")
def test_the_demos_fix_commands_carry_demo_in_its_report_and_its_findings_runbooks(capsys):
    assert main(["check", "--demo", "--format", "json"]) in (0, 1, 2, 3)
    report = json.loads(capsys.readouterr().out)
    assert report["demo"] is True
    fixes = [i["next"]["fix"] for i in report["incidents"] if i["next"].get("fix")]
    assert fixes and all(f.startswith("fmdoctor fix --demo ") for f in fixes), fixes
    held = [f for f in report["findings"] if f["check"] == "scheduler-node-held-out"]
    assert held, "the demo holds a node out"
    show = ["runbook", "show", "scheduler-node-held-out", "--cluster", "demo-llm-train", "--region", "us-west-2"]
    assert main([*show, "--finding", json.dumps(report)]) == 0  # the report says it is the demo's
    assert "fmdoctor fix --demo --cluster demo-llm-train --check scheduler-node-held-out --resource i-" \
        in capsys.readouterr().out
    assert main([*show, "--finding", json.dumps(held[0]), "--demo"]) == 0  # one finding taken out of it: --demo
    assert "fmdoctor fix --demo --cluster demo-llm-train --check scheduler-node-held-out" in capsys.readouterr().out
    assert main([*show, "--finding", json.dumps(held[0])]) == 0  # nothing says it is the demo's
    assert "--demo" not in capsys.readouterr().out


@pytest.mark.parametrize("cancelled", [True, False])
def test_a_demo_report_that_ends_early_still_says_it_is_the_demos(cancelled, monkeypatch):
    """Cancelled before the inventory, or the inventory unreadable (nothing listens on 127.0.0.1:9): the JSON
    contract's "demo": true holds for every demo run's report, not only those whose checks ran."""
    import threading

    from fmdoctor.config import Settings
    from fmdoctor.engine.api import Connection, Doctor

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    settings = Settings.model_validate({"region": "us-west-2", "clusters": {"c": {}}})
    doctor = Doctor(settings=settings, connection=Connection(region="us-west-2", endpoint_url="http://127.0.0.1:9"))
    doctor.extras["demo"] = object()
    cancel = threading.Event()
    if cancelled:
        cancel.set()
    report = doctor.check("c", cancel=cancel)
    assert report.status.value == "unknown" and (report.skipped if cancelled else report.errors)
    assert report.to_json_dict()["demo"] is True


@pytest.mark.usefixtures("one_demo_per_module")
def test_every_command_a_demo_findings_runbook_gives_asks_the_demo_and_runs(capsys):
    """Each demo finding's runbook, rendered with its real evidence (an endpoint's variant, a node's host): every
    fmdoctor command carries --demo in the demo's rendering and none in the account's, and each check and
    why-not command pasted from the demo's runbooks runs against the demo (a finding's exit code, not a usage
    error or an unknown cluster)."""
    import shlex

    assert main(["check", "--demo", "--format", "json", "--no-progress"]) in (0, 1, 2)
    report = json.loads(capsys.readouterr().out)
    library = {r.id: r for r in builtin_runbooks()}
    pasted: dict[str, str] = {}
    for finding in report["findings"]:
        runbook = library.get(finding["runbook"] or finding["check"])
        if runbook is None:
            continue
        demo = runbook.render(finding, cluster=report["cluster"], region=report["region"], demo=True)
        real = runbook.render(finding, cluster=report["cluster"], region=report["region"])
        assert not bare_commands(demo), (finding["check"], bare_commands(demo))
        assert "--demo" not in real, finding["check"]
        for command in COMMAND.finditer(demo):
            if command.group(1) in ("check", "why-not") and "⟨refused" not in command.group(0):
                pasted.setdefault(command.group(0).strip(), finding["check"])
    assert any("--local" in c for c in pasted) and any("--endpoint" in c for c in pasted), sorted(pasted)
    assert any(c.startswith("fmdoctor why-not") for c in pasted), sorted(pasted)
    for command, check in sorted(pasted.items()):
        argv = shlex.split(command, comments=True)[1:]
        code = main([*argv, "--no-progress"] if argv[0] == "check" else argv)
        out = capsys.readouterr()
        assert code in (0, 1, 2), (check, command, code, out.err[-800:])


@pytest.mark.parametrize("cluster, shown", [
    ("prod; rm -rf ~", "--cluster 'prod; rm -rf ~' --only"),  # one shell word
    ("`id`", "``"),  # a backtick cannot end the code span the command stands in
    ("-x", "--cluster ⟨refused: starts with a dash"),  # an option, not a value: refused, as in the body
    ("--demo", "--cluster ⟨refused: starts with a dash"),
])
def test_the_template_views_own_command_places_the_cluster_as_the_body_does(cluster, shown):
    """Without a finding, the view opens with the command that fills it in; its cluster goes through the policy the
    body's values follow, not a quoting of its own (shlex.quote let '--cluster -x' through as an option)."""
    runbook = next(r for r in builtin_runbooks() if r.id == "capacity-block-expiring")
    header = runbook.render(None, cluster=cluster, region="us-west-2").split("\n\n")[2]
    assert shown in header and "fmdoctor runbook show capacity-block-expiring --finding -" in header, header
