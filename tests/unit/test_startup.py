"""Start-up stays small: registering the commands imports no subcommand's world, and ``checks list`` reads a
catalogue that can never drift from the registry."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import fmdoctor
from fmdoctor.cli import check_cmd, checks_cmd, export_cmd, fleet_cmd, why_not_cmd

HEAVY = ("langchain", "langchain_core", "textual", "slack_bolt", "slack_sdk", "mcp", "moto", "boto3", "botocore",
         "fmdoctor.assistant", "fmdoctor.checks", "fmdoctor.tui")


def test_registering_the_commands_imports_no_subcommand_world():
    code = ("import sys, fmdoctor.cli.main as m; m.build_parser(); "
            f"print(sorted({{n.split('.')[0] if not n.startswith('fmdoctor.') else '.'.join(n.split('.')[:2]) "
            f"for n in sys.modules}} & set({HEAVY!r})))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_the_shipped_catalogue_is_the_registry_s():
    """Regenerate with `python -m fmdoctor.cli.docs_gen` when this fails (a check was added or changed)."""
    expected = checks_cmd.catalogue_text(checks_cmd.registry_catalogue())
    assert checks_cmd.CATALOGUE_FILE.read_text(encoding="utf-8") == expected
    assert [e["id"] for e in json.loads(expected)] == [e["id"] for e in checks_cmd.catalogue()]


def test_the_names_registration_repeats_are_the_engine_s():
    """Flags name these without importing their modules; each must stay what the module defines."""
    from fmdoctor.export.cloudwatch import IAM_ACTION
    from fmdoctor.net.reachability import PROTOCOLS
    from fmdoctor.report import RENDERERS
    from fmdoctor.report.fleet import FLEET_RENDERERS

    assert tuple(sorted(RENDERERS)) == check_cmd.FORMATS
    assert tuple(sorted(FLEET_RENDERERS)) == fleet_cmd.FORMATS
    assert why_not_cmd.PROTOCOLS == PROTOCOLS
    assert export_cmd.IAM_ACTION == IAM_ACTION


def test_the_mcp_service_s_verify_delays_are_the_remediation_s():
    from fmdoctor.mcp.service import DEFAULT_VERIFY_DELAYS
    from fmdoctor.remediation.apply import DEFAULT_VERIFY_DELAYS as APPLY_DELAYS

    assert DEFAULT_VERIFY_DELAYS == APPLY_DELAYS



RECORDED = Path(fmdoctor.__file__).resolve().parent.parent / "bench" / "startup.json"


def _start_up_cpu(argv: list[str]) -> float:
    """The least CPU of three runs of the installed CLI (after one that writes Python's compiled modules)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    command = [str(Path(sys.executable).with_name("fmdoctor")), *argv]
    cpu = []
    for _ in range(4):
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        assert proc.returncode == 0, argv
        cpu.append(usage.ru_utime + usage.ru_stime)
    return min(cpu[1:])


@pytest.mark.skipif(not RECORDED.exists(), reason="needs the source tree's bench/startup.json")
@pytest.mark.parametrize("command", [["--version"], ["checks", "list"]], ids=" ".join)
def test_start_up_cpu_stays_within_twice_the_recorded_figure(command):
    """A smoke test of start-up cost (CPU, not wall: steadier on a shared machine); bench/startup.py records
    the figure. Twice it is room for a slower machine, not for importing a subcommand's world at start."""
    recorded = json.loads(RECORDED.read_text())[" ".join(command)]["cpu_min"]
    assert _start_up_cpu(command) <= 2 * recorded


def test_the_console_script_collects_the_youngest_objects_less_often():
    """``run`` raises the collector's first threshold before the command runs: at CPython's 700, full walks of
    botocore's long-lived models cost `check --demo` about a quarter of its CPU."""
    from fmdoctor.cli.main import GC_FIRST_GENERATION_THRESHOLD

    script = ("import gc; from fmdoctor.cli import main as cli; "
              "cli.main = lambda: print(gc.get_threshold()[0]) or 0; cli.run()")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    assert int(done.stdout) == GC_FIRST_GENERATION_THRESHOLD > 700
