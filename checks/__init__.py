"""The catalogue of checks: one module per check, named after its id (``efa-sg-self-reference`` lives
in ``efa_sg_self_reference.py``). Add a check by writing its module and listing its class here.
"""

from fmdoctor.checks.accelerator_saturation import AcceleratorSaturation
from fmdoctor.checks.autoscaling_at_max import AutoscalingAtMax
from fmdoctor.checks.checkpoint_incomplete import CheckpointIncomplete
from fmdoctor.checks.checkpoint_missing import CheckpointMissing
from fmdoctor.checks.checkpoint_stale import CheckpointStale
from fmdoctor.checks.efa_missing_interfaces import EfaMissingInterfaces
from fmdoctor.checks.efa_not_attached import EfaNotAttached
from fmdoctor.checks.efa_sg_self_reference import EfaSgSelfReference
from fmdoctor.checks.efa_subnet_spread import EfaSubnetSpread
from fmdoctor.checks.endpoint_unhealthy import EndpointUnhealthy
from fmdoctor.checks.hyperpod_node_unhealthy import HyperpodNodeUnhealthy
from fmdoctor.checks.inference_errors import InferenceErrors
from fmdoctor.checks.inference_idle import InferenceIdle
from fmdoctor.checks.inference_latency_slo import InferenceLatencySlo
from fmdoctor.checks.placement_group import PlacementGroup
from fmdoctor.checks.spot_interruption import SpotInterruption
from fmdoctor.checks.spot_interruption_unprotected import SpotInterruptionUnprotected
from fmdoctor.checks.spot_rebalance import SpotRebalance

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
    HyperpodNodeUnhealthy,
    EndpointUnhealthy,
    InferenceLatencySlo,
    InferenceErrors,
    AcceleratorSaturation,
    AutoscalingAtMax,
    InferenceIdle,
)
