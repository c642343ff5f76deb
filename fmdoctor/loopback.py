"""Loopback HTTP servers (the fakes that tests, benchmarks and evals talk to on 127.0.0.1), served from a thread."""

from __future__ import annotations

import socketserver
import threading
from http.server import BaseHTTPRequestHandler
from typing import Any

# socketserver's serve loop notices shutdown() only at its next poll; the standard half second made every
# stopped fake cost its caller 0.5 s. A twentieth of a second is still idle for a loop that waits in select().
SHUTDOWN_POLL_S = 0.05


def serve_in_background(server: socketserver.BaseServer, name: str | None = None) -> threading.Thread:
    """Serve ``server`` from a daemon thread until ``server.shutdown()``, which then returns within a poll."""
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": SHUTDOWN_POLL_S}, name=name,
                              daemon=True)
    thread.start()
    return thread


class KeepAliveHandler(BaseHTTPRequestHandler):
    """A quiet HTTP/1.1 handler that keeps connections open, as the clients of the real services expect."""

    protocol_version = "HTTP/1.1"
    # Kept alive, the headers and the body go out as two writes: with Nagle on, the second waits for the client's
    # delayed ACK, about 40 ms a request on loopback.
    disable_nagle_algorithm = True

    def log_message(self, *args: Any) -> None:
        pass
