"""Issue 35 item 4: the AWS SDKs' precedence, flag > environment > file, for region and profile; and fmdoctor's
retry defaults only where the user set none (``AWS_RETRY_MODE``, ``AWS_MAX_ATTEMPTS``). Through the CLI on moto."""

from __future__ import annotations

import pytest

from fmdoctor.cli.main import main
from fmdoctor.config import Settings
from fmdoctor.engine.api import Connection, Doctor


@pytest.fixture
def config(tmp_path):
    path = tmp_path / "fmdoctor.yaml"
    path.write_text("region: us-west-2\nprofile: from-the-file\nclusters:\n  llm-train: {}\n")
    return path


def check(capsys, config, *extra: str) -> str:
    main(["check", "--config", str(config), "--cluster", "llm-train", "--only", "efa-sg-self-reference", *extra])
    return capsys.readouterr().err


def test_the_environments_region_beats_the_files(aws, config, capsys, monkeypatch):
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    config.write_text("region: us-west-2\nclusters:\n  llm-train: {}\n")
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    assert "in eu-west-1" in check(capsys, config)
    assert "in ap-south-1" in check(capsys, config, "--region", "ap-south-1")  # the flag beats both
    monkeypatch.delenv("AWS_REGION")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-central-1")
    assert "in eu-central-1" in check(capsys, config)
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    assert "in us-west-2" in check(capsys, config)  # the file only when neither is set


def test_the_environments_profile_beats_the_files(aws, config, capsys, monkeypatch):
    monkeypatch.setenv("AWS_PROFILE", "from-the-environment")
    err = check(capsys, config)
    assert "from-the-environment" in err and "from-the-file" not in err
    err = check(capsys, config, "--profile", "from-the-flag")
    assert "from-the-flag" in err and "from-the-environment" not in err


def retries(monkeypatch, **env: str) -> dict:
    for name in ("AWS_RETRY_MODE", "AWS_MAX_ATTEMPTS"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    doctor = Doctor(settings=Settings(), connection=Connection(region="us-west-2"))
    return dict(doctor.connect(doctor.cluster_settings("x")).client("ec2").meta.config.retries)


def test_retry_settings_of_the_user_are_kept(aws, monkeypatch):
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    assert retries(monkeypatch) == {"mode": "adaptive", "total_max_attempts": 5}
    assert retries(monkeypatch, AWS_RETRY_MODE="standard", AWS_MAX_ATTEMPTS="2") == {
        "mode": "standard", "total_max_attempts": 2}
    assert retries(monkeypatch, AWS_MAX_ATTEMPTS="9") == {"mode": "adaptive", "total_max_attempts": 9}
    assert retries(monkeypatch, AWS_RETRY_MODE="legacy") == {"mode": "legacy", "total_max_attempts": 5}


def test_the_environments_endpoints_beat_the_files_and_keep_their_per_service_order(aws, monkeypatch):
    settings = Settings(endpoint_url="http://127.0.0.1:1111")
    doctor = Doctor(settings=settings, connection=Connection(region="us-west-2"))
    assert doctor.connect(doctor.cluster_settings("x")).client("ec2").meta.endpoint_url == "http://127.0.0.1:1111"
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:2222")
    monkeypatch.setenv("AWS_ENDPOINT_URL_SQS", "http://127.0.0.1:3333")
    aws_ = doctor.connect(doctor.cluster_settings("x"))
    assert aws_.client("ec2").meta.endpoint_url == "http://127.0.0.1:2222"
    assert aws_.client("sqs").meta.endpoint_url == "http://127.0.0.1:3333"  # the service's own first
