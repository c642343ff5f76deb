"""``fmdoctor mcp`` over stdio as an MCP client starts it: the installed CLI as a subprocess, moto's server."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters

from fmdoctor.demo.scenario import DEMO_CLUSTER, seed_demo

pytestmark = pytest.mark.e2e


def test_stdio_server_answers_a_check_and_keeps_stdout_for_the_protocol(moto_server, tmp_path):
    world = seed_demo(moto_server.session())
    group = world.facts["groups"]["demo-efa"]
    params = StdioServerParameters(
        command=str(Path(sys.executable).with_name("fmdoctor")),
        args=["mcp", "--cluster", DEMO_CLUSTER, "--region", "us-west-2", "--endpoint-url", moto_server.url],
        env={"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_CONFIG_FILE": os.devnull,
             "AWS_SHARED_CREDENTIALS_FILE": os.devnull, "AWS_EC2_METADATA_DISABLED": "true",
             "NO_PROXY": "127.0.0.1,localhost", "HOME": str(tmp_path)},
        cwd=tmp_path,
    )

    async def session():
        async with Client(params, mode="legacy") as client:
            names = {tool.name for tool in (await client.list_tools()).tools}
            report = await client.call_tool("check", {"only": ["efa-sg-self-reference"]})
            return names, report.structured_content

    names, report = anyio.run(session)
    assert {"check", "why_not", "get_runbook"} <= names and "apply_fix" not in names
    assert report["cluster"] == DEMO_CLUSTER
    assert [f["resource"] for f in report["findings"] if f["check"] == "efa-sg-self-reference"] == [group]
