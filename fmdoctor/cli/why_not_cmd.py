"""``fmdoctor why-not``: why can (or can't) X reach Y? Exit 0 reachable, 2 blocked, 3 can't answer."""

from __future__ import annotations

import argparse
import sys

from fmdoctor.cli.common import add_connection_args, add_target_args, open_target
from fmdoctor.safety.text import dumps_json

EXIT = {True: 0, False: 2, None: 3}
# fmdoctor.net.reachability.PROTOCOLS (a test keeps them equal): --help must not import the network analysis.
PROTOCOLS = ("tcp", "udp", "icmp", "all", "efa")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "why-not",
        help="explain why one endpoint can or cannot reach another",
        description="Trace a flow through security groups, network ACLs, route tables and gateways, and name "
        "the component that blocks it, with the rule that would fix it. Endpoints: an instance id or Name tag, "
        "an ENI id, a private IP, a CIDR or bare IP, 'internet', an FSx file system id, s3://bucket or 's3'. "
        "Exit status: 0 reachable, 2 blocked, 3 cannot answer (bad input, or part of the path not evaluated).",
    )
    add_target_args(parser)
    add_connection_args(parser)
    parser.add_argument("--from", dest="source", required=True, metavar="SRC", help="where the traffic starts")
    parser.add_argument("--to", dest="destination", required=True, metavar="DST", help="where it should arrive")
    parser.add_argument("--port", metavar="P",
                        help="port, range (1018-1023) or list (988,1018-1023); optional for FSx for Lustre "
                        "(988,1018-1023) and S3 (443)")
    parser.add_argument("--protocol", choices=PROTOCOLS, default="tcp")
    parser.add_argument("--format", choices=["text", "json"], default="text")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from fmdoctor.net.reachability import parse_flow, why_not
    from fmdoctor.report.reachability import write_reachability
    from fmdoctor.report.text import make_console

    parse_flow(args.protocol, args.port, default_ports=((0, 0),))  # a bad port: exit 3 before the demo is seeded
    with open_target(args) as target:
        result = why_not(target.doctor, target.cluster, args.source, args.destination, args.port, args.protocol)
        cluster = target.cluster
    if args.format == "json":
        sys.stdout.write(dumps_json(result.to_json_dict(), indent=2) + "\n")
    else:
        write_reachability(result, make_console(sys.stdout), cluster)
    return EXIT[result.reachable]
