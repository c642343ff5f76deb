"""``fmdoctor mcp --transport http``: the bearer token gate, on 127.0.0.1 with uvicorn in a thread."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from fmdoctor.cli.main import main
from fmdoctor.engine.api import Connection, Doctor
from fmdoctor.mcp.http import TOKEN_ENV, BearerAuth, http_server, token_from_env
from fmdoctor.mcp.server import build_server
from fmdoctor.mcp.service import McpService
from fmdoctor.safety.server import ServerBounds

from ..unfinished_requests import closed
from ..unfinished_requests import hold as hold_unfinished

TOKEN = "s3cret-token-for-tests-0123456789"
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                         "clientInfo": {"name": "t", "version": "0"}}}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def bounds() -> ServerBounds:
    return ServerBounds()


@pytest.fixture
def url(aws, bounds) -> Iterator[str]:
    """The MCP server over streamable HTTP on 127.0.0.1 (moto behind it) as fmdoctor mcp serves it, stopped after
    the test."""
    service = McpService(Doctor(connection=Connection(region="us-west-2")), cluster="test-cluster")
    port = free_port()
    server = http_server(build_server(service), TOKEN, "127.0.0.1", port, bounds)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong-token-of-the-same-shape"},
                                     {"Authorization": f"Basic {TOKEN}"}, {"Authorization": "Bearer"},
                                     {"Authorization": f"Bearer {TOKEN}x"}])
def test_a_missing_or_wrong_token_gets_401_and_never_reaches_mcp(url, headers):
    response = httpx.post(url, json=INITIALIZE, headers={**MCP_HEADERS, **headers}, timeout=10)
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer")
    assert TOKEN not in response.text and "jsonrpc" not in response.text


def test_the_right_token_serves_the_tools(url, healthy_efa_cluster):
    async def main_():
        async with (httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30) as http,
                    Client(streamable_http_client(url, http_client=http), mode="legacy") as client):
            names = {tool.name for tool in (await client.list_tools()).tools}
            report = await client.call_tool("check", {"only": ["efa-sg-self-reference"]})
            return names, report.structured_content

    names, report = anyio.run(main_)
    assert "check" in names and "apply_fix" not in names
    assert report["status"] == "ok" and report["stats"]["checks_run"] == ["efa-sg-self-reference"]


def test_lifespan_passes_through_and_comparison_needs_the_exact_token():
    seen = []

    async def app(scope, receive, send):
        seen.append(scope["type"])

    gate = BearerAuth(app, TOKEN)
    anyio.run(gate, {"type": "lifespan"}, None, None)
    assert seen == ["lifespan"]
    assert gate._authorized({"headers": [(b"authorization", f"bearer {TOKEN}".encode())]})
    assert not gate._authorized({"headers": [(b"authorization", TOKEN.encode())]})


def test_http_refuses_to_start_without_a_token_or_with_a_short_one(capsys, monkeypatch):
    assert main(["mcp", "--transport", "http", "--cluster", "c", "--region", "us-west-2"]) == 3
    err = capsys.readouterr().err
    assert TOKEN_ENV in err and "Traceback" not in err
    monkeypatch.setenv(TOKEN_ENV, "short")
    assert main(["mcp", "--transport", "http", "--cluster", "c", "--region", "us-west-2"]) == 3
    assert "too short" in capsys.readouterr().err
    assert token_from_env({TOKEN_ENV: f"  {TOKEN}\n"}) == TOKEN


def hold(url: str, count: int) -> list[socket.socket]:
    """``count`` connections that start a request and never finish its headers (so never reach the token)."""
    return hold_unfinished(int(url.split(":")[2].split("/")[0]), count, b"POST /mcp HTTP/1.1")


@pytest.mark.parametrize("bounds", [ServerBounds(header_timeout=1.0, max_per_peer=4)])
def test_unfinished_headers_are_closed_and_one_peer_holds_few_connections(url, bounds):
    # The bearer token is checked once headers are complete: before the shared bounds, a peer that never
    # finished them held every connection it opened, with no deadline.
    held = hold(url, 6)
    try:
        assert [closed(c, 0.5) for c in held[4:]] == [True, True]  # over the per-peer cap: closed at once
        assert httpx.post(url, json=INITIALIZE, headers=MCP_HEADERS, timeout=10).status_code == 401
        assert all(closed(c, 5.0) for c in held[:4])  # no complete headers within header_timeout: closed
    finally:
        for conn in held:
            conn.close()
