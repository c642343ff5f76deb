"""The example deployment stays true: manifests parse, their fmdoctor command lines are valid for today's CLI,
and the member role grants every action the checks and discovery need (and nothing that writes)."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
import yaml

import fmdoctor
from fmdoctor.cli.main import build_parser
from fmdoctor.engine.registry import default_registry
from fmdoctor.fleet.discovery import IAM_ACTIONS as DISCOVERY_ACTIONS

ROOT = Path(fmdoctor.__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"

pytestmark = pytest.mark.skipif(not DEPLOY.exists(), reason="needs the source tree")


class _CloudFormationLoader(yaml.SafeLoader):
    """Reads !Ref, !If, !GetAtt... as plain data (enough to inspect a template)."""


_CloudFormationLoader.add_multi_constructor("!", lambda loader, suffix, node: (
    loader.construct_sequence(node) if isinstance(node, yaml.SequenceNode)
    else loader.construct_mapping(node) if isinstance(node, yaml.MappingNode) else loader.construct_scalar(node)))


def documents():
    for path in sorted(DEPLOY.rglob("*")):
        if path.suffix == ".json":
            yield path, [json.loads(path.read_text())]
        elif path.suffix in {".yaml", ".yml"}:
            yield path, list(yaml.load_all(path.read_text(), Loader=_CloudFormationLoader))  # noqa: S506


def fmdoctor_command_lines():
    text = "\n".join(p.read_text() for p in DEPLOY.rglob("*") if p.is_file())
    for match in re.finditer(r"fmdoctor ((?:fleet check|export cloudwatch|check) --[^;\n>|]*)", text):
        yield match.group(1).strip()


def test_manifests_parse():
    parsed = dict(documents())
    assert {p.name for p in parsed} >= {"fleet-cronjob.yaml", "task-definition.json", "schedule.json",
                                         "member-role.cfn.yaml", "scanner-policy.json"}
    kinds = [d["kind"] for d in parsed[DEPLOY / "kubernetes" / "fleet-cronjob.yaml"]]
    assert kinds == ["ServiceAccount", "ConfigMap", "CronJob"]


def test_command_lines_are_valid_for_the_cli():
    lines = list(fmdoctor_command_lines())
    assert len(lines) >= 3
    samples = {"${JOB_COMPLETION_INDEX}": "1", "${SHARD:-0/1}": "0/2"}
    for line in lines:
        for variable, value in samples.items():
            line = line.replace(variable, value)
        args = build_parser().parse_args(shlex.split(line))
        assert args.func, line


def test_shard_count_matches_the_indexed_job():
    [_, _, cronjob] = dict(documents())[DEPLOY / "kubernetes" / "fleet-cronjob.yaml"]
    job = cronjob["spec"]["jobTemplate"]["spec"]
    script = job["template"]["spec"]["containers"][0]["args"][0]
    assert f'--shard "${{JOB_COMPLETION_INDEX}}/{job["completions"]}"' in script
    assert job["completionMode"] == "Indexed" and job["parallelism"] == job["completions"]


def test_member_role_grants_what_the_checks_and_discovery_need():
    [template] = dict(documents())[DEPLOY / "iam" / "member-role.cfn.yaml"]
    statements = template["Resources"]["ReadOnlyRole"]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]
    granted = {a for s in statements for a in s["Action"]}
    needed = set(default_registry().iam_actions()) | set(DISCOVERY_ACTIONS)
    assert sorted(needed - granted) == [], "add these actions to deploy/iam/member-role.cfn.yaml"
    # Nothing that writes: describes, lists, gets and log searches (logs:FilterLogEvents), receiving Spot
    # notices (never deleting them), and PromQL queries of Amazon Managed Service for Prometheus.
    read_only = re.compile(r"^[a-z0-9-]+:(Describe|List|Get|Filter)[A-Za-z]*$")
    assert sorted(a for a in granted if not read_only.match(a)) == ["aps:QueryMetrics", "sqs:ReceiveMessage"]


def test_scanner_may_only_assume_the_read_only_role_and_publish():
    [policy] = dict(documents())[DEPLOY / "iam" / "scanner-policy.json"]
    actions = {s["Action"]: s for s in policy["Statement"]}
    assert set(actions) == {"sts:AssumeRole", "organizations:ListAccounts", "cloudwatch:PutMetricData"}
    assert actions["sts:AssumeRole"]["Resource"].endswith(":role/fmdoctor-read-only")
    assert actions["cloudwatch:PutMetricData"]["Condition"] == {"StringEquals": {"cloudwatch:namespace": "fmdoctor"}}


SERVE = DEPLOY / "serve"


def test_serve_manifests_run_a_valid_serve_command():
    [_, config_map, deployment, _] = dict(documents())[SERVE / "kubernetes.yaml"]
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    assert container["command"][:2] == ["fmdoctor", "serve"]
    args = build_parser().parse_args(container["command"][1:])
    assert args.func and args.port == container["ports"][0]["containerPort"] == 9877
    from fmdoctor.config import parse_settings

    settings = parse_settings(config_map["data"]["fmdoctor.yaml"])  # the example config is valid
    assert settings.serve.queue_url and settings.clusters
    grace = settings.serve.shutdown_grace.total_seconds()
    assert deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] > grace
    [task] = dict(documents())[SERVE / "ecs-task-definition.json"]
    [ecs] = task["containerDefinitions"]
    assert build_parser().parse_args(ecs["command"]).func and ecs["stopTimeout"] > grace


def test_eventbridge_rules_cover_every_event_serve_parses():
    from fmdoctor.serve.events import DETAIL_TYPES

    [template] = dict(documents())[SERVE / "eventbridge-rules.cfn.yaml"]
    rules = [r for r in template["Resources"].values() if r["Type"] == "AWS::Events::Rule"]
    routed = {t for r in rules for t in r["Properties"]["EventPattern"]["detail-type"]}
    assert routed == set(DETAIL_TYPES)
    queue = template["Resources"]["EventsQueue"]["Properties"]
    assert queue["RedrivePolicy"]["maxReceiveCount"]  # poison messages end in the dead-letter queue
    [statement] = template["Resources"]["EventsQueuePolicy"]["Properties"]["PolicyDocument"]["Statement"]
    assert len(statement["Condition"]["ArnEquals"]["aws:SourceArn"]) == len(rules)  # only these rules may send


def test_dedupe_table_template_matches_what_serve_writes():
    from fmdoctor.serve.dedupe import TABLE_KEY, TTL_ATTRIBUTE

    [template] = dict(documents())[SERVE / "dedupe-table.cfn.yaml"]
    table = template["Resources"]["DedupeTable"]["Properties"]
    assert table["KeySchema"] == TABLE_KEY["KeySchema"]
    assert table["AttributeDefinitions"] == TABLE_KEY["AttributeDefinitions"]
    assert table["TimeToLiveSpecification"] == {"AttributeName": TTL_ATTRIBUTE, "Enabled": True}
    assert table["BillingMode"] == "PAY_PER_REQUEST"


def dockerfile_stages() -> list[list[str]]:
    """The Dockerfile's instructions (continuation lines joined, comments dropped), one list per stage."""
    text = (DEPLOY / "Dockerfile").read_text().replace("\\\n", " ")
    stages: list[list[str]] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.upper().startswith("FROM "):
            stages.append([])
        stages[-1].append(line)
    return stages


def test_the_image_is_multi_stage_slim_non_root_and_without_build_tools():
    stages = dockerfile_stages()
    assert len(stages) >= 2
    runtime = stages[-1]
    assert re.match(r"FROM python:3\.1[1-3]-slim\b", runtime[0])
    assert any(i.startswith("COPY --from=build ") for i in runtime)
    assert not any(i.startswith(("COPY . ", "ADD ")) for i in runtime)  # no sources, only the built environment
    installs = " ".join(i for i in runtime if i.startswith("RUN "))
    assert not re.search(r"\b(gcc|g\+\+|build-essential|make|python3-dev|git)\b", installs)
    [user] = [i.split()[1] for i in runtime if i.startswith("USER ")]
    assert user not in ("root", "0")
    # The build stage copies the package sources by name: each folder setup.py maps, and what the build reads.
    build = " ".join(stages[0])
    for needed in ["pyproject.toml", "setup.py", "README.md", "LICENSE", "fmdoctor/", "checks/", "assistant/",
                   "tui/", "runbooks/", "evals/"]:
        assert needed in build, needed


def test_the_image_installs_the_extras_its_deployments_run():
    # serve's endpoint (deploy/serve/), its Slack output, and the Kubernetes client: the image runs on EKS, where
    # the scheduler checks read the cluster through it (without it they are not verified, MissingExtra).
    [install] = [i for i in dockerfile_stages()[0] if "pip install" in i]
    [extras] = re.findall(r'"\.\[([a-z,]+)\]"', install)
    assert {"serve", "slack", "kubernetes"} <= set(extras.split(","))


def dockerignore_pattern(pattern: str) -> re.Pattern[str]:
    """A .dockerignore pattern as Docker reads it (Go's filepath.Match, plus ** for any number of folders)."""
    out, i, pattern = "", 0, pattern.strip("/")
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out + r"\Z")


def in_build_context(path: str) -> bool:
    """Whether Docker sends ``path`` to the builder: the last rule matching it or a folder above it decides."""
    rules = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
             if line.strip() and not line.lstrip().startswith("#")]
    parts = path.split("/")
    prefixes = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
    included = True
    for rule in rules:
        negated = rule.startswith("!")
        if any(dockerignore_pattern(rule.lstrip("!")).match(p) for p in prefixes):
            included = negated
    return included


def copied_sources() -> list[str]:
    """Every source of the build stage's COPY instructions (a COPY may name several before its destination)."""
    return [source.rstrip("/") for i in dockerfile_stages()[0] if i.startswith("COPY ") and "--from" not in i
            for source in i.split()[1:-1]]


def test_the_build_context_is_what_the_build_copies():
    sources = copied_sources()
    assert {"pyproject.toml", "setup.py", "README.md", "LICENSE", "fmdoctor", "checks"} <= set(sources)
    inside = [f"{s}/__init__.py" if (ROOT / s).is_dir() else s for s in sources]
    assert [p for p in inside if not in_build_context(p)] == []  # everything the build copies is there
    # ... and nothing a checkout holds beside it: the local environment, or what a user keeps next to the code.
    leaked = [p for p in [".venv/bin/python", ".git/config", ".ci/.venv-lowest/bin/python", "tests/conftest.py",
                          "docs/index.md", "site/index.html", "build/lib/fmdoctor/__init__.py",
                          "fmdoctor.egg-info/PKG-INFO", "fmdoctor/__pycache__/config.cpython-311.pyc",
                          "fmdoctor.yaml", ".env", "fmdoctor/.env", "node-record/commands/nvidia-smi",
                          "audit.jsonl", "deploy/serve/kubernetes.yaml", "id_rsa.pem", "fleet.json"]
              if in_build_context(p)]
    assert leaked == []


def test_a_service_monitor_scrapes_what_the_annotations_name():
    [_, _, deployment, service] = dict(documents())[SERVE / "kubernetes.yaml"]
    [monitor] = dict(documents())[SERVE / "servicemonitor.yaml"]
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert monitor["kind"] == "ServiceMonitor" and monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["metadata"]["namespace"] == service["metadata"]["namespace"]
    [endpoint] = monitor["spec"]["endpoints"]
    [port] = [p for p in service["spec"]["ports"] if p["name"] == endpoint["port"]]
    assert endpoint["path"] == annotations["prometheus.io/path"] == "/metrics"
    assert str(port["port"]) == annotations["prometheus.io/port"]
