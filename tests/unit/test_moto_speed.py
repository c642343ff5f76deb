"""moto's remembered action lists answer as moto's own listing does, including methods added later."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from moto.core import responses, utils

from fmdoctor.demo import moto_compat


class _Actions:
    def describe_things(self) -> None: ...


def test_the_remembered_list_is_motos_and_sees_a_method_added_later():
    moto_compat.install()
    assert responses.method_names_from_class is not utils.method_names_from_class  # installed
    assert set(responses.method_names_from_class(_Actions)) == set(utils.method_names_from_class(_Actions))

    _Actions.create_thing = lambda self: None  # type: ignore[attr-defined]
    try:
        assert "create_thing" in responses.method_names_from_class(_Actions)
    finally:
        del _Actions.create_thing  # type: ignore[attr-defined]
    assert "create_thing" not in responses.method_names_from_class(_Actions)


def test_the_demos_added_placement_group_action_is_served(aws):
    ec2 = aws.client("ec2")
    ec2.create_placement_group(GroupName="pg", Strategy="cluster")
    [group] = ec2.describe_placement_groups()["PlacementGroups"]
    assert group["GroupName"] == "pg"


def _answers(session) -> list[dict]:
    """Responses that walk every alias provider and a transformer: EC2 (query XML, the network interfaces'
    ``return_if_not_empty``), CloudWatch, SageMaker (JSON), S3 (REST XML)."""
    ec2, cloudwatch = session.client("ec2"), session.client("cloudwatch")
    answers = [ec2.describe_instances(), ec2.describe_security_groups(), ec2.describe_network_interfaces(),
               ec2.describe_subnets(), ec2.describe_route_tables(), ec2.describe_placement_groups(),
               cloudwatch.list_metrics(), session.client("sagemaker").list_endpoints(),
               session.client("s3").list_objects_v2(Bucket="ckpt")]
    for answer in answers:
        answer.pop("ResponseMetadata")
    return answers


def test_remembered_attribute_names_serialise_as_moto_does(aws, monkeypatch):
    from moto.core import serialize

    from fmdoctor.demo.builders import ClusterBuilder

    moto_compat.install()
    remembered = serialize.AttributePicker.__call__
    assert hasattr(remembered, "__wrapped__")  # installed
    builder = ClusterBuilder(aws.client("ec2"), "c")
    builder.vpc("10.0.0.0/16")
    builder.subnet("a", "10.0.0.0/20", "us-west-2a")
    builder.security_group("efa", self_ingress=True, self_egress=True)
    builder.placement_group("pg")
    builder.launch(["gpu-1", "gpu-2"], "p5.48xlarge", "a", ["efa"], efa_interfaces=4, placement_group="pg",
                   spot=True, public_ip=True)
    aws.client("cloudwatch").put_metric_data(Namespace="N", MetricData=[{"MetricName": "m", "Value": 1.0}])
    aws.client("s3").create_bucket(Bucket="ckpt", CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
    aws.client("s3").put_object(Bucket="ckpt", Key="step-1/model.pt", Body=b"x")

    first = _answers(aws)  # fills the memo
    assert _answers(aws) == first  # read back from it
    monkeypatch.setattr(serialize.AttributePicker, "__call__", remembered.__wrapped__)
    assert _answers(aws) == first  # moto's own picking answers the same


def test_url_patterns_reused_across_mocks_still_answer_requests_calls():
    import boto3
    import requests
    from moto import mock_aws
    from moto.core.models import responses_mock

    moto_compat.install()
    registered = []
    for body in (b"first", b"second"):  # two mocks, one after the other: the second reuses the first's patterns
        with mock_aws():
            s3 = boto3.client("s3", region_name="us-east-1")
            s3.create_bucket(Bucket="ckpt")
            s3.put_object(Bucket="ckpt", Key="step-1/model.pt", Body=body)
            url = s3.generate_presigned_url("get_object", Params={"Bucket": "ckpt", "Key": "step-1/model.pt"})
            answer = requests.get(url, timeout=5)
            assert answer.status_code == 200 and answer.content == body  # served by moto through responses
            registered.append(responses_mock.registered())
    first, second = registered
    assert len(first) == len(second) > 1000 and all(a is b for a, b in zip(first, second, strict=True))
    assert all(len(r.calls) <= 1 for r in second)  # each start hands them out with no calls recorded


def _xml_documents() -> st.SearchStrategy[dict]:
    """Documents as moto hands them to xmltodict, and ones it never does (odd names, comments, several roots)."""
    names = st.one_of(st.sampled_from(["Item", "instanceId", "a-b", "x.y", "requestId", "ns:tag"]),
                      st.sampled_from(["", "bad name", "<x>", "#comment", "?pi", "a/b", 'q"']))
    scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.binary(max_size=8),
                        st.text(alphabet=st.sampled_from('ab&<>"\'\t\n\r é'), max_size=12))
    attribute = st.tuples(st.sampled_from(["@xmlns", "@id", "@bad name"]), scalars)
    elements = st.recursive(
        scalars,
        lambda inner: st.one_of(
            st.lists(inner, max_size=3),
            st.tuples(inner, inner),
            st.builds(lambda kids, attrs, text: {**dict(kids), **dict(attrs), **({"#text": text} if text else {})},
                      st.lists(st.tuples(names, inner), max_size=3), st.lists(attribute, max_size=2),
                      st.one_of(st.none(), scalars))),
        max_leaves=12)
    return st.dictionaries(names, elements, min_size=0, max_size=2)


def _written(unparse, document, **options):
    try:
        return unparse(document, **options)
    except Exception as exc:  # noqa: BLE001  the two must fail alike too
        return (type(exc), str(exc))


@given(_xml_documents(), st.booleans(), st.booleans())
@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
def test_xml_is_written_as_xmltodict_writes_it(document, full_document, short_empty_elements):
    from moto.core import serialize

    moto_compat.install()
    ours = serialize.xmltodict.unparse
    options = {"full_document": full_document, "short_empty_elements": short_empty_elements, "pretty": False}
    assert _written(ours, document, **options) == _written(ours.__wrapped__, document, **options)


def test_motos_answers_are_written_as_xmltodict_writes_them(aws, monkeypatch):
    """Every XML answer moto serialises in a real workload (EC2's and STS's query XML), written both ways."""
    from moto.core import serialize

    from fmdoctor.demo.builders import ClusterBuilder

    moto_compat.install()
    ours = serialize.xmltodict.unparse
    compared = []

    def both(document, **options):
        written = ours(document, **options)
        assert written == ours.__wrapped__(document, **options)
        compared.append(document)
        return written

    monkeypatch.setattr(serialize.xmltodict, "unparse", both)
    builder = ClusterBuilder(aws.client("ec2"), "c")
    builder.vpc("10.0.0.0/16")
    builder.subnet("a", "10.0.0.0/20", "us-west-2a")
    builder.security_group("efa", self_ingress=True, self_egress=True)
    builder.launch(["gpu-1"], "p5.48xlarge", "a", ["efa"], efa_interfaces=32, spot=True, public_ip=True)
    aws.client("s3").create_bucket(Bucket="ckpt", CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
    aws.client("sts").get_caller_identity()
    answers = _answers(aws)
    assert len(answers[0]["Reservations"][0]["Instances"][0]["NetworkInterfaces"]) == 32  # parsed back by botocore
    assert {next(iter(d)) for d in compared} >= {"RunInstancesResponse", "DescribeInstancesResponse",
                                                 "GetCallerIdentityResponse"}


@given(st.sets(st.text(alphabet="ab.12", max_size=6), max_size=12), st.text(alphabet="ab.12", max_size=4))
@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
def test_a_parameter_prefix_is_found_as_moto_finds_it(keys, prefix):
    from moto.core.parse import QueryParser

    moto_compat.install()
    params = dict.fromkeys(keys, "v")
    ours = QueryParser._gonna_recurse
    assert ours(None, params, prefix) == ours.__wrapped__(None, params, prefix)


@pytest.mark.parametrize("value", ["2026-12-03T18:14:41.000Z", "2026-12-03T18:14:41+02:00", "2026-12-03T18:14:41",
                                   1700000000, 1700000000.25, "1700000000", "Tue, 03 Dec 2026 18:14:41 GMT"])
def test_request_timestamps_read_as_moto_reads_them(value):
    from moto.core import parse

    moto_compat.install()
    ours = parse.default_timestamp_parser
    assert ours(value) == ours.__wrapped__(value) and ours(value).tzinfo is None


def test_a_datapoints_time_survives_the_round_trip(aws):
    from datetime import UTC, datetime

    cloudwatch = aws.client("cloudwatch")
    stamp = datetime(2026, 12, 3, 18, 14, 41, 250000, tzinfo=UTC)
    cloudwatch.put_metric_data(Namespace="N", MetricData=[{"MetricName": "m", "Value": 1.0, "Timestamp": stamp}])
    answer = cloudwatch.get_metric_data(
        MetricDataQueries=[{"Id": "m", "MetricStat": {"Metric": {"Namespace": "N", "MetricName": "m"},
                                                     "Period": 60, "Stat": "Sum"}}],
        StartTime=datetime(2026, 12, 3, 18, tzinfo=UTC), EndTime=datetime(2026, 12, 3, 19, tzinfo=UTC))
    [result] = answer["MetricDataResults"]
    assert result["Values"] == [1.0] and result["Timestamps"] == [datetime(2026, 12, 3, 18, 14, tzinfo=UTC)]
    [point] = cloudwatch.get_metric_statistics(Namespace="N", MetricName="m", Period=60, Statistics=["Sum"],
                                               StartTime=datetime(2026, 12, 3, 18, tzinfo=UTC),
                                               EndTime=datetime(2026, 12, 3, 19, tzinfo=UTC))["Datapoints"]
    assert point["Timestamp"] == stamp  # stored to the microsecond as sent
