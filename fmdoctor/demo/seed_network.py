"""The demo VPC's topology: internet gateway, NAT, S3 gateway endpoint, FSx for Lustre, and two faults.

Healthy: public-a routes to an internet gateway (the head node has a public IP); private-a and private-a2 (the
same zone) route the internet through a NAT gateway in public-a and S3 through a gateway endpoint. private-a2
has a tight network ACL: all traffic within the VPC, HTTPS out, and replies back on 32768-65535, which covers
the Linux nodes' ephemeral ports (nothing to report). The file system's group admits the file servers' own
traffic on 988 and 1018-1023, as the FSx guide asks. Faults the network checks find:

* SSH: the head node's group ``demo-head`` admits 22 only from 10.0.0.0/16, while the admins come from
  203.0.113.0/24 (``network.admin_cidrs``) -> ssh-unreachable.
* FSx: the Lustre file system's group admits TCP 988 from the nodes but not 1018-1023 -> fsx-unreachable.
  (The nodes' groups admit the file servers on both, as AWS's Lustre guide asks, so only one side is wrong.)
* S3: private-b, added later for the stray Spot node, was never associated with the private route table; the
  VPC's main table has only the local route, so that node cannot reach its checkpoints -> s3-unreachable.

Ids land in ``world.facts["network"]`` and ``world.facts["fsx"]``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fmdoctor.demo.builders import acl_entry

if TYPE_CHECKING:
    from fmdoctor.demo.scenario import DemoWorld

LUSTRE_PORTS = ((988, 988), (1018, 1023))


def _tcp(ports: tuple[tuple[int, int], ...], group_ids: list[str]) -> list[dict]:
    pairs = [{"GroupId": g} for g in group_ids]
    return [{"IpProtocol": "tcp", "FromPort": lo, "ToPort": hi, "UserIdGroupPairs": pairs} for lo, hi in ports]


def seed_network(world: DemoWorld) -> None:
    b = world.builder
    assert b is not None, "seed_network runs after seed_network_and_nodes"
    ec2 = b.ec2
    subnets, groups = b.subnets, b.groups
    region = world.region

    igw = b.internet_gateway(["public-a"], "demo-public")
    nat = b.nat_gateway("public-a")
    private_rt = b.route_table("demo-private", ["private-a", "private-a2"],
                               [{"DestinationCidrBlock": "0.0.0.0/0", "NatGatewayId": nat}])
    s3_endpoint = b.s3_gateway_endpoint([private_rt], region)
    tight_acl = b.network_acl(["private-a2"], [
        acl_entry(100, False, "-1", "allow", "10.0.0.0/16"),
        acl_entry(110, False, "6", "allow", "0.0.0.0/0", (32768, 65535)),  # replies to Linux clients
        acl_entry(100, True, "-1", "allow", "10.0.0.0/16"),
        acl_entry(110, True, "6", "allow", "0.0.0.0/0", (443, 443)),
    ])

    clients = [groups["demo-efa"], groups["demo-head"]]
    # Fault: 988 only; Lustre also needs 1018-1023 from every client.
    fsx_sg = b.security_group("demo-fsx", ingress=_tcp(LUSTRE_PORTS[:1], clients))
    b.ec2.authorize_security_group_ingress(GroupId=fsx_sg, IpPermissions=_tcp(LUSTRE_PORTS, [fsx_sg]))
    for client in clients:
        ec2.authorize_security_group_ingress(GroupId=client, IpPermissions=_tcp(LUSTRE_PORTS, [fsx_sg]))
    fsx = world.session.client("fsx", region_name=region)
    file_system = fsx.create_file_system(
        FileSystemType="LUSTRE",
        StorageCapacity=1200,
        SubnetIds=[subnets["private-a"]],
        SecurityGroupIds=[fsx_sg],
        LustreConfiguration={"DeploymentType": "PERSISTENT_2", "PerUnitStorageThroughput": 250},
        Tags=[{"Key": "Name", "Value": "demo-llm-scratch"}, {"Key": b.tag_key, "Value": world.cluster}],
    )["FileSystem"]

    world.facts["network"] = {
        "internet_gateway": igw,
        "nat_gateway": nat,
        "public_route_table": b.route_tables["demo-public"],
        "private_route_table": private_rt,
        "s3_gateway_endpoint": s3_endpoint,
        "tight_network_acl": tight_acl,
    }
    world.facts["fsx"] = {
        "id": file_system["FileSystemId"],
        "type": "LUSTRE",
        "dns_name": file_system.get("DNSName"),
        "subnet": subnets["private-a"],
        "security_group": fsx_sg,
        "missing_ports": "1018-1023",
    }
