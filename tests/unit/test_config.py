"""Configuration: defaults, per-cluster overrides, durations and messages that name key and line."""

from __future__ import annotations

from datetime import timedelta

import pytest

from fmdoctor.config import find_config_file, load_settings, parse_settings
from fmdoctor.durations import format_duration, parse_duration
from fmdoctor.engine.errors import ConfigError

GOOD = """\
region: us-east-1
gpu:
  idle_percent: 7
clusters:
  llm-train:
    region: us-west-2
    head_nodes: [i-0123456789abcdef0]
    gpu:
      window: 1h
    checkpoints:
      locations: [s3://ckpt-bucket/llm/, fsx://fs-0123456789abcdef0/ckpt]
      max_age: 45m
    capacity_blocks:
      expiry_window: 90m
"""


def test_cluster_inherits_top_level_and_overrides():
    settings = parse_settings(GOOD)
    cluster = settings.cluster("llm-train")
    assert cluster.region == "us-west-2"
    assert cluster.gpu.idle_percent == 7  # from the top level
    assert cluster.gpu.window == timedelta(hours=1)  # its own
    assert cluster.checkpoints.max_age == timedelta(minutes=45)
    assert cluster.capacity_blocks.expiry_window == timedelta(minutes=90)
    assert cluster.tag_keys == ["fmdoctor:cluster", "parallelcluster:cluster-name", "eks:cluster-name"]
    assert settings.default_cluster() == "llm-train"
    other = settings.cluster("unlisted")
    assert other.region == "us-east-1" and other.gpu.window == timedelta(minutes=30)
    assert other.capacity_blocks.expiry_window == timedelta(hours=3)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("regoin: us-east-1\n", "fmdoctor.yaml:1: unknown key 'regoin'"),
        (
            "clusters:\n  a:\n    gpu:\n      idle_percnt: 3\n",
            "fmdoctor.yaml:4: unknown key 'clusters.a.gpu.idle_percnt'",
        ),
        ("gpu:\n  idle_percent: lots\n", "fmdoctor.yaml:2: gpu.idle_percent"),
        ("checkpoints:\n  max_age: soon\n", "'soon' is not a duration"),
        ("capacity_blocks:\n  expiry_windw: 2h\n", "fmdoctor.yaml:2: unknown key 'capacity_blocks.expiry_windw'"),
        ("capacity_blocks:\n  expiry_window: later\n", "'later' is not a duration"),
        ("checkpoints:\n  locations: ['s3://Bad_Bucket/x']\n", "not a valid S3 URI"),
        ("checkpoints:\n  locations: ['ckpt/relative']\n", "is not a checkpoint location"),
        ("network:\n  admin_cidrs: [300.1.1.1/32]\n", "is not a CIDR"),
        ("max_workers: 0\n", "fmdoctor.yaml:1: max_workers"),
        ("- just\n- a list\n", "top level must be a mapping"),
        ("region: [unclosed\n", "not valid YAML"),
    ],
)
def test_bad_config_names_key_and_line(text, expected):
    with pytest.raises(ConfigError) as caught:
        parse_settings(text)
    assert expected in str(caught.value)


def test_empty_cluster_section_takes_defaults():
    assert parse_settings("clusters:\n  small:\n").cluster("small").gpu.idle_percent == 10


def test_config_discovery_order(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert find_config_file() is None
    (tmp_path / "fmdoctor.yaml").write_text("region: eu-west-1\n")
    assert load_settings().region == "eu-west-1"
    other = tmp_path / "other.yaml"
    other.write_text("region: ap-south-1\n")
    monkeypatch.setenv("FMDOCTOR_CONFIG", str(other))
    assert load_settings().region == "ap-south-1"
    assert load_settings(str(tmp_path / "fmdoctor.yaml")).region == "eu-west-1"  # --config wins
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings(str(tmp_path / "missing.yaml"))


@pytest.mark.parametrize(
    "text, seconds",
    [("90s", 90), ("30m", 1800), ("2h", 7200), ("1h30m", 5400), ("1d", 86400), ("1.5h", 5400), ("500ms", 0.5)],
)
def test_durations(text, seconds):
    assert parse_duration(text).total_seconds() == seconds


@pytest.mark.parametrize("text", ["", "soon", "5x", "h", "-5m", "1h 30", True, "45", "5", "5 m", "1h 30m", 120,
                                  "99999999999999999999d"])
def test_bad_durations(text):
    with pytest.raises(ValueError):
        parse_duration(text)


def test_format_duration():
    assert format_duration(timedelta(seconds=5400)) == "1h30m"
    assert format_duration(timedelta(days=3, hours=4, minutes=5)) == "3d4h"
    assert format_duration(timedelta(0)) == "0s"


def test_flag_overrides_win_and_are_validated():
    settings = parse_settings(GOOD)
    cluster = settings.cluster("llm-train", {"checkpoints": {"max_age": "10m"}})
    assert cluster.checkpoints.max_age == timedelta(minutes=10)
    assert cluster.checkpoints.locations == ["s3://ckpt-bucket/llm/", "fsx://fs-0123456789abcdef0/ckpt"]
    with pytest.raises(ConfigError, match="checkpoints.max_age"):
        settings.cluster("llm-train", {"checkpoints": {"max_age": "whenever"}})
