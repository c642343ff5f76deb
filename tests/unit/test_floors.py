"""The lower bounds in pyproject.toml are the versions CI tested: in .ci/run's lowest-direct environment
(FMDOCTOR_LOWEST_DIRECT=1) every direct dependency is installed at exactly its floor. A floor that another
dependency raises (kubernetes 37.0.1 needs pydantic>=2.13.5, urllib3>=2.8.0, pyyaml>=6.0.3) or that does not
exist was never tested, though a user's resolver may pick it where that other dependency is absent."""

from __future__ import annotations

import importlib.metadata
import os
import re
import tomllib
from pathlib import Path

import pytest
from packaging.version import Version

import fmdoctor

ROOT = Path(fmdoctor.__file__).resolve().parent.parent
NOT_INSTALLED_BY_TEST = {"docs"}  # extras .ci/run installs apart, at their newest


def floors() -> dict[str, set[str]]:
    """Distribution -> the floors written for it (every requirement [test] installs, the extras it pulls in)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = list(project["dependencies"]) + [r for name, reqs in project["optional-dependencies"].items()
                                                     if name not in NOT_INSTALLED_BY_TEST for r in reqs]
    found: dict[str, set[str]] = {}
    for requirement in requirements:
        match = re.match(r"([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?\s*>=\s*([0-9][^,;\s]*)", requirement)
        if match and match.group(1) != "fmdoctor":
            found.setdefault(match.group(1).lower().replace("_", "-"), set()).add(match.group(2))
    return found


def untested(installed: dict[str, str]) -> list[str]:
    return sorted(f"{name}>={floor}, installed {installed.get(name)}" for name, written in floors().items()
                  for floor in written if installed.get(name) is None or Version(installed[name]) != Version(floor))


@pytest.mark.skipif(not (ROOT / "pyproject.toml").exists(), reason="needs the source tree")
def test_one_floor_per_distribution():
    assert {name: written for name, written in floors().items() if len(written) > 1} == {}


@pytest.mark.skipif(os.environ.get("FMDOCTOR_LOWEST_DIRECT") != "1",
                    reason="runs in .ci/run's lowest-direct environment")
def test_every_floor_is_the_version_installed_at_the_lowest():
    installed = {name: importlib.metadata.version(name) for name in floors()}
    assert untested(installed) == [], "raise these floors to the version installed (the one tested)"


def test_a_floor_the_lowest_environment_did_not_install_is_reported(monkeypatch):
    # What the lowest-direct run installed before the floors were raised: kubernetes lifted pydantic's.
    import sys

    monkeypatch.setattr(sys.modules[__name__], "floors", lambda: {"pydantic": {"2.12"}, "networkx": {"3.2"}})
    assert untested({"pydantic": "2.13.5", "networkx": "3.2.0"}) == ["pydantic>=2.12, installed 2.13.5"]
    assert untested({"pydantic": "2.12.0", "networkx": "3.2"}) == []
    assert untested({"networkx": "3.2"}) == ["pydantic>=2.12, installed None"]
