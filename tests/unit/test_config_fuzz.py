"""Property tests: whatever YAML a user writes, the loader returns settings or one ConfigError — never a crash."""

from __future__ import annotations

import contextlib

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fmdoctor.config import Settings, parse_settings
from fmdoctor.durations import format_duration, parse_duration
from fmdoctor.engine.errors import ConfigError

KEYS = st.sampled_from(
    ["region", "profile", "tag_keys", "clusters", "gpu", "checkpoints", "spot", "network", "max_workers",
     "idle_percent", "window", "locations", "max_age", "admin_cidrs", "queue_url", "bogus", "ünïcode", ""]
)
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=True),
    st.text(max_size=30), st.sampled_from(["2h", "90s", "soon", "s3://b/x", "s3://Bad/x", "10.0.0.0/8", "-1"]),
)
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(KEYS, inner, max_size=4)), max_leaves=12)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.dictionaries(KEYS, VALUES, max_size=6))
def test_any_mapping_yields_settings_or_config_error(document):
    text = yaml.safe_dump(document, allow_unicode=True)
    try:
        result = parse_settings(text)
    except ConfigError as exc:
        assert str(exc).startswith(("invalid configuration:", "fmdoctor.yaml"))
        return
    assert isinstance(result, Settings)
    for name in result.clusters:
        result.cluster(name)  # every accepted cluster section resolves


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40))
def test_arbitrary_text_never_crashes_the_loader(text):
    with contextlib.suppress(ConfigError):
        parse_settings(text)


@given(st.integers(0, 10**7))
def test_durations_round_trip(seconds):
    from datetime import timedelta

    delta = timedelta(seconds=seconds)
    text = format_duration(delta)
    # format_duration keeps the two largest units: the round trip is exact below a day, close above it
    parsed = parse_duration(text)
    assert abs((parsed - delta).total_seconds()) < (3600 if seconds >= 86400 else 60 if seconds >= 3600 else 1)
