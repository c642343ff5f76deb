"""The assistant depends on the engine, never on front ends; provider names live in one module."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import fmdoctor

ROOT = Path(fmdoctor.__file__).resolve().parent.parent
FRONT_ENDS = ("textual", "slack_bolt", "slack_sdk", "mcp", "fmdoctor.cli", "fmdoctor.tui", "fmdoctor.slack")
PROVIDERS = re.compile(r"langchain_(aws|openai|ollama)|bedrock|ChatOpenAI|ChatOllama|\bollama\b")


def _imports(path: Path) -> set[str]:
    import ast

    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_assistant_imports_no_front_end():
    offenders = [f"{p.name} imports {n}" for p in (ROOT / "assistant").rglob("*.py") for n in _imports(p)
                 if any(n == f or n.startswith(f + ".") for f in FRONT_ENDS)]
    assert offenders == []


def test_only_providers_py_names_providers():
    offenders = []
    for path in [*(ROOT / "assistant").rglob("*.py"), *(ROOT / "fmdoctor" / "cli").glob("*.py")]:
        if path.name == "providers.py":
            continue
        text = path.read_text(encoding="utf-8").replace("convert_to_openai_tool", "")
        offenders += [f"{path.name}: {m.group(0)}" for m in PROVIDERS.finditer(text)]
    assert offenders == []


def test_cli_loads_langchain_only_for_the_assistant_commands():
    """`fmdoctor check` must stay quick to start: ask/eval import the assistant only when they run."""
    code = "import sys, fmdoctor.cli.main; print(sorted(m for m in sys.modules if m.startswith(('langchain', "
    code += "'fmdoctor.assistant'))))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
