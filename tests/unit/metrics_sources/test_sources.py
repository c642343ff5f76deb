"""Choosing and reaching a metric source: the metrics: settings contract, --metrics-url, AMP's SigV4 and its
refusals, bearer tokens, and finding the AMP workspace a HyperPod observability add-on writes to.

EKS's DescribeAddon is answered by botocore's Stubber with the response shape of the EKS API (moto has no EKS
add-ons); the add-on's configurationValues carry ``ampWorkspace.prometheusEndpoint`` and ``ampWorkspace.arn`` as
the amazon-sagemaker-hyperpod-observability add-on is configured (its documented
``aws eks create-addon --configuration-values`` and the Terraform modules that install it).
"""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import boto3
import pytest
from botocore.credentials import Credentials
from botocore.stub import Stubber

from fmdoctor.cli.check_cmd import settings_from_flags
from fmdoctor.cli.main import build_parser
from fmdoctor.config import Settings
from fmdoctor.engine.errors import ConfigError
from fmdoctor.engine.hyperpod import HyperPodCluster
from fmdoctor.loopback import serve_in_background
from fmdoctor.metrics.prometheus import BEARER, NONE, SIGV4, Endpoint, PrometheusClient, PrometheusFailed
from fmdoctor.metrics.source import (
    OBSERVABILITY_ADDON,
    endpoint,
    extension_workspace,
    observability_workspace,
    plan_sources,
)

AMP_URL = "https://aps-workspaces.us-west-2.amazonaws.com/workspaces/ws-0123abcd-4567-89ef-0123-456789abcdef/"
EKS_ARN = "arn:aws:eks:us-west-2:123456789012:cluster/hp-eks"


def test_metrics_settings_contract_top_level_or_per_cluster():
    settings = Settings.model_validate({
        "metrics": {"url": AMP_URL},
        "clusters": {"a": {}, "b": {"metrics": {"source": "prometheus", "url": "http://prom:9090", "auth": "none"}},
                     "c": {"metrics": {"source": "cloudwatch"}}}})
    a, b, c = (settings.cluster(name).metrics for name in "abc")
    assert (a.source, a.url, a.auth) == ("auto", AMP_URL, None)
    assert (b.source, b.url, b.auth) == ("prometheus", "http://prom:9090", "none")
    assert (c.source, c.url) == ("cloudwatch", AMP_URL)


@pytest.mark.parametrize("metrics, message", [
    ({"source": "prometheus"}, "metrics.url is not set"),
    ({"url": "prom:9090"}, "is not an http(s) URL"),
    ({"url": "http://p:9090", "auth": "bearer"}, "needs token_env"),
    ({"url": "http://p:9090", "auth": "bearer", "token_env": "not a name"}, "not an environment variable name"),
    ({"source": "influx"}, "source"),
    ({"auth": "basic"}, "auth"),
])
def test_bad_metrics_settings_are_refused_with_the_key(metrics, message):
    with pytest.raises((ConfigError, ValueError)) as caught:
        Settings.model_validate({"clusters": {"a": {"metrics": metrics}}}).cluster("a")
    assert message in str(caught.value)


def test_metrics_url_flag_overrides_the_url_and_reads_only_prometheus():
    args = build_parser().parse_args(["check", "--cluster", "a", "--metrics-url", "http://127.0.0.1:9090"])
    overrides = settings_from_flags(args)
    assert overrides["metrics"] == {"url": "http://127.0.0.1:9090", "source": "prometheus"}
    settings = Settings.model_validate({"metrics": {"url": AMP_URL, "source": "auto"}})
    assert settings.cluster("a", overrides).metrics.url == "http://127.0.0.1:9090"
    assert settings.cluster("a", overrides).metrics.source == "prometheus"


def test_auth_defaults_to_sigv4_for_amp_and_bearer_reads_its_token_from_the_environment(monkeypatch):
    credentials = Credentials("AKID", "SECRET")
    amp = endpoint(AMP_URL, None, None, credentials, "eu-west-1")
    assert (amp.auth, amp.region, amp.credentials) == (SIGV4, "us-west-2", credentials)  # the URL's region
    plain = endpoint("http://prom:9090", None, None, credentials, "us-west-2")
    assert (plain.auth, plain.credentials, plain.url) == (NONE, None, "http://prom:9090/")
    with pytest.raises(ConfigError, match="PROM_TOKEN"):
        endpoint("http://prom:9090", BEARER, "PROM_TOKEN", None, None)
    monkeypatch.setenv("PROM_TOKEN", "s3cr3t")
    assert endpoint("http://prom:9090", BEARER, "PROM_TOKEN", None, None).token == "s3cr3t"


class _Recorder(BaseHTTPRequestHandler):
    seen: list[dict[str, str]] = []

    def do_GET(self) -> None:  # noqa: N802
        type(self).seen.append({k.lower(): v for k, v in self.headers.items()})
        body = b'{"status":"success","data":["DCGM_FI_DEV_GPU_UTIL"]}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        pass


def test_bearer_token_is_sent_as_authorization_and_nothing_else_signs():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    serve_in_background(server)
    try:
        calls: list[tuple[str, str]] = []
        url = f"http://127.0.0.1:{server.server_address[1]}/"
        client = PrometheusClient(Endpoint(url, BEARER, "s3cr3t"), lambda s, o: calls.append((s, o)))
        from datetime import UTC, datetime, timedelta
        now = datetime.now(UTC)
        assert client.label_values("__name__", [], now - timedelta(minutes=30), now) == ["DCGM_FI_DEV_GPU_UTIL"]
    finally:
        server.shutdown()
        server.server_close()
    [headers] = _Recorder.seen
    assert headers["authorization"] == "Bearer s3cr3t" and "x-amz-date" not in headers
    assert calls == [("prometheus", "label_values")]


def test_amp_refusing_the_signature_is_access_denied_naming_the_aps_action(amp):
    workspace, seen = amp("http://127.0.0.1:9/", credentials=Credentials("OTHER", "KEY"))  # never forwarded
    client = PrometheusClient(Endpoint(workspace, SIGV4, credentials=Credentials("AKID", "SECRET"),
                                       region="us-west-2"), lambda *_: None)
    from datetime import UTC, datetime, timedelta
    now = datetime.now(UTC)
    with pytest.raises(PrometheusFailed) as caught:
        client.query_range("DCGM_FI_DEV_GPU_UTIL", now - timedelta(minutes=30), now, timedelta(minutes=5))
    failure = caught.value.failure
    assert (failure.code, failure.kind, failure.iam_action) == ("AccessDenied", "access-denied", "aps:QueryMetrics")
    assert seen.rejected == ["credential scope AKID/us-west-2/aps is not OTHER/us-west-2/aps"]


def test_an_unreachable_prometheus_is_a_connection_error_not_a_crash():
    client = PrometheusClient(Endpoint("http://127.0.0.1:9/"), lambda *_: None, timeout=2)
    from datetime import UTC, datetime, timedelta
    now = datetime.now(UTC)
    with pytest.raises(PrometheusFailed) as caught:
        client.label_values("__name__", [], now - timedelta(minutes=30), now)
    assert caught.value.failure.code == "ConnectionError"


def _eks(stub) -> object:
    client = boto3.client("eks", region_name="us-west-2", aws_access_key_id="a", aws_secret_access_key="b")
    stubber = Stubber(client)
    stub(stubber)
    stubber.activate()
    return client


def _addon(values: dict) -> dict:
    return {"addon": {"addonName": OBSERVABILITY_ADDON, "clusterName": "hp-eks", "status": "ACTIVE",
                      "addonVersion": "v1.0.4-eksbuild.1", "configurationValues": json.dumps(values)}}


def test_the_observability_add_on_names_the_amp_workspace():
    hyperpod = HyperPodCluster("hp", "arn:aws:sagemaker:us-west-2:123456789012:cluster/abc", "InService",
                               orchestrator="Eks", eks_cluster_arn=EKS_ARN)
    values = {"ampWorkspace": {"prometheusEndpoint": AMP_URL.rstrip("/"),
                               "arn": "arn:aws:aps:us-west-2:123456789012:workspace/ws-0123abcd"},
              "metricsProvider": {"trainingMetrics": {"level": "BASIC", "scrapeInterval": 30}}}
    eks = _eks(lambda s: s.add_response("describe_addon", _addon(values),
                                        {"clusterName": "hp-eks", "addonName": OBSERVABILITY_ADDON}))
    assert observability_workspace(lambda: eks, hyperpod) == (AMP_URL.rstrip("/"), "")

    sources = plan_sources(Settings().cluster("hp"), hyperpod, lambda: _eks(
        lambda s: s.add_response("describe_addon", _addon(values))), lambda: Credentials("AKID", "SECRET"),
        "us-west-2")
    assert sources.cloudwatch and sources.prometheus.url == AMP_URL and sources.prometheus.auth == SIGV4
    assert sources.origin == f"the {OBSERVABILITY_ADDON} add-on of EKS cluster hp-eks"


@pytest.mark.parametrize("workspace, found", [
    ({"arn": "arn:aws:aps:us-west-2:123456789012:workspace/ws-0123abcd-4567-89ef-0123-456789abcdef"}, AMP_URL),
    ({"arn": "arn:aws:iam::123456789012:role/not-a-workspace"}, None),
    ({}, None),
])
def test_an_add_on_naming_its_workspace_only_by_arn_is_queried_at_that_workspaces_url(workspace, found):
    """An AWS::EKS::Addon may set ampWorkspace.arn alone; the AMP user guide's query URL is built from it."""
    hyperpod = HyperPodCluster("hp", "arn", "InService", orchestrator="Eks", eks_cluster_arn=EKS_ARN)
    eks = _eks(lambda s: s.add_response("describe_addon", _addon({"ampWorkspace": workspace})))
    url, note = observability_workspace(lambda: eks, hyperpod)
    assert url == found
    assert note == ("" if found else f"the {OBSERVABILITY_ADDON} add-on of EKS cluster hp-eks names no ampWorkspace")


@pytest.mark.parametrize("code, note", [
    ("ResourceNotFoundException", f"EKS cluster hp-eks has no {OBSERVABILITY_ADDON} add-on"),
    ("AccessDeniedException", "could not be read (AccessDeniedException"),
])
def test_no_add_on_or_no_permission_leaves_a_note_for_the_not_verified_entries(code, note):
    hyperpod = HyperPodCluster("hp", "arn", "InService", orchestrator="Eks", eks_cluster_arn=EKS_ARN)
    eks = _eks(lambda s: s.add_client_error("describe_addon", code, "nope", 404 if "NotFound" in code else 403))
    sources = plan_sources(Settings().cluster("hp"), hyperpod, lambda: eks, lambda: None, "us-west-2")
    assert sources.prometheus is None and note in sources.note


def test_cloudwatch_only_never_looks_for_a_workspace():
    only = Settings.model_validate({"metrics": {"source": "cloudwatch"}}).cluster("hp")
    eks = HyperPodCluster("hp", "arn", "InService", orchestrator="Eks", eks_cluster_arn=EKS_ARN)
    slurm = HyperPodCluster("hp", SLURM_ARN, "InService", orchestrator="Slurm")
    for cluster in (eks, slurm):
        assert plan_sources(only, cluster, lambda: pytest.fail("no add-on lookup with source: cloudwatch"),
                            lambda: None, "r", lambda: pytest.fail("no extension lookup")).prometheus is None


# A Slurm HyperPod cluster's observability extension, as ListClusterExtensions and DescribeClusterExtension answer
# (SageMaker API reference); its ConfigurationValues are the SageMaker developer guide's "Observability extension
# configuration" example, which HyperPod stores with every default filled in.
SLURM_ARN = "arn:aws:sagemaker:us-west-2:123456789012:cluster/abcdef123456"
EXTENSION_ARN = "arn:aws:sagemaker:us-west-2:123456789012:extension/sagemaker-observability/abcdef123456/0a1b2c3d4e5f"
REMOTE_WRITE = AMP_URL + "api/v1/remote_write"
STORED = {"prometheus": {"remoteWriteUrl": REMOTE_WRITE},
          "metricsProvider": {"nodeMetrics": {"level": "BASIC", "collectionIntervalSeconds": 30},
                              "acceleratedComputeMetrics": {"level": "BASIC", "collectionIntervalSeconds": 30},
                              "networkMetrics": {"level": "ENABLED", "collectionIntervalSeconds": 30}}}


def _sagemaker(extensions: list[dict], stored: dict | None = None, error: str | None = None):
    client = boto3.client("sagemaker", region_name="us-west-2", aws_access_key_id="a", aws_secret_access_key="b")
    stubber = Stubber(client)
    if error:
        stubber.add_client_error("list_cluster_extensions", error, "nope", 400)
    else:
        stubber.add_response("list_cluster_extensions", {"Extensions": extensions}, {"ClusterArn": SLURM_ARN})
    if stored is not None:
        stubber.add_response("describe_cluster_extension", {"ExtensionDetails": {
            "ClusterArn": SLURM_ARN, "ExtensionArn": EXTENSION_ARN, "ExtensionName": "sagemaker-observability",
            "ExtensionVersion": "1.0.0", "Status": "Active", "ConfigurationValues": json.dumps(stored)},
            "NodeSummary": {"TotalCount": 4, "ActiveCount": 4}},
            {"ClusterArn": SLURM_ARN, "ExtensionArn": EXTENSION_ARN})
    stubber.activate()
    return client, stubber


def _extension(name: str = "sagemaker-observability", arn: str = EXTENSION_ARN) -> dict:
    return {"ExtensionArn": arn, "ExtensionName": name, "ExtensionVersion": "1.0.0", "Status": "Active"}


def test_a_slurm_clusters_observability_extension_names_the_amp_workspace():
    slurm = HyperPodCluster("hp", SLURM_ARN, "InService", orchestrator="Slurm")
    client, stubber = _sagemaker([_extension()], STORED)

    sources = plan_sources(Settings().cluster("hp"), slurm, None, lambda: Credentials("AKID", "SECRET"),
                           "us-west-2", lambda: client)

    stubber.assert_no_pending_responses()
    assert (sources.prometheus.url, sources.prometheus.auth, sources.prometheus.region) == (AMP_URL, SIGV4,
                                                                                             "us-west-2")
    assert sources.cloudwatch and sources.origin == "the sagemaker-observability extension of HyperPod cluster hp"


@pytest.mark.parametrize("extensions, stored, note", [
    ([], None, "HyperPod cluster hp is Slurm-orchestrated and has no sagemaker-observability extension"),
    ([_extension("another-extension", EXTENSION_ARN.replace("observability", "other"))], None,
     "has no sagemaker-observability extension"),
    # HyperPod stores every default: without prometheus the extension sends to CloudWatch.
    ([_extension()], {"metricsProvider": STORED["metricsProvider"]},
     "sends metrics to Amazon CloudWatch (its configuration has no prometheus.remoteWriteUrl)"),
    ([_extension()], {"prometheus": {"remoteWriteUrl": "https://mimir.example/push"}},
     "which is not a Prometheus remote-write URL (.../api/v1/remote_write)"),
])
def test_without_a_workspace_in_the_extension_the_note_says_why(extensions, stored, note):
    slurm = HyperPodCluster("hp", SLURM_ARN, "InService", orchestrator="Slurm")
    client, stubber = _sagemaker(extensions, stored)
    sources = plan_sources(Settings().cluster("hp"), slurm, None, lambda: None, "us-west-2", lambda: client)
    stubber.assert_no_pending_responses()
    assert sources.prometheus is None and note in sources.note


def test_a_denied_extension_listing_is_a_note_naming_the_error_never_a_crash():
    slurm = HyperPodCluster("hp", SLURM_ARN, "InService", orchestrator="Slurm")
    client, _ = _sagemaker([], error="AccessDeniedException")
    note = extension_workspace(lambda: client, slurm)[1]
    assert "sagemaker-observability extension could not be read (AccessDeniedException" in note
    # Not looked up at all (no SageMaker client): said, never guessed.
    assert "extension was not looked up" in extension_workspace(None, slurm)[1]


def test_a_bearer_token_missing_from_the_environment_is_an_error_entry_not_a_crash(builder, run_checks):
    from fmdoctor.demo.metrics import launch_nodes

    launch_nodes(builder, 1)
    report = run_checks(["gpu-idle"], gpu={"startup_grace": "0s"}, metrics={
        "source": "prometheus", "url": "http://127.0.0.1:9/", "auth": "bearer", "token_env": "FMDOCTOR_TEST_TOKEN"})
    [error] = report.errors
    assert error.code == "ConfigError" and "FMDOCTOR_TEST_TOKEN" in error.message
