"""Smoke test: the installed ``fmdoctor chat --demo`` in a real terminal (tmux, 120x40): it starts, runs the
checks, answers a question, shows help, and quits cleanly on q."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

TMUX = shutil.which("tmux")
FMDOCTOR = shutil.which("fmdoctor", path=str(Path(sys.executable).parent)) or shutil.which("fmdoctor")

# End to end, so out of the fast tier (`pytest -m "not e2e"`): the installed `fmdoctor` in a real terminal
# (tmux).
pytestmark = [pytest.mark.skipif(not TMUX or not FMDOCTOR, reason="needs tmux and the installed fmdoctor"),
              pytest.mark.e2e]


@pytest.fixture
def tmux(tmp_path: Path) -> Iterator[Callable[..., str]]:
    socket = f"fmdoctor-smoke-{uuid.uuid4().hex[:8]}"  # a private tmux server: no other session is touched

    def run(*args: str) -> str:
        return subprocess.run([TMUX, "-L", socket, *args], capture_output=True, text=True, check=True,
                              timeout=30).stdout

    yield run
    subprocess.run([TMUX, "-L", socket, "kill-server"], capture_output=True, timeout=30)


def chat_text(screen: str) -> str:
    """The chat pane's text (left of the findings pane) as one line: Textual wraps the chat at the pane's width,
    so a phrase can be cut over two screen lines wherever the words before it end."""
    left = [line.split("││")[0].strip(" │") for line in screen.splitlines() if "││" in line]
    return " ".join(" ".join(left).split())


def wait_for(tmux: Callable[..., str], *texts: str, timeout: float, in_chat: tuple[str, ...] = ()) -> str:
    """The pane once it shows every text, and the chat pane every phrase of ``in_chat``, in two captures alike.

    A capture can catch a frame half drawn: an answer still streaming in, or the streamed preview just replaced
    by its Markdown, not yet laid out. On a loaded machine that lasts longer than any fixed pause, so the pane
    counts as settled only once it stops changing."""
    deadline = time.monotonic() + timeout
    screen, shown = "", False
    while time.monotonic() < deadline:
        previous, screen = screen, tmux("capture-pane", "-p", "-t", "smoke")
        was_shown = shown
        shown = all(text in screen for text in texts) and all(text in chat_text(screen) for text in in_chat)
        if shown and was_shown and screen == previous:
            return screen
        time.sleep(0.4)
    raise AssertionError(f"{texts + in_chat!r} did not all appear within {timeout}s; the screen was:\n{screen}")


def wait_gone(tmux: Callable[..., str], text: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while text in (screen := tmux("capture-pane", "-p", "-t", "smoke")):
        if time.monotonic() > deadline:
            raise AssertionError(f"{text!r} still shown after {timeout}s; the screen was:\n{screen}")
        time.sleep(0.3)


def test_fmdoctor_chat_demo_in_a_120x40_terminal(tmux, tmp_path):
    # the private tmux server inherits this test's environment: fake credentials, no AWS profile
    # (without COLUMNS/LINES, which pytest or a CI runner may set and Textual would take over the pane's size)
    command = f"cd {tmp_path} && env -u COLUMNS -u LINES {FMDOCTOR} chat --demo; echo fmdoctor-exit=$?; sleep 60"
    tmux("new-session", "-d", "-s", "smoke", "-x", "120", "-y", "40", command)

    # the demo seeded, every check ran, the header names the target
    screen = wait_for(tmux, "not verified", "model offline", "q Quit", timeout=180)
    lines = screen.splitlines()
    assert len(lines) == 40 and max(len(line) for line in lines) <= 120
    assert "cluster demo-llm-train" in lines[0] and "region us-west-2" in lines[0] and "model offline" in lines[0]
    assert "critical  efa-sg…erence" in screen  # long ids are cut in the middle, with an ellipsis
    assert "Resource" in screen and "Summary" in screen  # every column in view at 120x40
    assert "r Re-run" in lines[-1] and "q Quit" in lines[-1]

    tmux("send-keys", "-t", "smoke", "i")
    wait_gone(tmux, "r Re-run", timeout=20)  # the question box has the focus: the footer drops letter keys
    tmux("send-keys", "-t", "smoke", "-l", "is my cluster healthy?")
    tmux("send-keys", "-t", "smoke", "Enter")
    # the answer's end (the chat follows it as it grows): what could not be verified (its heading may have
    # scrolled above the half-width pane; each entry says "not verified:"), which checks ran
    screen = wait_for(tmux, timeout=120, in_chat=("not verified:", "Checks run:"))
    assert "gpu-metrics-missing" in chat_text(screen)

    tmux("send-keys", "-t", "smoke", "Escape")  # leave the question box: the footer shows every key again
    wait_for(tmux, "r Re-run", timeout=20)
    tmux("send-keys", "-t", "smoke", "?")
    wait_for(tmux, "fmdoctor keys", "Approve on a plan", timeout=20)
    tmux("send-keys", "-t", "smoke", "q")  # q closes the help ...
    wait_gone(tmux, "fmdoctor keys", timeout=20)
    tmux("send-keys", "-t", "smoke", "q")  # ... and quits the app
    wait_for(tmux, "fmdoctor-exit=0", timeout=30)
