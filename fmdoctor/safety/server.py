"""The one hardening of fmdoctor's HTTP servers (``slack serve --mode http`` and ``serve``): uvicorn's HTTP/1.1
protocol with a deadline for each request's headers and a cap on the connections one peer may hold.

uvicorn times out only idle keep-alive connections, and its ``limit_concurrency`` counts *connections*, so a
peer that opens ~130 connections and never finishes a request line made every request, ``/healthz`` included,
answer 503. With :func:`bounded_h11`: a connection must send its request line and headers within
``header_timeout`` (and again, after a response, within ``header_timeout + keep_alive``) or it is closed; one
peer address holds at most ``max_per_peer`` connections (more are closed at once); and the servers set no
``limit_concurrency``, so the health endpoint answers while the event loop runs. Connections cost no thread
while they wait (asyncio); the work behind a request is bounded by each server's own pool.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

HEADER_TIMEOUT = 10.0  # seconds for a new connection to send its request line and headers
KEEP_ALIVE = 5  # seconds an idle keep-alive connection stays open
MAX_PER_PEER = 64  # connections one address may hold at once


def bounded_h11(header_timeout: float = HEADER_TIMEOUT, keep_alive: float = KEEP_ALIVE,
                max_per_peer: int = MAX_PER_PEER) -> type[H11Protocol]:
    """A protocol class for ``uvicorn.Config(http=...)``; each call makes one with its own per-peer counts (one
    per server: all of a server's connections run on its event loop, so the counts need no lock)."""
    peers: Counter[str] = Counter()

    class BoundedH11(H11Protocol):
        _header_deadline: Any = None
        _peer: str | None = None

        def connection_made(self, transport: Any) -> None:  # type: ignore[override]
            super().connection_made(transport)
            peer = transport.get_extra_info("peername")
            self._peer = str(peer[0]) if isinstance(peer, tuple) and peer else "?"
            peers[self._peer] += 1
            if peers[self._peer] > max_per_peer:
                transport.close()  # connection_lost follows and gives the count back
                return
            self._header_deadline = self.loop.call_later(header_timeout, self._headers_too_slow)

        def handle_events(self) -> None:
            before = self.cycle
            super().handle_events()
            if self.cycle is not before and self._header_deadline is not None:
                self._header_deadline.cancel()  # a request's headers arrived
                self._header_deadline = None

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():  # the next request on this connection gets its own deadline
                self._header_deadline = self.loop.call_later(header_timeout + keep_alive, self._headers_too_slow)

        def connection_lost(self, exc: Exception | None) -> None:
            if self._header_deadline is not None:
                self._header_deadline.cancel()
                self._header_deadline = None
            if self._peer is not None:
                peers[self._peer] -= 1
                if peers[self._peer] <= 0:
                    del peers[self._peer]
                self._peer = None
            super().connection_lost(exc)

        def _headers_too_slow(self) -> None:
            self._header_deadline = None
            if not self.transport.is_closing():
                self.transport.close()

    return BoundedH11
