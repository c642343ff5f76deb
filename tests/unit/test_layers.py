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
               "fmdoctor/training", "fmdoctor/safety", "fmdoctor/scheduler"]


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


# ---- no import circles ---------------------------------------------------------------------------------------
# Every import the package's modules make at run time (module level, or inside a function: deferred, but still
# a circle), except those under `if TYPE_CHECKING:`. A submodule's implicit import of its own parent package is
# not an edge: the parent is already being imported when the submodule runs. The top-level folders setup.py maps
# under the fmdoctor namespace are read under that name.
NAMESPACED = {"checks": "fmdoctor.checks", "assistant": "fmdoctor.assistant", "tui": "fmdoctor.tui",
              "runbooks": "fmdoctor.runbooks", "evals": "fmdoctor.evals"}


def package_modules(root: Path, folders: dict[str, str]) -> dict[str, Path]:
    modules = {}
    for folder, dotted in folders.items():
        for path in (root / folder).rglob("*.py"):
            parts = [*dotted.split("."), *path.relative_to(root / folder).with_suffix("").parts]
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def runtime_imports(module: str, modules: dict[str, Path]) -> set[str]:
    """The package's modules that ``module`` imports at run time."""
    package = module if modules[module].name == "__init__.py" else module.rpartition(".")[0]
    named: set[str] = set()

    def visit(statements: list[ast.stmt]) -> None:
        for node in statements:
            if isinstance(node, ast.If) and _is_type_checking(node.test):
                visit(node.orelse)
                continue
            if isinstance(node, ast.Import):
                named.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                    base = ".".join([*parent, *([node.module] if node.module else [])])
                named.add(base)
                named.update(f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in modules)
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.stmt):
                    visit([child])
                elif isinstance(child, ast.excepthandler):
                    visit(child.body)

    visit(ast.parse(modules[module].read_text(encoding="utf-8")).body)
    edges = set()
    for name in named:
        parts = name.split(".")
        for length in range(1, len(parts) + 1):
            target = ".".join(parts[:length])
            implicit_parent = length < len(parts) and module.startswith(target + ".")
            if target in modules and target != module and not implicit_parent:
                edges.add(target)
    return edges


def import_circles(modules: dict[str, Path]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan), each sorted."""
    graph = {module: runtime_imports(module, modules) for module in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def connect(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in graph[module]:
            if target not in index:
                connect(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                circles.append(sorted(group))

    for module in graph:
        if module not in index:
            connect(module)
    return circles


def test_no_run_time_import_circle_between_the_package_modules():
    modules = package_modules(ROOT, {"fmdoctor": "fmdoctor", **NAMESPACED})
    assert len(modules) > 200  # the walk found the package, not an empty folder
    assert import_circles(modules) == []


def test_the_circle_finder_sees_deferred_and_relative_imports_but_not_type_only_ones(tmp_path):
    def package(files: dict[str, str]) -> dict[str, Path]:
        for name, text in files.items():
            (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / name).write_text(text)
        return package_modules(tmp_path, {"pkg": "pkg"})

    found = package({"pkg/__init__.py": "", "pkg/a.py": "from pkg.b import thing\n",
                     "pkg/b.py": "def later():\n    from . import a\n"})
    assert import_circles(found) == [["pkg.a", "pkg.b"]]
    type_only = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import a\n"
    (tmp_path / "pkg" / "b.py").write_text(type_only)
    assert import_circles(package_modules(tmp_path, {"pkg": "pkg"})) == []
    (tmp_path / "pkg" / "__init__.py").write_text("from pkg.a import thing\n")  # re-exports are not a circle
    (tmp_path / "pkg" / "b.py").write_text("thing = 1\n")
    assert import_circles(package_modules(tmp_path, {"pkg": "pkg"})) == []
