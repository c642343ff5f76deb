"""Every library the product imports is declared where the code that imports it is installed: the base
dependencies for the core, and for a front end that only an extra enables (the demo, MCP, Slack, serve, the
Kubernetes scheduler source), that extra itself, not a package another dependency happens to pull in. The core
imports without any extra installed."""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import fmdoctor

ROOT = Path(fmdoctor.__file__).resolve().parent.parent
PRODUCT_DIRS = ["fmdoctor", "checks", "assistant", "tui", "runbooks", "evals"]

# Modules only an extra's front end reaches, and the extras that must declare what they import. A module that
# serves several front ends names each (safety/server.py hardens the HTTP servers of serve, Slack and MCP).
EXTRA_MODULES = {
    "fmdoctor/demo/": ("demo",),
    "fmdoctor/mcp/": ("mcp",),
    "fmdoctor/cli/mcp_cmd.py": ("mcp",),
    "fmdoctor/slack/": ("slack",),
    "fmdoctor/cli/slack_cmd.py": ("slack",),
    "fmdoctor/serve/": ("serve",),
    "fmdoctor/cli/serve_cmd.py": ("serve",),
    "fmdoctor/safety/server.py": ("serve", "slack", "mcp"),
    "fmdoctor/scheduler/": ("kubernetes",),
}

pytestmark = pytest.mark.skipif(not (ROOT / "pyproject.toml").exists(), reason="needs the source tree")


def distribution_name(requirement: str) -> str:
    return re.split(r"[<>=!~\[ ;]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def declared() -> tuple[set[str], dict[str, set[str]]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    base = {distribution_name(r) for r in project["dependencies"]}
    extras = {name: {distribution_name(r) for r in reqs} for name, reqs in project["optional-dependencies"].items()}
    return base, extras


def third_party_imports(path: Path) -> set[str]:
    """Top-level names of every absolute import, function-local ones included (they are what extras guard)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return {n for n in names if n not in sys.stdlib_module_names and n != "fmdoctor"}


@functools.cache
def installed() -> dict[str, set[str]]:
    """Top-level module -> the distributions that install it (normalized names)."""
    return {m: {d.lower().replace("_", "-") for d in dists}
            for m, dists in importlib.metadata.packages_distributions().items()}


def distributions_of(module: str) -> set[str]:
    return installed().get(module, set())


def extras_for(relative: str) -> tuple[str, ...]:
    return next((extras for prefix, extras in EXTRA_MODULES.items() if relative.startswith(prefix)), ())


def test_every_import_is_declared_where_its_module_is_installed():
    base, extras = declared()
    problems = []
    for directory in PRODUCT_DIRS:
        for path in sorted((ROOT / directory).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            for module in sorted(third_party_imports(path)):
                dists = distributions_of(module)
                if not dists:
                    problems.append(f"{relative}: {module} is installed by no distribution here")
                elif dists & base:
                    continue
                elif not extras_for(relative):
                    problems.append(f"{relative}: {module} ({', '.join(sorted(dists))}) is in no base dependency, "
                                    "and the module is named for no extra in EXTRA_MODULES")
                else:
                    problems += [f"{relative}: {module} ({', '.join(sorted(dists))}) is not declared in [{extra}]"
                                 for extra in extras_for(relative) if not dists & extras[extra]]
    assert problems == []


def test_each_model_provider_names_the_extra_that_declares_its_package():
    from fmdoctor.assistant.providers import PROVIDERS

    _, extras = declared()
    missing = [f"{package} not in [{extra}]" for package, extra in PROVIDERS.values()
               if not distributions_of(package) & extras.get(extra, set())]
    assert missing == []


def test_the_core_imports_without_any_extra():
    """`fmdoctor check`, its checks and the CLI's parser import with every extra's packages missing (a fresh
    `pip install fmdoctor`): the front ends that need one import it when they run, and say which to install."""
    _, extras = declared()
    optional = {d for name, dists in extras.items() if name not in ("all", "test", "docs") for d in dists}
    base, _ = declared()
    blocked = sorted(m for m, dists in installed().items() if dists & (optional - base))
    assert "moto" in blocked and "uvicorn" in blocked and "kubernetes" in blocked
    script = f"""
import sys
class Missing:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
sys.meta_path.insert(0, Missing())
from fmdoctor.cli.main import build_parser
from fmdoctor.engine.registry import default_registry
build_parser()
assert len(list(default_registry())) > 30
loaded = sorted(m for m in sys.modules if m.split(".")[0] in {blocked!r})
assert loaded == [], loaded
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
