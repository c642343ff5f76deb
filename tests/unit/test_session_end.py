"""The test processes' garbage collection: after each test and at the end of the session, nothing reported lost.

`tests/conftest.py` collects the garbage each test leaves as soon as the test is done, and the session's again
after the last test, freezing what survives each time, so that neither the collector's own passes nor pytest's
and Python's end-of-session walks visit the whole heap again and again. Those passes are where a finalizer that
fails is reported, so this runs a session of its own (in a separate process, as freezing is for the whole
process) with a copy of that conftest and checks both failures still surface: the one from a cycle a test in the
middle left, and the one from the last test's.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

CONFTEST = Path(__file__).resolve().parents[1] / "conftest.py"

LEAVE_FAILING_FINALIZERS = '''
class FailsWhenFinalized:
    def __init__(self, message):
        self.message = message
        self.itself = self

    def __del__(self):
        raise RuntimeError(self.message)


def test_leaves_a_cycle_for_the_collection_after_it():
    FailsWhenFinalized("finalizer of a cycle left by a test in the middle")


def test_leaves_a_cycle_for_the_end_of_the_session():
    FailsWhenFinalized("finalizer of a cycle left by the last test")
'''


def run_session(tmp_path: Path) -> subprocess.CompletedProcess[str]:
    shutil.copy(CONFTEST, tmp_path / "conftest.py")
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_cycle.py").write_text(LEAVE_FAILING_FINALIZERS)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-q",
         str(tmp_path / "test_cycle.py")],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)


def test_finalizers_that_fail_after_a_test_and_after_the_last_test_are_still_reported(tmp_path: Path) -> None:
    done = run_session(tmp_path)
    output = done.stdout + done.stderr
    assert "2 passed" in output, output
    assert "PytestUnraisableExceptionWarning" in output, output
    assert "finalizer of a cycle left by a test in the middle" in output, output
    assert "finalizer of a cycle left by the last test" in output, output
