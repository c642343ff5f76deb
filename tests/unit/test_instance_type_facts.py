"""DescribeInstanceTypes as discovery reads it, where moto cannot show it: botocore's Stubber with the API's
own response and error shapes (botocore's EC2 service model validates every stubbed response).

moto answers every type in its catalogue with NetworkCards[].InterfaceTypes; responses without that member
(what DescribeInstanceTypes returned before InterfaceTypes existed) and an InvalidInstanceType error whose
message does not name the type are shapes moto never produces, so they are stubbed here. The values are those
moto's catalogue (generated from real DescribeInstanceTypes output) holds for p4d.24xlarge and p5.48xlarge.
"""

from __future__ import annotations

import boto3
from botocore.stub import Stubber

from fmdoctor.engine.discovery import _fetch_instance_types, instance_type_info

P4D_WITHOUT_INTERFACE_TYPES = {
    "InstanceType": "p4d.24xlarge",
    "GpuInfo": {"Gpus": [{"Name": "A100", "Manufacturer": "NVIDIA", "Count": 8,
                          "MemoryInfo": {"SizeInMiB": 40960}}], "TotalGpuMemoryInMiB": 327680},
    "NetworkInfo": {
        "MaximumNetworkCards": 4,
        "EfaSupported": True,
        "EfaInfo": {"MaximumEfaInterfaces": 4},
        "NetworkCards": [{"NetworkCardIndex": i, "NetworkPerformance": "100 Gigabit", "MaximumNetworkInterfaces": 15,
                          "PeakBandwidthInGbps": 100.0} for i in range(4)],
    },
}
P5 = {
    "InstanceType": "p5.48xlarge",
    "NetworkInfo": {
        "MaximumNetworkCards": 32,
        "EfaSupported": True,
        "EfaInfo": {"MaximumEfaInterfaces": 32},
        "NetworkCards": [{"NetworkCardIndex": i, "PeakBandwidthInGbps": 100.0,
                          "InterfaceTypes": ["interface", "efa", "efa-only"]} for i in range(32)],
    },
}


def client():
    return boto3.client("ec2", region_name="us-west-2")


def test_cards_without_interface_types_leave_efa_cards_unknown_not_guessed():
    info = instance_type_info(P4D_WITHOUT_INTERFACE_TYPES)
    assert (info.max_efa_interfaces, info.gpus, len(info.network_cards)) == (4, 8, 4)
    assert [c.efa for c in info.network_cards] == [None] * 4
    assert info.efa_cards() is None  # which cards take EFA is not in the response: the share goes by count


def test_an_unknown_type_named_in_the_error_is_dropped_and_the_batch_asked_again():
    ec2 = client()
    with Stubber(ec2) as stub:
        stub.add_client_error("describe_instance_types", "InvalidInstanceType",
                              "The following supplied instance types do not exist: [p6e-gb200.36xlarge]",
                              expected_params={"InstanceTypes": ["p5.48xlarge", "p6e-gb200.36xlarge"]})
        stub.add_response("describe_instance_types", {"InstanceTypes": [P5]},
                          expected_params={"InstanceTypes": ["p5.48xlarge"]})
        infos = _fetch_instance_types(ec2, ["p5.48xlarge", "p6e-gb200.36xlarge"])
        stub.assert_no_pending_responses()
    assert list(infos) == ["p5.48xlarge"] and infos["p5.48xlarge"].max_efa_interfaces == 32


def test_an_error_that_names_no_type_asks_for_each_type_alone():
    ec2 = client()
    with Stubber(ec2) as stub:
        stub.add_client_error("describe_instance_types", "InvalidInstanceType", "Invalid instance type",
                              expected_params={"InstanceTypes": ["p4d.24xlarge", "x9.nope"]})
        stub.add_response("describe_instance_types", {"InstanceTypes": [P4D_WITHOUT_INTERFACE_TYPES]},
                          expected_params={"InstanceTypes": ["p4d.24xlarge"]})
        stub.add_client_error("describe_instance_types", "InvalidInstanceType", "Invalid instance type",
                              expected_params={"InstanceTypes": ["x9.nope"]})
        infos = _fetch_instance_types(ec2, ["p4d.24xlarge", "x9.nope"])
        stub.assert_no_pending_responses()
    assert list(infos) == ["p4d.24xlarge"]
