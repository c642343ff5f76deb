"""Assistant fixtures: seeded clusters, a scripted tool-calling fake model and fake backends of the contracts."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage
from pydantic import Field

from fmdoctor.assistant.backends import Backends
from fmdoctor.config import Settings
from fmdoctor.demo.scenario import seed_demo
from fmdoctor.engine.api import Connection, Doctor

REGION = "us-west-2"
CLUSTER = "test-cluster"


class ScriptedModel(GenericFakeChatModel):
    """Plays back AIMessages (the way LangChain's own agent tests do: a fake that accepts bind_tools) and
    records what it was sent, so tests can assert on the exact messages a remote model would see."""

    received: list[list[BaseMessage]] = Field(default_factory=list)
    tool_sets: list[list[str]] = Field(default_factory=list)  # the tool names bound for each call
    disable_streaming: bool = True

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self.bind(bound_tools=[getattr(t, "name", None) or t["function"]["name"] for t in tools])

    def _generate(self, messages: list[BaseMessage], *args: Any, bound_tools: list[str] | None = None,
                  **kwargs: Any) -> Any:
        self.received.append(list(messages))
        self.tool_sets.append(list(bound_tools or []))
        return super()._generate(messages, *args, **kwargs)


def scripted(*steps: AIMessage | str) -> ScriptedModel:
    return ScriptedModel(messages=iter(steps))


def call(name: str, call_id: str = "", **args: Any) -> AIMessage:
    tool_call = {"name": name, "args": args, "id": call_id or f"call-{name}", "type": "tool_call"}
    return AIMessage("", tool_calls=[tool_call])


@pytest.fixture
def doctor_for() -> Callable[..., Doctor]:
    def make(cluster: str = CLUSTER, **cluster_settings: Any) -> Doctor:
        settings = Settings.model_validate({"region": REGION, "clusters": {cluster: cluster_settings}})
        return Doctor(settings=settings, connection=Connection(region=REGION))

    return make


@pytest.fixture
def demo_world(aws):
    return seed_demo(aws)


@pytest.fixture
def demo_doctor(demo_world) -> Doctor:
    settings = Settings.model_validate({"region": REGION, "clusters": {demo_world.cluster: demo_world.settings}})
    return Doctor(settings=settings, connection=Connection(region=REGION))


# ---- fakes with the signatures of fmdoctor.assistant.backends.Backends' functions -------------------------


@dataclass
class FakePlan:
    calls: list[dict[str, Any]]
    check_id: str

    @property
    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.calls, sort_keys=True).encode()).hexdigest()[:16]

    @property
    def empty(self) -> bool:
        return not self.calls

    def to_json_dict(self) -> dict[str, Any]:
        return {"digest": self.digest, "calls": self.calls, "check_id": self.check_id}


@dataclass(frozen=True)
class FakeApproval:
    plan_digest: str
    approver: str = "alice"
    channel: str = "test"
    granted_at: datetime = field(default_factory=lambda: datetime.now(UTC))


@dataclass
class FakeRemediation:
    """plan_fix/preflight/apply_fix: builds the plan from the finding's fix hints, applies nothing itself but
    records every call; apply refuses a missing or mismatched approval, as the real one must."""

    applied: list[tuple[Any, Any]] = field(default_factory=list)
    planned: list[tuple[str, str | None]] = field(default_factory=list)
    decisions: list[dict[str, Any]] = field(default_factory=list)

    def plan_fix(self, doctor: Doctor, cluster: str, check_id: str, resource: str | None = None,
                 report: Any = None) -> FakePlan:
        self.planned.append((check_id, resource))
        findings = [f for f in (report.findings if report else []) if f.check == check_id
                    and (resource is None or f.resource == resource)]
        calls = [{"service": "ec2", "operation": "AuthorizeSecurityGroupEgress",
                  "params": {"GroupId": hint["group_id"], "IpPermissions": [
                      {"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": hint["peer_group_id"]}]}]}}
                 for f in findings for hint in f.evidence.get("fix", []) if hint["action"].endswith("egress")]
        return FakePlan(calls, check_id)

    def preflight(self, doctor: Doctor, plan: FakePlan) -> dict[str, Any]:
        return {"plan_digest": plan.digest, "ok": True, "denied_actions": [], "checks": []}

    def apply_fix(self, doctor: Doctor, plan: FakePlan, approval: Any) -> dict[str, Any]:
        if approval is None or approval.plan_digest != plan.digest:
            raise AssertionError("apply_fix called without the matching approval")
        self.applied.append((plan, approval))
        return {"verified": True, "applied": len(plan.calls)}

    def record_decision(self, doctor: Doctor, decision: str, reason: str, **fields: Any) -> dict[str, Any]:
        record = {"decision": decision, "reason": reason, **fields}
        self.decisions.append(record)
        return record


@pytest.fixture
def remediation() -> FakeRemediation:
    return FakeRemediation()


@pytest.fixture
def fix_backends(remediation: FakeRemediation) -> Backends:
    return Backends(plan_fix=remediation.plan_fix, preflight=remediation.preflight, apply_fix=remediation.apply_fix,
                    record_decision=remediation.record_decision)
