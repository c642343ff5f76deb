"""Run checks concurrently (at most ``max_workers`` running, waiting ones not counted) over one shared scope;
a failing check never sinks the others."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field

from fmdoctor.engine.aws import CancelFlag
from fmdoctor.engine.check import Check, NotApplicable, Unverified
from fmdoctor.engine.context import CheckContext, RunScope
from fmdoctor.engine.errors import Cancelled, describe_aws_failure
from fmdoctor.engine.inventory import Inventory
from fmdoctor.engine.model import CheckError, Finding, Skipped
from fmdoctor.engine.slots import WorkerSlots

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CheckEvent:
    """Progress: ``phase`` is 'started' or 'finished'; finished events carry the outcome."""

    check_id: str
    phase: str
    findings: int = 0
    errors: int = 0
    skipped: bool = False
    duration_s: float = 0.0
    done: int = 0
    total: int = 0


ProgressCallback = Callable[[CheckEvent], None]


@dataclass
class RunOutcome:
    findings: list[Finding] = field(default_factory=list)
    errors: list[CheckError] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    completed: list[str] = field(default_factory=list)  # checks that ran to the end (maybe partially)


def run_checks(
    scope: RunScope,
    checks: Sequence[Check],
    max_workers: int = 8,
    progress: ProgressCallback | None = None,
    cancel: CancelFlag | None = None,
    annotators: Sequence[Callable[[RunScope, Sequence[Finding]], None]] = (),
) -> RunOutcome:
    outcome = RunOutcome()
    lock = threading.Lock()
    total = len(checks)
    finished = [0]  # checks that have ended, each counted once (a partial error does not count it again)

    def cancelled(check: Check) -> None:
        with lock:
            outcome.skipped.append(Skipped(check=check.id, reason="cancelled"))
            finished[0] += 1

    def one(check: Check, view: Inventory) -> None:
        if cancel is not None and cancel.is_set():
            cancelled(check)
            return
        if progress:
            progress(CheckEvent(check.id, "started", total=total))
        started = time.perf_counter()
        ctx = CheckContext(scope=scope, check_id=check.id, view=view)
        findings: list[Finding] = []
        skipped: Skipped | None = None
        completed = False
        try:
            findings = list(check.run(ctx))
            completed = True
        except NotApplicable as exc:
            skipped = Skipped(check=check.id, reason=exc.reason)
        except Cancelled:  # the run was cancelled while this check waited on AWS: it neither passed nor failed
            skipped, ctx.errors[:] = Skipped(check=check.id, reason="cancelled"), []
        except Unverified as exc:  # its errors are on ctx already; it is neither completed nor skipped
            if not ctx.errors:
                ctx.unverified(f"everything {check.id} checks ({check.proves()})", "Unverified", str(exc))
        except Exception as exc:
            ctx.errors.append(_error_entry(check, exc))
        with lock:
            outcome.findings.extend(findings)
            outcome.errors.extend(ctx.errors)
            if skipped:
                outcome.skipped.append(skipped)
            if completed:
                outcome.completed.append(check.id)
            finished[0] += 1
            done = finished[0]
        if progress:
            progress(
                CheckEvent(
                    check.id,
                    "finished",
                    findings=len(findings),
                    errors=len(ctx.errors),
                    skipped=skipped is not None,
                    duration_s=time.perf_counter() - started,
                    done=done,
                    total=total,
                )
            )

    # A thread per check, ``max_workers`` of them running at once: a check waiting for AWS or for shared data
    # gives its slot to the next (fmdoctor.engine.slots), so a slow load never keeps other checks from starting.
    slots = WorkerSlots(max_workers)

    def in_slot(check: Check) -> None:
        # A check starts as soon as the inventory parts it reads are there (a check that reads no endpoints does
        # not wait for the endpoint chain), waiting for them without a slot.
        try:
            view = scope.inventory_for(frozenset(check.inventory))
        except Exception:  # their discovery failed: the run reports that instead (RunScope.settle)
            cancelled(check)
            return
        with slots.hold():
            one(check, view)

    with ThreadPoolExecutor(max_workers=max(1, total), thread_name_prefix="fmdoctor-check") as pool:
        for future in as_completed([pool.submit(in_slot, c) for c in checks]):
            future.result()
    scope.settle()  # the whole inventory, for the annotators and the report

    order = {c.id: i for i, c in enumerate(checks)}
    outcome.findings.sort(key=lambda f: (-f.severity.rank, order.get(f.check, 0), f.resource))
    outcome.errors.sort(key=lambda e: order.get(e.check, 0))
    outcome.skipped.sort(key=lambda s: order.get(s.check, 0))
    outcome.completed.sort(key=lambda c: order.get(c, 0))
    for annotate in annotators:
        if cancel is not None and cancel.is_set():
            break
        try:
            annotate(scope, outcome.findings)
        except Exception as exc:  # evidence it could not add is said, the findings stand
            name = getattr(annotate, "__name__", "annotator")
            outcome.errors.append(CheckError(check=name, code=type(exc).__name__, message=str(exc)[:300],
                                             unverified=f"what {name} adds to the findings"))
    return outcome


def _error_entry(check: Check, exc: Exception) -> CheckError:
    everything = f"everything {check.id} checks ({check.proves()})"
    failure = describe_aws_failure(exc)
    if failure is not None:
        action = failure.iam_action
        if action is None and len(check.iam_actions) == 1:
            action = check.iam_actions[0]
        return CheckError(
            check=check.id, code=failure.code, iam_action=action, unverified=everything, message=failure.message
        )
    # A bug in a check must not take the report down with it; it is logged with its traceback.
    log.exception("check %s failed", check.id)
    return CheckError(
        check=check.id, code="InternalError", unverified=everything, message=f"{type(exc).__name__}: {exc}"
    )
