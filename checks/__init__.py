"""The catalogue of checks: one module per check, named after its id (``efa-sg-self-reference`` lives
in ``efa_sg_self_reference.py``). Add a check by writing its module and listing its class here.
"""

from fmdoctor.checks.efa_missing_interfaces import EfaMissingInterfaces
from fmdoctor.checks.efa_not_attached import EfaNotAttached
from fmdoctor.checks.efa_peer_unreachable import EfaPeerUnreachable
from fmdoctor.checks.efa_sg_self_reference import EfaSgSelfReference
from fmdoctor.checks.efa_subnet_spread import EfaSubnetSpread
from fmdoctor.checks.fsx_unreachable import FsxUnreachable
from fmdoctor.checks.placement_group import PlacementGroup
from fmdoctor.checks.s3_unreachable import S3Unreachable
from fmdoctor.checks.ssh_unreachable import SshUnreachable

ALL_CHECKS = (
    EfaSgSelfReference,
    EfaSubnetSpread,
    EfaNotAttached,
    EfaMissingInterfaces,
    PlacementGroup,
    EfaPeerUnreachable,
    SshUnreachable,
    FsxUnreachable,
    S3Unreachable,
)
