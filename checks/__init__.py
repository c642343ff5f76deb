"""The catalogue of checks: one module per check, named after its id (``efa-sg-self-reference`` lives
in ``efa_sg_self_reference.py``). Add a check by writing its module and listing its class here.
"""

from fmdoctor.checks.efa_errors import EfaErrors
from fmdoctor.checks.efa_missing_interfaces import EfaMissingInterfaces
from fmdoctor.checks.efa_not_attached import EfaNotAttached
from fmdoctor.checks.efa_sg_self_reference import EfaSgSelfReference
from fmdoctor.checks.efa_subnet_spread import EfaSubnetSpread
from fmdoctor.checks.gpu_idle import GpuIdle
from fmdoctor.checks.gpu_memory_pressure import GpuMemoryPressure
from fmdoctor.checks.gpu_metrics_missing import GpuMetricsMissing
from fmdoctor.checks.gpu_straggler import GpuStraggler
from fmdoctor.checks.gpu_xid import GpuXid
from fmdoctor.checks.node_efa_provider import NodeEfaProvider
from fmdoctor.checks.node_gpu_health import NodeGpuHealth
from fmdoctor.checks.placement_group import PlacementGroup

ALL_CHECKS = (
    EfaSgSelfReference,
    EfaSubnetSpread,
    EfaNotAttached,
    EfaMissingInterfaces,
    PlacementGroup,
    EfaErrors,
    GpuMetricsMissing,
    GpuIdle,
    GpuStraggler,
    GpuMemoryPressure,
    NodeGpuHealth,
    GpuXid,
    NodeEfaProvider,
)
