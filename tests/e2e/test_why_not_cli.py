"""``fmdoctor why-not`` as users run it: a subprocess against moto's server on 127.0.0.1."""

from __future__ import annotations

import pytest

from fmdoctor.demo.scenario import DEMO_CLUSTER, seed_demo

pytestmark = pytest.mark.e2e


def test_why_not_blocked_reachable_and_bad_input_over_http(moto_server, fmdoctor_cli):
    world = seed_demo(moto_server.session())
    common = ("--cluster", DEMO_CLUSTER, "--region", "us-west-2", "--endpoint-url", moto_server.url)

    blocked = fmdoctor_cli("why-not", *common, "--from", "203.0.113.0/24", "--to", "head-node", "--port", "22",
                           "--format", "json")
    assert blocked.code == 2, blocked.stderr
    data = blocked.json()
    assert set(data) == {"reachable", "source", "destination", "protocol", "port", "hops", "blocked_by", "warnings"}
    assert (data["reachable"], data["protocol"], data["port"]) == (False, "tcp", 22)
    assert data["destination"]["resource"].startswith("eni-")
    assert set(data["blocked_by"]) == {"code", "component", "resource", "rule", "fix", "evidence"}
    assert data["blocked_by"]["code"] == "sg-ingress-no-match"
    assert data["blocked_by"]["resource"] == world.facts["groups"]["demo-head"]
    assert data["blocked_by"]["fix"][0]["cidr"] == "203.0.113.0/24"
    assert [h["component"] for h in data["hops"]] == ["source", "route", "internet-gateway", "nacl-in", "sg-ingress"]

    fsx = fmdoctor_cli("why-not", *common, "--from", "gpu-node-1", "--to", world.facts["fsx"]["id"])
    assert fsx.code == 2 and "BLOCKED" in fsx.stdout and "1018-1023" in fsx.stdout
    assert all(len(line) <= 80 for line in fsx.stdout.splitlines())

    s3 = fmdoctor_cli("why-not", *common, "--from", "gpu-node-1", "--to", "s3", "--format", "json")
    assert s3.code == 0, s3.stderr
    assert s3.json()["blocked_by"] is None
    assert "vpc-endpoint" in [h["component"] for h in s3.json()["hops"]]

    efa = fmdoctor_cli("why-not", *common, "--from", "gpu-node-1", "--to", "gpu-node-2", "--protocol", "efa",
                       "--format", "json")
    assert efa.code == 2, efa.stderr
    assert (efa.json()["protocol"], efa.json()["port"]) == ("efa", None)
    assert efa.json()["blocked_by"]["code"] == "sg-egress-no-match"  # the demo's EFA group lacks its egress rule
    efa_port = fmdoctor_cli("why-not", *common, "--from", "gpu-node-1", "--to", "gpu-node-2", "--protocol", "efa",
                            "--port", "22")
    assert efa_port.code == 3 and "does not apply to protocol efa" in efa_port.stderr

    bad = fmdoctor_cli("why-not", *common, "--from", "gpu-node-1", "--to", "head-node", "--port", "http")
    assert bad.code == 3 and bad.stdout == "" and "invalid port" in bad.stderr and "Traceback" not in bad.stderr
    unknown = fmdoctor_cli("why-not", *common, "--from", "gpu-node-1", "--to", "i-0123456789abcdef0", "--port", "22")
    assert unknown.code == 3 and "Traceback" not in unknown.stderr


def test_why_not_demo_from_a_bare_environment(fmdoctor_cli):
    result = fmdoctor_cli("why-not", "--demo", "--from", "internet", "--to", "gpu-node-1", "--port", "22",
                          env={"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": ""})
    assert result.code == 2, result.stderr
    assert "nat-no-inbound" in result.stdout
