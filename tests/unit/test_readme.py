"""The README's two set-up commands stay true: CI runs the test one verbatim, the demo one is a real command."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import fmdoctor

ROOT = Path(fmdoctor.__file__).resolve().parent.parent
README = ROOT / "README.md"

pytestmark = pytest.mark.skipif(not README.exists(), reason="needs the source tree")


def shell_blocks(text: str) -> list[str]:
    return [b.strip() for b in re.findall(r"```sh\n(.*?)```", text, re.S)]


def test_ci_runs_the_readme_test_command():
    blocks = shell_blocks(README.read_text())
    test_command = next(b for b in blocks if "pytest" in b)
    assert test_command in (ROOT / ".ci" / "run").read_text().splitlines()


def test_readme_demo_command_runs_the_demo():
    demo = next(b for b in shell_blocks(README.read_text()) if "--demo" in b)
    assert demo.endswith("fmdoctor check --demo")


def test_readme_says_what_the_demo_commands_exit_status_means():
    text = README.read_text()
    try_it = text[text.index("## Try it"):text.index("## Run the tests")]
    assert 'exit status 2, which means "critical findings"' in try_it
    # The exit status table itself lives on the check command's page, which the README links.
    assert "](docs/commands/check.md)" in try_it
    check_page = (ROOT / "docs" / "commands" / "check.md").read_text()
    assert "| 2 | `critical` | at least one critical finding |" in check_page


def test_readme_stays_short_and_its_links_resolve():
    text = README.read_text()
    assert len(text.splitlines()) <= 250, "the README is an entry point: move detail to docs/"
    targets = [t.split("#", 1)[0] for t in re.findall(r"\]\(([^)\s]+)\)", text) if "://" not in t]
    missing = [t for t in targets if t and not (ROOT / t).exists()]
    assert missing == []
