"""Streamable HTTP for ``fmdoctor mcp --transport http``, behind a static bearer token.

Anyone who can reach the port could otherwise read the cluster's findings (and, with --allow-fixes, ask for
fixes), so the server does not start without ``FMDOCTOR_MCP_TOKEN``, and every HTTP request must carry
``Authorization: Bearer <token>``. The comparison hashes both sides first and uses ``hmac.compare_digest``,
so its time depends neither on where the tokens differ nor on their lengths. The token is never logged.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from typing import Any

from fmdoctor.engine.errors import ConfigError

TOKEN_ENV = "FMDOCTOR_MCP_TOKEN"
MIN_TOKEN_CHARS = 16
LOOPBACK = ("127.0.0.1", "localhost", "::1")

Scope = dict[str, Any]


def token_from_env(environ: dict[str, str] | None = None) -> str:
    """The bearer token, or a ConfigError: HTTP never starts unauthenticated."""
    token = (environ if environ is not None else os.environ).get(TOKEN_ENV, "").strip()
    if not token:
        raise ConfigError(f"refusing to serve MCP over HTTP without a bearer token: set {TOKEN_ENV}",
                          hint=f"e.g. export {TOKEN_ENV}=$(openssl rand -hex 32); clients send "
                          "'Authorization: Bearer <token>'")
    if len(token) < MIN_TOKEN_CHARS:
        raise ConfigError(f"{TOKEN_ENV} is too short to be a secret (under {MIN_TOKEN_CHARS} characters)",
                          hint="use a random one: openssl rand -hex 32")
    return token


class BearerAuth:
    """ASGI middleware: HTTP requests without the right bearer token get 401 and never reach the MCP app.
    Lifespan events pass through (the app's session manager starts there)."""

    def __init__(self, app: Any, token: str):
        self.app = app
        self._expected = hashlib.sha256(token.encode()).digest()

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket") and not self._authorized(scope):
            await _unauthorized(send)
            return
        await self.app(scope, receive, send)

    def _authorized(self, scope: Scope) -> bool:
        presented = b""
        for name, value in scope.get("headers", ()):
            if name.lower() == b"authorization":
                scheme, _, credentials = value.partition(b" ")
                if scheme.lower() == b"bearer":
                    presented = credentials.strip()
                break
        return hmac.compare_digest(hashlib.sha256(presented).digest(), self._expected) and bool(presented)


async def _unauthorized(send: Any) -> None:
    body = json.dumps({"error": "unauthorized", "message": "missing or wrong bearer token"}).encode()
    await send({"type": "http.response.start", "status": 401,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"www-authenticate", b'Bearer realm="fmdoctor-mcp"')]})
    await send({"type": "http.response.body", "body": body})


def http_app(server: Any, token: str, host: str = "127.0.0.1", path: str = "/mcp") -> BearerAuth:
    """The MCP server's streamable HTTP app (the SDK's, with its DNS-rebinding guard on loopback hosts) behind
    the bearer token."""
    return BearerAuth(server.streamable_http_app(streamable_http_path=path, host=host), token)


def http_server(server: Any, token: str, host: str, port: int, bounds: Any = None) -> Any:
    """The uvicorn server for the app above, with the one hardening of fmdoctor's HTTP servers
    (:mod:`fmdoctor.safety.server`): the bearer token is checked only once a request's headers are complete, so
    without it a peer that never finished them held its connection forever, as many as it liked. Its access
    log stays off (the token is in headers it would not log anyway)."""
    import uvicorn

    from fmdoctor.safety.server import KEEP_ALIVE, ServerBounds

    limits = bounds or ServerBounds()
    # proxy_headers off: the bounds know a request's connection by scope["client"], the socket's peer.
    config = uvicorn.Config(limits.app(http_app(server, token, host)), host=host, port=port, log_level="warning",
                            access_log=False, proxy_headers=False, http=limits.protocol,
                            timeout_keep_alive=KEEP_ALIVE, server_header=False)
    return uvicorn.Server(config)


def serve_http(server: Any, token: str, host: str, port: int) -> None:
    """Serve until interrupted."""
    http_server(server, token, host, port).run()
