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
