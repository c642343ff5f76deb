"""Events find their configured cluster and the checks that explain them; anything else is unknown, not guessed."""

from __future__ import annotations

import json

import pytest

from fmdoctor.config import parse_settings
from fmdoctor.engine.errors import ConfigError
from fmdoctor.serve.events import parse_body
from fmdoctor.serve.routing import Router

from .test_events import LIMIT, load, one

CONFIG = """
clusters:
  llm-train:
    hyperpod: {cluster_name: sample-cluster}
    inference: {endpoints: [MyEndpoint]}
  other: {}
"""


def router(extra: str = "", lookup=None) -> Router:
    return Router(parse_settings(CONFIG + extra), lookup)


@pytest.mark.parametrize(("fixture", "checks"), [
    ("hyperpod-node-health.json", ("hyperpod", "gpu", "efa")),
    ("hyperpod-cluster-event.json", ("hyperpod", "gpu", "efa")),
    ("endpoint-state-change.json", ("inference",)),
    ("alertmanager-webhook.json", ("gpu",)),  # GPUXidError: a GPU alert
    ("grafana-webhook.json", ("efa",)),  # "EFA rx drops"
])
def test_cluster_from_the_event_and_checks_by_kind(fixture, checks):
    route = router().route(one(fixture))
    assert (route.cluster, route.checks) == ("llm-train", checks)


def test_instances_are_looked_up_by_their_tags():
    asked = []

    def lookup(kind, ids):
        asked.append((kind, list(ids)))
        return {"llm-train"}

    spot = router(lookup=lookup).route(one("spot-interruption.json"))
    block = router(lookup=lookup).route(one("capacity-block-expiration.json"))
    alarm = router(lookup=lookup).route(one("cloudwatch-alarm-gpu.json"))
    assert (spot.cluster, spot.checks) == ("llm-train", ("spot",))
    assert (block.cluster, block.checks) == ("llm-train", ("capacity", "checkpoint"))
    assert (alarm.cluster, alarm.checks) == ("llm-train", ("gpu",))  # nvidia_smi_utilization_gpu
    assert asked == [("instance", ["i-1234567890abcdef0"]), ("capacity-reservation", ["cr-0123456789abcdef0"]),
                     ("instance", ["i-12345678901234567"])]


def test_unknown_cluster_says_why():
    untagged = router(lookup=lambda kind, ids: set()).route(one("spot-interruption.json"))
    assert untagged.cluster is None and "no configured cluster" in untagged.reason
    data = json.loads(load("alertmanager-webhook.json"))
    data["alerts"][0]["labels"]["cluster"] = data["commonLabels"]["cluster"] = "not-ours"
    [event] = parse_body(json.dumps(data), LIMIT)
    stranger = router().route(event)
    assert stranger.cluster is None and "'not-ours'" in stranger.reason


def test_lookup_failure_is_reported_not_raised():
    def broken(kind, ids):
        raise RuntimeError("AccessDenied")

    route = router(lookup=broken).route(one("spot-interruption.json"))
    assert route.cluster is None and "could not look up" in route.reason


def test_several_clusters_for_one_instance_is_not_a_guess():
    route = router(lookup=lambda kind, ids: {"llm-train", "other"}).route(one("spot-interruption.json"))
    assert route.cluster is None and "several clusters" in route.reason


def test_rules_decide_first():
    rules = """
serve:
  routes:
    - match: {kind: aws-health, label.env: dev}
      ignore: true
    - match: {alarm: "llm-train-*", namespace: CWAgent}
      cluster: other
      checks: [gpu-idle]
"""
    route = router(rules).route(one("cloudwatch-alarm-gpu.json"))
    assert (route.cluster, route.checks, route.reason) == ("other", ("gpu-idle",), "a serve.routes rule")
    health = router(rules).route(one("aws-health-ec2.json"))
    assert not health.ignore  # no env label: the ignore rule does not match


def test_alert_may_name_its_checks():
    data = json.loads(load("alertmanager-webhook.json"))
    data["alerts"][0]["labels"]["fmdoctor_checks"] = "gpu-xid, efa"
    [event] = parse_body(json.dumps(data), LIMIT)
    assert router().route(event).checks == ("gpu-xid", "efa")


def test_route_keys_are_validated():
    with pytest.raises(ConfigError, match="not an event field"):
        parse_settings("serve:\n  routes:\n    - match: {colour: red}\n")
    with pytest.raises(ConfigError, match="Slack channel id"):
        parse_settings("serve:\n  slack_channel: '#alerts'\n")


def _dcgm_alert(**labels: str) -> str:
    """The Xid alert of alertmanager-webhook.json without a cluster label: only DCGM's own labels name the node."""
    body = json.loads(load("alertmanager-webhook.json"))
    for where in (body["commonLabels"], body["alerts"][0]["labels"]):
        where.pop("cluster", None)
    body["alerts"][0]["labels"].update(labels)
    for name in [k for k, v in body["alerts"][0]["labels"].items() if v == ""]:
        del body["alerts"][0]["labels"][name]
    return json.dumps(body)


def test_an_alert_is_routed_by_the_node_its_dcgm_labels_name():
    asked = []

    def lookup(kind, ids):
        asked.append((kind, list(ids)))
        return {"llm-train"} if kind == "node" else set()

    [event] = parse_body(_dcgm_alert(), LIMIT)
    assert event.nodes == ("ip-10-0-1-23", "10.0.1.23:9400")  # Hostname, then instance
    route = router(lookup=lookup).route(event)
    assert (route.cluster, route.checks) == ("llm-train", ("gpu",)) and asked == [("node", list(event.nodes))]


def test_node_names_through_the_demo_clusters_identities(demo_world):
    """The serve lookup resolves DCGM's Hostname (any DNS form) and instance (host:port) in each configured
    cluster's inventory; a name no node has finds no cluster."""
    from fmdoctor.serve.service import instance_lookup

    world, doctor = demo_world
    inventory = doctor.inventory(world.cluster, parts=())
    node = next(i for i in inventory.compute_nodes() if i.private_ip)
    short = "ip-" + node.private_ip.replace(".", "-")
    lookup = instance_lookup(doctor)
    for labels in ({"Hostname": f"{short}.ec2.internal", "instance": ""},
                   {"Hostname": "", "instance": f"{node.private_ip}:9400"}, {"Hostname": node.private_dns or short}):
        [event] = parse_body(_dcgm_alert(**labels), LIMIT)
        route = Router(doctor.settings, lookup).route(event)
        assert route.cluster == world.cluster, (labels, route.reason)
    [stranger] = parse_body(_dcgm_alert(Hostname="ip-10-99-99-99", instance="10.99.99.99:9400"), LIMIT)
    assert Router(doctor.settings, lookup).route(stranger).cluster is None
