"""Incidents: the findings of one run grouped by the thing at fault, most urgent first.

A person at 3 a.m. needs "what do I do first", not 30 findings in catalogue order. One broken security group is
raised by two checks (its rule, and the EFA pairs the rule blocks); one Spot notice by two (the notice, and the
work on that node it will lose). An **incident** is every finding whose cause sits on the same thing:

* **the thing at fault** is what a finding's own evidence names as the cause, never a guess from its wording:
  its ``resource`` (a SageMaker variant counts as its endpoint, an on-node resource ``node/HOST`` as that host
  and the ``instance_id`` the node reported, an S3 checkpoint as the checkpoint ``location`` it was listed
  under; a host name in :func:`fmdoctor.engine.identity.canonical`'s one spelling); the ``blocking_resource``
  of a reachability finding (the security group, route table or NACL the path stops at); the ``culprits`` a
  stalled job names (their instances and hosts). Findings sharing any such
  thing are one incident (transitively), so every finding is in exactly one. Things a finding merely *affects*
  (the nodes of a Capacity Block, the checkpoint a Spot node's job resumes from) do not join incidents: they
  count in its ``impact``.
* **the cause** is the finding no other finding of the incident explains (:data:`EXPLAINS`: a missing
  security-group rule explains the unreachable EFA peers, a Spot notice the unprotected work, a GPU's Xid the
  stalled job, an endpoint at its scaling maximum its saturation and its latency), then the most severe and
  the most urgent, then the one that explains the most of the others.
* **urgency** is the time until harm: an incident with a deadline in its evidence (a Spot ``action_time``, a
  Capacity Block's ``terminations_begin``) comes first, soonest first, because that loss can be prevented only
  until then (a deadline already passed, whose loss has happened, comes after those still ahead and after
  harm under way); next harm under way now (:data:`HARM_NOW`: a job losing work, an endpoint failing or slow
  requests), whose cost grows at the same rate whichever is fixed first; then the rest. Severity ranks above
  urgency (a warning's deadline does not outrank a critical), **impact** (jobs, endpoints, nodes) breaks ties.
* **the id** is a hash of the cause's check and resource, so the same cause keeps its id across runs.

Front ends read the list from :func:`build_incidents` (or ``Report.incidents()``) and never group on their own.
"""

from __future__ import annotations

import hashlib
import re
import shlex
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from fmdoctor.durations import format_duration
from fmdoctor.engine.identity import canonical

if TYPE_CHECKING:  # the report model imports this module to put incidents in its JSON
    from fmdoctor.engine.model import Finding

# Check X explains checks Y when both sit on the same thing: Y is what X's fault does (the root is X). From the
# documents the checks follow: EFA needs its security group to allow all traffic to and from itself, else the
# peers cannot reach each other (docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-start.html, "Prepare an
# EFA-enabled security group"); a Spot interruption notice is the two-minute warning that ends the node and the
# work since its last checkpoint, and supersedes a rebalance recommendation (.../spot-instance-termination-
# notices.html, .../rebalance-recommendations.html); an Xid such as 79 (GPU fallen off the bus) or 48 (DBE)
# stops the GPU's processes, so the collective every rank waits on hangs (docs.nvidia.com/deploy/xid-errors/);
# a variant at its auto scaling maximum cannot add the instances its load needs, so its accelerators saturate
# and its latency grows (docs.aws.amazon.com/sagemaker/latest/dg/endpoint-auto-scaling.html); a checkpoint whose
# newest save is incomplete leaves the previous one as the newest usable, hence stale.
EXPLAINS: Mapping[str, frozenset[str]] = {
    "efa-sg-self-reference": frozenset({"efa-peer-unreachable"}),
    # scheduler-schedules-faulty-node's fault on a Spot node is the notice itself (its docstring).
    "spot-interruption": frozenset({"spot-interruption-unprotected", "spot-rebalance",
                                    "scheduler-schedules-faulty-node"}),
    "gpu-xid": frozenset({"training-stalled", "gpu-straggler", "gpu-idle", "gpu-memory-pressure",
                          "hyperpod-node-unhealthy", "node-gpu-health"}),
    "gpu-xid-metrics": frozenset({"training-stalled", "gpu-straggler", "gpu-idle", "gpu-memory-pressure",
                                  "hyperpod-node-unhealthy"}),
    "node-gpu-health": frozenset({"training-stalled", "gpu-straggler", "gpu-idle", "hyperpod-node-unhealthy"}),
    "training-stalled": frozenset({"gpu-idle", "gpu-straggler", "gpu-memory-pressure"}),
    "efa-not-attached": frozenset({"efa-errors", "gpu-straggler", "training-stalled"}),
    "efa-missing-interfaces": frozenset({"efa-errors", "gpu-straggler"}),
    "node-efa-provider": frozenset({"efa-errors", "gpu-straggler", "training-stalled"}),
    "endpoint-unhealthy": frozenset({"inference-errors", "inference-latency-slo", "accelerator-saturation",
                                     "autoscaling-at-max", "inference-idle"}),
    "autoscaling-at-max": frozenset({"accelerator-saturation", "inference-latency-slo", "inference-errors"}),
    "accelerator-saturation": frozenset({"inference-latency-slo", "inference-errors"}),
    "checkpoint-incomplete": frozenset({"checkpoint-stale"}),
}

# Checks whose finding means harm is happening now, and what is being lost.
HARM_NOW: Mapping[str, str] = {
    "training-stalled": "a job losing work",
    "inference-errors": "requests failing",
    "endpoint-unhealthy": "an endpoint serving no requests",
    "inference-latency-slo": "requests slower than the SLO",
}

# Evidence keys that hold the moment harm begins (the first present wins), and since when harm is under way.
DEADLINE_KEYS = ("terminations_begin", "action_time", "end_date")
SINCE_KEYS = ("stall_start", "status_since")

DEADLINE, NOW, LATER = "deadline", "now", "later"
_URGENCY_ORDER = {DEADLINE: 0, NOW: 1, LATER: 2}
_INSTANCE = re.compile(r"(?<![\w-])(?:i|mi)-[0-9a-f]{8,17}(?![\w-])")
_SEVERITY_RANK = {"critical": 2, "warning": 1, "info": 0}
_AWS_ID = re.compile(r"[a-z]{1,5}-[0-9a-f]{8,17}")


@dataclass(frozen=True)
class FindingRef:
    check: str
    resource: str

    def to_json_dict(self) -> dict[str, str]:
        return {"check": self.check, "resource": self.resource}


@dataclass(frozen=True)
class Impact:
    nodes: int = 0
    jobs: int = 0
    endpoints: int = 0

    def to_json_dict(self) -> dict[str, int]:
        return {"nodes": self.nodes, "jobs": self.jobs, "endpoints": self.endpoints}

    def words(self) -> str:
        parts = [(self.jobs, "job"), (self.endpoints, "endpoint"), (self.nodes, "node")]
        return ", ".join(f"{n} {what}{'' if n == 1 else 's'}" for n, what in parts if n)


@dataclass(frozen=True)
class NextStep:
    runbook: str
    fix: str | None = None  # the `fmdoctor fix` command line, where a finding of the incident carries a fix

    def to_json_dict(self) -> dict[str, str | None]:
        return {"runbook": self.runbook, "fix": self.fix}


@dataclass(frozen=True)
class Incident:
    id: str
    title: str
    severity: str
    deadline: datetime | None
    impact: Impact
    resources: tuple[str, ...]
    findings: tuple[FindingRef, ...]
    cause: FindingRef
    next: NextStep
    urgency: str = LATER  # 'deadline', 'now' (harm under way) or 'later'
    since: datetime | None = None  # when the harm under way began, where the evidence says
    harm: str | None = None  # what is being lost now (HARM_NOW), for 'now'
    members: tuple[Finding, ...] = field(default=(), compare=False, repr=False)  # the findings, cause first

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "id": self.id, "title": self.title, "severity": self.severity,
            "deadline": _iso(self.deadline), "impact": self.impact.to_json_dict(),
            "resources": list(self.resources), "findings": [f.to_json_dict() for f in self.findings],
            "cause": self.cause.to_json_dict(), "next": self.next.to_json_dict(),
            "urgency": self.urgency, "since": _iso(self.since), "harm": self.harm,
        }

    def contains(self, finding: Finding) -> bool:
        return FindingRef(finding.check, finding.resource) in self.findings

    def when(self, now: datetime) -> str:
        """How soon, in words every front end shows: 'deadline 00:14 UTC (in 1m38s)', 'under way since 22:37
        UTC (1h35m): a job losing work', or '' when the evidence names no time."""
        if self.urgency == DEADLINE and self.deadline:
            left = self.deadline - now
            clock = self.deadline.astimezone(UTC).strftime("%H:%M UTC")
            return (f"deadline {clock} (in {format_duration(left)})" if left.total_seconds() > 0
                    else f"deadline {clock} (passed {format_duration(-left)} ago)")
        if self.urgency == NOW:
            since = (f" since {self.since.astimezone(UTC).strftime('%H:%M UTC')} "
                     f"({format_duration(max(now - self.since, timedelta()))})" if self.since else "")
            return f"under way{since}: {self.harm}"
        return ""

    def next_words(self) -> str:
        """The first thing to do as a command: the fix where one exists, else the runbook."""
        return self.next.fix or f"fmdoctor runbook show {shlex.quote(self.next.runbook)}"


def build_incidents(findings: Iterable[Finding], *, now: datetime | None = None, cluster: str | None = None,
                    region: str | None = None, node_of: Callable[[str], str | None] | None = None,
                    demo: bool = False) -> list[Incident]:
    """The incidents of ``findings``, most urgent first; every finding is in exactly one.

    ``now`` orders deadlines already passed (default: the current time). ``cluster``, ``region`` and ``demo`` (the
    findings are the demo's) go into the ``fmdoctor fix`` command. ``node_of`` maps a node name a finding carries
    (a host name) to its instance id (:meth:`fmdoctor.engine.identity.NodeIdentities.node_of`), so an on-node
    finding and a stalled job's culprit named differently still meet."""
    found = list(findings)
    parent = list(range(len(found)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner: dict[str, int] = {}
    for index, finding in enumerate(found):
        for key in cause_keys(finding, node_of):
            if key in owner:
                parent[root(index)] = root(owner[key])
            else:
                owner[key] = index
    groups: dict[int, list[Finding]] = {}
    for index, finding in enumerate(found):
        groups.setdefault(root(index), []).append(finding)
    moment = now or datetime.now(UTC)
    incidents = [_incident(group, cluster, region, moment, demo) for group in groups.values()]
    return sorted(incidents, key=lambda incident: rank_key(incident, moment))


def rank_key(incident: Incident, now: datetime) -> tuple[Any, ...]:
    """Severity, then urgency (deadline soonest first, then harm under way), then impact; the id keeps it total.

    A deadline already passed ranks after every one still ahead and after harm under way (the most recently
    passed first), before the rest: its loss has happened and can no longer be prevented, while a coming
    deadline's loss still can and harm under way still grows, so a stale notice never pushes those down."""
    seconds = (incident.deadline - now).total_seconds() if incident.deadline else 0.0
    order = _URGENCY_ORDER[incident.urgency] + (1.5 if incident.urgency == DEADLINE and seconds < 0 else 0)
    impact = incident.impact
    return (-_SEVERITY_RANK.get(incident.severity, 0), order, abs(seconds),
            -impact.jobs, -impact.endpoints, -impact.nodes, -len(incident.findings), incident.id)


def cause_keys(finding: Finding, node_of: Callable[[str], str | None] | None = None) -> set[str]:
    """The things a finding's evidence names as at fault (see the module): findings sharing one share a cause."""
    evidence = finding.evidence
    resource = finding.resource
    keys = {_thing(finding), f"resource:{resource}"}  # the same resource is the same thing, whatever else it names
    blocking = evidence.get("blocking_resource")
    if isinstance(blocking, str) and blocking:
        keys.add(blocking)
    if resource.startswith("node/"):  # an on-node check: its host, and the instance the node said it is
        keys |= _node_keys(resource.split("/")[1], evidence.get("instance_id"), node_of)
    for culprit in _dicts(evidence.get("culprits")):
        keys |= _node_keys(culprit.get("host"), culprit.get("instance"), node_of)
    return keys


def node_names(findings: Iterable[Finding]) -> set[str]:
    """The node names the findings carry that :func:`cause_keys` asks ``node_of`` about (an on-node resource's host,
    a stalled job's culprit hosts): what a resolver must answer for these findings to group as it would."""
    names = set()
    for finding in findings:
        if finding.resource.startswith("node/"):
            names.add(finding.resource.split("/")[1])
        names.update(c["host"] for c in _dicts(finding.evidence.get("culprits"))
                     if isinstance(c.get("host"), str) and c["host"])
    return names


def _thing(finding: Finding) -> str:
    resource = finding.resource
    if resource.startswith("endpoint/"):  # a variant's findings are its endpoint's
        return "endpoint/" + resource.split("/")[1]
    location = finding.evidence.get("location")
    if resource.startswith("s3://") and isinstance(location, str) and location:
        return location  # a checkpoint's findings are its location's (the run it belongs to)
    if resource.startswith("node/"):
        return _host_key(resource.split("/")[1])
    return resource


def _node_keys(host: Any, instance: Any, node_of: Callable[[str], str | None] | None) -> set[str]:
    """A node's keys: its instance id, and its host name in the identity module's one spelling (the instance id
    a name carries, else ``ip-a-b-c-d`` under any domain), resolved to the instance id where ``node_of`` can."""
    keys = set()
    if isinstance(instance, str) and instance:
        keys.add(instance)
    if isinstance(host, str) and host:
        keys.add(_host_key(host))
        resolved = node_of(host) if node_of else None
        if resolved:
            keys.add(resolved)
    return keys


def _host_key(host: str) -> str:
    name = canonical(host) or host
    return name if _INSTANCE.fullmatch(name) else f"host:{name}"


def _incident(group: list[Finding], cluster: str | None, region: str | None, now: datetime,
              demo: bool = False) -> Incident:
    cause = _cause(group, now)
    members = (cause, *(f for f in group if f is not cause))
    severity = max((f.severity.value for f in group), key=lambda s: _SEVERITY_RANK.get(s, 0))
    deadlines = [d for d in (_first_time(f.evidence, DEADLINE_KEYS) for f in group) if d]
    harms = [f for f in members if f.check in HARM_NOW]
    urgency = DEADLINE if deadlines else NOW if harms else LATER
    since = min((d for d in (_first_time(f.evidence, SINCE_KEYS) for f in harms) if d), default=None)
    fixable = next((f for f in members if _has_fix(f)), None)
    return Incident(
        id=incident_id(cause),
        title=title_of(cause),
        severity=severity,
        deadline=_deadline(deadlines, now),
        impact=impact_of(group),
        resources=tuple(dict.fromkeys(f.resource for f in members)),
        findings=tuple(FindingRef(f.check, f.resource) for f in members),
        cause=FindingRef(cause.check, cause.resource),
        next=NextStep(cause.runbook, fix_command(fixable, cluster, region, demo) if fixable else None),
        urgency=urgency,
        since=since if urgency == NOW else None,
        harm=HARM_NOW[harms[0].check] if urgency == NOW else None,
        members=members,
    )


def _deadline(deadlines: list[datetime], now: datetime) -> datetime | None:
    """The soonest deadline still ahead (its loss can still be prevented), else the one passed last."""
    ahead = [d for d in deadlines if d >= now]
    return min(ahead) if ahead else max(deadlines, default=None)


def _cause(group: list[Finding], now: datetime) -> Finding:
    """The finding no other one of the group explains; among those the most severe, then the most urgent (a
    deadline still ahead before one passed, as in :func:`rank_key`), then
    the one that explains the most of the others (two faults on a stalled job's node: the Xid that explains the
    stall, not an EFA counter that explains nothing there), the check id only to break what is left."""
    checks = {f.check for f in group}
    unexplained = [f for f in group
                   if not any(f.check in EXPLAINS.get(other, ()) for other in checks if other != f.check)]
    candidates = unexplained or group  # explanations in a circle: fall back to severity

    def order(f: Finding) -> tuple[Any, ...]:
        deadline = _first_time(f.evidence, DEADLINE_KEYS)
        seconds = (deadline - now).total_seconds() if deadline else 0.0
        explains = sum(1 for other in group if other.check != f.check and other.check in EXPLAINS.get(f.check, ()))
        return (-_SEVERITY_RANK.get(f.severity.value, 0), deadline is None, seconds < 0, abs(seconds), -explains,
                f.check not in HARM_NOW, f.check, f.resource)

    return min(candidates, key=order)


def incident_id(cause: Finding) -> str:
    """Stable for the same cause across runs: its check and resource, never its times or wording."""
    return "inc-" + hashlib.sha256(f"{cause.check}\0{cause.resource}".encode()).hexdigest()[:12]


def title_of(cause: Finding, width: int = 100) -> str:
    """The cause's summary up to its first clause break, without its lists in parentheses (the resources and
    findings carry those), cut at a word to ``width`` characters."""
    text = _without_lists(" ".join(cause.summary.split()))
    for mark in (": ", "; ", ", so ", " (at ", ". "):
        cut = text.find(mark)
        if cut >= 24:
            text = text[:cut]
    text = text.rstrip(".")
    if len(text) <= width:
        return text or f"{cause.check} on {cause.resource}"
    return text[: width - 1].rsplit(" ", 1)[0].rstrip(",;:(") + "…"


def _without_lists(text: str) -> str:
    """``a (x, y) b (i-0abc…) c (d (e)) f (in 1h)`` -> ``a b c f (in 1h)``: a parenthesis holding a comma or
    another one (a list of labels), a long aside, or the AWS id of the name before it (``resources`` has it)
    is too long for a title; a short plain one stays."""
    out: list[str] = []
    depth, start = 0, 0
    for index, char in enumerate(text):
        if char == "(":
            if depth == 0:
                out.append(text[start:index])
                start = index
            depth += 1
        elif char == ")" and depth:
            depth -= 1
            if depth == 0:
                inner = text[start + 1:index]
                if "," not in inner and "(" not in inner and len(inner) <= 32 and not _AWS_ID.fullmatch(inner):
                    out.append(text[start:index + 1])
                start = index + 1
    out.append(text[start:])
    return re.sub(r"\s+([,;:.])", r"\1", re.sub(r"\s{2,}", " ", "".join(out))).strip()


def impact_of(group: Iterable[Finding]) -> Impact:
    """What the incident's findings name as affected: instances, endpoints, and the jobs losing work."""
    nodes: set[str] = set()
    endpoints: set[str] = set()
    jobs: set[str] = set()
    for f in group:
        nodes.update(_INSTANCE.findall(f.resource))
        nodes.update(m for text in _strings(f.evidence) for m in _INSTANCE.findall(text))
        endpoint = f.evidence.get("endpoint")
        if isinstance(endpoint, str) and endpoint:
            endpoints.add(endpoint)
        elif f.resource.startswith("endpoint/"):
            endpoints.add(f.resource.split("/")[1])
        jobs.update(_jobs(f))
    return Impact(nodes=len(nodes), jobs=len(jobs), endpoints=len(endpoints))


def _jobs(finding: Finding) -> set[str]:
    """The jobs a finding says lose (or will lose) work: named ones (``job``/``jobs``), else the checkpoint
    location the lost work would resume from, which identifies the run."""
    evidence = finding.evidence
    named = evidence.get("jobs")
    if isinstance(named, list):
        return {str(j) for j in named if j}
    if evidence.get("job"):
        return {str(evidence["job"])}
    checkpoint = evidence.get("checkpoint")
    if finding.check == "training-stalled":
        location = checkpoint.get("location") if isinstance(checkpoint, dict) else None
        return {str(location or f"training job ({finding.resource})")}
    if "minutes_lost" in evidence:
        return {str(evidence.get("location") or f"training job ({finding.resource})")}
    return set()


def command_words(command: str, demo: bool = False) -> str:
    """The words that start a fmdoctor command rendered for a person to paste (``fmdoctor check``, ``fmdoctor fix``,
    ``fmdoctor why-not``), with ``--demo`` for the demo's findings: pasted without it, the command would look at
    (or plan a fix against) the real AWS account of the shell it is pasted in, or fail there. Every such command
    fmdoctor renders starts with these words (:func:`fix_command`, the runbooks' ``fmdoctor_fix``,
    ``fmdoctor_check`` and ``fmdoctor_why_not``)."""
    return f"fmdoctor {command} --demo" if demo else f"fmdoctor {command}"


def local_check_words(demo: bool = False) -> str:
    """The words that start an on-node check: ``sudo fmdoctor check --local`` on the node (the kernel log and the
    devices need root), or, for the demo's findings, ``fmdoctor check --demo --local``, which reads the demo
    node's recording (the demo's nodes are not machines one can log in to)."""
    return f"{command_words('check', True)} --local" if demo else f"sudo {command_words('check')} --local"


def fix_words(demo: bool = False) -> str:
    """The command that applies a fix: ``fmdoctor fix``, with ``--demo`` for the demo's findings
    (:func:`command_words`)."""
    return command_words("fix", demo)


def fix_command(finding: Finding, cluster: str | None = None, region: str | None = None, demo: bool = False) -> str:
    """The ``fmdoctor fix`` command for this finding's proposed fix, every value quoted for a shell."""
    words = [fix_words(demo)]
    if cluster:
        words += ["--cluster", shlex.quote(cluster)]
    if region:
        words += ["--region", shlex.quote(region)]
    words += ["--check", shlex.quote(finding.check), "--resource", shlex.quote(finding.resource)]
    return " ".join(words)


def _has_fix(finding: Finding) -> bool:
    # Imported here: the remediation package imports the report model, which imports this module.
    from fmdoctor.remediation.actions import has_automated_fix

    return has_automated_fix(finding.evidence)


def _first_time(evidence: Mapping[str, Any], keys: tuple[str, ...]) -> datetime | None:
    for key in keys:
        value = evidence.get(key)
        if isinstance(value, str) and value:
            try:
                moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError:
                continue
            return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    return None


def _dicts(value: Any) -> list[Mapping[str, Any]]:
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _strings(item)


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment else None
