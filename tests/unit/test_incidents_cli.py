"""`fmdoctor check --demo` leads with its incidents: the JSON's `incidents` from the CLI, the same ids from two
runs of one world (a later clock, other times in the evidence), and the text's act-first screen."""

from __future__ import annotations

import json

import pytest

from fmdoctor.cli.main import main

pytestmark = pytest.mark.usefixtures("one_demo_per_module")


def run(capsys, *argv):
    code = main(list(argv))
    out, _ = capsys.readouterr()
    return code, out


def test_two_runs_of_one_world_give_the_same_incidents(capsys, one_demo_per_module):
    facts = one_demo_per_module.facts
    _, first = run(capsys, "check", "--demo", "--format", "json", "--no-progress")
    _, second = run(capsys, "check", "--demo", "--format", "json", "--no-progress")
    one, two = json.loads(first), json.loads(second)
    assert one["generated_at"] != two["generated_at"]
    assert [i["id"] for i in one["incidents"]] == [i["id"] for i in two["incidents"]]
    spot = one["incidents"][0]
    node = facts["spot"]["interrupted"]
    assert spot["cause"] == {"check": "spot-interruption", "resource": node}
    assert {"check": "spot-interruption-unprotected", "resource": node} in spot["findings"]
    assert spot["next"]["runbook"] == "spot-interruption"  # and the drain Slurm still needs, as its first fix
    assert spot["next"]["fix"].endswith(f"--check scheduler-schedules-faulty-node --resource {node}")
    group = facts["groups"]["demo-efa"]
    [sg] = [i for i in one["incidents"] if i["cause"] == {"check": "efa-sg-self-reference", "resource": group}]
    assert sg["findings"] == [sg["cause"], {"check": "efa-peer-unreachable", "resource": group}]
    assert sg["next"]["fix"].endswith(f"--check efa-sg-self-reference --resource {group}")
    listed = sorted((f["check"], f["resource"]) for i in one["incidents"] for f in i["findings"])
    assert listed == sorted((f["check"], f["resource"]) for f in one["findings"])


def test_the_text_report_says_what_to_do_first_on_its_first_screen(capsys):
    _, out = run(capsys, "check", "--demo", "--no-progress")
    screen = out.splitlines()[:24]
    assert screen[3].startswith("ACT FIRST")
    assert "will be terminated by EC2 Spot" in screen[4] and "deadline" in screen[5]
    assert any(line.strip().startswith("+ ") and "more incident" in line for line in screen)
