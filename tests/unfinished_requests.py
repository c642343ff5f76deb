"""Connections that start an HTTP request and never finish its headers: how a peer holds a server's connections
without sending anything its handlers read (the bearer token included). The servers' bounds close them."""

from __future__ import annotations

import socket


def hold(port: int, count: int, request_line: bytes, source: str = "127.0.0.2") -> list[socket.socket]:
    """``count`` connections from ``source`` (another address than the tests' own requests, which a per-peer cap
    must not refuse) to 127.0.0.1:``port``, each having sent ``request_line`` and one header."""
    held = []
    for _ in range(count):
        conn = socket.socket()
        conn.bind((source, 0))
        conn.connect(("127.0.0.1", port))
        conn.sendall(request_line + b"\r\nHost: 127.0.0.1\r\n")
        held.append(conn)
    return held


def closed(conn: socket.socket, wait: float) -> bool:
    """Whether the server closed ``conn`` within ``wait`` seconds."""
    conn.settimeout(wait)
    try:
        return conn.recv(1) == b""
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True
