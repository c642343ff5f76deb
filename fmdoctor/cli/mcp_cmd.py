"""``fmdoctor mcp``: serve the checks, why-not, runbooks and (with --allow-fixes) fixes to MCP clients.

stdio for a client that starts fmdoctor itself (Claude Desktop, IDEs); streamable HTTP for a shared server,
only with a bearer token. The SDK is imported here, inside run(), so other commands start without it.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from fmdoctor.cli.common import add_connection_args, add_target_args, open_target
from fmdoctor.engine.errors import ConfigError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "mcp",
        help="serve fmdoctor's tools to MCP clients (stdio, or streamable HTTP with a bearer token)",
        description="A Model Context Protocol server with the tools check, list_checks, why_not, get_runbook and "
        "list_runbooks (read-only), plus plan_fix and apply_fix with --allow-fixes: apply_fix changes nothing "
        "until the person at the client confirms the exact calls (elicitation). HTTP needs FMDOCTOR_MCP_TOKEN.",
    )
    add_target_args(parser)
    add_connection_args(parser)
    parser.add_argument("--transport", choices=["stdio", "http"], default="stdio",
                        help="stdio (default) or streamable HTTP at http://HOST:PORT/mcp")
    parser.add_argument("--host", default="127.0.0.1", help="HTTP address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="HTTP port (default 8000)")
    parser.add_argument("--allow-fixes", action="store_true",
                        help="also serve plan_fix and apply_fix (each apply needs the client user's confirmation)")
    parser.add_argument("--audit-log", metavar="FILE",
                        help="JSONL audit log for fixes (default: $FMDOCTOR_AUDIT_LOG, else "
                        "$XDG_STATE_HOME/fmdoctor/audit.jsonl)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    token = None
    if args.transport == "http":
        from fmdoctor.mcp.http import LOOPBACK, token_from_env

        token = token_from_env()  # before anything else: no token, no server
        if not 0 < args.port < 65536:
            raise ConfigError(f"--port {args.port} is not a TCP port")
        if args.host not in LOOPBACK:
            sys.stderr.write(f"fmdoctor mcp: listening on {args.host}: the bearer token crosses the network; "
                             "put TLS in front (a reverse proxy or load balancer)\n")
    try:
        from fmdoctor.mcp.server import build_server
        from fmdoctor.mcp.service import McpService
        from fmdoctor.remediation.audit import AuditLog
    except ImportError as exc:
        raise ConfigError(f"the MCP server needs the MCP Python SDK ({exc.name} is missing)",
                          hint="pip install 'fmdoctor[mcp]'") from None
    if args.demo:
        return _serve_demo(args, token)
    with open_target(args) as target:
        service = McpService(target.doctor, cluster=target.cluster, allow_fixes=args.allow_fixes,
                             audit=AuditLog(args.audit_log))
        _serve(build_server(service), args, token, target.cluster)
    return 0


def _serve_demo(args: argparse.Namespace, token: str | None) -> int:
    """The transport starts first and answers ``initialize`` at once (the MCP Inspector gives up after 15 s);
    the demo world is seeded meanwhile in a thread, and each tool call waits for it."""
    server, background, cluster = demo_server(args)
    background.start()  # after the imports and the server are built: seeding would slow both down
    try:
        _serve(server, args, token, cluster)
    finally:
        background.close()
    return 0


def demo_server(args: argparse.Namespace) -> tuple[Any, Any, str]:
    """The server, the demo world to seed in the background (not started) and the cluster it serves."""
    import importlib.util

    from fmdoctor.cli.common import BackgroundTarget
    from fmdoctor.demo import DEMO_CLUSTER
    from fmdoctor.mcp.server import build_server
    from fmdoctor.mcp.service import McpService
    from fmdoctor.remediation.audit import AuditLog

    if importlib.util.find_spec("moto") is None:  # the one failure worth stopping for before serving
        raise ConfigError("the embedded demo needs moto", hint="pip install 'fmdoctor[demo]'")
    cluster = args.cluster or DEMO_CLUSTER
    background = BackgroundTarget(args)
    # The doctor is the demo's, set once it is seeded; no tool reads it before (before_tools waits).
    service = McpService(None, cluster=cluster, allow_fixes=args.allow_fixes,  # type: ignore[arg-type]
                         audit=AuditLog(args.audit_log))

    def world_ready() -> None:
        target = background.wait()
        service.doctor, service.cluster = target.doctor, target.cluster

    return build_server(service, before_tools=world_ready), background, cluster


def _serve(server: Any, args: argparse.Namespace, token: str | None, cluster: str) -> None:
    if token is not None:
        from fmdoctor.mcp.http import serve_http

        sys.stderr.write(f"fmdoctor mcp: http://{args.host}:{args.port}/mcp (cluster {cluster}, "
                         f"fixes {'allowed, each confirmed by the client user' if args.allow_fixes else 'off'})\n")
        serve_http(server, token, args.host, args.port)
    else:
        server.run("stdio")
