"""From a question in plain words to the checks that answer it (the offline planner's first step).

Intents name check ids; only the ids the bound tools offer at run time are used (a session scoped to some
checks offers fewer), and when none of an intent's checks is offered (or nothing matches) the plan falls
back to the full check run. A question that names a node, group, endpoint or bucket is answered about it
(``check_resource``, or ``why_not`` for "can X reach Y?"); the names are taken out before the intents are
read, so "gpu-node-3" is not a question about GPUs.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field

from fmdoctor.assistant.scope import HEAD, Named, named_things, path_question, without_names

EFA_CONFIG = ("efa-sg-self-reference", "efa-subnet-spread", "efa-not-attached", "efa-missing-interfaces",
              "placement-group", "efa-peer-unreachable")
GPU = ("gpu-straggler", "gpu-idle", "gpu-memory-pressure", "gpu-metrics-missing", "gpu-xid", "gpu-xid-metrics")
CHECKPOINT = ("checkpoint-stale", "checkpoint-missing", "checkpoint-incomplete")
SPOT = ("spot-interruption", "spot-interruption-unprotected", "spot-rebalance")
INFERENCE = ("endpoint-unhealthy", "inference-latency-slo", "inference-errors", "accelerator-saturation",
             "autoscaling-at-max", "inference-idle")


WHY_NOT, CHECK_RESOURCE = "why_not", "check_resource"
MAX_NAMED = 3  # names scoped in one question; more is a fleet question


@dataclass(frozen=True)
class Intent:
    name: str
    pattern: re.Pattern[str]
    checks: tuple[str, ...] = ()
    topic: str = ""  # how the answer names what was asked about
    # what the intent means about one kind of thing, where it is not ``checks`` ("slow" about an endpoint is its
    # latency, errors, saturation and scaling): (kind, checks, topic)
    about: tuple[tuple[str, tuple[str, ...], str], ...] = ()

    def checks_about(self, kind: str) -> tuple[str, ...]:
        return next((checks for k, checks, _ in self.about if k == kind), self.checks)

    def topic_about(self, kind: str) -> str:
        return next((topic for k, _, topic in self.about if k == kind), self.topic)


def _words(*alternatives: str) -> re.Pattern[str]:
    return re.compile("|".join(alternatives), re.I)


FIX = Intent("fix", _words(r"\b(fix|repair|remediat\w*|apply|add (the )?missing)\b",
                           r"\bmake it work\b"))
RUNBOOK = re.compile(r"\brunbook|\bby hand\b|\bmanually\b|\bhow (do|can|should|would) (i|we) (fix|repair)|"
                     r"\bsteps to (fix|repair)", re.I)
INTENTS = (
    Intent("ssh", _words(r"\bssh\b", r"\blog ?(in|on)(to)?\b", r"\blogin\b", r"\bport 22\b", r"\bbastion\b",
                         r"\b(reach|connect(ion)?|access)\w* (to )?(the )?(head|login) ?node",
                         r"\b(head|login) ?node\b.*\b(unreachable|reach|connect|refused|time[sd]? ?out)"),
           ("ssh-unreachable",), "SSH to the head node"),
    Intent("spot", _words(r"\bspot\b", r"\breclaim", r"\bpre-?empt", r"\binterrupt", r"\brebalanc",
                          r"\b(lose|lost|losing)\b.*\b(work|progress|training|steps?|job)\b", r"\btakes? (back|away)\b",
                          r"\bevict"),
           SPOT + CHECKPOINT, "losing work to a Spot reclaim"),
    Intent("slow", _words(r"\bslow", r"\bsluggish", r"\bcrawl", r"\bthroughput", r"\bperformance", r"\bstraggl",
                          r"\bhang", r"\bhung\b", r"\bstuck\b", r"\bnccl\b", r"\ball-?reduce", r"\btokens?/s",
                          r"\bmfu\b", r"\bstep time", r"\bbottleneck", r"\bspeed", r"\btim(es?|ing) ?out\b",
                          r"\bdropped by\b", r"\bfaster\b", r"\blagging\b", r"\bdrag"),
           ("gpu-straggler", "efa-errors", *EFA_CONFIG, "gpu-idle", "gpu-memory-pressure", "gpu-metrics-missing",
            "hyperpod-node-unhealthy", "fsx-unreachable", "training-stalled"), "slow or stalled training",
           (("endpoint", ("inference-latency-slo", "inference-errors", "accelerator-saturation", "autoscaling-at-max",
                          "endpoint-unhealthy"), "its latency, errors, saturation and scaling"),)),
    Intent("checkpoint", _words(r"\bcheckpoint", r"\bckpt"), CHECKPOINT + ("s3-unreachable", "fsx-unreachable"),
           "checkpoints"),
    Intent("storage", _words(r"\bfsx\b", r"\blustre\b", r"\bs3\b", r"\bbucket", r"\bmount", r"\bfile ?system",
                             r"\bdata ?load"), ("fsx-unreachable", "s3-unreachable"), "storage access"),
    Intent("efa", _words(r"\befa\b", r"\bfabric\b", r"\bsecurity groups?\b", r"\bsgs?\b", r"\bsubnets?\b",
                         r"\bplacement\b", r"\binterconnect", r"\bnetwork interfaces?\b", r"\benis?\b", r"\brdma\b",
                         r"\bsrd\b", r"\blibfabric\b", r"\bnetwork(ing)?\b"),
           (*EFA_CONFIG, "efa-errors"), "the EFA network"),
    Intent("gpu", _words(r"\bgpus?\b", r"\bcuda\b", r"\bnvidia\b", r"\butili[sz]", r"\bidle\b", r"\bgpu memory\b",
                         r"\boom\b", r"\bxid\b", r"\baccelerators?\b"), GPU, "GPU utilization"),
    Intent("inference", _words(r"\binference\b", r"\bendpoints?\b", r"\bserving\b", r"\blatency\b", r"\bp9\d\b",
                               r"\b[45]xx\b", r"\berror rate", r"\bautoscal", r"\breplicas?\b", r"\bsaturat"),
           INFERENCE, "the inference endpoints"),
    Intent("hyperpod", _words(r"\bhyperpod\b", r"\bunhealthy nodes?\b", r"\breplace (a |the )?node",
                              r"\breboot"), ("hyperpod-node-unhealthy",), "HyperPod nodes"),
)
FOLLOW_UP = re.compile(r"\b(which|what) (nodes?|instances?|resources?|groups?|ones?)\b|\baffected\b|\bthose\b|"
                       r"\bthem\b|\bmore detail|\bshow me\b|\blist (the )?findings\b", re.I)


@dataclass
class Plan:
    """What to run for a question: ``calls`` of (tool name, args); ``missing`` topics nothing installed covers.

    A question naming a node, group, endpoint or bucket is ``scoped``: its calls are ``check_resource`` per
    name (or one ``why_not`` for a path between named things); ``unscoped`` holds the calls the question
    would get without the names, for a weak name the cluster turns out not to have."""

    intents: list[Intent] = field(default_factory=list)
    fix: bool = False
    runbook: bool = False  # "how do I fix it by hand": the runbook, not an automated plan
    calls: list[tuple[str, dict]] = field(default_factory=list)
    missing: list[Intent] = field(default_factory=list)
    full_run: bool = False
    named: list[Named] = field(default_factory=list)
    path: dict | None = None  # why_not's arguments when the question asks whether X reaches Y
    unscoped: list[tuple[str, dict]] = field(default_factory=list)

    @property
    def scoped(self) -> bool:
        return bool(self.named) and not self.path

    @property
    def names(self) -> list[str]:
        return [i.name for i in self.intents]


def classify(question: str) -> tuple[list[Intent], bool]:
    return [i for i in INTENTS if i.pattern.search(question)], bool(FIX.pattern.search(question))


def plan_for(question: str, families: dict[str, tuple[str, ...]], available: set[str],
             earlier_findings: bool = False, recognised: list[Named] | None = None) -> Plan:
    """``families``: family tool name -> the check ids it runs; ``available``: every bound tool name;
    ``recognised``: the names the cluster's inventory found in the question (find_names)."""
    named = named_things(question, recognised)
    intents, fix = classify(without_names(question, named))
    if not named and HEAD.search(question) and not fix and not any(i.name == "ssh" for i in intents):
        named = [Named("head", HEAD.search(question).start(), True)]  # type: ignore[union-attr]
    plan = _plan(question, intents, fix, families, available, earlier_findings)
    if not named or fix or plan.runbook:  # fixes and runbooks pick their finding from the unscoped results
        return plan
    path = path_question(question, named) if WHY_NOT in available else None
    if path is None and CHECK_RESOURCE not in available:
        return plan
    scoped = dataclasses.replace(plan, calls=[], named=named, path=path, unscoped=plan.calls)
    if path is not None:
        scoped.calls = [(WHY_NOT, path)]
        return scoped
    owner_checks = {c for ids in families.values() for c in ids}

    def args(name: Named) -> dict[str, list[str]]:
        topical = [c for i in intents if i not in plan.missing for c in i.checks_about(name.kind) if c in owner_checks]
        return {"checks": list(dict.fromkeys(topical))} if topical else {}

    scoped.calls = [(CHECK_RESOURCE, {"resource": n.text, **args(n)}) for n in named[:MAX_NAMED]]
    return scoped


def wants_names(question: str) -> bool:
    """Whether the names the question may hold matter to its plan: always, except for a fix or a runbook (they pick
    from the unscoped results). Any word may be one of the cluster's names ('chatbot', an endpoint; 'scratch', a
    file system), so the inventory is asked (find_names), never the shape of the word."""
    return bool(question.strip()) and not FIX.pattern.search(question) and not RUNBOOK.search(question)


def _plan(question: str, intents: list[Intent], fix: bool, families: dict[str, tuple[str, ...]],
          available: set[str], earlier_findings: bool) -> Plan:
    plan = Plan(intents=intents, fix=fix, runbook=bool(RUNBOOK.search(question)))
    owner = {check: tool for tool, ids in families.items() for check in ids}
    wanted: dict[str, list[str]] = {}
    for intent in intents:
        present = [c for c in intent.checks if c in owner]
        if not present:
            plan.missing.append(intent)
        for check in present:
            checks = wanted.setdefault(owner[check], [])
            if check not in checks:
                checks.append(check)
    for tool, checks in wanted.items():
        whole = set(checks) == set(families[tool])
        plan.calls.append((tool, {} if whole else {"checks": checks}))
    if any(i.name == "ssh" for i in intents) and WHY_NOT in available:
        plan.calls.append((WHY_NOT, {"source": "admin", "destination": "head", "port": 22, "protocol": "tcp"}))
    if not plan.calls:
        if not intents and earlier_findings and FOLLOW_UP.search(question) and "list_findings" in available:
            plan.calls.append(("list_findings", {}))
        elif "check_all" in available:
            plan.full_run = True
            plan.calls.append(("check_all", {}))
    return plan


_FIX_TOPICS = ((re.compile(r"security group|\bsgs?\b|self[- ]?referenc", re.I), "sg"),
               (re.compile(r"subnet", re.I), "subnet"), (re.compile(r"placement", re.I), "placement"),
               (re.compile(r"ssh|head node", re.I), "ssh"), (re.compile(r"interface|\benis?\b", re.I), "interface"))


def fix_target(question: str, findings: list[dict], fixable: bool = True) -> dict | None:
    """The finding a 'fix ...' question means, the topic it names first, then the worst. ``fixable``: only
    findings fmdoctor can fix (evidence.fix); a runbook question takes any finding."""
    candidates = [f for f in findings if not fixable or (f.get("evidence") or {}).get("fix")]
    if not candidates:
        return None
    topics = [word for pattern, word in _FIX_TOPICS if pattern.search(question)]
    order = {"critical": 0, "warning": 1, "info": 2}

    def rank(finding: dict) -> tuple[int, int]:
        named = any(t in finding["check"] for t in topics)
        return (0 if named else 1, order.get(finding.get("severity", "info"), 3))

    return sorted(candidates, key=rank)[0]
