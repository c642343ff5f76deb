"""Configuration: ``fmdoctor.yaml``, environment and flags, validated with messages that name key and line.

Precedence, highest first: command-line flags, environment (``FMDOCTOR_*`` and the standard AWS
variables, which boto3 reads itself), the cluster's own section, the file's top-level defaults.
"""

from __future__ import annotations

import ipaddress
import os
import re
import stat
import sys
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    ValidationError,
    field_validator,
    model_validator,
)

from fmdoctor.durations import format_duration, parse_duration
from fmdoctor.engine.errors import ConfigError

Duration = Annotated[
    timedelta,
    BeforeValidator(parse_duration),
    PlainSerializer(format_duration, return_type=str, when_used="json"),
]

DEFAULT_TAG_KEYS = ("fmdoctor:cluster", "parallelcluster:cluster-name", "eks:cluster-name")
CONFIG_FILE_NAME = "fmdoctor.yaml"

_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_FSX_ID = re.compile(r"^fs-[0-9a-f]{8,17}$")


def validate_checkpoint_location(value: str) -> str:
    """Accept ``s3://bucket[/prefix]``, ``fsx://fs-id[/path]`` (or a bare FSx id) and absolute local paths."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError("a checkpoint location must be a non-empty string")
    value = value.strip()
    if value.startswith("s3://"):
        bucket = value[5:].split("/", 1)[0]
        if not _BUCKET.match(bucket) or ".." in bucket:
            raise ValueError(f"{value!r} is not a valid S3 URI: bad bucket name {bucket!r}")
        return value
    if value.startswith("fsx://") or _FSX_ID.match(value):
        fs_id = value[6:].split("/", 1)[0] if value.startswith("fsx://") else value
        if not _FSX_ID.match(fs_id):
            raise ValueError(f"{value!r} is not a valid FSx location: expected fsx://fs-0123456789abcdef0[/path]")
        return value
    if value.startswith("file://"):
        value = value[7:]
    if value.startswith("/"):
        return value
    raise ValueError(f"{value!r} is not a checkpoint location: use s3://bucket/prefix, fsx://fs-id/path or /abs/path")


CheckpointLocation = Annotated[str, BeforeValidator(validate_checkpoint_location)]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)


class NetworkSettings(_Section):
    """``ssh-unreachable``: who must reach the head and login nodes over SSH, and on which port."""

    admin_cidrs: list[str] = Field(default_factory=list, description="Where people SSH from (CIDRs or IPs).")
    ssh_port: int = Field(22, ge=1, le=65535, description="Port the head and login nodes accept SSH on.")

    @field_validator("admin_cidrs")
    @classmethod
    def _cidrs(cls, values: list[str]) -> list[str]:
        for value in values:
            try:
                ipaddress.ip_network(value, strict=False)
            except ValueError as exc:
                raise ValueError(f"{value!r} is not a CIDR or IP address") from exc
        return values


class GpuSettings(_Section):
    """GPU/Neuron utilization, EFA counters (CloudWatch) and the on-node GPU checks."""

    window: Duration = Field(timedelta(minutes=30), description="How far back GPU/Neuron and EFA metrics are read.")
    period: Duration = Field(timedelta(minutes=5), description="Step of the metric series read over the window.")
    idle_percent: float = Field(10.0, ge=0, le=100, description="Mean utilization under this over the window is "
                                "idle (gpu-idle); at or above it a node is busy.")
    memory_pressure_percent: float = Field(95.0, ge=0, le=100, description="Memory share that counts as the ceiling.")
    memory_collapse_percent: float = Field(
        50.0, gt=0, le=100, description="Utilization drop (share of its earlier level) that is trouble at the ceiling."
    )
    memory_growth_percent: float = Field(
        10.0, gt=0, le=100, description="Points of memory a steady rise over the window must gain to be reported."
    )
    straggler_robust_z: float = Field(3.5, gt=0, description="Modified z-score (MAD) below the median.")
    straggler_min_gap_percent: float = Field(
        15.0, ge=0, le=100, description="Utilization points below the median a straggler must also be."
    )
    straggler_min_drop_percent: float = Field(
        15.0, ge=0, le=100, description="Power, SM clock or tensor activity this far below the median (relative)."
    )
    no_tensor_work_percent: float = Field(
        1.0, ge=0, le=100, description="Tensor activity at or under this on a busy GPU, while its peers compute."
    )
    min_coverage_percent: float = Field(
        50.0, gt=0, le=100, description="Share of the window's periods a series must cover to be judged."
    )
    startup_grace: Duration = Field(
        timedelta(minutes=15), description="Nodes launched more recently are not judged (agent and job starting)."
    )
    namespace: str = Field("CWAgent", description="CloudWatch namespace of the NVIDIA GPU metrics.")
    utilization_metric: str = Field("nvidia_smi_utilization_gpu", description="GPU utilization metric (percent).")
    memory_used_metric: str = Field("nvidia_smi_memory_used", description="GPU memory used metric.")
    memory_total_metric: str = Field("nvidia_smi_memory_total", description="GPU memory total metric.")
    neuron_namespace: str = Field("NeuronMonitor", description="CloudWatch namespace of the Neuron metrics.")
    neuron_utilization_metric: str = Field("neuroncore_utilization", description="NeuronCore utilization metric.")
    neuron_memory_used_metric: str | None = Field(None, description="Unset: memory pressure is not checked on Neuron.")
    neuron_memory_total_metric: str | None = Field(
        None, description="Neuron memory total metric; memory pressure on Neuron needs both it and the used one."
    )
    power_metric: str | None = Field(
        None, description="Unset: the publisher's own (nvidia_smi_power_draw, node_gpu_power_draw)."
    )
    sm_clock_metric: str | None = Field(None, description="Unset: the publisher's own (nvidia_smi_clocks_current_sm).")
    other_publishers: bool = Field(
        True, description="Look for nodes without series under the CloudWatch agent's and Container Insights' names."
    )
    instance_dimension: str = Field("InstanceId", description="Dimension naming the instance (agent's append).")
    host_dimension: str = Field("host", description="Fallback: hostname dimension (ip-10-0-1-23...).")
    hostname_tags: list[str] = Field(
        default_factory=list,
        description="Instance tags whose value is the hostname the agent publishes (e.g. a Slurm node name).",
    )
    device_dimensions: list[str] = Field(
        default_factory=lambda: ["index", "GpuDevice", "uuid", "NeuronCore", "NeuronDevice"],
        description="Dimensions that tell one GPU or NeuronCore from another.",
    )
    efa_namespace: str = Field("CWAgent", description="CloudWatch namespace of the EFA counters.")
    efa_interface_dimension: str = Field("eniId", description="Dimension naming the EFA network interface.")
    efa_metrics: list[str] = Field(
        default_factory=lambda: [
            "efa_retrans_timeout_events",
            "efa_impaired_remote_conn_events",
            "efa_unresponsive_remote_events",
            "efa_rx_dropped",
        ],
        description="EFA error counters read (efa-errors); a rise in any is reported.",
    )
    efa_critical_metrics: list[str] = Field(
        default_factory=lambda: ["efa_retrans_timeout_events", "efa_unresponsive_remote_events"],
        description="Counters whose rise breaks collectives (critical); the others are warnings.",
    )
    efa_min_events: float = Field(1, gt=0, description="Events in the window on one interface that count as rising.")
    xid_lookback: Duration = Field(
        timedelta(hours=24), description="Application-level Xids (restart/monitor) older than this are ignored."
    )

    @field_validator("period")
    @classmethod
    def _period(cls, value: timedelta) -> timedelta:
        seconds = value.total_seconds()
        if seconds < 60 or seconds % 60:
            raise ValueError("must be a whole number of minutes (CloudWatch periods are multiples of 60s)")
        return value

    @model_validator(mode="after")
    def _window_holds_a_period(self) -> GpuSettings:
        if self.window < self.period:
            raise ValueError(
                f"window ({format_duration(self.window)}) is shorter than period ({format_duration(self.period)})"
            )
        return self


_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
TOKEN_ENV_PREFIX = "FMDOCTOR_"
_API_KEY_ENV = re.compile(r"^[A-Z][A-Z0-9_]*_API_KEY$")
TOKEN_ENV_ALLOW_FILE = "token-env.allow"


def user_config_dir() -> Path:
    return Path(os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")) / "fmdoctor"


def allowed_token_envs() -> set[str]:
    """Variable names the user allowed as ``*_token_env`` besides ``FMDOCTOR_*``: one per line in
    ``~/.config/fmdoctor/token-env.allow`` (the user's own directory, never the working directory's). A file
    another user owns, or one group- or world-writable, is not the user's choice and allows nothing."""
    path = user_config_dir() / TOKEN_ENV_ALLOW_FILE
    try:
        with path.open(encoding="utf-8") as handle:
            info = os.fstat(handle.fileno())
            if _allow_file_problem(info):
                return set()
            text = handle.read(65536)
    except (OSError, UnicodeDecodeError):
        return set()
    return {line.split("#", 1)[0].strip() for line in text.splitlines()} - {""}


def _allow_file_problem(info: os.stat_result) -> str | None:
    if info.st_uid not in (os.geteuid(), 0):
        return f"it is owned by uid {info.st_uid}, not by you"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"others may write to it (mode {stat.S_IMODE(info.st_mode):o})"
    return None


def _allow_file_note() -> str:
    """Why the allow-list is ignored, for the refusal's message ('' when it is not, or there is none)."""
    try:
        why = _allow_file_problem(os.stat(user_config_dir() / TOKEN_ENV_ALLOW_FILE))
    except OSError:
        return ""
    return f" (that file is ignored: {why})" if why else ""


def http_url(value: str | None, example: str) -> str | None:
    """An http(s) URL with a host, or None; the error shows what the key expects."""
    if value is not None and not re.match(r"^https?://[^/\s]+", value):
        raise ValueError(f"{value!r} is not an http(s) URL (e.g. {example})")
    return value


def validate_token_env(value: str | None) -> str | None:
    """A ``*_token_env`` names a variable the user set aside for that token: ``FMDOCTOR_*``, or one listed in
    their own allow-list, so a configuration cannot send ``AWS_SECRET_ACCESS_KEY`` (or any variable) as a token."""
    if value is None:
        return value
    if not _ENV_NAME.match(value):
        raise ValueError(f"{value!r} is not an environment variable name (the token itself never goes here)")
    if not value.startswith(TOKEN_ENV_PREFIX) and value not in allowed_token_envs():
        raise ValueError(f"{value!r} is not a variable set aside for a token: use a name starting with "
                         f"{TOKEN_ENV_PREFIX} (e.g. {TOKEN_ENV_PREFIX}PROM_TOKEN), or list it in "
                         f"{user_config_dir() / TOKEN_ENV_ALLOW_FILE}{_allow_file_note()}")
    return value


class MetricsSettings(_Section):
    """Where GPU, EFA and inference-fleet metrics are read: CloudWatch, a Prometheus HTTP API, or both."""

    source: Literal["cloudwatch", "prometheus", "auto"] = Field(
        "auto", description="auto: CloudWatch, then Prometheus (url, or a HyperPod add-on's AMP) for nodes it lacks.")
    url: str | None = Field(
        None, description="Prometheus API base URL; for AMP the workspace's .../workspaces/ws-.../ URL.")
    auth: Literal["none", "bearer", "sigv4"] | None = Field(
        None, description="Unset: sigv4 for an AMP (aps-workspaces) URL, else none.")
    token_env: str | None = Field(None, description="Environment variable holding the bearer token (never the "
                                  "token): FMDOCTOR_*, or listed in ~/.config/fmdoctor/token-env.allow.")

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        return http_url(value, "https://aps-workspaces.us-west-2.amazonaws.com/workspaces/ws-.../ or "
                               "http://prometheus:9090/")

    @field_validator("token_env")
    @classmethod
    def _env_name(cls, value: str | None) -> str | None:
        return validate_token_env(value)

    @model_validator(mode="after")
    def _complete(self) -> MetricsSettings:
        if self.auth == "bearer" and not self.token_env:
            raise ValueError("auth: bearer needs token_env, the environment variable that holds the token")
        return self


class CheckpointSettings(_Section):
    """The checkpoint checks: where the job saves and how old its newest usable save may be."""

    locations: list[CheckpointLocation] = Field(
        default_factory=list, description="Where checkpoints are written: s3://bucket/prefix, fsx://fs-id/path or "
        "an absolute path."
    )
    max_age: Duration = Field(timedelta(hours=2), description="Allowed age of the newest usable checkpoint "
                              "(checkpoint-stale; the Spot and Capacity Block checks weigh lost work by it too).")
    incomplete_size_ratio: float = Field(0.5, gt=0, le=1, description="Newest smaller than this x previous.")
    write_grace: Duration = Field(timedelta(minutes=15), description="Newer than this may still be being written.")


class SpotSettings(_Section):
    """The Spot checks: where interruption and rebalance notices arrive."""

    queue_url: str | None = Field(None, description="SQS queue an EventBridge rule feeds with Spot events.")
    use_imds: bool = Field(False, description="Has no effect: no check reads Spot notices from the instance "
                           "metadata service (kept so files that set it still load).")


class CapacityBlockSettings(_Section):
    """``capacity-block-expiring``: how early the end of a Capacity Block is reported."""

    expiry_window: Duration = Field(
        timedelta(hours=3),
        description="Report nodes whose Capacity Block ends within this (an extension needs at least 1h).",
    )


class HyperPodSettings(_Section):
    """``hyperpod-node-unhealthy``: which SageMaker HyperPod cluster the cluster is."""

    cluster_name: str | None = Field(None, description="SageMaker HyperPod cluster name, if not the same.")


class InferenceSettings(_Section):
    """The inference checks: which endpoints, their SLOs and the thresholds their metrics are judged by."""

    endpoints: list[str] = Field(default_factory=list, description="SageMaker endpoints to check by name.")
    window: Duration = Field(timedelta(minutes=15), description="How far back endpoint metrics are read (whole "
                             "minutes: one CloudWatch period).")
    latency_p90_ms: float = Field(500.0, gt=0, description="Real-time, serverless and inference-component SLO.")
    latency_p99_ms: float = Field(2000.0, gt=0, description="The same SLO at p99, in milliseconds.")
    async_max_age: Duration = Field(
        timedelta(minutes=10), description="Asynchronous endpoints' SLO: the oldest queued request may be this old."
    )
    async_backlog_growth_percent: float = Field(
        50.0, gt=0, description="An async backlog whose last third of the window averages this much above its "
        "first third (and at least one request more) is growing.",
    )
    serverless_max_cold_start: Duration = Field(
        timedelta(seconds=30), description="Serverless endpoints: p90 ModelSetupTime (a cold start) may be this long."
    )
    error_rate_percent: float = Field(1.0, ge=0, le=100, description="Share of requests that may fail over the "
                                      "window (inference-errors).")
    saturation_percent: float = Field(90.0, ge=0, le=100, description="Mean compute utilization at or above this "
                                      "over the window is saturated (accelerator-saturation).")
    stuck_after: Duration = Field(timedelta(minutes=60), description="An endpoint or inference component in a "
                                  "transitional status (Creating, Updating...) this long is stuck "
                                  "(endpoint-unhealthy).")
    latency_metric: str | None = Field(None, description="For EC2/EKS fleets: namespace/metric of latency.")
    latency_unit: Literal["microseconds", "milliseconds", "seconds"] = Field(
        "milliseconds", description="Unit of latency_metric's values."
    )
    idle_utilization_percent: float = Field(
        2.0, ge=0, le=100, description="A fleet node whose accelerators never exceed this is idle (no latency_metric)."
    )

    @field_validator("window")
    @classmethod
    def _whole_minutes(cls, value: timedelta) -> timedelta:
        # CloudWatch periods are whole minutes; the window is queried as one period.
        if value < timedelta(minutes=1) or value.total_seconds() % 60:
            raise ValueError("the inference window must be a whole number of minutes (e.g. '15m')")
        return value

    @field_validator("latency_metric")
    @classmethod
    def _namespace_and_metric(cls, value: str | None) -> str | None:
        if value is not None and (value.count("/") < 1 or not all(value.rsplit("/", 1))):
            raise ValueError(f"{value!r} is not 'Namespace/MetricName' (e.g. 'LLMServer/RequestLatency')")
        return value


class TrainingSettings(_Section):
    """``training-stalled``: where the job's logs and NCCL flight-recorder dumps are, and when it counts as stalled."""

    log_groups: list[str] = Field(default_factory=list, description="CloudWatch log groups holding the job's "
                                  "output; unset: ParallelCluster's, HyperPod's and Container Insights' are found.")
    log_lookback: Duration = Field(timedelta(hours=6), description="How far back failure lines are searched.")
    silence: Duration = Field(timedelta(minutes=15), description="No log line for this long: the job is silent.")
    max_log_pages: int = Field(20, ge=1, le=500, description="FilterLogEvents pages read per log group.")
    flight_recorder: list[str] = Field(
        default_factory=list, description="Where the ranks' flight-recorder dumps land: s3://bucket/prefix/"
        "nccl_trace_rank_ (the TORCH_NCCL_DEBUG_INFO_TEMP_FILE prefix, synced to S3), or "
        "fsx://fs-id/path/nccl_trace_rank_ on an FSx for Lustre file system that exports that path to S3.")
    interval_factor: float = Field(2.0, ge=1.1, description="Stalled when the newest usable checkpoint is older "
                                   "than this many times the usual interval between checkpoints.")
    min_interval: Duration = Field(timedelta(minutes=5), description="Floor for the learned interval.")

    @field_validator("flight_recorder")
    @classmethod
    def _s3_prefixes(cls, values: list[str]) -> list[str]:
        for value in values:
            s3 = value.startswith("s3://") and len(value) > 5
            fsx = re.match(r"^fsx://fs-[0-9a-f]{8,17}/.", value) is not None
            if not (s3 or fsx):
                raise ValueError(f"{value!r} is not an S3 prefix like s3://bucket/dumps/nccl_trace_rank_ or an FSx "
                                 "path like fsx://fs-0123456789abcdef0/fr/nccl_trace_rank_")
        return values


class SlurmSchedulerSettings(_Section):
    """How Slurm is read: its commands on this (login/head) node, or slurmrestd."""

    via: Literal["local", "slurmrestd"] = Field(
        "local", description="local: sinfo/squeue/scontrol on this node; slurmrestd: its REST API at url.")
    url: str | None = Field(None, description="slurmrestd base URL, e.g. http://head-node:6820 (via: slurmrestd).")
    token_env: str | None = Field(
        None, description="Environment variable holding the Slurm JWT (scontrol token), never the token itself.")
    user: str | None = Field(
        None, description="X-SLURM-USER-NAME sent with the JWT (22.05's slurmrestd refuses a token without it).")

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        return http_url(value, "http://head-node:6820")

    @field_validator("token_env")
    @classmethod
    def _env_name(cls, value: str | None) -> str | None:
        return validate_token_env(value)

    @model_validator(mode="after")
    def _complete(self) -> SlurmSchedulerSettings:
        if self.via == "slurmrestd" and not (self.url and self.token_env):
            raise ValueError("slurm via: slurmrestd needs url and token_env (the variable holding the JWT)")
        return self


class KubernetesSchedulerSettings(_Section):
    """Which Kubernetes API: a kubeconfig context, or the in-cluster service account when neither is set."""

    context: str | None = Field(None, description="kubeconfig context; unset: the current one (or in-cluster).")
    kubeconfig: str | None = Field(None, description="kubeconfig path; unset: $KUBECONFIG or ~/.kube/config.")


class SchedulerSettings(_Section):
    """The scheduler whose view of the nodes and jobs fmdoctor reads (and drains nodes through, when approved)."""

    kind: Literal["auto", "slurm", "kubernetes", "none"] = Field(
        "auto", description="auto: Slurm from the cluster's tags/log groups or a local sinfo, Kubernetes from "
                            "EKS/HyperPod-EKS; none: no scheduler view.")
    slurm: SlurmSchedulerSettings = Field(default_factory=SlurmSchedulerSettings)
    kubernetes: KubernetesSchedulerSettings = Field(default_factory=KubernetesSchedulerSettings)
    held_out_after: Duration = Field(
        timedelta(hours=1), description="A drained, idle node AWS sees running is reported after this long.")


class ClusterSettings(_Section):
    """Everything that can differ per cluster; top-level values are the defaults."""

    region: str | None = None
    profile: str | None = None
    tag_keys: list[str] = Field(default_factory=lambda: list(DEFAULT_TAG_KEYS), min_length=1)
    head_nodes: list[str] = Field(default_factory=list)
    network: NetworkSettings = Field(default_factory=NetworkSettings)
    gpu: GpuSettings = Field(default_factory=GpuSettings)
    checkpoints: CheckpointSettings = Field(default_factory=CheckpointSettings)
    spot: SpotSettings = Field(default_factory=SpotSettings)
    capacity_blocks: CapacityBlockSettings = Field(default_factory=CapacityBlockSettings)
    hyperpod: HyperPodSettings = Field(default_factory=HyperPodSettings)
    inference: InferenceSettings = Field(default_factory=InferenceSettings)
    training: TrainingSettings = Field(default_factory=TrainingSettings)
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)
    scheduler: SchedulerSettings = Field(default_factory=SchedulerSettings)


_CLUSTER_KEYS = set(ClusterSettings.model_fields)


class ModelPrice(_Section):
    """What a model costs, in US dollars per million tokens (``fmdoctor eval``'s cost column)."""

    input_per_mtok: float = Field(ge=0, description="USD per million input (prompt) tokens.")
    output_per_mtok: float = Field(ge=0, description="USD per million output (completion) tokens.")


class AgentSettings(_Section):
    """The assistant (``ask``, ``chat``, Slack, ``eval``): its model and the limits of each question."""

    model: str | None = Field(None, description="Provider string, e.g. 'bedrock_converse:...'; unset = offline.")
    max_tool_calls: int = Field(12, ge=1, le=100, description="Tool calls per question; past it the model "
                                "answers without tools.")
    max_tokens: int = Field(4096, ge=256, description="Tokens the model may write per call.")
    redact: list[str] = Field(default_factory=list, description="Extra regexes to redact before sending.")
    base_url: str | None = Field(None, description="OpenAI-compatible or Ollama endpoint, e.g. a vLLM server; for "
                                 "Bedrock the bedrock-runtime endpoint (e.g. a VPC interface endpoint).")
    api_key_env: str | None = Field(None, description="Environment variable holding the API key (never the key): "
                                    "a provider's *_API_KEY (not AWS_*), FMDOCTOR_*, or listed in "
                                    "~/.config/fmdoctor/token-env.allow.")
    region: str | None = Field(None, description="Bedrock region (default: the AWS default region).")
    temperature: float = Field(0.0, ge=0, le=2, description="Sampling temperature passed to the model.")
    timeout_s: float = Field(120.0, gt=0, description="Seconds one call to an OpenAI-compatible model may take.")
    max_turn_tokens: int = Field(200_000, ge=1000, description="Input + output tokens per question, all calls.")
    max_tool_output_chars: int = Field(12_000, ge=500, description="Characters of one tool result the model sees; "
                                       "evidence digests, then the least severe finding lines give way first, "
                                       "and the result says what was left out.")
    history_turns: int = Field(10, ge=1, description="Earlier questions (with their tool calls) sent per call.")
    prices: dict[str, ModelPrice] = Field(
        default_factory=dict, description="Model (a --model string, e.g. 'openai:gpt-4o-mini') -> its price per "
        "million tokens, for fmdoctor eval's cost estimate; a model without one shows no cost.")

    def price_of(self, model: str) -> ModelPrice | None:
        """The price of a --model string, or of the model name without its provider, if configured."""
        return self.prices.get(model) or self.prices.get(model.partition(":")[2])

    @field_validator("redact")
    @classmethod
    def _patterns(cls, values: list[str]) -> list[str]:
        for value in values:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"{value!r} is not a regular expression: {exc}") from exc
        return values

    @field_validator("api_key_env")
    @classmethod
    def _key_env(cls, value: str | None) -> str | None:
        # A provider's own key variable (OPENAI_API_KEY, VLLM_API_KEY) is what users name here; anything else obeys
        # the token rule, so no file sends AWS_SECRET_ACCESS_KEY (or any variable) to base_url as an API key.
        if value is not None and _API_KEY_ENV.match(value) and not value.startswith("AWS_"):
            return value
        return validate_token_env(value)


_SLACK_APPROVER = re.compile(r"^[UWS][A-Z0-9]{2,}$")
_SLACK_CHANNEL = re.compile(r"^[CGD][A-Z0-9]{2,}$")


class SlackSettings(_Section):
    """``fmdoctor slack``: who may approve fixes and which clusters each channel may look at.

    Tokens are never read from here: they come from the environment (``SLACK_BOT_TOKEN``, ...)."""

    approvers: list[str] = Field(default_factory=list,
                                 description="Slack user ids (U..., W...) or user-group ids (S...) that may approve.")
    channel_clusters: dict[str, list[str]] = Field(
        default_factory=dict, description="Channel id -> clusters it may check; '*' is every other channel.")
    max_blocks: int = Field(40, ge=6, le=50, description="Blocks per message before a report is split.")
    approver_cache: Duration = Field(timedelta(minutes=5), description="How long user-group members are cached.")

    @field_validator("approvers")
    @classmethod
    def _approver_ids(cls, values: list[str]) -> list[str]:
        for value in values:
            if not isinstance(value, str) or not _SLACK_APPROVER.match(value):
                raise ValueError(f"{value!r} is not a Slack user id (U0123ABCD) or user-group id (S0123ABCD)")
        return values

    @field_validator("channel_clusters")
    @classmethod
    def _channel_ids(cls, values: dict[str, list[str]]) -> dict[str, list[str]]:
        for channel in values:
            if channel != "*" and not _SLACK_CHANNEL.match(channel):
                raise ValueError(f"{channel!r} is not a Slack channel id (C0123ABCD) or '*'")
        return values

    def clusters_for(self, channel: str | None) -> list[str]:
        """The clusters this channel may check: its own entry, else the '*' entry, else none."""
        if channel and channel in self.channel_clusters:
            return list(self.channel_clusters[channel])
        return list(self.channel_clusters.get("*", []))


AWS_REGION_NAME = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d{1,2}$")


def validate_region(value: str) -> str:
    if not isinstance(value, str) or not AWS_REGION_NAME.match(value.strip()):
        raise ValueError(f"{value!r} is not an AWS region name (e.g. us-west-2)")
    return value.strip()


Region = Annotated[str, BeforeValidator(validate_region)]


class FleetSettings(_Section):
    """Defaults for ``fmdoctor fleet check``; flags and the accounts file override them."""

    role_name: str = Field("fmdoctor-read-only", pattern=r"^[A-Za-z0-9_+=,.@/-]+$", max_length=512,
                           description="Read-only role assumed in every account.")
    regions: list[Region] = Field(default_factory=list, description="Regions to scan (default: the region).")
    concurrency: int = Field(8, ge=1, le=64, description="Clusters checked at once (and scopes discovered).")
    hyperpod: bool = Field(True, description="Also discover SageMaker HyperPod clusters (ListClusters).")
    session_duration: Duration = Field(timedelta(hours=1), description="Assumed-role session length.")

    @field_validator("session_duration")
    @classmethod
    def _sts_bounds(cls, value: timedelta) -> timedelta:
        if not timedelta(minutes=15) <= value <= timedelta(hours=12):
            raise ValueError("session_duration must be between 15m and 12h (the STS limits)")
        return value


class ExportSettings(_Section):
    """``fmdoctor export``: where verdicts are published."""

    cloudwatch_namespace: str = Field("fmdoctor", min_length=1, max_length=255, pattern=r"^[^:].*$",
                                      description="CloudWatch namespace `export cloudwatch` publishes to.")


_SERVE_MATCH_KEYS = re.compile(r"^(kind|source|alarm|namespace|metric|endpoint|hyperpod_cluster|instance|title"
                               r"|label\.[A-Za-z0-9_:./-]+)$")


class ServeRoute(_Section):
    """One routing rule of ``fmdoctor serve``: events whose fields match (shell-style globs) go to ``cluster``
    and run ``checks`` (ids or families; empty: the event kind's defaults), or are dropped with ``ignore``."""

    match: dict[str, str] = Field(default_factory=dict, description="Event field -> glob, e.g. {alarm: 'gpu-*'}.")
    cluster: str | None = Field(None, description="Cluster to investigate (default: found from the event).")
    checks: list[str] = Field(default_factory=list, description="Check ids or families to run.")
    ignore: bool = Field(False, description="Acknowledge matching events without investigating.")

    @field_validator("match")
    @classmethod
    def _match_keys(cls, values: dict[str, str]) -> dict[str, str]:
        for key, value in values.items():
            if not _SERVE_MATCH_KEYS.match(key):
                raise ValueError(f"{key!r} is not an event field to match (kind, source, alarm, namespace, metric, "
                                 "endpoint, hyperpod_cluster, instance, title, label.NAME)")
            if not isinstance(value, str):
                raise ValueError(f"match.{key}: give a string (a glob), not {type(value).__name__}")
        return values


class ServeSettings(_Section):
    """``fmdoctor serve``: where events come from, where results go, and how events map to clusters."""

    queue_url: str | None = Field(None, description="SQS queue the EventBridge rules feed.")
    concurrency: int = Field(4, ge=1, le=64, description="Events investigated at once (per replica).")
    visibility_timeout: Duration = Field(timedelta(minutes=2), description="SQS visibility, extended while busy.")
    wait_time: int = Field(20, ge=0, le=20, description="SQS long-poll seconds.")
    shutdown_grace: Duration = Field(timedelta(seconds=30), description="Time in-flight events get on SIGTERM.")
    repeat_window: Duration = Field(timedelta(hours=6), description="A repeat within it updates the same thread.")
    reuse_report: Duration = Field(timedelta(seconds=60),
                                   description="Events for the same cluster and checks within it share one run.")
    slack_channel: str | None = Field(None, description="Slack channel id to post results to.")
    webhook_url: str | None = Field(None, description="URL each result is POSTed to as JSON.")
    webhook_token_env: str | None = Field(None, description="Environment variable with its bearer token "
                                          "(FMDOCTOR_*, or listed in ~/.config/fmdoctor/token-env.allow).")
    sns_topic_arn: str | None = Field(None, description="SNS topic each result is published to.")
    host: str = Field("127.0.0.1", description="Address of the HTTP endpoint (webhooks, /metrics, /healthz).")
    port: int = Field(9877, ge=0, le=65535, description="Port of the HTTP endpoint.")
    max_body_bytes: int = Field(1 << 20, ge=1024, description="Largest webhook body accepted.")
    max_event_bytes: int = Field(256 * 1024, ge=1024, description="Largest event parsed (SQS allows 256 KiB).")
    cluster_label: str = Field("cluster", description="Alertmanager label naming the cluster.")
    routes: list[ServeRoute] = Field(default_factory=list, description="Routing rules, first match wins: which "
                                     "events go to which cluster and checks, or are ignored.")
    dedupe_table: str | None = Field(None, pattern=r"^[A-Za-z0-9_.-]{3,255}$", description=(
        "DynamoDB table the replicas on one queue share, so an event is posted once whichever replica gets "
        "it (deploy/serve/dedupe-table.cfn.yaml); without it each replica remembers only its own deliveries."))

    @field_validator("webhook_token_env")
    @classmethod
    def _token_env(cls, value: str | None) -> str | None:
        return validate_token_env(value)

    @field_validator("slack_channel")
    @classmethod
    def _channel(cls, value: str | None) -> str | None:
        if value is not None and not _SLACK_CHANNEL.match(value):
            raise ValueError(f"{value!r} is not a Slack channel id (C0123ABCD)")
        return value


class AwsSettings(_Section):
    """How fmdoctor talks to AWS."""

    read_timeout: Duration = Field(timedelta(seconds=30), description=(
        "How long one AWS response may take to arrive (botocore's read timeout); a timed-out read is retried "
        "as the standard retry mode retries any transient failure."))

    @field_validator("read_timeout")
    @classmethod
    def _positive(cls, value: timedelta) -> timedelta:
        if not timedelta(seconds=1) <= value <= timedelta(minutes=15):
            raise ValueError("read_timeout must be between 1s and 15m")
        return value


class Settings(_Section):
    """The whole file. Cluster-level keys at the top are defaults for every cluster."""

    region: str | None = Field(None, description="AWS region of the cluster (default: the AWS default region).")
    profile: str | None = Field(None, description="AWS profile to read with (default: the AWS default chain).")
    endpoint_url: str | None = Field(None, description="AWS endpoint for every service (e.g. a local emulator); "
                                     "AWS_ENDPOINT_URL* in the environment wins.")
    aws: AwsSettings = Field(default_factory=AwsSettings)
    tag_keys: list[str] = Field(default_factory=lambda: list(DEFAULT_TAG_KEYS), min_length=1,
                                description="Instance tags whose value names the cluster an instance belongs to.")
    head_nodes: list[str] = Field(default_factory=list, description="Instance ids of head and login nodes not "
                                  "tagged as such (fmdoctor:role=head, parallelcluster:node-type=HeadNode).")
    network: NetworkSettings = Field(default_factory=NetworkSettings)
    gpu: GpuSettings = Field(default_factory=GpuSettings)
    checkpoints: CheckpointSettings = Field(default_factory=CheckpointSettings)
    spot: SpotSettings = Field(default_factory=SpotSettings)
    capacity_blocks: CapacityBlockSettings = Field(default_factory=CapacityBlockSettings)
    hyperpod: HyperPodSettings = Field(default_factory=HyperPodSettings)
    inference: InferenceSettings = Field(default_factory=InferenceSettings)
    training: TrainingSettings = Field(default_factory=TrainingSettings)
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)
    scheduler: SchedulerSettings = Field(default_factory=SchedulerSettings)
    clusters: dict[str, ClusterSettings] = Field(default_factory=dict, description="Cluster name -> its own "
                                                 "values of the keys marked per cluster, over the top-level ones.")
    max_workers: int = Field(8, ge=1, le=64, description="Checks running at once (a check waiting on AWS gives "
                             "its turn up).")
    runbooks_dir: str | None = Field(None, description="Folder of runbooks that add to or override the built-in "
                                     "ones (relative to the config file).")
    agent: AgentSettings = Field(default_factory=AgentSettings)
    slack: SlackSettings = Field(default_factory=SlackSettings)
    fleet: FleetSettings = Field(default_factory=FleetSettings)
    export: ExportSettings = Field(default_factory=ExportSettings)
    serve: ServeSettings = Field(default_factory=ServeSettings)
    source: str | None = Field(None, exclude=True, description="Path the settings were read from.")

    @field_validator("clusters", mode="before")
    @classmethod
    def _empty_clusters(cls, clusters: Any) -> Any:
        # 'llm-train:' with nothing under it is a cluster that takes every default.
        if isinstance(clusters, dict):
            return {name: ({} if body is None else body) for name, body in clusters.items()}
        return clusters

    def cluster(self, name: str, overrides: dict[str, Any] | None = None) -> ClusterSettings:
        """One cluster's effective settings: top-level defaults, then its own section, then ``overrides``
        (flags). Bad override values raise :class:`ConfigError` naming the setting."""
        base = self.model_dump(include=_CLUSTER_KEYS, exclude_unset=True)
        own = self.clusters[name].model_dump(exclude_unset=True) if name in self.clusters else {}
        merged = _deep_merge(_deep_merge(base, own), overrides or {})
        try:
            settings = ClusterSettings.model_validate(merged)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in _yaml_path(e['loc']))}: {e['msg'].removeprefix('Value error, ')}"
                for e in exc.errors()[:5]
            )
            raise ConfigError(f"invalid setting: {problems}") from None
        if settings.metrics.source == "prometheus" and not settings.metrics.url:
            raise ConfigError("invalid setting: metrics.source is prometheus but metrics.url is not set",
                              hint="set metrics.url (top level or the cluster's section) or pass --metrics-url")
        return settings

    def default_cluster(self) -> str | None:
        return next(iter(self.clusters)) if len(self.clusters) == 1 else None


def _deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


WORKING_DIRECTORY, NAMED, USER_DIRECTORY = "the working directory", "named", "your config directory"


def locate_config_file(explicit: str | None = None, cwd: Path | None = None) -> tuple[Path | None, str]:
    """The config file and where it came from: ``NAMED`` (``--config`` or ``$FMDOCTOR_CONFIG``: the user chose
    it), ``WORKING_DIRECTORY`` (``./fmdoctor.yaml``, found, perhaps in a cloned repository) or ``USER_DIRECTORY``."""
    if explicit:
        path = Path(explicit).expanduser()
        if not path.is_file():
            raise ConfigError(f"config file {explicit!r} does not exist")
        return path, NAMED
    env = os.environ.get("FMDOCTOR_CONFIG")
    if env:
        path = Path(env).expanduser()
        if not path.is_file():
            raise ConfigError(f"FMDOCTOR_CONFIG points to {env!r}, which does not exist")
        return path, NAMED
    here = (cwd or Path.cwd()) / CONFIG_FILE_NAME
    if here.is_file():
        return here, WORKING_DIRECTORY
    mine = user_config_dir() / CONFIG_FILE_NAME
    return (mine, USER_DIRECTORY) if mine.is_file() else (None, "")


def find_config_file(explicit: str | None = None, cwd: Path | None = None) -> Path | None:
    return locate_config_file(explicit, cwd)[0]


def outbound_keys(settings: Settings) -> list[str]:
    """The keys that send something out: a URL requests go to, or a variable whose value is sent as a secret."""
    found = []
    sections: list[tuple[str, Any]] = [("", settings)]
    sections += [(f"clusters.{name}.", cluster) for name, cluster in settings.clusters.items()]
    for prefix, section in sections:
        if section.metrics.url is not None:
            found.append(f"{prefix}metrics.url")
        if section.metrics.token_env is not None:
            found.append(f"{prefix}metrics.token_env")
        # slurmrestd gets a JWT; a kubeconfig names API servers, credentials and exec plugins (commands it runs).
        for key, value in (("scheduler.slurm.url", section.scheduler.slurm.url),
                           ("scheduler.slurm.token_env", section.scheduler.slurm.token_env),
                           ("scheduler.kubernetes.kubeconfig", section.scheduler.kubernetes.kubeconfig)):
            if value is not None:
                found.append(f"{prefix}{key}")
    for key, value in (("endpoint_url", settings.endpoint_url), ("agent.base_url", settings.agent.base_url),
                       ("serve.sns_topic_arn", settings.serve.sns_topic_arn),
                       ("agent.api_key_env", settings.agent.api_key_env), ("serve.webhook_url",
                       settings.serve.webhook_url), ("serve.webhook_token_env", settings.serve.webhook_token_env)):
        if value is not None:
            found.append(key)
    return found


def keys_needing_trust(settings: Settings) -> list[str]:
    """The keys a configuration found in the working directory may not set unless the user names the file: those
    that send something out (:func:`outbound_keys`), and ``runbooks_dir``, whose runbooks replace the built-in
    ones an on-call reads and copies commands from (and whose declared IAM actions ``iam-policy`` grants)."""
    return outbound_keys(settings) + (["runbooks_dir"] if settings.runbooks_dir is not None else [])


# A configuration is a few KiB; these bounds are checked before anything is parsed or built, so a file that is
# huge, has hundreds of thousands of keys or nests thousands of levels deep is refused at once, not after minutes.
MAX_CONFIG_BYTES = 256 * 1024
MAX_CONFIG_NODES = 20_000
MAX_CONFIG_DEPTH = 32
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when installed: the same YAML, faster


def load_settings(explicit: str | None = None, announce: bool = True) -> Settings:
    """The settings of the file :func:`locate_config_file` finds, saying on stderr which file that is (unless it
    was named with ``--config``). A file found in the working directory is not trusted to send anything out: one
    that sets an outbound URL or a secret's variable (:func:`outbound_keys`) is refused unless the user names it
    (``--config ./fmdoctor.yaml`` or ``FMDOCTOR_CONFIG``), which is the opt-in; so is one that replaces the
    runbooks (:func:`keys_needing_trust`)."""
    path, origin = locate_config_file(explicit)
    if path is None:
        return Settings()
    if announce and not explicit:
        sys.stderr.write(f"fmdoctor: config {path} (from {'$FMDOCTOR_CONFIG' if origin == NAMED else origin})\n")
    try:
        if path.stat().st_size > MAX_CONFIG_BYTES:
            raise ConfigError(f"{path}: {path.stat().st_size} bytes; a configuration is at most "
                              f"{MAX_CONFIG_BYTES // 1024} KiB")
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from exc
    settings = parse_settings(text, str(path))
    if origin == WORKING_DIRECTORY:
        keys = keys_needing_trust(settings)
        if keys:
            raise ConfigError(
                f"{path} was found in the working directory and sets {', '.join(keys)}: a configuration found "
                "there (a cloned repository's, say) may not send secrets or requests anywhere, nor replace the "
                "runbooks",
                hint=f"if you wrote it, name it: --config {path} (or FMDOCTOR_CONFIG={path}); otherwise move it "
                     "away or run fmdoctor from another directory")
    return settings.model_copy(update={"source": str(path)})


def parse_settings(text: str, source: str = "fmdoctor.yaml") -> Settings:
    if len(text) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{source}: {len(text)} characters; a configuration is at most "
                          f"{MAX_CONFIG_BYTES // 1024} KiB")
    _bound_flow_nesting(text, source)
    try:
        loader = _LOADER(text)
        try:
            root = loader.get_single_node()
            _bound_nodes(root, source)
            data = loader.construct_document(root) if root is not None else None
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{source}{where}: not valid YAML ({problem})") from exc
    except RecursionError:
        raise ConfigError(f"{source}: nested more than {MAX_CONFIG_DEPTH} levels deep") from None
    if data is None:
        return Settings()
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the top level must be a mapping of keys, not {type(data).__name__}")
    try:
        return Settings.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe_validation(exc, root, source)) from None


def _bound_flow_nesting(text: str, source: str) -> None:
    """Flow collections ('[[[[...', '{a: {b: ...') nest without indentation: count them before the parser
    recurses into them (quoted text is skipped)."""
    depth, quote = 0, ""
    for char in text:
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char in "[{":
            depth += 1
            if depth > MAX_CONFIG_DEPTH:
                raise ConfigError(f"{source}: nested more than {MAX_CONFIG_DEPTH} levels deep")
        elif char in "]}":
            depth = max(0, depth - 1)


def _bound_nodes(root: yaml.Node | None, source: str) -> None:
    stack = [(root, 1)] if root is not None else []
    count = 0
    while stack:
        node, depth = stack.pop()
        count += 1
        if count > MAX_CONFIG_NODES:
            raise ConfigError(f"{source}: more than {MAX_CONFIG_NODES} keys and values; a configuration is smaller")
        if depth > MAX_CONFIG_DEPTH:
            raise ConfigError(f"{source}: nested more than {MAX_CONFIG_DEPTH} levels deep")
        if isinstance(node, yaml.MappingNode):
            stack += [(part, depth + 1) for pair in node.value for part in pair]
        elif isinstance(node, yaml.SequenceNode):
            stack += [(item, depth + 1) for item in node.value]


def _describe_validation(exc: ValidationError, root: yaml.Node | None, source: str) -> str:
    lines = []
    for error in exc.errors()[:5]:
        loc = _yaml_path(error["loc"])
        line = _line_of(root, loc)
        where = f"{source}:{line}" if line else source
        key = ".".join(str(p) for p in loc) or "(top level)"
        if error["type"] == "extra_forbidden":
            lines.append(f"{where}: unknown key '{key}'")
        else:
            message = error["msg"].removeprefix("Value error, ")
            lines.append(f"{where}: {key}: {message}")
    return "invalid configuration: " + "; ".join(lines)


def _yaml_path(loc: tuple[Any, ...]) -> tuple[Any, ...]:
    # Strip pydantic's internal tags (e.g. 'function-after[...]') so the path matches the YAML keys.
    return tuple(p for p in loc if not (isinstance(p, str) and "[" in p))


def _line_of(node: yaml.Node | None, loc: tuple[Any, ...]) -> int | None:
    best = node
    for part in loc:
        if isinstance(best, yaml.MappingNode):
            match = next((v for k, v in best.value if getattr(k, "value", None) == str(part)), None)
            key_node = next((k for k, _ in best.value if getattr(k, "value", None) == str(part)), None)
            if match is None:
                break
            best = key_node if part == loc[-1] else match
        elif isinstance(best, yaml.SequenceNode) and isinstance(part, int) and part < len(best.value):
            best = best.value[part]
        else:
            break
    return best.start_mark.line + 1 if best is not None else None
