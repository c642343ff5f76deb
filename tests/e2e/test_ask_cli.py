"""``fmdoctor ask`` as users run it: the installed CLI, real boto3 over HTTP to moto's server on 127.0.0.1."""

from __future__ import annotations

import pytest

from fmdoctor.demo.scenario import DEMO_CLUSTER, seed_demo

pytestmark = pytest.mark.e2e


def test_ask_over_http_with_the_connection_flags(moto_server, fmdoctor_cli):
    world = seed_demo(moto_server.session())
    result = fmdoctor_cli("ask", "why is training slow?", "--cluster", DEMO_CLUSTER, "--region", "us-west-2",
                          "--endpoint-url", moto_server.url, "--format", "json")
    assert result.code == 0, result.stderr
    out = result.json()
    assert "check_efa" in [c["name"] for c in out["tool_calls"]]
    group = world.facts["groups"]["demo-efa"]
    assert f"efa-sg-self-reference/{group}" in out["answer"]
    assert out["unverified_citations"] == [] and out["citations"] == [f["id"] for f in out["findings"]]


def test_ask_unknown_cluster_is_a_clear_error(moto_server, fmdoctor_cli):
    result = fmdoctor_cli("ask", "is my cluster healthy", "--cluster", "nope", "--region", "us-west-2",
                          "--endpoint-url", moto_server.url)
    assert result.code == 3
    assert "no running or pending instances tagged with cluster 'nope'" in result.stderr
    assert "Traceback" not in result.stdout + result.stderr
