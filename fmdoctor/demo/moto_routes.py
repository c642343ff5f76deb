"""Teach moto the route-fix calls as EC2 answers them (real AWS needs none of this).

moto ignores ``DryRun`` on CreateRoute, ReplaceRoute and ModifyVpcEndpoint (a pre-flight would make the
change), and ModifyVpcEndpoint's ``AddRouteTableIds`` / ``RemoveRouteTableIds`` only edit the endpoint's list:
AWS also adds (removes) the prefix-list route of a gateway endpoint in each table, which is what the
reachability engine reads. :func:`install` is called by :func:`fmdoctor.demo.moto_compat.install`.
"""

from __future__ import annotations

import functools
from typing import Any


def install() -> None:
    _honour_dry_run()
    _gateway_endpoint_routes()


def _honour_dry_run() -> None:
    from moto.ec2.responses.route_tables import RouteTables
    from moto.ec2.responses.vpcs import VPCs

    for cls, name in ((RouteTables, "create_route"), (RouteTables, "replace_route"), (VPCs, "modify_vpc_endpoint")):
        original = getattr(cls, name)

        def honour_dry_run(self: Any, _original: Any = original) -> Any:
            self.error_on_dryrun()
            return _original(self)

        setattr(cls, name, functools.wraps(original)(honour_dry_run))


def _gateway_endpoint_routes() -> None:
    from moto.ec2.models.vpcs import VPCBackend

    original = VPCBackend.modify_vpc_endpoint

    @functools.wraps(original)
    def modify_vpc_endpoint(self: Any, vpc_id: str, *args: Any, **kwargs: Any) -> Any:
        endpoint = self.describe_vpc_endpoints(vpc_end_point_ids=[vpc_id])[0]
        before = set(endpoint.route_table_ids or [])
        result = original(self, vpc_id, *args, **kwargs)
        prefix_list = getattr(endpoint, "destination_prefix_list_id", None)
        if prefix_list:
            after = set(endpoint.route_table_ids or [])
            for table in sorted(after - before):
                self.create_route(table, None, gateway_id=endpoint.id, destination_prefix_list_id=prefix_list)
            for table in sorted(before - after):
                self.delete_route(table, None, destination_prefix_list_id=prefix_list)
        return result

    VPCBackend.modify_vpc_endpoint = modify_vpc_endpoint
