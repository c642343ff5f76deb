"""Sessions from ``new_session`` share parsed service models and client classes, and stay separate sessions."""

from __future__ import annotations

import boto3
import pytest

from fmdoctor.engine import timestamps
from fmdoctor.engine.api import new_aws, new_session
from fmdoctor.engine.aws import AwsOptions

REGION = "us-west-2"


def test_two_sessions_build_one_class_and_model_per_service(aws):
    first, second = new_session(region=REGION).client("ec2"), new_session(region=REGION).client("ec2")
    assert type(first) is type(second)
    assert first.meta.service_model is second.meta.service_model
    assert first.meta.events is not second.meta.events  # each client still copies its own session's handlers


def test_other_sessions_build_their_own_as_botocore_does(aws):
    shared = new_session(region=REGION).client("ec2")
    plain = boto3.Session(region_name=REGION).client("ec2")
    assert type(plain) is not type(shared)
    assert plain.meta.service_model is not shared.meta.service_model


def test_a_shared_class_keeps_what_boto3_adds_to_it(aws):
    s3 = new_session(region=REGION).client("s3")
    again = new_session(region=REGION).client("s3")
    assert type(s3) is type(again)
    assert callable(again.upload_fileobj) and callable(again.generate_presigned_url)


def test_each_run_counts_only_its_own_calls(aws):
    one, other = new_aws(AwsOptions(region=REGION)), new_aws(AwsOptions(region=REGION))
    one.client("ec2").describe_vpcs()
    one.client("ec2").describe_subnets()
    other.client("ec2").describe_vpcs()
    assert one.calls.snapshot() == {"ec2.DescribeSubnets": 1, "ec2.DescribeVpcs": 1}
    assert other.calls.snapshot() == {"ec2.DescribeVpcs": 1}


def test_clients_share_the_event_names_worked_out_once(aws):
    session = new_session(region=REGION)
    first, second = session.client("ec2"), session.client("ec2")
    first.describe_vpcs()
    assert "before-call.ec2.DescribeVpcs" in second.meta.events._alias_name_cache
    handled: list[str] = []
    second.meta.events.register("before-call.ec2.DescribeVpcs", lambda **_: handled.append("second"))
    first.describe_vpcs()
    second.describe_vpcs()
    assert handled == ["second"]  # the names are shared, the handlers are not


def test_the_demo_and_the_engine_parse_each_model_once():
    from fmdoctor.demo.runtime import mocked_aws
    from fmdoctor.engine import api

    with mocked_aws() as session:
        seeders = boto3.Session(region_name=REGION)  # as moto and the seeders make theirs
        assert seeders._session.get_component("data_loader") is api._SHARED_LOADER
        assert session._session.get_component("data_loader") is api._SHARED_LOADER
    loader = api._SHARED_LOADER
    # botocore asks both ways; one parse answers both
    assert loader.load_service_model("ec2", "service-2") is loader.load_service_model("ec2", type_name="service-2")


def test_sessions_share_what_botocore_works_out_for_its_handlers_and_still_refuse_a_bad_one(aws):
    first, second = new_session(region=REGION), new_session(region=REGION)
    assert first.events._alias_name_cache is second.events._alias_name_cache  # botocore's own aliases

    def takes_no_keywords(event_name):
        return None

    def takes_keywords(**kwargs):
        return None

    for session in (first, second):  # the second answer comes from memory and must be the same
        with pytest.raises(ValueError, match="must accept keyword arguments"):
            session.events.register("before-call.ec2", takes_no_keywords)
        session.events.register("before-call.ec2", takes_keywords)


def test_a_sessions_answers_carry_the_same_times_as_a_plain_sessions(aws):
    """new_session's clients read times with the engine's parser (fmdoctor.engine.timestamps), not dateutil."""
    ec2 = aws.client("ec2")
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.0.0/20")["Subnet"]["SubnetId"]
    ec2.run_instances(ImageId="ami-12345678", MinCount=2, MaxCount=2, InstanceType="p5.48xlarge", SubnetId=subnet)
    ours = new_session(region=REGION).client("ec2").describe_instances()["Reservations"]
    plain = boto3.Session(region_name=REGION).client("ec2").describe_instances()["Reservations"]
    assert ours == plain
    launched = [i["LaunchTime"] for r in ours for i in r["Instances"]]
    attached = [n["Attachment"]["AttachTime"] for r in ours for i in r["Instances"] for n in i["NetworkInterfaces"]]
    assert len(launched) == 2 and attached and all(t.tzinfo is not None for t in launched + attached)
    parser = new_session(region=REGION)._session.get_component("response_parser_factory")._defaults
    assert parser["timestamp_parser"] is timestamps.parse_timestamp


@pytest.mark.parametrize(("service", "type_name"), [("ec2", "service-2"), ("sagemaker", "service-2"),
                                                    ("cloudwatch", "paginators-1"), ("s3", "endpoint-rule-set-1")])
def test_the_shared_loader_reads_botocore_s_models_as_botocore_does_in_plain_dicts(service, type_name):
    """Plain dicts instead of OrderedDicts: the same content in the same order (JSON written back is identical)."""
    import json
    from collections import OrderedDict

    from botocore.loaders import Loader

    from fmdoctor.engine.api import _OneKeyLoader

    ours, botocore_s = _OneKeyLoader().load_service_model(service, type_name), Loader().load_service_model(
        service, type_name)
    assert json.dumps(ours) == json.dumps(botocore_s)
    assert type(ours) is dict and isinstance(botocore_s, OrderedDict)
