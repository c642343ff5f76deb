"""The demo seeded the fast way (bulk data handed to moto's backends and handlers in this process) is the world
seeded through requests: the same datapoints in moto, the same answers from EC2's and S3's APIs for the nodes,
network and checkpoint objects, and the same report from ``fmdoctor check --demo``.

``seed_demo(..., moto_here=True)`` is what the demo and bench/world_server.py use; ``moto_here=False`` sends every
call as a request, as the seeders did before (and as they do against a moto server in another process).
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from botocore.exceptions import FlexibleChecksumError
from moto import mock_aws

from fmdoctor.demo import moto_cloudwatch, moto_compat, moto_ec2, moto_s3, seed_health
from fmdoctor.demo.endpoint_builder import EndpointBuilder
from fmdoctor.demo.metrics import A100_40GB, MetricsPublisher
from fmdoctor.demo.scenario import DEMO_REGION

NOW = datetime(2026, 4, 12, 9, 41, 27, 654321, tzinfo=UTC)  # a fraction of a second, as datetime.now() has


def _stored(backend: Any) -> list[tuple[Any, ...]]:
    """Every datapoint moto holds, as its queries read them."""
    return sorted(
        (d.namespace, d.name, tuple(sorted((x.name, x.value) for x in d.dimensions)), d.timestamp, d.unit,
         getattr(d, "value", None), getattr(d, "sum", None), getattr(d, "sample_count", None))
        for d in backend.metric_data)


def _publish(session: boto3.Session, direct: bool) -> list[tuple[Any, ...]]:
    backend = moto_cloudwatch.backend_answering(session, DEMO_REGION)
    publish = MetricsPublisher(session.client("cloudwatch"), NOW, region=DEMO_REGION,
                               backend=backend if direct else None)
    publish.gpu_node("i-0123456789abcdef0", "10.0.1.7", 93.0, by_period={5: {"memory_percent": [79.0] * 6}})
    publish.gpu_node("i-0123456789abcdef1", "10.0.1.8", 2.0, gpu=A100_40GB, append_instance_id=False)
    publish.efa_interface("eni-0123456789abcdef0", "rdmap16s27", {"efa_rx_dropped": 7}, metrics=["efa_rx_drops"])
    assert publish.flush() == 1
    endpoints = EndpointBuilder(session, "c", metrics_backend=backend if direct else None)
    # Distributions (Values and Counts, ints among them), single values and a backlog, as the demo publishes them.
    endpoints.traffic("chat", NOW, model_latency_us={350_000: 40, 1_600_000: 10}, overhead_latency_us={6_000: 95},
                      invocations=100, model_errors=3, gpu_utilization=372.0, gpu_memory_utilization=300.0)
    endpoints.async_traffic("batch", NOW, backlog=[0, 1, 3, 6, 9, 12, 15, 19, 22, 26],
                            oldest_age_s=[0, 48, 106, 167, 229, 288, 349, 408, 469, 530])
    return _stored(backend)


@pytest.mark.parametrize("env", [{}, {"MOTO_ACCOUNT_ID": "210987654321"}])
def test_datapoints_handed_to_the_backend_are_those_a_request_stores(monkeypatch, env):
    moto_compat.install()
    for key, value in env.items():  # another account: the backend is the one the session's calls reach
        monkeypatch.setenv(key, value)
    worlds = []
    for direct in (False, True):
        with mock_aws():
            worlds.append(_publish(boto3.Session(region_name=DEMO_REGION, aws_access_key_id="testing",
                                                 aws_secret_access_key="testing"), direct))
    through_requests, direct = worlds
    assert len(through_requests) > 1000  # 2 nodes x 8 GPUs x 5 metrics x 6 periods, EFA, endpoints
    assert direct == through_requests
    # Whole seconds: the wire would have rounded NOW's fraction, which the direct route would keep.
    assert all(row[3].microsecond == 0 and row[3].tzinfo is None for row in direct)


def test_a_fraction_of_a_second_is_refused_rather_than_stored_differently():
    class Backend:
        def put_metric_data(self, namespace: str, data: list[dict[str, Any]]) -> None:
            raise AssertionError("stored")

    with pytest.raises(ValueError, match="fraction of a second"):
        moto_cloudwatch.put_metric_data(Backend(), "CWAgent", [{"MetricName": "m", "Timestamp": NOW, "Value": 1.0}])


# What identifies a finding across two seedings: AWS's generated ids read as the demo's names for them.
_AWS_ID = re.compile(r"\b(?:i|eni|sg|subnet|vpc|rtb|acl|igw|nat|vpce|fs|cr)-[0-9a-f]{8,17}\b")
_DURATION = re.compile(r"\b\d+(?:d|h|m|s)(?:\d+(?:h|m|s))*\b")
# A time the demo writes relative to its clock ("stalled since about 2026-12-05T06:21+00:00", "ends at ..."): each
# run seeds its world at its own now, so two runs a minute boundary apart name different minutes.
_TIME = re.compile(r"\b\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:\d{2})?")


def _names(world: Any) -> dict[str, str]:
    """Each generated id the seeders noted, named by where the world's facts hold it (``nodes.gpu-node-3``)."""
    named: dict[str, str] = {}

    def walk(value: Any, path: str) -> None:
        if isinstance(value, dict):
            for key, child in value.items():
                walk(child, f"{path}.{key}" if path else str(key))
        elif isinstance(value, str) and _AWS_ID.fullmatch(value):
            named.setdefault(value, path)

    walk({k: v for k, v in world.facts.items() if k != "prometheus_history"}, "")
    return named


def _shape(report: dict[str, Any], named: dict[str, str]) -> dict[str, Any]:
    def name(text: str) -> str:
        # An id the facts do not name stays as it is: generated, it differs between the seedings and fails the test.
        text = _TIME.sub("<time>", text)
        return _DURATION.sub("<duration>", _AWS_ID.sub(lambda m: named.get(m.group(0), m.group(0)), text))

    return {
        "status": report["status"],
        "findings": Counter((f["check"], f["severity"], name(f["resource"])) for f in report["findings"]),
        "errors": Counter((e["check"], e["code"], name(e["unverified"] or "")) for e in report["errors"]),
        "skipped": Counter(json.dumps(s, sort_keys=True) for s in report["skipped"]),
        "incidents": Counter(
            (i["severity"], i["urgency"], name(i["title"]), json.dumps(i["impact"], sort_keys=True),
             name(i["cause"]["check"] + " " + i["cause"]["resource"]),
             tuple(sorted(name(f["check"] + " " + f["resource"]) for f in i["findings"])))
            for i in report["incidents"]),
    }


def _demo_check(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                moto_here: bool) -> tuple[int, dict[str, Any]]:
    from fmdoctor.cli.main import main
    from fmdoctor.demo import runtime

    seeded = []
    real = runtime.seed_demo

    def seed_demo(session: boto3.Session, *args: Any, **kwargs: Any) -> Any:
        kwargs["moto_here"] = moto_here
        world = real(session, *args, **kwargs)
        # The VPC's main route table (s3-unreachable's resource) is made by AWS, not noted by a seeder.
        world.facts.setdefault("test", {})["main_route_table"] = world.builder.main_route_table()
        seeded.append(world)
        return world

    monkeypatch.setattr(runtime, "seed_demo", seed_demo)
    code = main(["check", "--demo", "--format", "json", "--no-progress"])
    report = json.loads(capsys.readouterr().out)
    (world,) = seeded
    return code, _shape(report, _names(world))


def test_the_demo_report_is_the_one_seeded_through_requests(monkeypatch, capsys):
    before_code, before = _demo_check(monkeypatch, capsys, moto_here=False)
    after_code, after = _demo_check(monkeypatch, capsys, moto_here=True)
    assert before_code == after_code == 2
    assert before["status"] == "critical"
    assert len(before["findings"]) > 30 and before["incidents"] and before["errors"]
    assert after == before



# --- S3: the checkpoint objects -------------------------------------------------------------------------------

def _s3_world(session: boto3.Session, now: datetime) -> dict[str, Any]:
    """What S3's APIs answer for the checkpoint bucket, and every field moto keeps for each object."""
    from moto.s3.models import s3_backends

    s3 = session.client("s3")

    def when(stamp: datetime) -> Any:
        # Backdated objects carry an exact instant; the others moto stamps at their upload ("now", a second apart).
        delta = stamp.replace(tzinfo=UTC) - now
        return "now" if abs(delta.total_seconds()) < 60 else delta

    listed = s3.list_objects_v2(Bucket=seed_health.CHECKPOINT_BUCKET)["Contents"]
    answers = {}
    for entry in listed:
        key = entry["Key"]
        head = s3.head_object(Bucket=seed_health.CHECKPOINT_BUCKET, Key=key, ChecksumMode="ENABLED")
        headers = {k: v for k, v in head.pop("ResponseMetadata")["HTTPHeaders"].items()
                   if k not in {"date", "x-amzn-requestid", "x-amz-request-id", "x-amz-id-2", "last-modified"}}
        head["LastModified"] = when(head["LastModified"])
        acl = s3.get_object_acl(Bucket=seed_health.CHECKPOINT_BUCKET, Key=key)
        acl.pop("ResponseMetadata")
        tags = s3.get_object_tagging(Bucket=seed_health.CHECKPOINT_BUCKET, Key=key)["TagSet"]
        body = s3.get_object(Bucket=seed_health.CHECKPOINT_BUCKET, Key=key)["Body"].read()
        answers[key] = {"listed": {**entry, "LastModified": when(entry["LastModified"])}, "head": head,
                        "headers": headers, "acl": acl, "tags": tags, "body": body}
    account = session.client("sts").get_caller_identity()["Account"]
    bucket = s3_backends[account]["aws"].get_bucket(seed_health.CHECKPOINT_BUCKET)
    stored = {}
    for key in bucket.keys.values():
        fields = {name: (dict(value) if name == "_metadata" else repr(value)) for name, value in vars(key).items()
                  if name not in {"last_modified", "_time_progressed", "_value_buffer", "lock"}}
        fields["value"], fields["last_modified"] = key.value, when(key.last_modified)
        stored[key.name] = fields
    return {"answers": answers, "stored": stored}


def _seed_checkpoints(monkeypatch: pytest.MonkeyPatch, moto_here: bool, now: datetime) -> dict[str, Any]:
    from fmdoctor.demo.scenario import DemoWorld

    class Frozen(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> Any:  # type: ignore[override]
            return now

    monkeypatch.setattr(seed_health, "datetime", Frozen)
    with mock_aws():
        session = boto3.Session(region_name=DEMO_REGION, aws_access_key_id="testing", aws_secret_access_key="testing")
        seed_health.seed_checkpoints(DemoWorld(session=session, moto_here=moto_here))
        return _s3_world(session, now)


def test_checkpoint_objects_handed_to_the_backend_are_those_put_through_requests(monkeypatch):
    moto_compat.install()
    now = datetime.now(UTC)
    through_requests = _seed_checkpoints(monkeypatch, False, now)
    direct = _seed_checkpoints(monkeypatch, True, now)
    assert len(through_requests["answers"]) == 44  # 4 whole checkpoints of 9 files, one of 6, config, tensorboard
    first = through_requests["answers"]["llama-70b/run-0412/step-001600/.metadata"]
    assert first["listed"]["ChecksumAlgorithm"] == ["CRC32"] and first["head"]["ChecksumCRC32"]
    assert first["head"]["ContentType"] == "binary/octet-stream" and first["acl"]["Grants"]
    assert direct == through_requests


@pytest.mark.parametrize("drop", ["checksum_algorithm", "checksum_value", "metadata", "acl", "storage"])
def test_a_field_the_direct_route_dropped_would_show(monkeypatch, drop):
    """The comparison above sees each field the direct route sets: leave one out (or get it wrong) and it fails."""
    moto_compat.install()
    now = datetime.now(UTC)
    through_requests = _seed_checkpoints(monkeypatch, False, now)
    real = moto_s3.put_object

    def dropping(backend: Any, bucket: str, key: str, body: bytes) -> Any:
        stored = real(backend, bucket, key, body)
        if drop == "checksum_algorithm":
            stored.checksum_algorithm = None
        elif drop == "checksum_value":
            stored.checksum_value = "AAAAAA=="  # moto answers None as a header botocore cannot read: a wrong value
        elif drop == "metadata":
            stored._metadata.pop("x-amz-content-sha256")
        elif drop == "acl":
            from moto.s3.models import get_canned_acl

            stored.set_acl(get_canned_acl("public-read"))
        else:
            stored._storage_class = None
        return stored

    monkeypatch.setattr(moto_s3, "put_object", dropping)
    try:
        differs = _seed_checkpoints(monkeypatch, True, now) != through_requests
    except FlexibleChecksumError:  # GetObject refuses a body whose stored checksum is not its own
        differs = drop == "checksum_value"
    assert differs


# --- EC2: the network and the nodes -------------------------------------------------------------------------------

# Generated values differ between any two seedings, by either route: each is read as its kind and the order of its
# first appearance in the answers, so the two worlds compare by structure (which interface of which instance has
# which address, in which subnet and group) while every other field compares as it is.
_GENERATED = re.compile(
    r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"  # client tokens
    r"|\b(?:[a-z]+-)+-?[0-9a-f]{8,17}\b"  # ids: i-, eni-, eni-attach-, r-, sg-, subnet-, sir-, cr-, pg-, ...
    r"|\b(?:ip|ec2)-\d+-\d+-\d+-\d+\b|\b\d+\.\d+\.\d+\.\d+\b"  # addresses and the host names made of them
    r"|\b(?:[0-9a-f]{2}:){5}[0-9a-f]{2}\b")  # MAC addresses


def _canonical(answers: Any, now: datetime) -> Any:
    def stamp(value: Any) -> Any:
        if isinstance(value, datetime):  # moto's clock (launch, attach times) or the seeders' (now - 6 days)
            seconds = (value.replace(tzinfo=UTC) - now).total_seconds()
            return "recent" if abs(seconds) < 120 else f"{round(seconds / 60)} minutes from the test's start"
        if isinstance(value, timedelta):
            return str(value)
        raise TypeError(type(value))

    text = json.dumps(answers, sort_keys=True, default=stamp)
    seen: dict[str, str] = {}

    def label(match: re.Match[str]) -> str:
        token = match.group(0)
        if token not in seen:
            kind = ("token" if len(token) == 36 and token.count("-") == 4 else "address" if token[0].isdigit()
                    else "host" if re.match(r"(?:ip|ec2)-\d", token) else "mac" if ":" in token
                    else token.rsplit("-", 1)[0].rstrip("-"))
            seen[token] = f"<{kind} {len(seen)}>"
        return seen[token]

    return json.loads(_GENERATED.sub(label, text))


def _ec2_world(session: boto3.Session, world: Any, now: datetime) -> dict[str, Any]:
    """What EC2's APIs answer for the demo's network and nodes, and the nodes as the builder noted them."""
    ec2 = session.client("ec2", region_name=DEMO_REGION)
    answers: dict[str, Any] = {}
    for operation, key in (("describe_instances", "Reservations"), ("describe_network_interfaces", "NetworkInterfaces"),
                           ("describe_security_groups", "SecurityGroups"), ("describe_subnets", "Subnets"),
                           ("describe_placement_groups", "PlacementGroups"),
                           ("describe_spot_instance_requests", "SpotInstanceRequests"),
                           ("describe_capacity_reservations", "CapacityReservations"),
                           ("describe_instance_status", "InstanceStatuses")):
        answers[key] = getattr(ec2, operation)()[key]
    # Each interface's addresses lie in its subnet (the labels above keep which, not where).
    cidrs = {subnet["SubnetId"]: ipaddress.ip_network(subnet["CidrBlock"]) for subnet in answers["Subnets"]}
    answers["in_subnet"] = [ipaddress.ip_address(a["PrivateIpAddress"]) in cidrs[i["SubnetId"]]
                            for i in answers["NetworkInterfaces"] for a in i.get("PrivateIpAddresses", [])]
    answers["launched"] = {name: vars(node) for name, node in world.builder.launched.items()}
    answers["facts"] = world.facts
    return _canonical(answers, now)


def _seed_nodes(monkeypatch: pytest.MonkeyPatch, moto_here: bool) -> tuple[dict[str, Any], list[str]]:
    from fmdoctor.demo.scenario import DemoWorld, seed_network_and_nodes

    monkeypatch.setenv("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")
    now = datetime.now(UTC)
    with mock_aws():
        session = boto3.Session(region_name=DEMO_REGION, aws_access_key_id="testing", aws_secret_access_key="testing")
        world = DemoWorld(session=session, moto_here=moto_here)
        seed_network_and_nodes(world)
        interfaces = session.client("ec2", region_name=DEMO_REGION).describe_network_interfaces()["NetworkInterfaces"]
        addresses = [a["PrivateIpAddress"] for i in interfaces for a in i.get("PrivateIpAddresses", [])]
        return _ec2_world(session, world, now), addresses


def test_nodes_launched_through_moto_s_handler_are_those_launched_through_requests(monkeypatch):
    moto_compat.install()
    through_requests, _ = _seed_nodes(monkeypatch, False)
    direct, addresses = _seed_nodes(monkeypatch, True)
    reservations = through_requests["Reservations"]
    assert len(reservations) == 7 and len(through_requests["NetworkInterfaces"]) > 7 * 4
    gpu_1 = next(i for r in reservations for i in r["Instances"]
                 if {"Key": "Name", "Value": "gpu-node-1"} in i["Tags"])
    assert gpu_1["Placement"]["GroupName"] == "demo-llm-pg" and len(gpu_1["NetworkInterfaces"]) == 32
    assert gpu_1["InstanceLifecycle"] == "capacity-block" and gpu_1["CapacityReservationId"]
    assert len(through_requests["SpotInstanceRequests"]) == 2
    assert direct == through_requests and all(direct["in_subnet"])
    assert len(addresses) == len(set(addresses)) > 7  # no two interfaces share an address (moto_compat's patch)


def _without(arguments: dict[str, Any], drop: str) -> dict[str, Any]:
    arguments = dict(arguments)
    if drop == "InterfaceType":
        arguments["NetworkInterfaces"] = [{k: v for k, v in nic.items() if k != drop}
                                          for nic in arguments["NetworkInterfaces"]]
    elif drop == "Tag":
        arguments["TagSpecifications"] = [{**spec, "Tags": spec["Tags"][:-1]}
                                          for spec in arguments["TagSpecifications"]]
    else:
        arguments.pop(drop, None)
    return arguments


@pytest.mark.parametrize("drop", ["Placement", "InstanceMarketOptions", "CapacityReservationSpecification",
                                  "InterfaceType", "Tag", "ClientToken"])
def test_an_argument_the_direct_launch_lost_would_show(monkeypatch, drop):
    """The comparison above sees what each argument of a launch makes: lose one and the worlds differ."""
    moto_compat.install()
    through_requests, _ = _seed_nodes(monkeypatch, False)
    real = moto_ec2.run_instances

    def losing(response: Any, arguments: Any) -> Any:
        if drop == "ClientToken":  # moto's default token instead of the one botocore generates
            response_params = dict(arguments)
            response.params = response_params
            return [moto_ec2._answered(i) for i in response.run_instances().result.instances]
        return real(response, _without(arguments, drop))

    monkeypatch.setattr(moto_ec2, "run_instances", losing)
    direct, _ = _seed_nodes(monkeypatch, True)
    assert direct != through_requests


def test_the_moto_internals_the_direct_routes_call_are_there():
    """moto's private parts moto_s3 and moto_ec2 call, by name: a moto that renames one fails here, by name, before
    the comparisons above fail by difference."""
    import inspect

    from moto.ec2.responses import EC2Response
    from moto.s3.models import FakeKey, S3Backend

    put = inspect.signature(S3Backend.put_object).parameters
    assert {"storage", "encryption", "kms_key_id", "bucket_key_enabled", "lock_mode", "lock_legal_status",
            "lock_until", "checksum_value"} <= set(put)
    assert all(callable(getattr(FakeKey, name, None)) for name in ("set_metadata", "set_acl"))
    assert callable(getattr(S3Backend, "put_object_tagging", None))
    response = EC2Response()
    assert response.automated_parameter_parsing  # run_instances reads ``params`` as moto's parser fills them
    assert callable(response.run_instances) and callable(response._get_param)
