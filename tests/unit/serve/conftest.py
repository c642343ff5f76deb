"""serve fixtures: the demo world (moto in-process) with a Doctor, and a processor posting to a fake Slack."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from slack_sdk import WebClient

from fmdoctor.demo.runtime import demo_environment, demo_settings
from fmdoctor.engine.api import Connection, Doctor
from fmdoctor.serve.investigate import Investigator
from fmdoctor.serve.outputs import SlackOutput, redactor
from fmdoctor.serve.processor import Processor
from fmdoctor.serve.routing import Router
from fmdoctor.serve.service import instance_lookup
from fmdoctor.serve.state import Ledger, Metrics
from fmdoctor.slack.testing import BOT_TOKEN, CHANNEL, FakeSlack


@dataclass
class Served:
    world: Any
    doctor: Doctor
    processor: Processor
    slack: SlackOutput
    metrics: Metrics
    investigator: Investigator


@pytest.fixture(scope="module")
def demo_world() -> Iterator[tuple[Any, Doctor]]:
    """Seeded once per module (seeding is most of the time); the tests only read it."""
    with demo_environment() as world:
        doctor = Doctor(settings=demo_settings(world), connection=Connection(region=world.region))
        doctor.extras["demo"] = world
        yield world, doctor


@pytest.fixture
def served(demo_world: tuple[Any, Doctor], fake_slack: FakeSlack) -> Iterator[Served]:
    world, doctor = demo_world
    client = WebClient(token=BOT_TOKEN, base_url=fake_slack.api_url)
    slack = SlackOutput(client, CHANNEL, redactor(), window_s=3600)
    metrics = Metrics()
    investigator = Investigator(doctor, reuse_s=60)
    processor = Processor(Router(doctor.settings, instance_lookup(doctor)), investigator, [slack], Ledger(),
                          metrics, 256 * 1024)
    yield Served(world, doctor, processor, slack, metrics, investigator)
