"""Wiring: the router, investigator, outputs, ledger and metrics of one ``fmdoctor serve`` process, its SQS
consumer and HTTP endpoint, and SIGTERM handling."""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from fmdoctor.config import ServeSettings
from fmdoctor.engine.api import Doctor
from fmdoctor.engine.identity import NodeIdentities
from fmdoctor.serve.http import HttpServer, WebhookIntake, app
from fmdoctor.serve.investigate import Investigator, Narrator, assistant_narrator
from fmdoctor.serve.processor import Processor
from fmdoctor.serve.queue import SqsConsumer
from fmdoctor.serve.routing import Router
from fmdoctor.serve.state import Ledger, Metrics

log = logging.getLogger("fmdoctor.serve")
NODE_NAMES_TTL_S = 300.0  # how long a cluster's node names are trusted before its instances are listed again


def aws_client(doctor: Doctor, service: str) -> Any:
    """A client of the service account fmdoctor runs in (region, profile and endpoint as for the checks)."""
    name = doctor.settings.default_cluster() or next(iter(doctor.settings.clusters), "")
    return doctor.connect(doctor.cluster_settings(name)).client(service)


def instance_lookup(doctor: Doctor) -> Any:
    """Cluster names from the tags of instances (or of a Capacity Block's instances), via DescribeInstances; for
    node names from an alert's labels, the configured clusters whose node identities resolve one of them."""

    clients: dict[str, Any] = {}
    identities: dict[str, tuple[float, NodeIdentities]] = {}

    def naming(names: Sequence[str]) -> set[str]:
        found = set()
        for name in doctor.settings.clusters:
            known = identities.get(name)
            if known is None or time.monotonic() - known[0] > NODE_NAMES_TTL_S:
                inventory = doctor.inventory(name, parts=())  # the instance listing: every node and its addresses
                tags = doctor.cluster_settings(name).gpu.hostname_tags
                known = (time.monotonic(), NodeIdentities.of(inventory, tags))
                identities[name] = known
            if any(known[1].resolve(n, suggest_close=False).instance is not None for n in names):
                found.add(name)
        return found

    def lookup(kind: str, ids: Sequence[str]) -> set[str]:
        if kind == "node":
            return naming(ids)
        ec2 = clients.get("ec2") or clients.setdefault("ec2", aws_client(doctor, "ec2"))
        if kind == "instance":
            pages = ec2.get_paginator("describe_instances").paginate(InstanceIds=list(ids)[:200])
        else:
            pages = ec2.get_paginator("describe_instances").paginate(
                Filters=[{"Name": "capacity-reservation-id", "Values": list(ids)[:200]}])
        try:
            tags = {t["Key"]: t["Value"] for page in pages for r in page.get("Reservations", [])
                    for i in r.get("Instances", []) for t in i.get("Tags", [])}
        except ClientError as exc:  # an instance that is gone (or never was ours) belongs to no cluster
            if exc.response.get("Error", {}).get("Code", "").startswith("InvalidInstanceID"):
                return set()
            raise
        found = set()
        for name in doctor.settings.clusters:
            keys = doctor.cluster_settings(name).tag_keys
            if any(tags.get(k) == name for k in keys):
                found.add(name)
        return found

    return lookup


@dataclass
class Service:
    doctor: Doctor
    settings: ServeSettings
    outputs: list[Any]
    narrator: Narrator | None = None
    metrics: Metrics = field(default_factory=Metrics)
    ledger: Ledger = field(default_factory=Ledger)
    stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.router = Router(self.doctor.settings, instance_lookup(self.doctor))
        self.investigator = Investigator(self.doctor, self.settings.reuse_report.total_seconds(), self.narrator)
        self.processor = Processor(self.router, self.investigator, self.outputs, self.ledger, self.metrics,
                                   self.settings.max_event_bytes, self.settings.visibility_timeout.total_seconds())
        self.consumer: SqsConsumer | None = None
        self.http: HttpServer | None = None

    def start_http(self, token: str | None, enabled: bool = True) -> tuple[str, int] | None:
        if not enabled:
            return None
        forward = None
        if self.settings.queue_url:
            sqs = aws_client(self.doctor, "sqs")
            url = self.settings.queue_url

            def forward(body: str) -> None:
                sqs.send_message(QueueUrl=url, MessageBody=body)

        intake = WebhookIntake(self.processor, self.settings.concurrency, forward)
        self.http = HttpServer(app(intake, self.metrics, token, self.settings.max_body_bytes),
                               self.settings.host, self.settings.port)
        return self.http.start()

    def run(self) -> None:
        """Serve until SIGTERM/SIGINT (or ``stop``): the queue if configured, else only the HTTP side."""
        previous = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                previous[sig] = signal.signal(sig, lambda *_: self.shutdown())
        try:
            if self.settings.queue_url:
                self.consumer = SqsConsumer(aws_client(self.doctor, "sqs"), self.settings.queue_url, self.processor,
                                            self.settings.concurrency,
                                            int(self.settings.visibility_timeout.total_seconds()),
                                            self.settings.wait_time, self.settings.shutdown_grace.total_seconds())
                if self.stop.is_set():
                    self.consumer.stop.set()
                self.consumer.run()
            else:
                self.stop.wait()
        finally:
            if self.http is not None:
                self.http.stop()
            self.ledger.close()
            for sig, handler in previous.items():  # a stopped service no longer owns Ctrl-C (an embedding caller)
                signal.signal(sig, handler)
            log.info("fmdoctor serve stopped: %s", dict(self.metrics.events))

    def shutdown(self) -> None:
        log.info("fmdoctor serve: shutting down (finishing or releasing in-flight events)")
        self.stop.set()
        if self.consumer is not None:
            self.consumer.stop.set()


def narrator_for(doctor: Doctor) -> Narrator | None:
    """The assistant writes narratives only when a model is configured; the offline default writes none."""
    return assistant_narrator(doctor) if doctor.settings.agent.model else None
