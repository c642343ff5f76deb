"""Spot checks on the node itself: the real LocalHost against a fake IMDSv2 server on 127.0.0.1."""

from __future__ import annotations

import json
import os
import socket
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from fmdoctor.config import Settings
from fmdoctor.engine.api import Doctor
from fmdoctor.engine.host import LocalHost
from fmdoctor.engine.model import Severity, Status
from fmdoctor.loopback import serve_in_background

IDS = ["spot-interruption", "spot-rebalance", "spot-interruption-unprotected"]
TOKEN = "AQAEAFakeImdsV2Token=="
INSTANCE = "i-0abc1234567890def"


class FakeImds(BaseHTTPRequestHandler):
    """IMDSv2: PUT /latest/api/token, then GETs that carry the token (401 without, as IMDSv2-only nodes do)."""

    paths: dict[str, str] = {}
    gets: list[str] = []

    def do_PUT(self):  # noqa: N802 - http.server's naming
        if self.path == "/latest/api/token" and self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
            self._reply(200, TOKEN)
        else:
            self._reply(400, "")

    def do_GET(self):  # noqa: N802
        type(self).gets.append(self.path)
        if self.headers.get("X-aws-ec2-metadata-token") != TOKEN:
            self._reply(401, "")
        elif self.path.lstrip("/") in self.paths:
            self._reply(200, self.paths[self.path.lstrip("/")])
        else:
            self._reply(404, "<html>404 - Not Found</html>")

    def _reply(self, status, body):
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def imds(monkeypatch):
    FakeImds.paths = {"latest/meta-data/instance-life-cycle": "spot", "latest/meta-data/instance-id": INSTANCE}
    FakeImds.gets = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeImds)
    serve_in_background(server)
    monkeypatch.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", f"http://127.0.0.1:{server.server_port}")
    yield FakeImds
    server.shutdown()
    server.server_close()


def at(minutes_from_now):
    return (datetime.now(UTC) + timedelta(minutes=minutes_from_now)).strftime("%Y-%m-%dT%H:%M:%SZ")


def run(**settings):
    return Doctor(settings=Settings.model_validate(settings)).check_local(only=IDS, host=LocalHost())


def _local_checkpoint(tmp_path, minutes_ago):
    folder = tmp_path / "ckpt" / "step-500"
    folder.mkdir(parents=True)
    (folder / "model.pt").write_bytes(b"\0" * 100)
    stamp = (datetime.now(UTC) - timedelta(minutes=minutes_ago)).timestamp()
    os.utime(folder / "model.pt", (stamp, stamp))
    return str(tmp_path / "ckpt")


def test_instance_action_on_the_node_with_a_stale_local_checkpoint(imds, tmp_path):
    imds.paths["latest/meta-data/spot/instance-action"] = json.dumps({"action": "terminate", "time": at(1.5)})
    report = run(checkpoints={"locations": [_local_checkpoint(tmp_path, 95)], "max_age": "1h"})
    interruption = report.findings_for("spot-interruption")[0]
    assert interruption.resource == INSTANCE and interruption.severity is Severity.CRITICAL
    assert interruption.evidence["notices"][0]["source"] == "imds"
    [unprotected] = report.findings_for("spot-interruption-unprotected")
    assert unprotected.evidence["minutes_lost"] in (96, 97)
    assert report.findings_for("spot-rebalance") == [] and report.errors == []
    assert "/latest/meta-data/events/recommendations/rebalance" in imds.gets  # asked, and 404 means none
    assert report.stats.api_calls == {}


def test_rebalance_only(imds):
    imds.paths["latest/meta-data/events/recommendations/rebalance"] = json.dumps({"noticeTime": at(-12)})
    report = run()
    assert [f.check for f in report.findings] == ["spot-rebalance"]
    assert report.status is Status.WARNING and report.errors == []


def test_malformed_imds_reply_is_reported(imds):
    imds.paths["latest/meta-data/spot/instance-action"] = "<html>502 Bad Gateway</html>"
    report = run()
    assert report.findings == []
    assert {e.code for e in report.errors} == {"MalformedImdsReply"} and report.status is Status.WARNING
    assert "spot/instance-action" in report.errors[0].unverified


def test_on_demand_node_has_no_rebalance_but_its_scheduled_events_are_read(imds):
    imds.paths["latest/meta-data/instance-life-cycle"] = "on-demand"
    report = run()
    [skipped] = report.skipped
    assert skipped.check == "spot-rebalance" and "not a Spot instance" in skipped.reason
    assert report.findings == [] and report.errors == [] and report.status is Status.OK
    assert "/latest/meta-data/events/maintenance/scheduled" in imds.gets
    assert "/latest/meta-data/spot/instance-action" not in imds.gets  # only Spot instances have one


def test_scheduled_retirement_on_the_node(imds):
    """events/maintenance/scheduled as the EC2 user guide shows it: a retirement in three days is a warning."""
    not_before = datetime.now(UTC) + timedelta(days=3, minutes=5)
    imds.paths["latest/meta-data/instance-life-cycle"] = "on-demand"
    imds.paths["latest/meta-data/events/maintenance/scheduled"] = json.dumps([{
        "NotBefore": not_before.strftime("%d %b %Y %H:%M:%S GMT"), "Code": "instance-retirement",
        "Description": "The instance is running on degraded hardware", "EventId": "instance-event-0d59937288b749b32",
        "NotAfter": (not_before + timedelta(days=1)).strftime("%d %b %Y %H:%M:%S GMT"), "State": "active"}])
    report = run()
    [finding] = report.findings
    assert (finding.check, finding.severity) == ("spot-interruption", Severity.WARNING)
    assert "will be retired by an EC2 scheduled event (instance-retirement) in about 3d" in finding.summary
    assert finding.evidence["cause"] == "an EC2 scheduled event"


def test_imds_unreachable_is_an_error_entry(monkeypatch):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", f"http://127.0.0.1:{port}")
    report = run()
    assert report.findings == [] and {e.code for e in report.errors} == {"ImdsUnavailable"}
    assert report.status is Status.UNKNOWN  # IMDS was the only source: nothing verified
