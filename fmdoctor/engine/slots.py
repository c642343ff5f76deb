"""Worker slots: how many checks run Python at once, with a check that waits (for AWS, for data another
check or a loader is fetching) giving its slot up until the wait ends.

A fixed pool of check workers made a check waiting on shared data hold its worker: with 8 workers and
30 checks, the GPU checks each held one for the whole metrics load while the checks behind them waited
to start. Here every check has a thread of its own and ``max_workers`` bounds only those running at once;
:func:`waiting` frees the caller's slot for the length of a wait (the runner's AWS hooks, the shared-data
memo and the concurrent-call helper use it). A thread that holds no slot (a loader, a pool thread) waits
as it is.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

_local = threading.local()


class WorkerSlots:
    def __init__(self, count: int):
        self._semaphore = threading.Semaphore(max(1, count))

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        """Run the body in a slot (waiting for one first); the thread's waits inside give it up for their length."""
        self._semaphore.acquire()
        _local.slots, _local.held = self, True
        try:
            yield
        finally:
            if _local.held:
                self._semaphore.release()
            _local.slots, _local.held = None, False


def holds_slot() -> bool:
    """Whether the calling thread runs a check in a slot (held now or given up for a wait)."""
    return getattr(_local, "slots", None) is not None


def pause() -> None:
    """The calling thread is about to wait: free its slot, if it holds one."""
    slots = getattr(_local, "slots", None)
    if slots is not None and _local.held:
        _local.held = False
        slots._semaphore.release()


def resume() -> None:
    """The wait is over: take a slot again (waiting for one), if the thread gave one up."""
    slots = getattr(_local, "slots", None)
    if slots is not None and not _local.held:
        slots._semaphore.acquire()
        _local.held = True


@contextlib.contextmanager
def waiting() -> Iterator[None]:
    pause()
    try:
        yield
    finally:
        resume()
