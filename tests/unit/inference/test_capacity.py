"""accelerator-saturation, autoscaling-at-max and inference-idle: GPU-count normalisation, scaling limits."""

from __future__ import annotations

from datetime import timedelta

from fmdoctor.demo.endpoint_builder import publish_node_metric, samples
from fmdoctor.engine.model import Severity

SATURATION = ["accelerator-saturation"]
AT_MAX = ["autoscaling-at-max"]
IDLE = ["inference-idle"]


def test_gpu_utilization_is_divided_by_the_gpu_count(endpoints, infer, at):
    """SageMaker sums GPUUtilization over an instance's GPUs: 372 on a 4-GPU g4dn.12xlarge is 93 % each,
    300 is 75 % each (not saturated, although above 100), and 95 on a 1-GPU g4dn.xlarge is 95 %."""
    endpoints.endpoint("four-busy", "ml.g4dn.12xlarge", instances=2)
    endpoints.endpoint("four-ok", "ml.g4dn.12xlarge", instances=2)
    endpoints.endpoint("one-busy", "ml.g4dn.xlarge")
    endpoints.traffic("four-busy", at, invocations=100, gpu_utilization=372, gpu_memory_utilization=200)
    endpoints.traffic("four-ok", at, invocations=100, gpu_utilization=300, gpu_memory_utilization=300)
    endpoints.traffic("one-busy", at, invocations=100, gpu_utilization=95, gpu_memory_utilization=40)
    report = infer(SATURATION)
    assert report.errors == []
    by_resource = {f.resource: f.evidence for f in report.findings}
    assert set(by_resource) == {"endpoint/four-busy/variant/AllTraffic", "endpoint/one-busy/variant/AllTraffic"}
    four = by_resource["endpoint/four-busy/variant/AllTraffic"]
    assert four["utilization_percent"] == 93.0 and four["memory_utilization_percent"] == 50.0
    assert four["accelerators_per_instance"] == 4 and four["raw"]["GPUUtilization"] == 372.0
    assert by_resource["endpoint/one-busy/variant/AllTraffic"]["utilization_percent"] == 95.0


def test_missing_gpu_metrics_or_gpu_count_are_unverified_not_healthy(endpoints, infer, at):
    endpoints.endpoint("chat", "ml.g4dn.xlarge")
    endpoints.endpoint("old", "ml.p3.2xlarge")  # moto's EC2 catalogue has no p3 types: the GPU count is unknown
    report = infer(SATURATION)
    assert report.findings == []
    errors = {e.unverified: e.code for e in report.errors}
    assert errors == {"accelerator load of chat/AllTraffic": "NoData",
                      "accelerator load of old/AllTraffic": "UnknownInstanceType"}


def test_neuron_endpoint_and_cpu_endpoint(endpoints, infer, at, aws):
    endpoints.endpoint("inf", "ml.inf1.xlarge")
    endpoints.endpoint("cpu", "ml.c5.xlarge")
    aws.client("cloudwatch").put_metric_data(Namespace="NeuronMonitor", MetricData=[{
        "MetricName": "neuroncore_utilization", "Timestamp": at - timedelta(minutes=2), "Value": 97.0,
        "Dimensions": [{"Name": "EndpointName", "Value": "inf"}, {"Name": "VariantName", "Value": "AllTraffic"}]}])
    report = infer(SATURATION)
    [finding] = report.findings  # the CPU endpoint has no accelerators to saturate
    assert finding.resource == "endpoint/inf/variant/AllTraffic" and "Neuron cores" in finding.summary
    assert report.errors == []


def test_fleet_gpu_and_neuron_nodes(builder, infer, at, aws):
    builder.security_group("serve")
    [gpu] = builder.launch(["gpu-serve"], "g5.xlarge", "private-a", ["serve"], role="inference")
    [trn] = builder.launch(["trn-serve"], "trn1.2xlarge", "private-a", ["serve"], role="inference")
    [calm] = builder.launch(["calm-serve"], "g5.xlarge", "private-a", ["serve"], role="inference")
    cw = aws.client("cloudwatch")
    publish_node_metric(cw, "CWAgent", "nvidia_smi_utilization_gpu", gpu, at, [97, 99])
    publish_node_metric(cw, "CWAgent", "nvidia_smi_utilization_gpu", calm, at, [40, 45])
    # An LLM server's KV cache fills 95 % of the calm node's GPU memory: compute, not memory, is saturation.
    publish_node_metric(cw, "CWAgent", "nvidia_smi_memory_used", calm, at, [22800])
    publish_node_metric(cw, "CWAgent", "nvidia_smi_memory_total", calm, at, [24000])
    publish_node_metric(cw, "NeuronMonitor", "neuroncore_utilization", trn, at, [92, 94])
    report = infer(SATURATION, cluster="test-cluster")
    assert {f.resource for f in report.findings} == {gpu, trn}
    assert report.errors == []


def test_at_max_capacity_under_pressure_is_the_bottleneck(endpoints, infer, at):
    endpoints.endpoint("chat", "ml.g4dn.12xlarge", instances=4)
    endpoints.autoscale("chat", 1, 4)
    endpoints.traffic("chat", at, model_latency_us=samples(1_600_000, 3_200_000), invocations=100,
                      gpu_utilization=372)
    [finding] = infer(AT_MAX).findings
    assert finding.severity is Severity.WARNING
    ev = finding.evidence
    assert (ev["instances"], ev["max_capacity"], ev["min_capacity"]) == (4, 4, 1)
    assert ev["latency"] == "p90 latency is 1600.0 ms (SLO 500 ms)"
    assert ev["saturation"] == "its GPUs are saturated (93% per GPU)"
    assert "scaling limit, not the model" in finding.summary


def test_at_max_but_calm_or_below_max_but_slow_is_not_this_check(endpoints, infer, at):
    endpoints.endpoint("calm", "ml.g4dn.xlarge", instances=2)
    endpoints.autoscale("calm", 1, 2)
    endpoints.traffic("calm", at, model_latency_us=samples(50_000, 90_000), invocations=100, gpu_utilization=40)
    endpoints.endpoint("room", "ml.g4dn.xlarge", instances=2)
    endpoints.autoscale("room", 1, 8)
    endpoints.traffic("room", at, model_latency_us=samples(1_600_000, 3_200_000), invocations=100,
                      gpu_utilization=99)
    endpoints.endpoint("fixed", "ml.g4dn.xlarge")  # no scalable target: nothing to be at the maximum of
    endpoints.traffic("fixed", at, model_latency_us=samples(1_600_000, 3_200_000), invocations=100)
    report = infer(AT_MAX)
    assert report.findings == [] and report.errors == []


def test_fleet_auto_scaling_group_at_max(builder, infer, at, aws):
    builder.security_group("serve")
    [node] = builder.launch(["serve-1"], "g5.xlarge", "private-a", ["serve"], role="inference")
    asg = aws.client("autoscaling")
    asg.create_launch_configuration(LaunchConfigurationName="lc", ImageId="ami-12c6146b", InstanceType="g5.xlarge")
    asg.create_auto_scaling_group(AutoScalingGroupName="llm-serve", LaunchConfigurationName="lc", MinSize=0,
                                  MaxSize=1, DesiredCapacity=0, VPCZoneIdentifier=builder.subnets["private-a"])
    asg.attach_instances(AutoScalingGroupName="llm-serve", InstanceIds=[node])
    publish_node_metric(aws.client("cloudwatch"), "CWAgent", "nvidia_smi_utilization_gpu", node, at, [96])
    [finding] = infer(AT_MAX, cluster="test-cluster").findings
    assert finding.resource == "llm-serve"
    assert (finding.evidence["desired_capacity"], finding.evidence["max_size"]) == (1, 1)
    assert node in finding.evidence["nodes_under_pressure"]


def test_idle_accelerator_endpoint_is_a_warning_and_idle_cpu_endpoint_info(endpoints, infer, at):
    endpoints.endpoint("idle-gpu", "ml.g4dn.xlarge", instances=2)
    endpoints.endpoint("idle-cpu", "ml.c5.xlarge")
    endpoints.endpoint("busy", "ml.g4dn.xlarge")
    endpoints.traffic("busy", at, invocations=10)
    report = infer(IDLE)
    severities = {f.resource: f.severity for f in report.findings}
    assert severities == {"endpoint/idle-gpu/variant/AllTraffic": Severity.WARNING,
                          "endpoint/idle-cpu/variant/AllTraffic": Severity.INFO}
    gpu = next(f for f in report.findings if f.resource.startswith("endpoint/idle-gpu"))
    assert "2 x ml.g4dn.xlarge, 1 x T4" in gpu.summary and gpu.evidence["accelerated"] is True


def test_an_endpoint_younger_than_the_window_is_not_idle(endpoints, infer, at):
    endpoints.endpoint("new", "ml.g4dn.xlarge")
    assert infer(IDLE, clock=at - timedelta(minutes=25)).findings == []  # created 5 minutes before the run


def test_idle_fleet_node_by_requests_or_by_utilisation(builder, infer, at, aws):
    builder.security_group("serve")
    [quiet, busy] = builder.launch(["quiet", "busy"], "g5.xlarge", "private-a", ["serve"], role="inference")
    cw = aws.client("cloudwatch")
    publish_node_metric(cw, "LLM", "Latency", busy, at, [120.0])
    publish_node_metric(cw, "CWAgent", "nvidia_smi_utilization_gpu", quiet, at, [0, 1])
    publish_node_metric(cw, "CWAgent", "nvidia_smi_utilization_gpu", busy, at, [60, 80])
    by_requests = infer(IDLE, cluster="test-cluster", inference={"latency_metric": "LLM/Latency"})
    assert [f.resource for f in by_requests.findings] == [quiet]
    assert by_requests.findings[0].evidence["requests"] == 0
    by_utilisation = infer(IDLE, cluster="test-cluster")
    assert [f.resource for f in by_utilisation.findings] == [quiet]
    assert by_utilisation.findings[0].evidence["max_utilization_percent"] == 1.0
