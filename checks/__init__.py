"""The catalogue of checks: one module per check, named after its id (``efa-sg-self-reference`` lives
in ``efa_sg_self_reference.py``). Add a check by writing its module and listing its class here.
"""

from fmdoctor.checks._gpu_sources import start_metric_listings
from fmdoctor.checks._scheduler import annotate_jobs
from fmdoctor.checks.accelerator_saturation import AcceleratorSaturation
from fmdoctor.checks.autoscaling_at_max import AutoscalingAtMax
from fmdoctor.checks.capacity_block_expiring import CapacityBlockExpiring
from fmdoctor.checks.checkpoint_incomplete import CheckpointIncomplete
from fmdoctor.checks.checkpoint_missing import CheckpointMissing
from fmdoctor.checks.checkpoint_stale import CheckpointStale
from fmdoctor.checks.efa_errors import EfaErrors
from fmdoctor.checks.efa_missing_interfaces import EfaMissingInterfaces
from fmdoctor.checks.efa_not_attached import EfaNotAttached
from fmdoctor.checks.efa_peer_unreachable import EfaPeerUnreachable
from fmdoctor.checks.efa_sg_self_reference import EfaSgSelfReference
from fmdoctor.checks.efa_subnet_spread import EfaSubnetSpread
from fmdoctor.checks.endpoint_unhealthy import EndpointUnhealthy
from fmdoctor.checks.fsx_unreachable import FsxUnreachable
from fmdoctor.checks.gpu_idle import GpuIdle
from fmdoctor.checks.gpu_memory_pressure import GpuMemoryPressure
from fmdoctor.checks.gpu_metrics_missing import GpuMetricsMissing
from fmdoctor.checks.gpu_straggler import GpuStraggler
from fmdoctor.checks.gpu_xid import GpuXid
from fmdoctor.checks.gpu_xid_metrics import GpuXidMetrics
from fmdoctor.checks.hyperpod_node_unhealthy import HyperpodNodeUnhealthy
from fmdoctor.checks.inference_errors import InferenceErrors
from fmdoctor.checks.inference_idle import InferenceIdle
from fmdoctor.checks.inference_latency_slo import InferenceLatencySlo
from fmdoctor.checks.k8s_device_plugin_missing import K8sDevicePluginMissing
from fmdoctor.checks.k8s_gpu_pods_pending import K8sGpuPodsPending
from fmdoctor.checks.k8s_node_not_ready import K8sNodeNotReady
from fmdoctor.checks.node_efa_provider import NodeEfaProvider
from fmdoctor.checks.node_gpu_health import NodeGpuHealth
from fmdoctor.checks.placement_group import PlacementGroup
from fmdoctor.checks.s3_unreachable import S3Unreachable
from fmdoctor.checks.scheduler_node_down import SchedulerNodeDown
from fmdoctor.checks.scheduler_node_held_out import SchedulerNodeHeldOut
from fmdoctor.checks.scheduler_schedules_faulty_node import SchedulerSchedulesFaultyNode
from fmdoctor.checks.spot_interruption import SpotInterruption
from fmdoctor.checks.spot_interruption_unprotected import SpotInterruptionUnprotected
from fmdoctor.checks.spot_rebalance import SpotRebalance
from fmdoctor.checks.ssh_unreachable import SshUnreachable
from fmdoctor.checks.training_stalled import TrainingStalled

ALL_CHECKS = (
    EfaSgSelfReference,
    EfaSubnetSpread,
    EfaNotAttached,
    EfaMissingInterfaces,
    PlacementGroup,
    CheckpointMissing,
    CheckpointStale,
    CheckpointIncomplete,
    SpotInterruption,
    SpotRebalance,
    SpotInterruptionUnprotected,
    CapacityBlockExpiring,
    HyperpodNodeUnhealthy,
    EndpointUnhealthy,
    InferenceLatencySlo,
    InferenceErrors,
    AcceleratorSaturation,
    AutoscalingAtMax,
    InferenceIdle,
    EfaErrors,
    GpuMetricsMissing,
    GpuIdle,
    GpuStraggler,
    GpuMemoryPressure,
    GpuXidMetrics,
    NodeGpuHealth,
    GpuXid,
    NodeEfaProvider,
    EfaPeerUnreachable,
    SshUnreachable,
    FsxUnreachable,
    S3Unreachable,
    TrainingStalled,
    SchedulerSchedulesFaultyNode,
    SchedulerNodeDown,
    SchedulerNodeHeldOut,
    K8sNodeNotReady,
    K8sDevicePluginMissing,
    K8sGpuPodsPending,
)

# Run after every check of a run, over all its findings (fmdoctor.engine.registry.Registry.annotators): every
# finding on a node gets the scheduler's jobs on it.
ANNOTATORS = (annotate_jobs,)
# Run when a run starts, before its inventory is read (Registry.starters): the CloudWatch metric listings.
STARTERS = (start_metric_listings,)
