"""``fmdoctor serve``: investigate alarms and cluster events as they fire (an SQS queue fed by EventBridge, and
Alertmanager/Grafana webhooks), and post each result to Slack, a webhook and/or SNS; ``/metrics`` and
``/healthz`` for Prometheus and probes. Flags override the ``serve:`` section of fmdoctor.yaml."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, Any

from fmdoctor.cli.common import add_connection_args
from fmdoctor.engine.errors import ConfigError, UsageError

if TYPE_CHECKING:
    from fmdoctor.engine.api import Doctor

_FLAGS = ("queue_url", "host", "port", "concurrency", "slack_channel", "webhook_url", "sns_topic_arn")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "serve", help="investigate alarms and cluster events as they fire; post results to Slack/webhook/SNS",
        description="A long-running service: reads EventBridge events from an SQS queue and Alertmanager/Grafana "
        "webhooks (POST /webhook/alertmanager, bearer $FMDOCTOR_SERVE_TOKEN), runs the checks that explain each "
        "event on its cluster, and delivers one result per event. Scale out by running replicas on one queue.")
    parser.add_argument("--queue-url", help="SQS queue the EventBridge rules feed (serve.queue_url)")
    parser.add_argument("--host", help="HTTP address (serve.host; default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="HTTP port (serve.port; default 9877; 0 picks a free one)")
    parser.add_argument("--no-http", action="store_true", help="no HTTP endpoint (no webhooks, /metrics, /healthz)")
    parser.add_argument("--concurrency", type=int, help="events investigated at once (serve.concurrency)")
    parser.add_argument("--slack-channel", help="Slack channel id to post to (SLACK_BOT_TOKEN; serve.slack_channel)")
    parser.add_argument("--webhook-url", help="POST each result here as JSON (serve.webhook_url)")
    parser.add_argument("--sns-topic-arn", help="publish each result to this SNS topic (serve.sns_topic_arn)")
    parser.add_argument("--demo", action="store_true", help="investigate the embedded demo cluster (moto in-process)")
    add_connection_args(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from fmdoctor.config import load_settings
    from fmdoctor.engine.api import Connection, Doctor

    settings = load_settings(args.config)
    overrides = {k: getattr(args, k) for k in _FLAGS if getattr(args, k) is not None}
    try:
        serve = settings.serve.model_validate({**settings.serve.model_dump(), **overrides})
    except ValueError as exc:
        raise UsageError(f"invalid serve option: {exc}") from None
    if not serve.queue_url and args.no_http:
        raise UsageError("nothing to serve: give --queue-url, or leave the HTTP endpoint on for webhooks")
    if args.demo:
        from fmdoctor.demo.runtime import demo_environment, demo_settings

        with demo_environment() as world:
            demo = demo_settings(world).model_copy(update={"serve": serve, "agent": settings.agent})
            doctor = Doctor(settings=demo, connection=Connection(region=world.region))
            doctor.extras["demo"] = world
            return _serve(doctor, args)
    connection = Connection(region=args.region or os.environ.get("FMDOCTOR_REGION"), profile=args.profile,
                            endpoint_url=args.endpoint_url)
    return _serve(Doctor(settings=settings.model_copy(update={"serve": serve}), connection=connection), args)


def _serve(doctor: Doctor, args: argparse.Namespace) -> int:
    from fmdoctor.serve.outputs import SnsOutput, WebhookOutput, redactor
    from fmdoctor.serve.service import Service, aws_client, narrator_for

    serve = doctor.settings.serve
    if not doctor.settings.clusters:
        raise ConfigError("fmdoctor serve needs the clusters it may investigate in fmdoctor.yaml (clusters:)",
                          hint="events name clusters; only configured ones are investigated")
    redact = redactor(doctor.settings.agent.redact)
    outputs: list[Any] = []
    ledger = _ledger(doctor, serve)
    if serve.slack_channel:
        outputs.append(_slack_output(serve.slack_channel, redact, serve.repeat_window.total_seconds(),
                                     doctor.settings.slack.max_blocks, ledger if serve.dedupe_table else None))
    if serve.webhook_url:
        token = os.environ.get(serve.webhook_token_env, "").strip() if serve.webhook_token_env else None
        outputs.append(WebhookOutput(serve.webhook_url, redact, token or None))
    if serve.sns_topic_arn:
        outputs.append(SnsOutput(aws_client(doctor, "sns"), serve.sns_topic_arn, redact))
    service = Service(doctor, serve, outputs, narrator_for(doctor), ledger=ledger)
    token = os.environ.get("FMDOCTOR_SERVE_TOKEN", "").strip() or None
    if token is not None and len(token) < 16:
        raise ConfigError("FMDOCTOR_SERVE_TOKEN is too short to be a secret (under 16 characters)",
                          hint="use a random one: openssl rand -hex 32")
    if not args.no_http:
        try:
            import uvicorn  # noqa: F401
        except ImportError:
            raise ConfigError("the HTTP endpoint of fmdoctor serve needs uvicorn",
                              hint="pip install 'fmdoctor[serve]', or run with --no-http") from None
    address = service.start_http(token, enabled=not args.no_http)
    if address:
        hooks = "webhooks on /webhook/alertmanager" if token else "no webhooks (FMDOCTOR_SERVE_TOKEN unset)"
        sys.stderr.write(f"fmdoctor serve: http://{address[0]}:{address[1]} ({hooks}; /metrics; /healthz)\n")
    sys.stderr.write(f"fmdoctor serve: queue {serve.queue_url or 'none'}; outputs "
                     f"{', '.join(o.name for o in outputs) or 'none (metrics only)'}; deliveries remembered "
                     f"{'in DynamoDB table ' + serve.dedupe_table if serve.dedupe_table else 'by this replica'}\n")
    sys.stderr.flush()
    service.run()
    return 0


def _ledger(doctor: Doctor, serve: Any) -> Any:
    """The shared DynamoDB ledger where serve.dedupe_table is set, else this replica's memory."""
    from fmdoctor.serve.dedupe import SharedLedger
    from fmdoctor.serve.service import aws_client
    from fmdoctor.serve.state import Ledger

    if not serve.dedupe_table:
        return Ledger()
    ledger = SharedLedger(aws_client(doctor, "dynamodb"), serve.dedupe_table, serve.visibility_timeout.total_seconds())
    try:
        ledger.probe()
    except Exception as exc:
        from fmdoctor.engine.errors import describe_aws_failure

        failure = describe_aws_failure(exc)
        why = f"{failure.code}: {failure.message}" if failure else f"{type(exc).__name__}: {exc}"
        raise ConfigError(f"serve.dedupe_table {serve.dedupe_table!r} cannot be read ({why})",
                          hint="create it with deploy/serve/dedupe-table.cfn.yaml and grant what "
                               "'fmdoctor iam-policy --serve' lists") from None
    return ledger


def _slack_output(channel: str, redact: Any, window_s: float, max_blocks: int, shared: Any = None) -> Any:
    try:
        from fmdoctor.serve.outputs import SlackOutput
        from fmdoctor.slack.app import web_client
        from fmdoctor.slack.tokens import SlackTokens, install_redaction
    except ImportError as exc:
        raise ConfigError(f"posting to Slack needs slack-bolt ({exc.name} is missing)",
                          hint="pip install 'fmdoctor[slack]'") from None
    tokens = SlackTokens.from_env(None)
    install_redaction(tokens)
    return SlackOutput(web_client(tokens), channel, redact, window_s, max_blocks, shared=shared)
