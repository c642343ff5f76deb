"""The docs site stays true to the code: generated pages are current, every check and page is reachable."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

import fmdoctor
from fmdoctor.cli import docs_gen

ROOT = Path(fmdoctor.__file__).resolve().parent.parent
DOCS = ROOT / "docs"

pytestmark = pytest.mark.skipif(not (ROOT / "mkdocs.yml").exists(), reason="needs the source tree")


def test_generated_pages_are_current():
    stale = [str(p.relative_to(ROOT)) for p in docs_gen.stale()]
    assert stale == [], "regenerate with: python -m fmdoctor.cli.docs_gen"


def test_docs_gen_check_mode_reports_a_stale_page(tmp_path, monkeypatch, capsys):
    page = tmp_path / "checks.md"
    page.write_text("old\n")
    (tmp_path / "mkdocs.yml").write_text("site_name: x\n")
    monkeypatch.setattr(docs_gen, "generated", lambda: {page: lambda: "new\n"})
    monkeypatch.setattr(docs_gen, "ROOT", tmp_path)
    assert docs_gen.main(["--check"]) == 1
    assert "stale: checks.md" in capsys.readouterr().err
    assert page.read_text() == "old\n"  # --check writes nothing
    assert docs_gen.main([]) == 0
    assert docs_gen.main(["--check"]) == 0


def test_docs_gen_outside_a_source_tree_writes_nothing(tmp_path, monkeypatch, capsys):
    # From an installed wheel ROOT is site-packages' parent: writing there would leave docs/ in the environment.
    page = tmp_path / "docs" / "checks.md"
    monkeypatch.setattr(docs_gen, "generated", lambda: {page: lambda: "new\n"})
    monkeypatch.setattr(docs_gen, "ROOT", tmp_path)
    assert docs_gen.main([]) == 2
    assert docs_gen.main(["--check"]) == 2
    assert "not fmdoctor's source tree" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_every_check_has_its_section_in_the_checks_page():
    from fmdoctor.engine.registry import default_registry

    text = (DOCS / "checks.md").read_text()
    missing = [c.id for c in default_registry() if f"\n## {c.id}\n" not in text or f"`{c.runbook_id()}`" not in text]
    assert missing == []


def test_every_config_key_is_in_the_reference():
    from fmdoctor.config import Settings

    text = (DOCS / "configuration.md").read_text()
    missing = [k for k in Settings.model_fields if k != "source" and f"| `{k}`" not in text]
    assert missing == []


def test_every_config_key_says_what_it_does():
    # The reference's description column comes from each field's description (a section's from its model's
    # docstring): a key without one reached newcomers as a bare name and type (46 of 148 did).
    from fmdoctor.config import Settings

    bare = [key for key, _, _, description in docs_gen.model_rows(Settings, "")
            if not key.startswith("clusters.") and not description.strip()]
    assert bare == [], "give these fields a description= (or their section model a docstring)"


def test_every_cli_argument_says_what_it_takes():
    import argparse

    from fmdoctor.cli.main import build_parser

    bare = []
    parsers = [("fmdoctor", build_parser())]
    while parsers:
        path, parser = parsers.pop()
        bare += [f"{path} {action.option_strings or action.dest}" for action in parser._actions
                 if not isinstance(action, argparse._SubParsersAction | argparse._HelpAction)
                 and not action.help and not action.choices]
        parsers += [(f"{path} {name}", sub) for name, sub, _ in docs_gen.subcommands(parser)]
    assert bare == []


def test_every_command_has_its_section_in_the_cli_page():
    from fmdoctor.cli.main import build_parser

    text = (DOCS / "cli.md").read_text()
    commands = [name for name, _, _ in docs_gen.subcommands(build_parser())]
    assert len(commands) >= 14
    assert [c for c in commands if f"## `fmdoctor {c}`" not in text] == []


def nav_pages(node: object) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, list):
        return [p for item in node for p in nav_pages(item)]
    if isinstance(node, dict):
        return [p for value in node.values() for p in nav_pages(value)]
    return []


def test_every_page_is_in_the_nav_and_every_nav_entry_exists():
    nav = nav_pages(yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"])
    pages = sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md"))
    assert sorted(nav) == pages


def test_relative_links_between_pages_resolve():
    broken = []
    for page in DOCS.rglob("*.md"):
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            path = target.split("#", 1)[0]
            if "://" in target or not path:
                continue
            if not (page.parent / path).resolve().exists():
                broken.append(f"{page.relative_to(DOCS)} -> {target}")
    assert broken == []


def test_generated_pages_do_not_depend_on_the_environment(monkeypatch):
    # A default read from the environment when the parser is built would make the page differ per machine.
    for name, value in {"PORT": "8080", "FMDOCTOR_CLUSTER": "x", "FMDOCTOR_REGION": "eu-west-1",
                        "AWS_REGION": "eu-west-1", "FMDOCTOR_CONFIG": "/nonexistent.yaml", "COLUMNS": "40"}.items():
        monkeypatch.setenv(name, value)
    assert docs_gen.cli_page() == (DOCS / "cli.md").read_text()
    assert docs_gen.configuration_page() == (DOCS / "configuration.md").read_text()


# What a copied benchmark figure looks like: a table cell that is a bare time or size, the machine's load, CPU
# time as a result, a "when measured" aside. Limits and defaults (`30s`, "1 MiB, refused before...") are not.
MEASUREMENT = re.compile(r"\|\s*~?\d[\d.,]*\s?(?:s|ms|MiB|GiB)\s*(?=\|)|load average|\d[\d.,]*\s?m?s of CPU"
                         r"|(?:when|was|were) measured|measured (?:it )?at\b")


def test_no_page_carries_measurements():
    # Figures are produced by bench/ into bench/RESULTS.md and go stale anywhere they are copied by hand
    # (the README's timing diary, the scale table of robustness.md). Pages say what a benchmark measures.
    pages = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted(DOCS.rglob("*.md"))]
    found = [f"{page.relative_to(ROOT)}:{n}: {line.strip()[:80]}" for page in pages
             for n, line in enumerate(page.read_text().splitlines(), 1) if MEASUREMENT.search(line)]
    assert found == [], "put figures in bench/RESULTS.md (by a bench script) and link them"
