"""Layers point one way: the engine, checks and runbooks never import front ends or LLM/UI libraries."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import fmdoctor

ROOT = Path(fmdoctor.__file__).resolve().parent.parent
FORBIDDEN = ("textual", "langchain", "langchain_core", "slack_bolt", "slack_sdk", "mcp",
             "fmdoctor.assistant", "fmdoctor.tui", "fmdoctor.slack", "fmdoctor.mcp", "fmdoctor.cli")
ENGINE_DIRS = ["checks", "runbooks", "fmdoctor/engine", "fmdoctor/net", "fmdoctor/report", "fmdoctor/remediation",
               "fmdoctor/inference", "fmdoctor/metrics", "fmdoctor/node", "fmdoctor/fleet", "fmdoctor/export",
               "fmdoctor/training", "fmdoctor/safety"]


def imports_of(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_engine_layers_import_no_front_end():
    offenders = []
    for directory in ENGINE_DIRS:
        for path in (ROOT / directory).rglob("*.py"):
            for name in imports_of(path):
                if any(name == f or name.startswith(f + ".") for f in FORBIDDEN):
                    offenders.append(f"{path.relative_to(ROOT)} imports {name}")
    assert offenders == []


def test_checks_build_no_clients_and_never_print():
    for path in (ROOT / "checks").glob("*.py"):
        source = path.read_text(encoding="utf-8")
        assert "boto3" not in source, f"{path.name}: checks get clients from ctx.client()"
        assert "print(" not in source and "sys.exit" not in source, path.name


ASSISTANT_FORBIDDEN = ("textual", "slack_bolt", "slack_sdk", "mcp", "fmdoctor.cli", "fmdoctor.tui", "fmdoctor.slack")
PROVIDER_NAMES = re.compile(r"langchain_(aws|openai|ollama)|bedrock|ChatOpenAI|ChatOllama|\bollama\b")


def test_assistant_imports_no_front_end():
    offenders = [f"{p.name} imports {n}" for p in (ROOT / "assistant").rglob("*.py") for n in imports_of(p)
                 if any(n == f or n.startswith(f + ".") for f in ASSISTANT_FORBIDDEN)]
    assert offenders == []


def test_only_the_providers_module_names_model_providers():
    offenders = []
    for path in [*(ROOT / "assistant").rglob("*.py"), *(ROOT / "fmdoctor" / "cli").glob("*.py")]:
        if path.name != "providers.py":
            text = path.read_text(encoding="utf-8").replace("convert_to_openai_tool", "")
            offenders += [f"{path.name}: {m.group(0)}" for m in PROVIDER_NAMES.finditer(text)]
    assert offenders == []


def test_the_cli_imports_langchain_only_when_the_assistant_runs():
    """`fmdoctor check` stays quick to start: ask/eval import the assistant inside their run()."""
    code = ("import sys, fmdoctor.cli.main; "
            "print(sorted(m for m in sys.modules if m.startswith(('langchain', 'fmdoctor.assistant'))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
