"""Fleet scans: discover clusters across accounts and regions and check each one.

Front ends (the CLI, an MCP tool, a scheduled job) build a :class:`FleetPlan` with :func:`build_plan`
and call :func:`scan_fleet` with a template :class:`~fmdoctor.engine.api.Doctor`; the result is a
:class:`FleetReport` whose ``to_json_dict()`` is the stable JSON schema documented in ``model``.
"""

from fmdoctor.fleet.model import ClusterResult, FleetReport, ScopeResult
from fmdoctor.fleet.scan import FleetEvent, scan_fleet
from fmdoctor.fleet.sessions import Scope, SessionFactory, default_session_factory
from fmdoctor.fleet.targets import AccountTarget, FleetPlan, build_plan, parse_shard

__all__ = ["AccountTarget", "ClusterResult", "FleetEvent", "FleetPlan", "FleetReport", "Scope", "ScopeResult",
           "SessionFactory", "build_plan", "default_session_factory", "parse_shard", "scan_fleet"]
