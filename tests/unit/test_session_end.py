"""The test processes' end of session: collected once until clean, then frozen, with nothing it should report lost.

`tests/conftest.py` collects the session's garbage itself after the last test and freezes what survives, so that
pytest's and Python's own end-of-session walks do not visit the whole heap again. Those walks are where a
finalizer that fails is reported, so this runs a session of its own (in a separate process, as freezing is for
the whole process) with a copy of that conftest and checks the failure still surfaces.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

CONFTEST = Path(__file__).resolve().parents[1] / "conftest.py"

LEAVES_A_FAILING_FINALIZER = '''
class FailsWhenFinalized:
    def __del__(self):
        raise RuntimeError("finalizer of a cycle left by the last test")


def test_leaves_a_cycle_for_the_end_of_the_session():
    cycle = FailsWhenFinalized()
    cycle.itself = cycle
'''


def run_session(tmp_path: Path) -> subprocess.CompletedProcess[str]:
    shutil.copy(CONFTEST, tmp_path / "conftest.py")
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_cycle.py").write_text(LEAVES_A_FAILING_FINALIZER)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-q",
         str(tmp_path / "test_cycle.py")],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)


def test_a_finalizer_that_fails_after_the_last_test_is_still_reported(tmp_path: Path) -> None:
    done = run_session(tmp_path)
    output = done.stdout + done.stderr
    assert "1 passed" in output, output
    assert "PytestUnraisableExceptionWarning" in output, output
    assert "finalizer of a cycle left by the last test" in output, output
