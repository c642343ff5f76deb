"""``fmdoctor fleet check`` and ``fmdoctor export cloudwatch`` in-process: formats, exit codes, bad input."""

from __future__ import annotations

import json

import pytest
from prometheus_client.parser import text_string_to_metric_families

from fmdoctor.cli.main import main
from fmdoctor.report.text import WIDTH

# Every --demo run here only reads the demo: one seeded world serves the module.
pytestmark = pytest.mark.usefixtures("one_demo_per_module")


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_demo_fleet_summary_table(capsys):
    code, out, _ = run(capsys, "fleet", "check", "--demo", "--no-progress")
    assert code == 2
    lines = out.splitlines()
    assert lines[0] == "fmdoctor fleet check CRITICAL"
    assert "6 ok, 1 warning, 1 critical · 2 accounts · 4 scopes" in lines[1]
    header = next(line for line in lines if line.startswith("CLUSTER"))
    assert header.split() == ["CLUSTER", "ACCOUNT", "REGION", "STATUS", "WORST", "FINDINGS"]
    rows = [line.split() for line in lines[lines.index(header) + 1:] if line.strip()]
    assert rows[0] == ["c1", "100000000001", "us-west-2", "critical", "efa-sg-self-reference,"]
    assert rows[1] == ["efa-peer-unreachable"]  # the worst findings wrap within the column
    rows = [rows[0], *rows[2:]]
    assert rows[1][:4] == ["c0", "100000000002", "us-east-1", "warning"]
    assert {r[3] for r in rows[2:]} == {"ok"} and len(rows) == 8
    assert max(len(line) for line in lines) <= WIDTH and "\x1b[" not in out


def test_check_prometheus_format(capsys):
    code, out, _ = run(capsys, "check", "--demo", "--format", "prometheus", "--only", "efa", "--no-progress")
    assert code == 2
    families = {f.name: f for f in text_string_to_metric_families(out)}
    [status] = families["fmdoctor_status"].samples
    assert status.labels == {"cluster": "demo-llm-train", "region": "us-west-2"} and status.value == 2


def test_export_dry_run_prints_the_requests(capsys):
    code, out, _ = run(capsys, "export", "cloudwatch", "--demo", "--dry-run", "--only", "efa-not-attached",
                       "--namespace", "Team/fmdoctor", "--no-progress")
    assert code == 0
    result = json.loads(out)
    assert (result["namespace"], result["metrics"], result["calls"], result["dry_run"]) == ("Team/fmdoctor", 5, 0, True)
    names = [d["MetricName"] for d in result["requests"][0]["MetricData"]]
    assert names == ["Status", "Findings", "Findings", "Findings", "CheckErrors"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["fleet", "check", "--org", "--accounts", "a.yaml"], "not allowed with argument"),
        (["fleet", "check", "--shard", "3/3", "--regions", "us-west-2"], "expected INDEX/COUNT"),
        (["fleet", "check", "--regions", "us-west-2,moon-1"], "'moon-1' is not an AWS region name"),
        (["fleet", "check", "--concurrency", "0", "--regions", "us-west-2"], "between 1 and 64"),
        (["fleet", "check", "--accounts", "/nonexistent.yaml", "--regions", "us-west-2"], "cannot read accounts"),
        (["fleet", "check", "--account-ids", "123", "--regions", "us-west-2"], "'123' is not a 12-digit account id"),
        (["fleet", "check", "--role-name", "bad role", "--regions", "us-west-2"], "is not an IAM role name"),
        (["export", "cloudwatch", "--report", "r.json", "--cluster", "x"], "does not take --cluster"),
        (["export", "cloudwatch", "--report", "/nonexistent.json"], "cannot read report"),
    ],
)
def test_bad_input_exits_3_with_one_message(capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 3 and out == ""
    assert message in err and "Traceback" not in err


def test_fleet_progress_goes_to_stderr_one_line_per_cluster():
    import io

    from fmdoctor.cli.fleet_cmd import FleetProgressLine
    from fmdoctor.engine.model import Status
    from fmdoctor.fleet import FleetEvent

    stream = io.StringIO()
    progress = FleetProgressLine(stream=stream, delay_s=0)
    progress(FleetEvent("111111111111", "us-west-2", "llm", Status.CRITICAL, 1, 3))
    FleetProgressLine(stream=stream, delay_s=60)(FleetEvent("111111111111", "us-west-2", "b", Status.OK, 2, 3))
    assert stream.getvalue() == "fmdoctor: [1/3] 111111111111 us-west-2 llm: critical\n"
