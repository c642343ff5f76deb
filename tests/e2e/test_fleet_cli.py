"""``fmdoctor fleet check`` and ``export cloudwatch`` as a scheduled job runs them: subprocesses against moto's
server on 127.0.0.1, every account reached through sts:AssumeRole."""

from __future__ import annotations

import json

import pytest
from prometheus_client.parser import text_string_to_metric_families

from fmdoctor.demo.fleet import EGRESS_MISSING, account_ids, seed_fleet
from fmdoctor.demo.runtime import LEAN_MOTO_ENV

pytestmark = pytest.mark.e2e

ACCOUNTS = account_ids(2)
REGIONS = ["us-west-2", "eu-west-1"]


@pytest.fixture
def fleet(moto_server, monkeypatch, tmp_path):
    for key, value in LEAN_MOTO_ENV.items():
        monkeypatch.setenv(key, value)  # the server runs in this process
    world = seed_fleet(moto_server.session(), ACCOUNTS, REGIONS, 1, {(ACCOUNTS[1], "eu-west-1", "c0"): EGRESS_MISSING})
    accounts = tmp_path / "accounts.yaml"
    accounts.write_text(f"role_name: fmdoctor-read-only\naccounts:\n  - id: '{ACCOUNTS[0]}'\n    name: research\n"
                        f"  - '{ACCOUNTS[1]}'\n")
    return world, accounts


def test_fleet_json_over_http(fleet, moto_server, fmdoctor_cli):
    world, accounts = fleet
    result = fmdoctor_cli("fleet", "check", "--accounts", str(accounts), "--regions", ",".join(REGIONS),
                          "--endpoint-url", moto_server.url, "--format", "json", "--no-progress")
    assert result.code == 2, result.stderr
    report = result.json()
    assert list(report) == ["schema", "generated_at", "status", "accounts", "summary", "scopes", "clusters", "stats"]
    assert (report["schema"], report["status"], report["accounts"]) == ("fmdoctor.fleet/v1", "critical", 2)
    assert [(s["account"], s["region"], s["status"], s["error"]) for s in report["scopes"]] == [
        (a, r, "ok", None) for a in ACCOUNTS for r in sorted(REGIONS)]
    statuses = {(c["account"], c["region"], c["cluster"]): c["status"] for c in report["clusters"]}
    assert statuses == {key: world.expected_status(fault) for key, fault in world.clusters.items()}
    broken = next(c for c in report["clusters"] if c["status"] == "critical")
    assert [f["check"] for f in broken["report"]["findings"]] == ["efa-sg-self-reference", "efa-peer-unreachable"]
    assert report["stats"]["api_calls"]["sts.AssumeRole"] == 2
    assert report["summary"]["clusters_by_status"] == {"ok": 3, "warning": 0, "critical": 1, "unknown": 0}


def test_fleet_prometheus_then_cloudwatch_export(fleet, moto_server, fmdoctor_cli, tmp_path):
    _, accounts = fleet
    base = ["fleet", "check", "--accounts", str(accounts), "--regions", "us-west-2", "--endpoint-url",
            moto_server.url, "--no-progress"]
    prom = fmdoctor_cli(*base, "--format", "prometheus")
    assert prom.code == 0, prom.stderr
    families = {f.name: f for f in text_string_to_metric_families(prom.stdout)}
    assert {s.labels["account"] for s in families["fmdoctor_status"].samples} == set(ACCOUNTS)
    assert families["fmdoctor_fleet_status"].samples[0].value == 0

    saved = tmp_path / "fleet.json"
    saved.write_text(fmdoctor_cli(*base, "--format", "json").stdout)
    exported = fmdoctor_cli("export", "cloudwatch", "--report", str(saved), "--namespace", "fmdoctor-e2e",
                            "--region", "us-west-2", "--endpoint-url", moto_server.url)
    assert exported.code == 0, exported.stderr
    # Per cluster: Findings for each check that ran x 3 severities, CheckErrors for each check, and Status.
    ran = [c["report"]["stats"]["checks_run"] for c in json.loads(saved.read_text())["clusters"]]
    expected = sum(4 * len(checks) + 1 for checks in ran)
    assert len(ran) == 2 and all(ran)
    assert f"put {expected} metrics into fmdoctor-e2e (us-west-2) in 1 PutMetricData calls" in exported.stderr
    cloudwatch = moto_server.session().client("cloudwatch")
    metrics = [m for page in cloudwatch.get_paginator("list_metrics").paginate(Namespace="fmdoctor-e2e")
               for m in page["Metrics"]]
    status = [m for m in metrics if m["MetricName"] == "Status"]
    assert sorted(next(d["Value"] for d in m["Dimensions"] if d["Name"] == "Account") for m in status) == ACCOUNTS
