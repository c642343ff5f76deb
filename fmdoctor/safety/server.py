"""The one hardening of fmdoctor's HTTP servers (``slack serve --mode http``, ``serve``, ``mcp --transport
http``): uvicorn's HTTP/1.1 protocol with a deadline for each request's headers and a cap on the connections one
peer may hold.

uvicorn times out only idle keep-alive connections, and its ``limit_concurrency`` counts *connections*, so a
peer that opens ~130 connections and never finishes a request line made every request, ``/healthz`` included,
answer 503. With :class:`ServerBounds`: a connection must send its request line and headers within
``header_timeout`` (and again, after a response, within ``header_timeout + keep_alive``: uvicorn's keep-alive
timer stops once bytes arrive, so a trickled next request would otherwise hold the connection) or it is closed;
one peer address holds at most ``max_per_peer`` connections (more are closed at once); and the servers set no
``limit_concurrency``, so the health endpoint answers while the event loop runs. Connections cost no thread
while they wait (asyncio); the work behind a request is bounded by each server's own pool.

Built from public interfaces only (no subclass of uvicorn's private protocol classes): :class:`_BoundedProtocol`
wraps the protocol uvicorn itself uses for ``http="h11"`` through asyncio's protocol interface, and
:meth:`ServerBounds.app` wraps the ASGI application, which uvicorn calls once a request's headers are complete:
it stops the deadline of the connection its ``scope["client"]`` names and re-arms it once the response is sent.
``scope["client"]`` must be the socket's peer, so the servers run with ``proxy_headers=False``.
"""

from __future__ import annotations

import asyncio
import functools
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

from uvicorn.config import HTTP_PROTOCOLS
from uvicorn.importer import import_from_string

HEADER_TIMEOUT = 10.0  # seconds for a new connection to send its request line and headers
KEEP_ALIVE = 5  # seconds an idle keep-alive connection stays open
MAX_PER_PEER = 64  # connections one address may hold at once

Address = tuple[str, int]
Asgi = Callable[[dict[str, Any], Any, Any], Awaitable[None]]


class ServerBounds:
    """One server's bounds: pass :attr:`protocol` as ``uvicorn.Config(http=...)`` and :meth:`app` of the ASGI
    application as its app. All of a server's connections run on its event loop, so the state needs no lock."""

    def __init__(self, header_timeout: float = HEADER_TIMEOUT, keep_alive: float = KEEP_ALIVE,
                 max_per_peer: int = MAX_PER_PEER):
        self.header_timeout, self.keep_alive, self.max_per_peer = header_timeout, keep_alive, max_per_peer
        self.open: dict[Address, _BoundedProtocol] = {}
        self.peers: Counter[str] = Counter()

    @property
    def protocol(self) -> Callable[..., asyncio.Protocol]:
        return functools.partial(_BoundedProtocol, self)

    def app(self, application: Asgi) -> Asgi:
        """``application`` with each HTTP request's header deadline stopped while it runs and re-armed after."""

        async def bounded(scope: dict[str, Any], receive: Any, send: Any) -> None:
            if scope.get("type") != "http":
                await application(scope, receive, send)
                return
            connection = self.open.get(_address(scope.get("client")))  # type: ignore[arg-type]
            if connection is not None:
                connection.disarm()  # its headers arrived: uvicorn calls the app only then

            async def sending(message: dict[str, Any]) -> None:
                await send(message)
                if (connection is not None and message.get("type") == "http.response.body"
                        and not message.get("more_body", False)):
                    connection.arm(self.header_timeout + self.keep_alive)  # the next request's own deadline

            await application(scope, receive, sending)

        return bounded


def _address(client: Any) -> Address | None:
    if isinstance(client, list | tuple) and len(client) >= 2:
        return str(client[0]), int(client[1])
    return None


class _BoundedProtocol(asyncio.Protocol):
    """uvicorn's h11 protocol, delegated to, with the connection's header deadline and its peer's cap around it."""

    def __init__(self, bounds: ServerBounds, **uvicorn_arguments: Any) -> None:
        self.bounds = bounds
        self.inner: asyncio.Protocol = import_from_string(HTTP_PROTOCOLS["h11"])(**uvicorn_arguments)
        self.transport: asyncio.Transport | None = None
        self.address: Address | None = None
        self.peer: str | None = None
        self.deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.inner.connection_made(transport)
        peername = transport.get_extra_info("peername")
        self.address = _address(peername)
        self.peer = self.address[0] if self.address is not None else "?"
        self.bounds.peers[self.peer] += 1
        if self.bounds.peers[self.peer] > self.bounds.max_per_peer:
            transport.close()  # connection_lost follows and gives the count back
            return
        if self.address is not None:
            self.bounds.open[self.address] = self
        self.arm(self.bounds.header_timeout)

    def arm(self, seconds: float) -> None:
        self.disarm()
        if self.transport is not None and not self.transport.is_closing():
            self.deadline = asyncio.get_running_loop().call_later(seconds, self._too_slow)

    def disarm(self) -> None:
        if self.deadline is not None:
            self.deadline.cancel()
            self.deadline = None

    def _too_slow(self) -> None:
        self.deadline = None
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.disarm()
        if self.address is not None and self.bounds.open.get(self.address) is self:
            del self.bounds.open[self.address]
        if self.peer is not None:
            self.bounds.peers[self.peer] -= 1
            if self.bounds.peers[self.peer] <= 0:
                del self.bounds.peers[self.peer]
            self.peer = None
        self.inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self.inner.data_received(data)  # type: ignore[attr-defined]

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()
