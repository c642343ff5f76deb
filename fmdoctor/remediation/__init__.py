"""Safe remediation: plan -> pre-flight -> approve -> apply -> verify, every step in an audit log.

``plan_fix`` turns the fix hints of a check's current findings into exact API calls (read-only);
``preflight`` proves the permissions with EC2 DryRun; ``apply_fix`` runs an approved plan, re-runs the
check and reports whether the findings are gone. Nothing changes without an :class:`Approval` for the
exact plan (its digest), and approvals come only from front-end code that asked a person; see
:mod:`fmdoctor.remediation.approval` for the policy the LLM agent cannot talk its way past.

The package re-exports nothing: import from its modules (``fmdoctor.remediation.plan`` ...), so that reading
:mod:`fmdoctor.remediation.actions` (the engine's incidents ask it which fixes exist) does not load the planner
and, through it, the engine's front door.
"""
