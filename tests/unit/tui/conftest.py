"""TUI fixtures: the app built over the moto demo world (shared per module: seeding it is the slow part),
a small cluster with one EFA security-group fault for fixes that change state, and pilot helpers."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from fmdoctor.demo.builders import ClusterBuilder
from fmdoctor.demo.runtime import LEAN_MOTO_ENV, demo_settings, mocked_aws
from fmdoctor.demo.scenario import DemoWorld, seed_demo
from fmdoctor.engine.api import Connection, Doctor
from fmdoctor.remediation.audit import AuditLog

# pytest-textual-snapshot 1.0 names its extension ``_file_extension``; syrupy 7 reads ``file_extension`` (else
# ``raw``), so without this the snapshots are looked for, and written, as ``.raw`` beside the ``.svg`` ones.
try:
    from pytest_textual_snapshot import SVGImageExtension
except ImportError:  # the snapshot tests say so themselves
    pass
else:
    if getattr(SVGImageExtension, "file_extension", "svg") != "svg":
        SVGImageExtension.file_extension = "svg"

REGION = "us-west-2"
FIXED_NOW = datetime(2026, 12, 3, 9, 30, tzinfo=UTC)


def fixed_clock() -> datetime:
    return FIXED_NOW


@pytest.fixture
def anyio_backend() -> str:
    """Pilot tests are async: anyio's pytest plugin runs them on asyncio (mark them ``pytest.mark.anyio``)."""
    return "asyncio"


@pytest.fixture(scope="module")
def demo_world() -> Iterator[DemoWorld]:
    with mocked_aws(extra_env=LEAN_MOTO_ENV) as session:
        yield seed_demo(session)


@pytest.fixture(scope="module")
def demo_doctor(demo_world: DemoWorld) -> Doctor:
    doctor = Doctor(settings=demo_settings(demo_world), connection=Connection(region=demo_world.region))
    doctor.extras["demo"] = demo_world
    return doctor


@pytest.fixture(scope="module")
def demo_assistant(demo_doctor: Doctor, demo_world: DemoWorld) -> Any:
    from fmdoctor.assistant import Assistant

    return Assistant(demo_doctor, demo_world.cluster)


@pytest.fixture
def audit(tmp_path: Any) -> AuditLog:
    return AuditLog(tmp_path / "audit.jsonl")


@pytest.fixture
def app_for(audit: AuditLog, tmp_path: Any) -> Callable[..., Any]:
    """The app as the CLI builds it, with a fixed clock, no verify back-off and the audit log in tmp_path."""
    from fmdoctor.tui.app import FmdoctorApp

    def make(doctor: Doctor, cluster: str, assistant: Any = None, **kwargs: Any) -> FmdoctorApp:
        if assistant is not None and hasattr(assistant, "reset"):
            assistant.reset("tui")  # a module-scoped assistant: each test starts a fresh session
        kwargs.setdefault("check_on_start", False)
        return FmdoctorApp(doctor, cluster, assistant, audit=audit, clock=fixed_clock, verify_delays=(),
                           transcript_dir=tmp_path, **kwargs)

    return make


@pytest.fixture
def sg_fault(sg_fault_cluster: ClusterBuilder) -> ClusterBuilder:
    """The shared security-group-fault cluster (tests/conftest.py)."""
    return sg_fault_cluster


@pytest.fixture
def sg_doctor(sg_fault: ClusterBuilder) -> Doctor:
    from fmdoctor.config import Settings

    settings = Settings.model_validate({"region": REGION, "clusters": {sg_fault.cluster: {}}})
    return Doctor(settings=settings, connection=Connection(region=REGION))


async def settle(pilot: Any, rounds: int = 4) -> None:
    """Wait for every worker and the messages they posted (handlers may start more workers)."""
    from textual.worker import WorkerCancelled

    for _ in range(rounds):
        try:
            await pilot.app.workers.wait_for_complete()
        except WorkerCancelled:  # replaced by a newer exclusive worker; its thread ends at its next step
            await pilot.pause(0.1)
        await pilot.pause()
        if not any(w.is_running for w in pilot.app.workers):
            await pilot.pause()
            if not any(w.is_running for w in pilot.app.workers):
                return


async def paste(pilot: Any, text: str) -> None:
    """Text into the focused box as a terminal pastes it (bracketed paste: one event). Typing sends a key event
    each, and the pilot waits for the app to go idle after every key; a typed question was the slowest step of
    these tests. test_demo_pilot still types a question and a filter key by key."""
    from textual import events

    pilot.app.post_message(events.Paste(text))
    await pilot.pause()


def chat_text(app: Any) -> str:
    """Everything the chat pane shows, as text (Markdown sources, tool call titles, questions)."""
    from textual.widgets import Collapsible, Markdown, Static

    parts = []
    for widget in app.query_one("#chat-log").children:
        if isinstance(widget, Markdown):
            parts.append(widget.source)
        elif isinstance(widget, Collapsible):
            parts.append(str(widget.title))
        elif isinstance(widget, Static):
            parts.append(str(widget.render()))
    return "\n".join(parts)


def egress_groups(session: Any, group_id: str) -> list[str]:
    """The groups an all-traffic egress rule of ``group_id`` points at (what the fix adds)."""
    group = session.client("ec2", region_name=REGION).describe_security_groups(GroupIds=[group_id])["SecurityGroups"][0]
    return [pair["GroupId"] for rule in group["IpPermissionsEgress"] if rule["IpProtocol"] == "-1"
            for pair in rule.get("UserIdGroupPairs", [])]
