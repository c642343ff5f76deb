"""The streamed, slimmed DescribeInstances reader gives discovery exactly what botocore's full parse gave it:
the same inventory and the same findings, on the demo and on a p5-density world; and it pages by density."""

from __future__ import annotations

import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import boto3
import pytest
from botocore.utils import parse_timestamp as botocore_parse_timestamp
from moto import mock_aws

from fmdoctor.demo import moto_compat
from fmdoctor.demo.runtime import demo_environment, demo_settings
from fmdoctor.engine import discovery
from fmdoctor.engine.api import Connection, Doctor
from fmdoctor.engine.instance_listing import FIRST_PAGE, PAGE_MAX, page_size
from fmdoctor.engine.timestamps import parse_timestamp

BENCH = Path(__file__).resolve().parents[2] / "bench"


def botocore_pages(ec2, filters):
    """Discovery's listing before the reader: botocore's paginator and full parse, 1,000 a page."""
    for page in ec2.get_paginator("describe_instances").paginate(Filters=filters,
                                                                   PaginationConfig={"PageSize": 1000}):
        yield page.get("Reservations", [])


def both_ways(monkeypatch, doctor, cluster, only=None):
    slim_inventory, slim_report = doctor.inventory(cluster), doctor.check(cluster, only=only)
    with monkeypatch.context() as patch:
        patch.setattr(discovery, "read_instance_pages", botocore_pages)
        full_inventory, full_report = doctor.inventory(cluster), doctor.check(cluster, only=only)
    return (slim_inventory, slim_report), (full_inventory, full_report)


def findings(report):  # summaries can carry "in about 1m29s": the clock moves between the two runs
    return sorted((f.check, f.resource, f.severity.value, sorted(f.evidence)) for f in report.findings)


def test_the_demo_reads_the_same_either_way(monkeypatch):
    with demo_environment() as world:
        doctor = Doctor(settings=demo_settings(world), connection=Connection(region=world.region))
        (slim_inv, slim), (full_inv, full) = both_ways(monkeypatch, doctor, world.cluster)
    assert slim_inv.instances == full_inv.instances and slim_inv.interfaces == full_inv.interfaces
    assert slim.findings and findings(slim) == findings(full)
    assert [(e.check, e.code) for e in slim.errors] == [(e.check, e.code) for e in full.errors]


@pytest.fixture
def p5_world(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    for key, value in {"AWS_ACCESS_KEY_ID": "t", "AWS_SECRET_ACCESS_KEY": "t", "AWS_DEFAULT_REGION": "us-west-2",
                       "MOTO_EC2_LOAD_DEFAULT_AMIS": "false"}.items():
        monkeypatch.setenv(key, value)
    moto_compat.install()
    with mock_aws():
        from p5_world import seed_p5_world

        yield seed_p5_world(boto3.Session(region_name="us-west-2"), "p5", 12, time.perf_counter)
    sys.modules.pop("p5_world", None)


def test_a_p5_world_reads_the_same_either_way(monkeypatch, p5_world):
    doctor = Doctor(connection=Connection(region="us-west-2"))
    (slim_inv, slim), (full_inv, full) = both_ways(monkeypatch, doctor, "p5", only=["efa"])
    assert len(slim_inv.interfaces) == 12 * 33
    assert slim_inv.instances == full_inv.instances and slim_inv.interfaces == full_inv.interfaces
    assert findings(slim) == findings(full) == []  # healthy, and said so both ways
    assert slim.stats.checks_run == full.stats.checks_run


def test_page_size_follows_interface_density():
    """AWS's 1,000 a page for p4d and p5 alike (a 1,000-node p5 page peaks at 41 MiB in the reader:
    bench/listing_memory.py); only a layout denser than p5's 33 interfaces pages smaller."""
    assert FIRST_PAGE == PAGE_MAX == 1000
    assert page_size(1000, 1000 * 5) == PAGE_MAX  # p4d: 4 EFA interfaces and a primary
    assert page_size(1000, 1000 * 33) == PAGE_MAX  # p5: 33 interfaces
    assert page_size(10, 10 * 66) == 500  # twice p5's density: half a page
    assert page_size(0, 0) == PAGE_MAX


@pytest.mark.parametrize("value", ["2026-12-03T18:14:41.000Z", "2026-12-03T18:14:41Z", "2026-12-03T18:14:41.5Z",
                                   "2026-12-03T18:14:41.123456Z", 1700000000, 1700000000.123456, "1700000000",
                                   "Tue, 03 Dec 2026 18:14:41 GMT", "2026-12-03T18:14:41+02:00"])
def test_timestamps_parse_as_botocore_does(value):
    ours, theirs = parse_timestamp(value), botocore_parse_timestamp(value)
    assert ours == theirs and type(ours) is type(theirs) is datetime  # the same instant
    assert ours.tzinfo is not None and theirs.tzinfo is not None  # both aware
    if not isinstance(value, str) or value.endswith("Z"):  # the forms parsed here: always UTC
        assert ours.utcoffset() == timedelta(0) and ours.astimezone(UTC) == theirs.astimezone(UTC)


def test_read_timeout_comes_from_the_config():
    from fmdoctor.config import ClusterSettings, parse_settings

    doctor = Doctor(settings=parse_settings("aws: {read_timeout: 2m}"), connection=Connection(region="us-west-2"))
    client = doctor.connect(ClusterSettings()).client("ec2")
    assert client.meta.config.read_timeout == 120.0
