"""One thing of a cluster that a question names: a node, an endpoint, a security group, a HyperPod instance group,
an S3 bucket, an FSx file system or the training job; which checks concern it, and which findings are about it.

:func:`find_entity` resolves what a person typed against the cluster's inventory (and the :class:`Known`
names of its settings: checkpoint locations, file systems), in this order:

1. a node: ``head``/``head-node`` for the head node, or any name :mod:`fmdoctor.engine.identity` knows for
   it: its ``Name`` tag, id, private DNS name (``ip-10-0-1-12.ec2.internal``, ``ip-10-0-1-12``), an address of
   any of its interfaces, an interface id, a HyperPod or Kubernetes node name;
2. a security group: its id or its name;
3. a SageMaker endpoint of the cluster: its name (or ``endpoint/NAME``);
4. a HyperPod instance group: its name;
5. an FSx file system: its id, ``fsx://id`` or its Name tag (of those :class:`Known` lists);
6. the training job: the run a checkpoint location names (``run-0412`` of ``s3://b/llama-70b/run-0412/``);
7. an S3 bucket, or a prefix in it: ``s3://bucket[/prefix]``, or the bare name of a checkpoint location's bucket.

Nothing matched raises :class:`~fmdoctor.engine.errors.TargetNotFound` naming what was tried and what is
close. :func:`mentioned` finds every such name in a sentence (names come from the inventory, never from the
shape of a word). :func:`checks_for` picks the checks whose ``concerns`` (their metadata) include the entity's
kind. :func:`relation` tells a finding *on* the entity (its resource is the entity) from one that *involves* it
(names the entity's ids in its summary or evidence, or sits on its security group or subnet).
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fmdoctor.config import DEFAULT_TAG_KEYS
from fmdoctor.engine.errors import AwsCallFailed, TargetNotFound
from fmdoctor.engine.hyperpod import HyperPodCluster
from fmdoctor.engine.identity import NodeIdentities
from fmdoctor.engine.inventory import HEAD, INFERENCE, Instance, Inventory
from fmdoctor.safety.text import hidden
from fmdoctor.words import suggest

NODE, SECURITY_GROUP, ENDPOINT = "node", "security-group", "endpoint"
INSTANCE_GROUP, BUCKET, FILE_SYSTEM, JOB = "instance-group", "bucket", "file-system", "job"
# What a question can name; a check's ``concerns`` (fmdoctor.engine.check) is a subset of these.
KINDS = frozenset({NODE, SECURITY_GROUP, ENDPOINT, INSTANCE_GROUP, BUCKET, FILE_SYSTEM, JOB})
ON, INVOLVES = "on", "involves"
ORDER = ("a node's Name tag, id, DNS name, IP or interface id ({nodes} nodes), 'head', a security group id or name, "
         "an endpoint name ({endpoints} endpoints), a HyperPod instance group, an FSx file system ({file_systems}), "
         "the training job's run name, or a bucket (s3://bucket)")
BUCKET_CHECKS = ("s3-unreachable",)  # the path to S3 concerns every bucket in the region
_FSX_ID = re.compile(r"^fs-[0-9a-f]{8,17}$")
# A word of a question, as a name may be written in it: quotes of every script ('gpu-node-2', "x", `x`, the
# typographic ‘x’ “x” „x“ «x» a chat client or word processor puts in), punctuation around it, and
# a possessive ('gpu-node-2’s') are not part of it, nor the marks of Markdown and Slack's mrkdwn around it (*bold*,
# ~struck~, [x], <x|label>, {x}): no AWS name holds them.
WORD = re.compile(r"[^\s,;?!()'\"`\u2018\u2019\u201a\u201b\u201c\u201d\u201e\u201f\u00ab\u00bb\u2039\u203a"
                  r"*~<>\[\]{}|]+")


@dataclass(frozen=True)
class Known:
    """Names a question may use that the inventory does not hold: the cluster's checkpoint locations (their
    buckets, file systems and the job's run) and its FSx file systems (id -> Name tag)."""

    locations: tuple[str, ...] = ()
    file_systems: Mapping[str, str] = field(default_factory=dict)

    def buckets(self) -> list[str]:
        return list(dict.fromkeys(loc[5:].split("/", 1)[0] for loc in self.locations if loc.startswith("s3://")))

    def runs(self) -> dict[str, list[str]]:
        """The job's run name (a location's last path segment, and its last two) -> the locations it writes. A
        plain word is a folder, not a run's name ('checkpoints/', 'latest/'): it would swallow the word in
        questions about checkpoints."""
        runs: dict[str, list[str]] = {}
        for loc in self.locations:
            parts = [p for p in loc.split("://", 1)[-1].split("/")[1:] if p]
            if not parts or parts[-1].isalpha():
                continue
            for name in {parts[-1], "/".join(parts[-2:])}:
                runs.setdefault(name, []).append(loc)
        return runs


@dataclass(frozen=True)
class Entity:
    kind: str
    id: str  # instance id, group id, endpoint name, instance group name, bucket name
    label: str  # how answers name it: 'gpu-node-3 (i-0abc...)', 's3://bucket'
    tokens: tuple[str, ...] = ()  # ids whose mention in a finding ties it to the entity
    resources: tuple[str, ...] = ()  # resources a finding on the entity carries
    nearby: tuple[str, ...] = field(default=())  # resources it depends on (its security groups, its subnet)
    inference_node: bool = False

    def to_json_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "id": self.id, "label": self.label}


def find_entity(inventory: Inventory, text: str, known: Known | None = None) -> Entity:
    """The node, group, endpoint, instance group, file system, job or bucket ``text`` names in ``inventory``
    (see the module). A part of the inventory AWS would not return is passed over, and a miss then says it
    could not be read."""
    entity = _as_typed_or_read(inventory, text.strip(), known or Known())
    if entity is None:
        raise _not_found(inventory, text.strip(), known or Known())
    return entity


def mentioned(inventory: Inventory, text: str, known: Known | None = None,
              limit: int = 200) -> list[tuple[str, Entity]]:
    """The things of the cluster ``text`` names, in order, each once, with the word that named it: every word is
    looked up in the inventory (and ``known``), and every name of several words is looked for as it stands, so a
    name is recognised by being the cluster's, whatever its shape ('demo-llm-chat', 'chatbot', 'LLM scratch').
    'head' alone is left to the caller (it is also an English word)."""
    known = known or Known()
    found: dict[tuple[str, str], tuple[int, str, Entity]] = {}
    words = [(m.start(), m.group(0).rstrip(".:")) for m in WORD.finditer(text)][:limit]
    # a name of several words (a Name tag 'GPU node 7', a file system 'LLM scratch') is no word of the question:
    # it is looked for as it stands, whole words, in any case
    phrases = [n for n in dict.fromkeys(_names(inventory, known)) if " " in n.strip() and len(n) <= 256]
    for name in phrases:
        spotted = re.search(rf"(?<![\w-]){re.escape(name.strip())}(?![\w-])", text, re.I)
        if spotted:
            words.append((spotted.start(), name.strip()))
    for start, word in sorted(words):
        if not word or word.lower() in _HEAD_WORDS:
            continue
        try:
            entity = _as_typed_or_read(inventory, word, known)
        except TargetNotFound:  # a name several nodes carry: the caller's lookup says so
            entity = None
        if entity is not None and not _generic(text, word, entity):
            found.setdefault((entity.kind, entity.id), (start, word, entity))
    return [(word, entity) for _, word, entity in sorted(found.values(), key=lambda f: f[0])]


# A security group or instance group named by a plain word is named by a word of the language too: every VPC has a
# security group 'default' ("what is the default NCCL timeout?"), instance groups are often 'worker' or 'compute'.
# Such a name counts only beside its kind word ('sg default', 'the default security group', 'worker group').
_KIND_WORDS = {SECURITY_GROUP: r"sgs?|security[- ]groups?|groups?", INSTANCE_GROUP: r"(?:instance[- ])?groups?|igs?"}


def _generic(text: str, word: str, entity: Entity) -> bool:
    kind = _KIND_WORDS.get(entity.kind)
    if kind is None or not word.isalpha():
        return False
    name = re.escape(word)
    beside = rf"(?<![\w-])(?:(?:{kind})\W+{name}|{name}\W+(?:{kind}))(?![\w-])"
    return re.search(beside, text, re.I) is None


# "cluster prod-train", "cluster named prod-train", "the prod-train cluster": a cluster named in a question. Its name
# is no name of the inventory (the inventory is one cluster's), so only the kind word says it is one; a word counts
# only when shaped like a name (a hyphen, underscore, digit or dot), and not when it is an instance type or family
# ('the p5 cluster', 'the p4d.24xlarge cluster'), a size ('a 16-node cluster', 'the 8xH100 cluster'), an ordinal
# ('my 2nd cluster'), a model's or memory's size ('the 70B cluster'), a version ('the EKS-1.29 cluster'), a region
# ('the us-west-2 cluster'), or a node's or resource's id or address ('cluster i-0abc123', 'the cluster 10.0.1.12',
# 'cluster ip-10-0-1-12'): those are things of a cluster, not its name.
_CLUSTER_NAME = r"[A-Za-z0-9][A-Za-z0-9_.\-]*[A-Za-z0-9]"
# 'cluster: x', 'cluster=x', '--cluster=x', 'cluster_name: x' (a configuration or a command line pasted) and 'clusters
# x and y' name it as 'cluster x' does
_CLUSTER_BEFORE = re.compile(rf"\bclusters?(?:[-_]name)?(?:\s+|\s*[:=]\s*)(?:called\s+|named\s+)?"
                             rf"[`'\"\u2018\u201c]?({_CLUSTER_NAME})", re.I)
# a name starts a word: tried from every letter of a long word, the search took quadratic time (40,000 characters
# of one word: 35 s)
# ('the x EKS cluster', 'the x HyperPod cluster': the kind of cluster between the name and the word)
_CLUSTER_AFTER = re.compile(rf"(?<![A-Za-z0-9_.\-])({_CLUSTER_NAME})[`'\"\u2019\u201d]?\s+"
                            r"(?:(?:EKS|HyperPod|Slurm|Kubernetes|k8s|ParallelCluster|SageMaker|PCS)\s+)?"
                            r"clusters?\b", re.I)
_NOT_CLUSTER = re.compile(
    r"^(?:(?:ml\.)?[a-z]{1,4}\d+[a-z]{0,4}(?:\.\d*x?large|\.metal[\w-]*)?"  # instance family or type
    r"|\d[\d,]*(?:-\w+)?|\d+(?:st|nd|rd|th)|\d+x\w+"  # a size, an ordinal, a count of accelerators
    r"|\d+(?:\.\d+)?(?:[kmbt]|[kmgtp]i?b)"  # a model's size (70b, 1.5B) or a memory size (80GB, 2TiB)
    r"|(?:[a-z][a-z0-9]*-)?v?\d+(?:\.\d+)+"  # a version (1.29, v2.5, EKS-1.29, k8s-1.30) or an IPv4 address
    r"|ip-\d+-\d+-\d+-\d+(?:\.[\w.-]+)?"  # an EC2 private DNS name
    r"|(?:i|sg|subnet|eni|fs|vpc|vpce|rtb|cr|igw|nat|acl|pcx|ami|vol|snap)-[0-9a-f]{4,17}"  # an AWS resource id
    r"|(?:us|eu|ap|sa|ca|me|af|il|mx|cn)(?:-gov|-iso\w*)?-[a-z]+-\d[a-z]?"  # a region or an Availability Zone
    r"|[a-z]{3,4}\d-az\d+)$", re.I)  # an Availability Zone id (usw2-az1)
# A cluster named in an ARN or a console address: EKS's ``arn:aws:eks:REGION:ACCOUNT:cluster/NAME`` (the EKS API's
# documented ARN format, https://docs.aws.amazon.com/resilience-hub/latest/APIReference/API_EksSource.html) and its
# console's ``#/clusters/NAME``, HyperPod's console ``#/cluster-management/NAME`` (a path of another site or a file
# system's ``/fsx/clusters/run-7`` names no cluster).
# Every EKS resource of a cluster carries the cluster's name first in its ARN (``nodegroup/CLUSTER/NODEGROUP/UUID``,
# ``addon/CLUSTER/...``, ``fargateprofile/``, ``identityproviderconfig/``, ``podidentityassociation/``,
# ``access-entry/``: the Service Authorization Reference's EKS resource types,
# https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazonelastickubernetesservice.html), in
# every partition (aws, aws-cn, aws-us-gov). The consoles: aws.amazon.com, China's amazonaws.cn and GovCloud's
# amazonaws-us-gov.com, with the cluster after ``#/clusters/`` or, in the EKS console's newer addresses, in the path
# (``/eks/clusters/NAME``).
_CLUSTER_PATH = re.compile(r"(arn:aws[\w-]*:eks:[\w-]*:\d*:(?:cluster|nodegroup|addon|fargateprofile|"
                           r"identityproviderconfig|podidentityassociation|access-entry)"
                           r"|console\.(?:aws\.amazon\.com|amazonaws\.cn|amazonaws-us-gov\.com)/"
                           r"(?:[^\s#]*#/(?:clusters|cluster-management)|eks/clusters))/([\w.-]+)", re.I)
# A SageMaker HyperPod cluster's ARN holds the cluster's id, not its name: ``arn:aws:sagemaker:REGION:ACCOUNT:cluster/
# ID``, ID twelve lower-case letters and digits (ClusterArn's documented pattern,
# https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_ClusterSummary.html; moto writes the name there).
_HYPERPOD_ARN = re.compile(r"arn:aws[a-z-]*:sagemaker:[a-z0-9-]*:\d*:cluster/([A-Za-z0-9-]+)", re.I)
# Where a name stands as a cluster's although no kind word says so: 'is gpu-node-2 on/in/of prod-train healthy?' (right
# after a thing of the cluster), 'on prod-train, is gpu-node-2 ok?' (opening the question or a clause).
_PLACES = frozenset({"on", "in", "of"})
# A name EKS or HyperPod would give a cluster: letters, digits, hyphens (and underscores for EKS), starting with a
# letter or digit, at most 100 characters (EKS CreateCluster's name, as the AWS SDKs document it:
# https://docs.aws.amazon.com/sdk-for-kotlin/api/latest/eks/aws.sdk.kotlin.services.eks.model/-create-cluster-request/
# name.html; the EKS API Reference's pattern ^[0-9A-Za-z][A-Za-z0-9\-_]*, API_RegisterClusterRequest.html). HyperPod's
# ClusterName is a subset: ^[a-zA-Z0-9](-*[a-zA-Z0-9])*$, 63 characters (API_ClusterSummary.html above). A dot,
# slash or colon makes it a file, a version or a path.
_AWS_CLUSTER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,99}$")
# a part of a hyphenated word that is a model's or memory's size ('llama-70b', 'a100-80gb', 'mixtral-8x7b')
_SIZE_PART = re.compile(r"^(?:\d+(?:\.\d+)?[kmbt]|\d+[kmgtp]i?b|\d+x\d+[kmbt]?)$", re.I)

NAMED, BESIDE, PLACED, EKS_ARN, CONSOLE, HYPERPOD_ARN = "named", "beside", "placed", "eks-arn", "console", \
    "hyperpod-arn"


@dataclass(frozen=True)
class ClusterMention:
    """A cluster a question names, and how: ``named`` (a known cluster's name), ``beside`` the word cluster,
    ``placed`` where a cluster's name stands ('gpu-node-2 on prod-train', 'prod-train/gpu-node-2'), in an EKS ARN
    (``eks-arn``), a console address (``console``), or a HyperPod ARN (``hyperpod-arn``: ``name`` is the ARN and
    ``cluster_id`` the id it holds)."""

    name: str
    how: str
    start: int
    cluster_id: str | None = None
    arn: str | None = None  # an EKS ARN's cluster, as its ARN (arn:PARTITION:eks:REGION:ACCOUNT:cluster/NAME)

    @property
    def sure(self) -> bool:
        """Whether the question says it is a cluster (a kind word, an ARN, a console address, a known name), not
        only that a name stands where a cluster's would."""
        return self.how != PLACED


def _shaped(word: str) -> bool:
    return bool(re.search(r"[-_.\d]", word))


def _plain(name: str) -> bool:
    """A name that is also a word of the language ('prod', 'train'): it names a cluster only where it stands as one."""
    return not _shaped(name)


def _placed_name(word: str) -> bool:
    """Whether a word that stands where a cluster's name does may be one: a name EKS or HyperPod would accept,
    shaped like a name, and none of the things of a cluster (an instance type, a size, a version, a region or zone, a
    resource id) nor a model's or memory's size ('llama-70b', 'a100-80gb')."""
    return (bool(_AWS_CLUSTER_NAME.match(word)) and _shaped(word) and not _NOT_CLUSTER.match(word)
            and not any(_SIZE_PART.match(part) for part in re.split(r"[-_]", word)))


def cluster_mentions(text: str, known: Iterable[str] = (), names: Callable[[str], bool] | None = None,
                     limit: int = 200) -> list[ClusterMention]:
    """The clusters a question names, in order, each once (see :class:`ClusterMention`).

    - ``known`` (the configuration's cluster names, this one's included): as a word or the first part of one
      ('prod-train', 'prod-train/gpu-node-2', '@prod-train:gpu-node-3'; not a part further on in a path: s3://b/prod/).
      A known name that is a plain word ('prod', 'train') counts only where it stands as a cluster's name: beside
      'cluster', in an ARN or console address, before a thing of the cluster ('prod/gpu-node-2') or as a place
      ('gpu-node-2 on prod'), so 'why is training slow?' or 'is the train job slow?' name no cluster train.
    - a name-shaped word beside the word 'cluster', and a cluster an EKS ARN, a HyperPod ARN or an AWS console address
      names;
    - with ``names`` (whether a word names a thing of this cluster's inventory: :func:`names_a_thing`), a name that
      is none of its things and stands where a cluster's name does: right after a thing of the cluster ('gpu-node-2
      on prod-train'), ending a clause that names a thing of the cluster ('is gpu-node-2 healthy on prod-train?'),
      opening the question or a clause ('on prod-train, ...') or before a thing of it ('prod-train/gpu-node-2'),
      in its first ``limit`` words (as many as :func:`mentioned` looks up).

    Which of them the conversation can see is the caller's to say (:func:`fmdoctor.assistant.guard` answers for every
    front end)."""
    text = as_read(text)
    found: dict[str, ClusterMention] = {}
    catalogue = {n.lower(): n for n in known if n}

    def add(name: str, how: str, start: int, cluster_id: str | None = None, arn: str | None = None) -> None:
        name = catalogue.get(name.lower(), name)
        if name not in found or found[name].start > start:
            found[name] = ClusterMention(name, how, start, cluster_id, arn)

    def thing(word: str) -> bool:
        return names is not None and bool(word) and names(word)


    words = [(m.start(), m.end(), m.group(0).rstrip(".:")) for m in WORD.finditer(text)]
    horizon = words[limit][0] if len(words) > limit else len(text)  # the inventory is asked about what comes before
    lookup = names
    for index, (start, _, word) in enumerate(words):
        if index >= limit:
            names = None  # past the limit, only what needs no inventory
        bare = word.lstrip("@")
        head, *rest = re.split(r"[/:]", bare, maxsplit=1)
        tail = re.split(r"[/:]", rest[0], maxsplit=1)[0] if rest else ""
        lowered = head.lower()
        if lowered in catalogue and (not _plain(head) or (rest or word.startswith("@")) and (
                word.startswith("@") or thing(tail) or (names is None and _shaped(tail)))):
            add(head, NAMED, start)
        elif rest and tail and _placed_name(head) and thing(tail) and not thing(head) and not thing(bare):
            add(head, PLACED, start)  # 'prod-train/gpu-node-2': a cluster before a thing of it
        if word.lower() in _PLACES and index + 1 < len(words):
            following = words[index + 1][2]
            known_plain = following.lower() in catalogue and _plain(following)  # 'on prod'
            unknown = following.lower() not in catalogue and names is not None and _placed_name(following)
            # the cheap tests first: the inventory is looked at only for a word that could be a cluster's name
            if (known_plain or unknown) and not thing(following) and (
                    index == 0 or _breaks(text, words[index - 1][0], start) or _after_thing(words, index, thing)
                    or _ends_clause(text, words, index + 1) and any(thing(w) for w in _clause_before(text, words,
                                                                                                     index))):
                add(following, PLACED, words[index + 1][0])
    for match in _CLUSTER_PATH.finditer(text):
        if match.group(1).lower().startswith("arn:"):  # the same name in another region or account is another cluster
            partition, _, region, account = match.group(1).split(":")[1:5]
            add(match.group(2), EKS_ARN, match.start(2), arn=f"arn:{partition}:eks:{region}:{account}:cluster/"
                                                               f"{match.group(2)}")
        else:
            add(match.group(2), CONSOLE, match.start(2))
    for match in _HYPERPOD_ARN.finditer(text):
        add(match.group(0), HYPERPOD_ARN, match.start(), match.group(1))
    for pattern in (_CLUSTER_BEFORE, _CLUSTER_AFTER):
        for match in pattern.finditer(text):
            word = match.group(1)
            # a thing of this cluster beside the word ('the cluster gpu-node-2', 'my cluster: gpu-node-2 is slow')
            # is one of its things, not a cluster
            names = lookup if match.start(1) < horizon else None
            if word.lower() in catalogue or (_shaped(word) and not _NOT_CLUSTER.match(word) and not thing(word)):
                add(word, BESIDE, match.start(1))
    return sorted(found.values(), key=lambda m: m.start)


# The word a person puts after a thing's name to say what it is ('the demo-llm-chat endpoint on prod-train', 'gpu-node-2
# node in staging-9'): the thing stands before it all the same.
_KIND_NOUN = re.compile(r"^(?:nodes?|instances?|hosts?|servers?|endpoints?|buckets?|(?:security|instance)?[-_]?groups?"
                        r"|sgs?|file[-_]?systems?|fs|jobs?|runs?)$", re.I)


def _after_thing(words: list[tuple[int, int, str]], index: int, thing: Callable[[str], bool]) -> bool:
    """Whether the word before ``index`` is a thing of the cluster, or a kind word right after one."""
    before = words[index - 1][2]
    return thing(before) or (index >= 2 and bool(_KIND_NOUN.match(before)) and thing(words[index - 2][2]))


def as_read(text: str) -> str:
    """``text`` as a person reads it: compatibility forms folded (NFKC: fullwidth 'ｃｌｕｓｔｅｒ' is 'cluster'), every
    dash a hyphen (a non-breaking hyphen in 'staging\u20119' is a hyphen to the eye), and characters no one sees
    (zero-width, bidi, tags: :func:`fmdoctor.safety.text.hidden`) dropped, so 'clus\u200bter' is the word cluster. What
    looks like another cluster's name is read as one."""
    if text.isascii():
        return text
    folded = unicodedata.normalize("NFKC", text)
    return "".join(_READ.get(unicodedata.category(c), c) for c in folded
                   if not hidden(c) or unicodedata.category(c) in _READ)


# every dash is a hyphen to the eye; a line or paragraph separator (hidden, but a break) separates words as a space does
_READ = {"Pd": "-", "Zl": " ", "Zp": " "}


def _breaks(text: str, start: int, end: int) -> bool:
    """Whether a clause ends in ``text[start:end]`` (a word and what follows it up to the next word)."""
    return bool(re.search(r"[,;:.?!]\s*$", text[start:end]))


def _ends_clause(text: str, words: list[tuple[int, int, str]], index: int) -> bool:
    """Whether the word at ``index`` ends its clause ('is gpu-node-2 healthy on prod-train?')."""
    end = words[index][1]
    return index + 1 >= len(words) or _breaks(text, words[index][0], words[index + 1][0]) or not text[end:].strip()


def _clause_before(text: str, words: list[tuple[int, int, str]], index: int, limit: int = 40) -> list[str]:
    """The words of the clause before the word at ``index``, nearest first, at most ``limit`` (each may be looked up
    in the inventory: a run-on 'clause' of thousands of words costs no more than a sentence)."""
    out: list[str] = []
    for i in range(index - 1, max(index - 1 - limit, -1), -1):
        if _breaks(text, words[i][0], words[i + 1][0]):
            break
        out.append(words[i][2])
    return out


def clusters_named(text: str, known: Iterable[str] = (), names: Callable[[str], bool] | None = None) -> list[str]:
    """The names of :func:`cluster_mentions` (a HyperPod ARN as it is written), in order."""
    return [m.name for m in cluster_mentions(text, known, names)]


def names_a_thing(inventory: Inventory, known: Known | None = None) -> Callable[[str], bool]:
    """Whether a word names a thing of the cluster (what :func:`find_entity` resolves, a name several nodes carry
    included), for :func:`cluster_mentions`: a thing of the cluster is never another cluster."""
    known = known or Known()
    seen: dict[str, bool] = {}

    def names(word: str) -> bool:
        if word not in seen:
            try:
                seen[word] = len(word) <= 256 and _as_typed_or_read(inventory, word, known) is not None
            except TargetNotFound:  # several nodes go by it: a name of this cluster all the same
                seen[word] = True
        return seen[word]

    return names


def cluster_identities(inventory: Inventory, hyperpod: HyperPodCluster | None = None) -> frozenset[str]:
    """Every name, ARN and id the cluster itself goes by, in lower case: its own, its HyperPod cluster's name, ARN
    and the id in that ARN, the EKS cluster a HyperPod cluster runs in (ARN and name), and the cluster names its
    instances carry in the tags that name a cluster (``eks:cluster-name``, ``parallelcluster:cluster-name``, ...).
    A question naming any of them names this cluster, whatever the configuration calls it. ``hyperpod``: its HyperPod
    cluster where the inventory does not hold it (the inventory looks HyperPod up only for a cluster no instance
    carries)."""
    own = {inventory.cluster}
    hyperpod = hyperpod or inventory.hyperpod
    if hyperpod is not None:
        own |= {hyperpod.name, hyperpod.arn, hyperpod.arn.rsplit("/", 1)[-1] if hyperpod.arn else ""}
        if hyperpod.eks_cluster_arn:
            own |= {hyperpod.eks_cluster_arn, hyperpod.eks_cluster_arn.rsplit("/", 1)[-1]}
    own |= {i.tags.get(key, "") for i in inventory.instances for key in DEFAULT_TAG_KEYS}
    return frozenset(n.lower() for n in own if n)


def mistyped(name: str, meant: str) -> bool:
    """Whether ``name`` is ``meant`` mistyped: one letter added, dropped, changed or swapped with its neighbour, in
    any case, the digits left as they are ('llm-trian' is llm-train; 'llm-train-2' and 'prod-3' are other names)."""
    a, b = name.lower(), meant.lower()
    if a == b or re.sub(r"\D", "", a) != re.sub(r"\D", "", b) or abs(len(a) - len(b)) > 1:
        return a == b
    rows = [list(range(len(b) + 1))]
    for i in range(1, len(a) + 1):  # optimal string alignment distance
        row = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            row[j] = min(rows[-1][j] + 1, row[j - 1] + 1, rows[-1][j - 1] + (a[i - 1] != b[j - 1]))
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                row[j] = min(row[j], rows[-2][j - 2] + 1)
        rows.append(row)
    return rows[-1][-1] <= 1


def near_misses(inventory: Inventory, text: str, known: Known | None = None, found: Iterable[str] = (),
                limit: int = 200) -> dict[str, list[str]]:
    """The words of ``text`` shaped like a resource name (a hyphen, underscore, dot, slash or colon in it) that
    name nothing of the cluster but are close to a name it has ('demo-llm-chatt' -> demo-llm-chat), each with
    those names; ``found``: the words :func:`mentioned` recognised. A typo is then said, not passed over."""
    skip = set(found)
    words = [w.rstrip(".:") for w in WORD.findall(text)][:limit]
    shaped = [w for w in dict.fromkeys(words) if w not in skip and 3 <= len(w) <= 256 and re.search(r"[-_./:]", w)
              and w.lower() not in _HEAD_WORDS]
    if not shaped:
        return {}
    names = _names(inventory, known or Known())
    close = {w: suggest(w, names) for w in shaped}
    return {w: s for w, s in close.items() if s}


def _names(inventory: Inventory, known: Known) -> list[str]:
    groups = _readable(lambda: list(inventory.security_groups.values()))
    endpoints = _readable(lambda: list(inventory.endpoints))
    names = NodeIdentities.of(inventory).all_names()
    names += [g.name for g in groups] + [e.name for e in endpoints]
    names += [g.name for g in inventory.hyperpod.groups] if inventory.hyperpod else []
    names += [*known.file_systems, *known.file_systems.values(), *known.runs(), *known.buckets()]
    return [n for n in names if n]


_HEAD_WORDS = ("head", "head-node", "head node")


def _as_typed_or_read(inventory: Inventory, query: str, known: Known) -> Entity | None:
    """The thing ``query`` names as it is typed, else as a person reads it (:func:`as_read`): 'gpu\u2011node\u20112'
    pasted from a document with non-breaking hyphens is gpu-node-2, not a miss that leaves the question to be answered
    about the whole cluster. A name that truly holds such characters (a Name tag) still matches as typed."""
    entity = _match(inventory, query, known)
    read = as_read(query)
    return entity if entity is not None or read == query else _match(inventory, read, known)


def _match(inventory: Inventory, query: str, known: Known) -> Entity | None:
    lowered = query.lower()
    node = _node(inventory, query)
    if node is not None:
        return node
    for group in _readable(lambda: list(inventory.security_groups.values())):
        if query in (group.id, group.name):
            return Entity(SECURITY_GROUP, group.id, f"security group {group.name} ({group.id})", (group.id,),
                          (group.id,))
    name = query.removeprefix("endpoint/")
    for endpoint in _readable(lambda: list(inventory.endpoints)):
        if name == endpoint.name:
            prefix = f"endpoint/{endpoint.name}"
            return Entity(ENDPOINT, endpoint.name, f"endpoint {endpoint.name}", (endpoint.name, prefix), (prefix,))
    for group in inventory.hyperpod.groups if inventory.hyperpod else ():
        if query == group.name:
            return Entity(INSTANCE_GROUP, group.name, f"HyperPod instance group {group.name}", (group.name,))
    fs_id = query[6:].split("/", 1)[0] if lowered.startswith("fsx://") else query
    for system_id, name in known.file_systems.items():
        if fs_id == system_id or (name and query == name):
            label = f"FSx file system {name} ({system_id})" if name else f"FSx file system {system_id}"
            return Entity(FILE_SYSTEM, system_id, label, tuple(t for t in (system_id, name) if t),
                          (system_id, f"fsx://{system_id}"))
    if _FSX_ID.match(fs_id):  # an id AWS gives a file system, like s3://: what it names is looked at by the checks
        return Entity(FILE_SYSTEM, fs_id, f"FSx file system {fs_id}", (fs_id,), (fs_id, f"fsx://{fs_id}"))
    runs = known.runs()
    run = query.removeprefix("job/").strip("/")
    if run in runs:
        return Entity(JOB, run, f"training job {run}", (run,), tuple(loc.rstrip("/") for loc in runs[run]))
    if lowered.startswith("s3://") and len(lowered) > 5:
        bucket = query[5:].split("/", 1)[0]
        uri = query.rstrip("/")  # a prefix narrows it: s3://bucket/run-1 is not s3://bucket/run-2
        return Entity(BUCKET, bucket, query, (uri,), (uri,))
    if query in known.buckets():
        uri = f"s3://{query}"
        return Entity(BUCKET, query, uri, (uri,), (uri,))
    return None


def checks_for(entity: Entity, checks: Iterable[Any]) -> list[str]:
    """Ids of the checks (of ``checks``: the registry's cluster checks) whose findings can be about this kind of
    thing (their ``concerns``); a node that serves inference also gets the inference checks."""
    return [c.id for c in checks if entity.kind in getattr(c, "concerns", ())
            and (c.family != "inference" or entity.kind != NODE or entity.inference_node)]


def relation(entity: Entity, finding: Mapping[str, Any], via: Iterable[str] = ()) -> str | None:
    """``on`` (the finding's resource is the entity), ``involves`` (it names the entity, sits on what the
    entity depends on, or comes from one of ``via``: checks whose findings bear on it, as a job's, unless the
    finding sits on a storage location that is not the entity's), else None."""
    resource = str(finding.get("resource", ""))
    if any(resource == r or resource.startswith(r + "/") for r in entity.resources):
        return ON
    if resource in entity.nearby or (entity.kind == BUCKET and finding.get("check") in BUCKET_CHECKS):
        return INVOLVES
    if finding.get("check") in set(via) and "://" not in resource:  # a location is another run's, not this one's
        return INVOLVES
    text = " ".join((str(finding.get("summary", "")), json.dumps(finding.get("evidence", {}), default=str)))
    return INVOLVES if mentions(text, entity.tokens) else None


def concerns_error(entity: Entity, error: Mapping[str, Any], others: Iterable[str]) -> bool:
    """An error entry names the entity, or names none of the cluster's other things (so it is check-wide)."""
    text = f"{error.get('unverified', '')} {error.get('message', '')}"
    return mentions(text, entity.tokens) or not mentions(text, others)


def other_tokens(inventory: Inventory, entity: Entity) -> list[str]:
    """Ids of the other things of the entity's kind, to tell an error about another node from a check-wide one."""
    if entity.kind == NODE:
        return [i.id for i in inventory.instances if i.id != entity.id]
    if entity.kind == ENDPOINT:
        return [e.name for e in _readable(lambda: list(inventory.endpoints)) if e.name != entity.id]
    if entity.kind == SECURITY_GROUP:
        return [g for g in _readable(lambda: list(inventory.security_groups)) if g != entity.id]
    return []



def mentions(text: str, tokens: Iterable[str]) -> bool:
    """Any token appears as a whole id (``demo-llm-chat`` is not in ``demo-llm-chat-canary``)."""
    return any(re.search(rf"(?<![\w-]){re.escape(t)}(?![\w-])", text) for t in tokens if t)


def _node(inventory: Inventory, query: str) -> Entity | None:
    """The node any of its names means (:class:`~fmdoctor.engine.identity.NodeIdentities`: Name tag, id,
    private DNS name full or short, any address, interface id, HyperPod/Kubernetes node name)."""
    lowered = query.lower()
    heads = [i for i in inventory.instances if i.role == HEAD]
    if lowered in ("head", "head-node", "head node") and heads:
        return _node_entity(inventory, heads[0])
    # a miss here is no node; what is close is said by _not_found, over every kind's names (suggesting per lookup
    # made find_names over a question of 200 words on 1,000 nodes take 17 s)
    match = NodeIdentities.of(inventory).resolve(query, suggest_close=False)
    if match.ambiguous:
        raise TargetNotFound(f"{len(match.candidates)} nodes go by {query!r} ({match.via}): name one by its id",
                             hint=", ".join(i.id for i in match.candidates[:5]))
    return _node_entity(inventory, match.instance) if match.instance is not None else None


def _readable(read: Callable[[], list[Any]]) -> list[Any]:
    try:
        return read()
    except AwsCallFailed:  # the part AWS would not return: _not_found says so
        return []


def _unreadable(inventory: Inventory) -> list[str]:
    """What of the inventory could not be read, so a name that matched nothing may still be there."""
    parts = [what for what, read in (("network interfaces", lambda: list(inventory.interfaces)),
                                     ("security groups", lambda: list(inventory.security_groups)))
             if _failed(read)]
    return parts + [gap.unverified for gap in inventory.endpoint_gaps]


def _failed(read: Callable[[], Any]) -> bool:
    try:
        read()
    except AwsCallFailed:
        return True
    return False


def _node_entity(inventory: Inventory, instance: Instance) -> Entity:
    interfaces = _readable(lambda: inventory.interfaces_of(instance))
    groups = {g for e in interfaces for g in e.security_group_ids}
    nearby = tuple(sorted(groups | ({instance.subnet_id} if instance.subnet_id else set())))
    return Entity(NODE, instance.id, inventory.label(instance.id), (instance.id, *(e.id for e in interfaces)),
                  (instance.id, *(e.id for e in interfaces)), nearby, inference_node=instance.role == INFERENCE)


def _not_found(inventory: Inventory, query: str, known: Known) -> TargetNotFound:
    endpoints = _readable(lambda: list(inventory.endpoints))
    close = suggest(query, _names(inventory, known)) if len(query) <= 256 else []
    shown = query if len(query) <= 80 else f"{query[:77]}..."
    tried = ORDER.format(nodes=len(inventory.instances), endpoints=len(endpoints),
                         file_systems=", ".join(known.file_systems) or "none known")
    unread = _unreadable(inventory)
    hidden = f"; not verified: {', '.join(unread)} could not be read, so it may be there" if unread else ""
    hint = f"did you mean {close[0]}?" + (f" (also close: {', '.join(close[1:])})" if close[1:] else "") \
        if close else None
    return TargetNotFound(f"{shown!r} is not a node, group, endpoint, file system, job or bucket of cluster "
                          f"{inventory.cluster} (tried, in order: {tried}){hidden}", hint=hint)

