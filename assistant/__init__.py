"""The assistant: a LangChain tool-calling agent over fmdoctor's checks, offline by default.

Front ends use :class:`Assistant` (see :mod:`fmdoctor.assistant.api` for the whole contract: ``ask``,
``stream`` and its events, sessions, and how to handle an approval request). Layout:

- ``tools`` / ``extra_tools``: the tools (one per check family from the registry, ``check_all``,
  ``list_findings``, ``get_finding``; ``why_not``, ``get_runbook``, ``propose_fix``, ``apply_fix`` when those
  libraries exist); ``results`` / ``digest``: what a tool returns and the text the model reads of it;
- ``policy``: deny-by-default tool policy, approvals, the per-question call cache; ``guard``: history,
  redaction, caps and token usage per model call;
- ``planner`` (+ ``intents``, ``compose``): the deterministic offline chat model;
- ``providers``: the only module naming model providers; ``safety``: redaction, invisible-Unicode stripping,
  delimiting; ``agent``: the ``create_agent`` wiring; ``evaluation``: the eval harness.
"""

from fmdoctor.assistant.api import Assistant
from fmdoctor.assistant.events import (
    AnswerToken,
    ApprovalNeeded,
    ApprovalRequest,
    AssistantAnswer,
    AssistantEvent,
    CheckProgress,
    ToolFinished,
    ToolStarted,
    TurnFinished,
)

__all__ = [
    "AnswerToken",
    "ApprovalNeeded",
    "ApprovalRequest",
    "Assistant",
    "AssistantAnswer",
    "AssistantEvent",
    "CheckProgress",
    "ToolFinished",
    "ToolStarted",
    "TurnFinished",
]
