"""fmdoctor eval's table against a model behind a real client: tokens from the provider, cost from agent.prices."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from fmdoctor.cli.main import main
from fmdoctor.loopback_models import LoopbackModel, planner_brain

# End to end, so out of the fast tier (`pytest -m "not e2e"`): `fmdoctor eval` end to end over the seeded eval
# clusters.
pytestmark = pytest.mark.e2e



def test_eval_prices_a_model_from_its_reported_tokens(tmp_path, capsys):
    with LoopbackModel("openai", planner_brain) as server:
        config = tmp_path / "fmdoctor.yaml"
        config.write_text(yaml.safe_dump({"agent": {"base_url": server.url, "prices": {
            "openai:loopback-model": {"input_per_mtok": 3.0, "output_per_mtok": 15.0}}}}))
        argv = ["eval", "--model", "openai:loopback-model", "--case", "health-healthy", "--config", str(config)]
        assert main(argv) == 0
        text, first = capsys.readouterr().out, list(server.exchanges)
        assert main([*argv, "--format", "json"]) == 0
        data = json.loads(capsys.readouterr().out)
    second = server.exchanges[len(first):]
    tokens_in, tokens_out = sum(e.input_tokens for e in second), sum(e.output_tokens for e in second)
    assert (data["input_tokens"], data["output_tokens"], data["usage_source"]) == (tokens_in, tokens_out, "provider")
    assert data["cost_usd"] == round((tokens_in * 3.0 + tokens_out * 15.0) / 1e6, 6) > 0
    assert data["passed"] == 1 and data["results"][0]["model_calls"] == 3  # find_names, check_all, the answer
    row = re.search(r"^openai:loopback-model +1/1 +100\.0% +0 +([\d,]+) +([\d,]+) .* \$(\d+\.\d{4}) ", text, re.M)
    assert row is not None and int(row[1].replace(",", "")) == sum(e.input_tokens for e in first)
    assert "~" not in row[0]  # the provider's numbers, not estimates


def test_eval_without_a_price_says_so(tmp_path, capsys):
    with LoopbackModel("ollama", planner_brain) as server:
        config = tmp_path / "fmdoctor.yaml"
        config.write_text(yaml.safe_dump({"agent": {"base_url": server.url}}))
        assert main(["eval", "--model", "ollama:loopback-model", "--case", "health-healthy", "--config",
                     str(config)]) == 0
    assert "n/a (no agent.prices entry)" in capsys.readouterr().out
