"""Layers point one way: the engine, checks and runbooks never import front ends or LLM/UI libraries."""

from __future__ import annotations

import ast
from pathlib import Path

import fmdoctor

ROOT = Path(fmdoctor.__file__).resolve().parent.parent
FORBIDDEN = ("textual", "langchain", "langchain_core", "slack_bolt", "slack_sdk", "mcp",
             "fmdoctor.assistant", "fmdoctor.tui", "fmdoctor.slack", "fmdoctor.mcp", "fmdoctor.cli")
ENGINE_DIRS = ["checks", "runbooks", "fmdoctor/engine", "fmdoctor/net", "fmdoctor/report", "fmdoctor/remediation",
               "fmdoctor/inference", "fmdoctor/metrics", "fmdoctor/node", "fmdoctor/fleet", "fmdoctor/export"]


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
