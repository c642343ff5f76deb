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
    # CI runs it verbatim too (its output aside), so [demo] alone is proven enough for the demo on a fresh clone.
    assert f"{demo} >/dev/null" in (ROOT / ".ci" / "run").read_text().splitlines()


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
    targets = [t for t in re.findall(r"\]\(([^)\s]+)\)", text) if "://" not in t]
    missing = [t for t in targets if t.split("#", 1)[0] and not (ROOT / t.split("#", 1)[0]).exists()]
    assert missing == []
    # mkdocs --strict checks the docs' anchors, not the README's: each #anchor names a heading of its page.
    broken = [t for t in targets if "#" in t and t.split("#", 1)[1] not in anchors(ROOT / t.split("#", 1)[0])]
    assert broken == []


def anchors(page: Path) -> set[str]:
    """The ids Python-Markdown's toc (mkdocs) gives a page's headings; GitHub's agree for plain headings."""
    return {re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", heading).strip().lower())
            for heading in re.findall(r"^#+\s+(.*)$", page.read_text(), re.M)}


def readme_output_sample() -> list[str]:
    text = README.read_text()
    start = text.index("The first screen of its output:")
    return re.search(r"```\n(.*?)```", text[start:], re.S).group(1).splitlines()


def headings(lines: list[str]) -> list[str]:
    """The output's sections: its unindented lines after the title and summary, without their counts."""
    return [line.split(" · ")[0] for line in lines[2:] if line and not line.startswith((" ", "…"))]


def test_readme_output_is_the_first_screen_the_demo_prints_now(demo_check):
    # The sample once showed the findings first; the demo has since led with its incidents ("ACT FIRST"), so a
    # newcomer's first screen matched nothing in the README. Ids, times and counts differ per run; the title,
    # the number of checks and the order of the sections do not.
    from fmdoctor.report.text import render_text

    real = render_text(demo_check.report).splitlines()
    sample = readme_output_sample()
    assert sample[0] == real[0]
    checks = re.compile(r"· (\d+) checks ·")
    assert checks.search(sample[1]).group(1) == checks.search(real[1]).group(1)
    assert headings(sample) == headings(real)[:len(headings(sample))]
    assert len(headings(sample)) >= 2
