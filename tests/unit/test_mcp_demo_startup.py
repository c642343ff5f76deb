"""``fmdoctor mcp --demo`` answers ``initialize`` before its demo world is seeded; tools wait for the world.

Ordering, not durations: seeding is held until the test lets it go, so a client that finished ``initialize``
(and listed the tools) while it was held got those answers before the world existed.
"""

from __future__ import annotations

import threading

import anyio
import pytest
from mcp import Client

from fmdoctor.cli.main import build_parser
from fmdoctor.cli.mcp_cmd import demo_server
from fmdoctor.demo import DEMO_CLUSTER, runtime
from fmdoctor.engine.errors import FmdoctorError


@pytest.fixture
def held_seeding(monkeypatch):
    """seed_demo waits for ``release``; ``seeded`` is set once the world exists."""
    release, seeded = threading.Event(), threading.Event()
    real = runtime.seed_demo

    def seed_when_released(session, *args, **kwargs):
        assert release.wait(120), "the test never released seeding"
        world = real(session, *args, **kwargs)
        seeded.set()
        return world

    monkeypatch.setattr(runtime, "seed_demo", seed_when_released)
    yield release, seeded
    release.set()


def serve(tmp_path, body):
    args = build_parser().parse_args(["mcp", "--demo", "--audit-log", str(tmp_path / "audit.jsonl")])
    server, background, cluster = demo_server(args)
    assert cluster == DEMO_CLUSTER
    background.start()
    try:
        async def main():
            async with Client(server, mode="legacy") as client:  # entering the session is initialize
                return await body(client)

        return anyio.run(main)
    finally:
        background.close()


def test_initialize_and_the_tool_list_are_answered_while_the_world_is_still_being_seeded(tmp_path, held_seeding):
    release, seeded = held_seeding

    async def body(client):
        initialized_before_seeding = not seeded.is_set()
        names = {tool.name for tool in (await client.list_tools()).tools}
        listed_before_seeding = not seeded.is_set()
        release.set()
        result = await client.call_tool("list_checks", {})  # waits for the world
        return initialized_before_seeding, listed_before_seeding, names, result, seeded.is_set()

    initialized_early, listed_early, names, result, seeded_by_then = serve(tmp_path, body)
    assert initialized_early and listed_early
    assert {"check", "list_checks", "why_not"} <= names
    assert not result.is_error and seeded_by_then
    assert "efa-sg-self-reference" in {c["id"] for c in result.structured_content["result"]}


def test_a_world_that_could_not_be_seeded_is_a_tool_error_with_its_message(tmp_path, monkeypatch):
    def broken(session, *args, **kwargs):
        raise FmdoctorError("the demo world broke", hint="a test fault")

    monkeypatch.setattr(runtime, "seed_demo", broken)

    async def body(client):
        return await client.call_tool("list_checks", {})

    result = serve(tmp_path, body)
    assert result.is_error
    assert "the demo world broke" in result.content[0].text
