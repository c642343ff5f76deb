"""The wheel installs everything under fmdoctor.* and no generic top-level package."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

import fmdoctor

ROOT = Path(fmdoctor.__file__).resolve().parent.parent


@pytest.mark.skipif(not (ROOT / "pyproject.toml").exists(), reason="needs the source tree")
def test_wheel_contents(tmp_path):
    # The sdist, then the wheel built from it, as `python -m build` does; without PYTHONDONTWRITEBYTECODE, whose
    # only effect is distutils' "byte-compiling is disabled" line.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    built = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(tmp_path), str(clean_tree(tmp_path))],
        check=True, capture_output=True, text=True, cwd=tmp_path, env=env,
    )
    # (a file's name may say "warning": setuptools' lines naming files are not its warnings)
    warnings = [line for line in (built.stdout + built.stderr).splitlines()
                if re.search(r"warn|would be ignored", line, re.I)
                and not re.match(r"(copying|adding|creating|hard linking) ", line)]
    assert warnings == []
    [sdist] = tmp_path.glob("fmdoctor-*.tar.gz")
    assert_sdist_is_the_tracked_tree(sdist)
    [wheel] = tmp_path.glob("fmdoctor-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    for data in ["fmdoctor/node/data", "fmdoctor/demo/node"]:  # check --local and its --demo read them
        for path in (ROOT / data).rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts:
                assert path.relative_to(ROOT).as_posix() in names, f"{path} missing from the wheel"
    top_level = {n.split("/", 1)[0] for n in names}
    assert top_level == {"fmdoctor", next(n for n in top_level if n.endswith(".dist-info"))}
    for source_dir, package in [("checks", "fmdoctor/checks"), ("assistant", "fmdoctor/assistant"),
                                ("tui", "fmdoctor/tui"), ("runbooks", "fmdoctor/runbooks"),
                                ("evals", "fmdoctor/evals")]:
        for path in (ROOT / source_dir).rglob("*.py"):
            if "__pycache__" in path.parts:
                continue
            assert f"{package}/{path.relative_to(ROOT / source_dir).as_posix()}" in names
    for path in (ROOT / "fmdoctor").rglob("*.py"):
        if "__pycache__" not in path.parts:
            assert path.relative_to(ROOT).as_posix() in names, f"{path} missing from the wheel"
    for path in (ROOT / "runbooks").glob("*.md"):
        assert f"fmdoctor/runbooks/{path.name}" in names
    assert "fmdoctor/evals/cases.yaml" in names  # fmdoctor eval works from an installed wheel
    assert "fmdoctor/tui/app.tcss" in names  # fmdoctor chat finds its styles in an installed wheel
    assert "fmdoctor/cli/checks_catalogue.json" in names  # fmdoctor checks list reads it


def clean_tree(tmp_path: Path) -> Path:
    """The tracked files alone, as a fresh clone has them: built in the checkout, setuptools also reads the
    fmdoctor.egg-info/SOURCES.txt an earlier build or `pip install -e` left there and ships what it lists, so a
    data file the package-data rules no longer name still reached the wheel. Outside git: the tree itself."""
    tracked = tracked_files()
    if tracked is None:
        return ROOT
    tree = tmp_path / "src"
    for name in tracked:
        if (ROOT / name).is_file():  # a tracked file deleted in the working tree is not there to build from
            (tree / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, tree / name)
    return tree


def tracked_files() -> set[str] | None:
    """git ls-files of the source tree, or None outside a git work tree (an unpacked sdist)."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return {name for name in listed.stdout.decode().split("\0") if name}


def assert_sdist_is_the_tracked_tree(sdist: Path) -> None:
    """A packager rebuilds, tests and documents from the sdist: it holds every tracked file (tests, docs,
    bench, deploy, .ci) and nothing a working tree leaves behind (bytecode)."""
    with tarfile.open(sdist) as archive:
        members = {m.name.split("/", 1)[1] for m in archive.getmembers() if m.isfile() and "/" in m.name}
    assert [n for n in members if "__pycache__" in n or n.endswith((".pyc", ".pyo"))] == []
    tracked = tracked_files()
    if tracked is None:
        return
    missing = sorted(n for n in tracked if (ROOT / n).is_file() and n not in members)
    assert missing == [], "list these files' kind in MANIFEST.in"
    made_by_setuptools = {"PKG-INFO", "setup.cfg"}
    extra = sorted(n for n in members - tracked - made_by_setuptools if not n.startswith("fmdoctor.egg-info/"))
    assert extra == [], "the sdist holds files git does not track"


@pytest.mark.skipif(not (ROOT / "CHANGELOG.md").exists(), reason="needs the source tree")
def test_the_changelog_and_the_example_images_name_the_one_version():
    # fmdoctor/__init__.py is the one place the version is written; the changelog's newest section (or the
    # Unreleased one, saying what it will be released as) and the deployments' image tags follow it.
    version = fmdoctor.__version__
    changelog = (ROOT / "CHANGELOG.md").read_text()
    sections = re.findall(r"^## \[([^\]]+)\]", changelog, re.M)
    released = [s for s in sections if s != "Unreleased"]
    if released:
        assert released[0] == version
    else:
        unreleased = changelog.split("## [Unreleased]", 1)[1].split("\n## ", 1)[0]
        assert f"released as {version}" in unreleased
    tags = {tag for path in (ROOT / "deploy").rglob("*") if path.is_file()
            for tag in re.findall(r"/fmdoctor:(\d[\w.]*)", path.read_text())}
    assert tags == {version}
