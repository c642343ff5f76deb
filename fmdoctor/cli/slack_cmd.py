"""``fmdoctor slack serve|watch``: the Slack front end (``fmdoctor[slack]``).

``serve --mode socket|http`` runs the bolt app (Socket Mode with ``SLACK_APP_TOKEN``, or HTTP with
``SLACK_SIGNING_SECRET`` and ``/healthz``); ``watch`` posts a cluster's status changes to a channel.
Tokens come only from the environment. Slack and the assistant are imported inside ``run`` so other
commands start without them.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from fmdoctor.cli.common import add_connection_args, add_target_args, open_target, split_ids
from fmdoctor.durations import parse_duration
from fmdoctor.engine.errors import ConfigError, FmdoctorError, UsageError

if TYPE_CHECKING:
    from fmdoctor.config import SlackSettings
    from fmdoctor.engine.api import Doctor


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("slack", help="run fmdoctor in Slack: slash command, mentions, fixes, watch",
                                   description="Slack front end. Tokens come from SLACK_BOT_TOKEN, SLACK_APP_TOKEN "
                                   "(socket mode), SLACK_SIGNING_SECRET (http mode) and SLACK_API_URL (optional).")
    sub = parser.add_subparsers(dest="slack_command", metavar="COMMAND", required=True,
                                parser_class=type(parser))
    serve = sub.add_parser("serve", help="answer /fmdoctor, @fmdoctor and the Runbook/Fix buttons")
    serve.add_argument("--mode", choices=["socket", "http"], required=True,
                       help="socket: Socket Mode (SLACK_APP_TOKEN); http: Request URLs (SLACK_SIGNING_SECRET)")
    # $PORT is read when serving, not when the parser is built (a bad $PORT must not break other commands).
    serve.add_argument("--port", type=int, default=None,
                       help="http mode: port to listen on (default: $PORT, else 3000)")
    serve.add_argument("--host", default="127.0.0.1",
                       help="http mode: address to listen on (default 127.0.0.1; 0.0.0.0 to listen on every "
                       "interface, behind TLS)")
    serve.add_argument("--demo", action="store_true",
                       help="answer about the embedded demo cluster (moto in-process; no AWS account needed)")
    serve.add_argument("--audit-log", metavar="FILE", help="JSONL audit log for fixes (default as 'fmdoctor fix')")
    add_connection_args(serve)
    serve.set_defaults(func=run_serve)

    watch = sub.add_parser("watch", help="post a cluster's status to a channel when it changes")
    add_target_args(watch)
    add_connection_args(watch)
    watch.add_argument("--every", default="5m", type=_duration, help="how often to check (default 5m)")
    watch.add_argument("--channel", required=True, help="channel id (C0123ABCD) or name to post to")
    watch.add_argument("--only", action="append", metavar="ID[,ID]", help="only these checks or families")
    watch.add_argument("--count", type=int, metavar="N", help="stop after N runs (default: run until stopped)")
    watch.set_defaults(func=run_watch)


def _duration(value: str) -> Any:
    try:
        every = parse_duration(value)
    except (ValueError, TypeError) as exc:
        raise UsageError(f"--every: {exc}") from None
    if every.total_seconds() < 60:
        raise UsageError("--every must be at least 1m (each run calls AWS)")
    return every


@contextlib.contextmanager
def _doctor(args: argparse.Namespace) -> Iterator[tuple[Doctor, SlackSettings]]:
    """The engine for every request, and the slack: settings (from --config even with --demo)."""
    from fmdoctor.config import load_settings
    from fmdoctor.engine.api import Connection, Doctor

    settings = load_settings(getattr(args, "config", None))
    if not args.demo:
        connection = Connection(region=args.region or os.environ.get("FMDOCTOR_REGION"), profile=args.profile,
                                endpoint_url=args.endpoint_url)
        yield Doctor(settings=settings, connection=connection), settings.slack
        return
    from fmdoctor.demo.runtime import demo_environment, demo_settings

    with demo_environment() as world:
        doctor = Doctor(settings=demo_settings(world), connection=Connection(region=world.region))
        doctor.extras["demo"] = world
        slack = settings.slack
        if not slack.channel_clusters:  # the demo cluster, from every channel
            slack = slack.model_copy(update={"channel_clusters": {"*": [world.cluster]}})
        yield doctor, slack


def run_serve(args: argparse.Namespace) -> int:
    try:
        from fmdoctor.remediation.audit import AuditLog
        from fmdoctor.slack.app import build_app, web_client
        from fmdoctor.slack.service import SlackService
        from fmdoctor.slack.tokens import SlackTokens, install_redaction
    except ImportError as exc:
        raise ConfigError(f"fmdoctor slack needs slack-bolt ({exc.name} is missing)",
                          hint="pip install 'fmdoctor[slack]'") from None
    tokens = SlackTokens.from_env(args.mode)
    install_redaction(tokens)
    with _doctor(args) as (doctor, slack):
        service = SlackService(doctor, slack, web_client(tokens), AuditLog(args.audit_log))
        try:
            app = build_app(service, tokens)
        except FmdoctorError:
            raise
        except Exception as exc:  # auth.test failed: a bad token or an unreachable SLACK_API_URL
            raise ConfigError(f"Slack refused the bot token or could not be reached ({type(exc).__name__})",
                              hint="check SLACK_BOT_TOKEN and SLACK_API_URL") from None
        if args.mode == "http":
            from fmdoctor.slack.server import EVENTS_PATH, HEALTH_PATH, SlackHTTPServer

            port = args.port if args.port is not None else env_port()
            server = SlackHTTPServer(app, args.host, port, tokens.signing_secret)
            sys.stderr.write(f"fmdoctor slack: listening on {server.url}{EVENTS_PATH} (health: {HEALTH_PATH})\n")
            try:
                server.serve_forever()
            finally:
                server.server_close()
        else:
            from slack_bolt.adapter.socket_mode import SocketModeHandler

            sys.stderr.write("fmdoctor slack: connecting in Socket Mode\n")
            SocketModeHandler(app, tokens.app_token).start()
    return 0


def run_watch(args: argparse.Namespace) -> int:
    try:
        from fmdoctor.slack.app import web_client
        from fmdoctor.slack.tokens import SlackTokens, install_redaction
        from fmdoctor.slack.watch import Watcher
    except ImportError as exc:
        raise ConfigError(f"fmdoctor slack needs slack-bolt ({exc.name} is missing)",
                          hint="pip install 'fmdoctor[slack]'") from None
    from fmdoctor.config import SlackSettings, load_settings

    if args.count is not None and args.count < 1:
        raise UsageError("--count must be at least 1")
    tokens = SlackTokens.from_env(None)
    install_redaction(tokens)
    with open_target(args) as target:
        settings = load_settings(args.config).slack if not target.demo else SlackSettings()
        watcher = Watcher(target.doctor, target.cluster, web_client(tokens), args.channel, args.every,
                          only=split_ids(args.only), max_blocks=settings.max_blocks)
        watcher.run(args.count)
    return 0


def env_port() -> int:
    """The http mode's port when --port is not given: $PORT (as platforms such as Cloud Run set it), else 3000."""
    text = os.environ.get("PORT", "3000")
    try:
        return int(text)
    except ValueError:
        raise UsageError(f"PORT={text!r} is not a port number", hint="set PORT to a number, or pass --port") from None
