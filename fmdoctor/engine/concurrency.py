"""Independent AWS calls made at once: a run waits for its deepest chain of dependent calls, not for their count.

Each call costs AWS's round trip (50-150 ms; GetMetricData more), so calls that need nothing from one another
are issued together, up to ``limit`` in flight. The limit keeps a run within the API's own request rate (a
GetMetricData or ListMetrics burst of hundreds would be throttled); throttling beyond it is absorbed by the
clients' adaptive retry mode (fmdoctor.engine.aws), which slows the client's send rate instead of failing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import TypeVar

from fmdoctor.engine.errors import note_failed_call
from fmdoctor.engine.slots import waiting

T = TypeVar("T")
R = TypeVar("R")

# In flight at once per API family: far under their documented request rates (CloudWatch GetMetricData 50 TPS,
# ListMetrics 25 TPS; EC2's describes' token buckets of 100; S3 thousands per prefix).
DEFAULT_LIMIT = 16


def each_at_once(function: Callable[[T], R], items: Sequence[T], limit: int = DEFAULT_LIMIT,
                 name: str = "fmdoctor-calls") -> Iterator[tuple[int, R]]:
    """(index, result) of ``function`` over ``items``, up to ``limit`` at once, in the order they finish.

    One item runs in the caller's thread. The first exception is raised once every call started has ended;
    calls not yet started are not made."""
    if len(items) <= 1:
        for n, item in enumerate(items):
            yield n, function(item)
        return

    def call(item: T) -> R:
        try:
            return function(item)
        except BaseException as exc:  # named by the call that failed, for the thread that reports it
            note_failed_call(exc)
            raise

    with ThreadPoolExecutor(max_workers=min(limit, len(items)), thread_name_prefix=name) as pool:
        pending: dict[Future[R], int] = {}
        queue = iter(enumerate(items))
        failure: BaseException | None = None

        def start(count: int) -> None:
            for n, item in _take(queue, count):
                pending[pool.submit(call, item)] = n

        start(limit)
        while pending:
            with waiting():  # the caller's worker slot is free while its calls are in flight
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                n = pending.pop(future)
                error = future.exception()
                if error is not None:
                    failure = failure or error
                    continue
                if failure is None:
                    yield n, future.result()
            if failure is None:
                start(len(done))
        if failure is not None:
            raise failure


def all_at_once(function: Callable[[T], R], items: Sequence[T], limit: int = DEFAULT_LIMIT,
                name: str = "fmdoctor-calls") -> list[R]:
    """``[function(item) for item in items]``, up to ``limit`` at once."""
    out: list[R | None] = [None] * len(items)
    for n, result in each_at_once(function, items, limit, name):
        out[n] = result
    return out  # type: ignore[return-value]


def _take(items: Iterator[T], count: int) -> Iterable[T]:
    for _ in range(count):
        item = next(items, None)
        if item is None:
            return
        yield item


def settle_all(functions: Sequence[Callable[[], R]], limit: int = DEFAULT_LIMIT,
               name: str = "fmdoctor-calls") -> list[Callable[[], R]]:
    """Run ``functions`` at once; each comes back as a thunk that returns its result or raises its failure, for
    the caller to open where it handles that call's errors (a failure is named by its call: see
    fmdoctor.engine.errors.note_failed_call)."""

    def settle(function: Callable[[], R]) -> Callable[[], R]:
        try:
            value = function()
        except Exception as exc:
            note_failed_call(exc)
            failure = exc

            def fail() -> R:
                raise failure

            return fail
        return lambda: value

    return all_at_once(settle, list(functions), limit, name)
