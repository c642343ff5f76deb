"""Every ``fmdoctor fix`` command rendered for the demo carries ``--demo``: pasted without it, the command plans the
fix against the real AWS account of the shell it is pasted in. The words come from one place
(``fmdoctor.engine.incidents.fix_words``): the incidents' ``next.fix`` (JSON, text, the assistant's answers) and
the runbooks' ``{{ fmdoctor_fix }}``."""

from __future__ import annotations

import json
import shlex

import pytest

from fmdoctor.cli.main import main
from fmdoctor.engine.incidents import fix_command
from fmdoctor.engine.model import Finding, Severity

SG = "sg-0123456789abcdef0"
FINDING = Finding(check="efa-sg-self-reference", severity=Severity.CRITICAL, resource=SG, summary="x",
                  evidence={"security_group": SG}, runbook="efa-sg-self-reference")


@pytest.mark.parametrize("cluster, region, demo, expected", [
    (None, None, False, f"fmdoctor fix --check efa-sg-self-reference --resource {SG}"),
    ("llm-train", "us-west-2", False,
     f"fmdoctor fix --cluster llm-train --region us-west-2 --check efa-sg-self-reference --resource {SG}"),
    ("demo-llm-train", "us-west-2", True,
     f"fmdoctor fix --demo --cluster demo-llm-train --region us-west-2 --check efa-sg-self-reference --resource {SG}"),
    (None, None, True, f"fmdoctor fix --demo --check efa-sg-self-reference --resource {SG}"),
    ("it's; rm -rf /", None, False,
     f"fmdoctor fix --cluster {shlex.quote(chr(39).join(['it', 's; rm -rf /']))} --check efa-sg-self-reference "
     f"--resource {SG}"),
])
def test_the_fix_command(cluster, region, demo, expected):
    assert fix_command(FINDING, cluster, region, demo) == expected


def test_a_report_of_an_account_has_no_demo_mark(sg_fault_cluster, run_checks):
    report = run_checks(only=["efa-sg-self-reference"])
    data = report.to_json_dict()
    assert "demo" not in data  # the JSON of a real run is as before
    [incident] = data["incidents"]
    assert incident["next"]["fix"].startswith("fmdoctor fix --cluster ")


@pytest.mark.usefixtures("one_demo_per_module")
class TestTheDemo:
    def run(self, capsys, *argv):
        main(list(argv))
        return capsys.readouterr().out

    def test_its_json_and_text_reports(self, capsys, tmp_path):
        out = self.run(capsys, "check", "--demo", "--format", "json", "--no-progress")
        data = json.loads(out)
        assert data["demo"] is True
        fixes = [i["next"]["fix"] for i in data["incidents"] if i["next"]["fix"]]
        assert fixes and all(f.startswith("fmdoctor fix --demo ") for f in fixes), fixes
        text = self.run(capsys, "check", "--demo", "--no-progress")
        pasted = [line for line in text.splitlines() if "fmdoctor fix" in line]
        assert pasted and all("fmdoctor fix --demo" in line for line in pasted), pasted
        report = tmp_path / "report.json"
        report.write_text(out)
        runbook = self.run(capsys, "runbook", "show", "efa-sg-self-reference", "--finding", f"@{report}")
        assert "fmdoctor fix --demo --cluster demo-llm-train --check efa-sg-self-reference" in runbook

    def test_the_assistants_answer(self, capsys):
        answer = self.run(capsys, "ask", "--demo", "--no-progress", "is the demo-llm-scratch file system ok?")
        steps = [line for line in answer.splitlines() if "fmdoctor fix" in line]
        assert steps and all("fmdoctor fix --demo" in line for line in steps), answer
