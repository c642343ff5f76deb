"""Benchmark: the memory one DescribeInstances page of p5 nodes costs the reader, by page size (issue 39).

    python bench/listing_memory.py                # pages of 250 and 1,000 p5 nodes; writes bench/RESULTS.md
    python bench/listing_memory.py --no-write

One p5.48xlarge node of bench/p5_world.py (33 interfaces, 32 of them EFA-only) is described by moto (its
DescribeInstances XML, AWS's shape); that reservation is repeated with distinct ids into one page of N nodes,
and the page is answered to a real botocore EC2 client (a ``before-send`` handler returns it, so botocore reads
the body, fmdoctor.engine.responses proves it whole and fmdoctor.engine.instance_listing streams it) while
tracemalloc records the peak of Python allocations above what was held before the call. This is the choice of
``FIRST_PAGE``/``INTERFACES_PER_PAGE``: a page of 1,000 saves round trips (one call instead of four for a
1,000-node cluster) at the cost measured here.
"""

from __future__ import annotations

import argparse
import gc
import os
import re
import sys
import time
import tracemalloc
from pathlib import Path

import boto3
from botocore.awsrequest import AWSResponse
from moto import mock_aws

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from results_file import write_section  # noqa: E402

RESULTS = HERE / "RESULTS.md"


def one_node_xml() -> tuple[bytes, bytes, bytes]:
    """(head, one reservation's <item>, tail) of moto's DescribeInstances answer for one p5 node."""
    from p5_world import seed_p5_world

    from fmdoctor.demo import moto_compat

    moto_compat.install()
    with mock_aws():
        session = boto3.Session(region_name="us-west-2")
        seed_p5_world(session, "p5", 1, time.perf_counter)
        ec2 = session.client("ec2")
        captured: list[bytes] = []
        ec2.meta.events.register("before-parse.ec2.DescribeInstances",
                                 lambda response_dict, **_: captured.append(bytes(response_dict["body"])))
        ec2.describe_instances()
    body = captured[0]
    start = body.index(b"<reservationSet>") + len(b"<reservationSet>")
    end = body.rindex(b"</reservationSet>")
    return body[:start], body[start:end].strip(), body[end:]


class _Raw:
    def __init__(self, body: bytes):
        self._body = body

    def stream(self, **_: object):
        yield self._body

    def read(self, *_: object) -> bytes:
        body, self._body = self._body, b""
        return body


def page_of(nodes: int, parts: tuple[bytes, bytes, bytes]) -> bytes:
    head, item, tail = parts
    ids = sorted(set(re.findall(rb"(?:i|eni|r)-[0-9a-f]{8,17}", item)))
    items = []
    for n in range(nodes):
        copy = item
        for old in ids:
            prefix = old.split(b"-", 1)[0]
            copy = copy.replace(old, prefix + b"-" + f"{n:06x}".encode() + old[-8:])
        items.append(copy)
    return head + b"".join(items) + tail


def measure(nodes: int, parts: tuple[bytes, bytes, bytes]) -> dict[str, float]:
    from fmdoctor.engine.instance_listing import read_instance_pages

    body = page_of(nodes, parts)
    ec2 = boto3.Session(region_name="us-west-2", aws_access_key_id="b", aws_secret_access_key="b").client(
        "ec2", endpoint_url="http://127.0.0.1:9")

    def answer(request, **_):
        return AWSResponse(request.url, 200, {"Content-Type": "text/xml;charset=UTF-8",
                                              "Content-Length": str(len(body))}, _Raw(body))

    ec2.meta.events.register_first("before-send.ec2.DescribeInstances", answer)
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    started = time.process_time()
    kept = 0
    for reservations in read_instance_pages(ec2, [{"Name": "tag:c", "Values": ["p5"]}]):
        kept += sum(len(r["Instances"]) for r in reservations)
    cpu = time.process_time() - started
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert kept == nodes, (kept, nodes)
    return {"nodes": nodes, "xml_mib": len(body) / 2**20, "peak_mib": (peak - base) / 2**20, "cpu_s": cpu}


def markdown(rows: list[dict[str, float]]) -> str:
    lines = ["| p5 nodes in the page | interfaces | XML MiB | peak Python allocations MiB (tracemalloc) | CPU s |",
             "|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['nodes']:,.0f} | {r['nodes'] * 33:,.0f} | {r['xml_mib']:.1f} | {r['peak_mib']:.1f} | "
              f"{r['cpu_s']:.2f} |" for r in rows]
    lines += ["", "One p5.48xlarge node as moto describes it (33 interfaces), repeated with distinct ids into one "
              "page answered to botocore's EC2 client; the peak is above what the process held before the call "
              f"(the body botocore reads, the stream reader's slimmed dicts). Load average "
              f"{os.getloadavg()[0]:.1f}."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="250,1000")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    os.environ.update({"AWS_ACCESS_KEY_ID": "b", "AWS_SECRET_ACCESS_KEY": "b", "MOTO_EC2_LOAD_DEFAULT_AMIS": "false"})
    parts = one_node_xml()
    rows = [measure(int(n), parts) for n in args.sizes.split(",")]
    table = markdown(rows)
    print(table)
    if not args.no_write:
        title = "One DescribeInstances page of p5 nodes: the reader's peak by page size (bench/listing_memory.py)"
        write_section(RESULTS, "listing-memory", title, table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
