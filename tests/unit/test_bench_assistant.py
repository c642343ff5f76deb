"""bench/assistant.py runs the demo health check through all three provider clients: every finding reaches
the model and fmdoctor's token count is the server's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import fmdoctor

# End to end, so out of the fast tier (`pytest -m "not e2e"`): a benchmark's smoke run: the assistant through
# each provider's client library.
pytestmark = pytest.mark.e2e


BENCH = Path(fmdoctor.__file__).resolve().parent.parent / "bench" / "assistant.py"


@pytest.mark.skipif(not BENCH.exists(), reason="needs the source tree")
def test_health_check_through_every_provider(tmp_path):
    out = tmp_path / "rows.json"
    done = subprocess.run([sys.executable, str(BENCH), "--case", "health-demo", "--json", str(out)],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = json.loads(out.read_text())
    assert [r["provider"] for r in rows] == ["openai", "ollama", "bedrock"]
    for row in rows:
        # find_names (the inventory asked for the names in the question), check_all, then the answer
        assert row["status"] == "pass" and row["round_trips"] == 3 and row["tool_calls"] == 2
        assert row["expected_ids"] >= 25 and row["reached_ids"] == row["expected_ids"] and row["missing"] == []
        assert row["accounted_tokens"] == row["tokens"] and row["usage_source"] == "provider"
    assert "| openai | health-demo | pass |" in done.stdout
