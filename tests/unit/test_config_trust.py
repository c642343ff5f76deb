"""Issue 35 item 3: a ``./fmdoctor.yaml`` in the working directory (a cloned repository's) cannot send an
environment variable to a URL of its choosing; ``*_token_env`` names only variables set aside for tokens; stderr
says which config file was loaded. Through the CLI (``fmdoctor.cli.main.main``) in a temporary working directory.
"""

from __future__ import annotations

import pytest

from fmdoctor.cli.main import main
from fmdoctor.config import parse_settings
from fmdoctor.engine.errors import ConfigError

SENDS_THE_SECRET = """\
clusters:
  llm-train: {}
metrics:
  source: prometheus
  url: https://collector.example.net/
  auth: bearer
  token_env: {token_env}
"""


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """A cloned repository as the working directory; AWS's secret in the environment, as on a laptop."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FMDOCTOR_CONFIG", raising=False)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")
    return tmp_path


def test_a_working_directory_config_cannot_name_aws_secret_as_a_token(repo, capsys):
    (repo / "fmdoctor.yaml").write_text(SENDS_THE_SECRET.replace("{token_env}", "AWS_SECRET_ACCESS_KEY"))
    code, _, err = run(capsys, "check", "--cluster", "llm-train", "--region", "us-west-2", "--only", "gpu-idle")
    assert code == 3
    assert "AWS_SECRET_ACCESS_KEY' is not a variable set aside for a token" in err


@pytest.mark.parametrize("key", ["metrics:\n  url: https://collector.example.net/\n",
                                 "metrics:\n  token_env: FMDOCTOR_PROM_TOKEN\n",
                                 "serve:\n  webhook_url: https://hooks.example.net/x\n",
                                 "agent:\n  base_url: https://llm.example.net/v1\n",
                                 "agent:\n  api_key_env: FMDOCTOR_KEY\n",
                                 "endpoint_url: https://aws.example.net/\n",
                                 "clusters:\n  a:\n    metrics: {url: 'https://collector.example.net/'}\n",
                                 # slurmrestd gets the JWT; a kubeconfig names servers, credentials and exec plugins
                                 "scheduler:\n  slurm: {url: 'https://slurm.example.net:6820'}\n",
                                 "scheduler:\n  slurm: {token_env: FMDOCTOR_SLURM_JWT}\n",
                                 "scheduler:\n  kubernetes: {kubeconfig: ./kubeconfig}\n",
                                 "clusters:\n  a:\n    scheduler: {kubernetes: {kubeconfig: ./kubeconfig}}\n"])
def test_a_working_directory_config_naming_an_outbound_url_or_secret_is_refused(repo, capsys, key):
    (repo / "fmdoctor.yaml").write_text(key)
    code, _, err = run(capsys, "iam-policy")
    assert code == 3
    assert "was found in the working directory" in err and "--config" in err


def test_naming_the_file_is_the_opt_in(repo, capsys, monkeypatch):
    (repo / "fmdoctor.yaml").write_text(SENDS_THE_SECRET.replace("{token_env}", "FMDOCTOR_PROM_TOKEN"))
    assert run(capsys, "iam-policy", "--config", "fmdoctor.yaml")[0] == 0
    monkeypatch.setenv("FMDOCTOR_CONFIG", str(repo / "fmdoctor.yaml"))
    code, _, err = run(capsys, "iam-policy")
    assert code == 0 and f"fmdoctor: config {repo / 'fmdoctor.yaml'} (from $FMDOCTOR_CONFIG)" in err


def test_a_plain_working_directory_config_still_loads_and_says_so(repo, capsys):
    (repo / "fmdoctor.yaml").write_text("region: eu-west-1\nclusters:\n  a: {}\n")
    code, _, err = run(capsys, "iam-policy")
    assert code == 0 and "fmdoctor: config fmdoctor.yaml (from the working directory)" in err.replace(
        str(repo) + "/", "")


def test_the_users_own_config_may_name_urls_and_says_where_it_is(repo, capsys, tmp_path):
    mine = tmp_path / "xdg-config" / "fmdoctor"
    mine.mkdir(parents=True)
    (mine / "fmdoctor.yaml").write_text(SENDS_THE_SECRET.replace("{token_env}", "FMDOCTOR_PROM_TOKEN"))
    code, _, err = run(capsys, "iam-policy")
    assert code == 0 and f"config {mine / 'fmdoctor.yaml'} (from your config directory)" in err


@pytest.mark.parametrize(("name", "allowed"), [("FMDOCTOR_PROM_TOKEN", True), ("AWS_SECRET_ACCESS_KEY", False),
                                               ("GITHUB_TOKEN", False), ("PROM_TOKEN", False),
                                               ("fmdoctor_token", False)])
def test_token_env_names_only_variables_set_aside_for_tokens(name, allowed, repo):
    for key in (f"metrics: {{token_env: {name}}}", f"serve: {{webhook_token_env: {name}}}"):
        if allowed:
            parse_settings(key)
        else:
            with pytest.raises(ConfigError, match="not a variable set aside for a token"):
                parse_settings(key)


def test_the_users_allow_list_admits_a_name(repo, tmp_path):
    allow = tmp_path / "xdg-config" / "fmdoctor" / "token-env.allow"
    allow.parent.mkdir(parents=True)
    allow.write_text("# tokens for fmdoctor\nPROM_TOKEN\n")
    assert parse_settings("metrics: {token_env: PROM_TOKEN}").metrics.token_env == "PROM_TOKEN"
    with pytest.raises(ConfigError):
        parse_settings("metrics: {token_env: AWS_SECRET_ACCESS_KEY}")


def test_the_slurm_token_variable_obeys_the_token_rule_and_scheduler_is_a_top_level_default():
    with pytest.raises(ConfigError, match="not a variable set aside for a token"):
        parse_settings("scheduler:\n  slurm: {via: slurmrestd, url: 'http://h:6820', "
                       "token_env: AWS_SECRET_ACCESS_KEY}\n")
    settings = parse_settings("scheduler:\n  kind: slurm\nclusters:\n  a: {}\n  b:\n    scheduler: {kind: none}\n")
    assert (settings.cluster("a").scheduler.kind, settings.cluster("b").scheduler.kind) == ("slurm", "none")


def test_an_allow_list_others_may_write_allows_nothing(repo, tmp_path, capsys):
    """Adversarial review: a world-writable token-env.allow was read, so any local user could add
    AWS_SECRET_ACCESS_KEY to it and a named config could then send that secret as a bearer token."""
    allow = tmp_path / "xdg-config" / "fmdoctor" / "token-env.allow"
    allow.parent.mkdir(parents=True)
    allow.write_text("AWS_SECRET_ACCESS_KEY\n")
    allow.chmod(0o666)
    (repo / "mine.yaml").write_text(SENDS_THE_SECRET.replace("{token_env}", "AWS_SECRET_ACCESS_KEY"))
    code, _, err = run(capsys, "iam-policy", "--config", "mine.yaml")
    assert code == 3 and "that file is ignored: others may write to it (mode 666)" in err
    allow.chmod(0o600)
    assert run(capsys, "iam-policy", "--config", "mine.yaml")[0] == 0


def test_a_working_directory_config_may_not_publish_results_to_a_topic(repo, capsys):
    """Adversarial review: serve.sns_topic_arn in a cloned repository's fmdoctor.yaml sent every result to a
    topic of the file's choosing (any account's, where its policy allows the publish)."""
    (repo / "fmdoctor.yaml").write_text("serve:\n  sns_topic_arn: arn:aws:sns:us-east-1:999999999999:collect\n")
    code, _, err = run(capsys, "iam-policy")
    assert code == 3 and "sets serve.sns_topic_arn" in err


@pytest.mark.parametrize(("name", "allowed"), [
    ("OPENAI_API_KEY", True), ("VLLM_API_KEY", True), ("FMDOCTOR_LLM_KEY", True),
    ("AWS_SECRET_ACCESS_KEY", False), ("AWS_BEDROCK_API_KEY", False), ("SLACK_BOT_TOKEN", False),
    ("GITHUB_TOKEN", False), ("openai_api_key", False),
])
def test_the_agents_key_variable_is_a_providers_key_or_set_aside(name, allowed):
    """Adversarial review: agent.api_key_env was not restricted, so a named config with a base_url of its choosing
    could send AWS_SECRET_ACCESS_KEY as the API key. A provider's *_API_KEY (not AWS_*) or a token name passes."""
    text = f"agent:\n  base_url: https://llm.example.net/v1\n  api_key_env: {name}\n"
    if allowed:
        assert parse_settings(text).agent.api_key_env == name
    else:
        with pytest.raises(ConfigError, match="not a variable set aside for a token"):
            parse_settings(text)


def test_a_working_directory_config_may_not_replace_the_runbooks(repo, capsys):
    """A cloned repository's fmdoctor.yaml naming a runbooks_dir replaced the built-in runbooks an on-call reads and
    copies commands from (and the IAM actions iam-policy grants a fix): it needs the same opt-in as a URL."""
    (repo / "books").mkdir()
    (repo / "fmdoctor.yaml").write_text("runbooks_dir: books\n")
    code, _, err = run(capsys, "runbook", "list")
    assert code == 3
    assert "sets runbooks_dir" in err and "nor replace the runbooks" in err and "--config" in err
    assert run(capsys, "runbook", "list", "--config", "fmdoctor.yaml")[0] == 0
