"""The assistant: a LangChain tool-calling agent over fmdoctor's checks, offline by default.

Front ends use :class:`Assistant` (see :mod:`fmdoctor.assistant.api` for the whole contract: ``ask``,
``stream`` and its events, sessions, and how to handle an approval request). Layout:

- ``tools`` / ``extra_tools``: the tools (one per check family from the registry, ``check_all``,
  ``list_findings``; ``why_not``, ``get_runbook``, ``propose_fix``, ``apply_fix`` when those libraries exist);
- ``policy``: deny-by-default tool policy and approvals; ``guard``: history, redaction and caps per model call;
- ``planner`` (+ ``intents``, ``compose``): the deterministic offline chat model;
- ``providers``: the only module naming model providers; ``safety``: redaction, invisible-Unicode stripping,
  delimiting, truncation; ``agent``: the ``create_agent`` wiring; ``evaluation``: the eval harness.
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
