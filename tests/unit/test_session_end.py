"""The test processes' garbage collection: after each test and at the end of the session, nothing reported lost.

`tests/conftest.py` collects the garbage each test leaves as soon as the test is done and freezes what survives,
so that neither the collector's own passes nor pytest's and Python's end-of-session walks visit the whole heap
again and again. Collections are where a finalizer that fails is reported, so this runs a session of its own (in
a separate process, as freezing is for the whole process) with those hooks of the conftest and checks both
failures still surface: the one from a cycle a test in the middle left, and the one from the last test's.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

CONFTEST = Path(__file__).resolve().parents[1] / "conftest.py"
COLLECTOR_HOOKS = ("pytest_collection_finish", "pytest_runtest_logfinish")

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


def collector_hooks() -> str:
    """The conftest's garbage-collection hooks and the constants they read, as a conftest of their own: the same
    code, without the imports the rest of the conftest needs (boto3, moto, the engine), most of this test's time."""
    tree = ast.parse(CONFTEST.read_text())
    hooks = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name in COLLECTOR_HOOKS]
    assert sorted(h.name for h in hooks) == sorted(COLLECTOR_HOOKS)
    read = {node.id for hook in hooks for node in ast.walk(hook) if isinstance(node, ast.Name)}
    constants = [node for node in tree.body if isinstance(node, ast.Assign)
                 and any(isinstance(target, ast.Name) and target.id in read for target in node.targets)]
    return "import gc\n\nimport pytest\n\n" + "\n\n".join(ast.unparse(node) for node in constants + hooks)


def run_session(tmp_path: Path) -> subprocess.CompletedProcess[str]:
    (tmp_path / "conftest.py").write_text(collector_hooks())
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_cycle.py").write_text(LEAVE_FAILING_FINALIZERS)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-p", "no:langsmith_plugin", "-q",
         str(tmp_path / "test_cycle.py")],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)


def test_finalizers_that_fail_after_a_test_and_after_the_last_test_are_still_reported(tmp_path: Path) -> None:
    done = run_session(tmp_path)
    output = done.stdout + done.stderr
    assert "2 passed" in output, output
    assert "PytestUnraisableExceptionWarning" in output, output
    assert "finalizer of a cycle left by a test in the middle" in output, output
    assert "finalizer of a cycle left by the last test" in output, output
