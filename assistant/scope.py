"""What a question names and whether it asks about a path: the offline planner's reading of entity questions.

:func:`named_things` finds the node, group, endpoint or bucket names in a question ("gpu-node-3",
"i-0abc...", "10.0.16.4", "s3://bucket", "the demo-llm-chat endpoint", "bucket ckpts"). A name is
*strong* when its shape or a kind word says it is one (an id, an address, an s3:// URI, "endpoint X",
"node X"); *weak* when it only looks like a name (a hyphenated word with a digit, "gpu-4"): a weak name that
the cluster does not have may be something else ("llama-70b"), so the planner then answers the question for
the whole cluster and says so. :func:`path_question` reads "can X reach Y on port P?" into why_not's
arguments; names are resolved by the tools, never here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from fmdoctor.engine.entities import WORD as WORD_OF_QUESTION

_ID = r"(?:i|eni|sg)-[0-9a-f]{8,17}"
_IP = r"(?<![\d.])\d{1,3}(?:\.\d{1,3}){3}(?:/\d{1,2})?(?![\d.])"
_S3 = r"s3://[a-z0-9][a-z0-9.\-]*[a-z0-9](?:/[^\s?,;]*)?"
_WORD = r"[A-Za-z0-9][A-Za-z0-9_.\-]*[A-Za-z0-9]"
# EC2 hostnames (ip-10-0-1-12, under any domain) and HyperPod's EKS node names: nodes by their shape; which node
# is fmdoctor.engine.identity's to say
_HOST = r"(?:ip-\d{1,3}(?:-\d{1,3}){3}|hyperpod-i-[0-9a-f]{8,17})(?:\.[a-z0-9-]+)*"
STRONG = re.compile(rf"(?<![\w/-])(?:{_ID}|{_S3}|{_IP}|{_HOST})(?![\w-])", re.I)
WORD = re.compile(rf"^{_WORD}$")
TOKEN = WORD_OF_QUESTION  # one reading of a question's words: find_names' (fmdoctor.engine.entities)
KIND_BEFORE = re.compile(rf"\b(?:node|instance|host|server|endpoint|bucket|security group|instance group)\s+"
                         rf"(?:called\s+|named\s+)?({_WORD})", re.I)
KIND_AFTER = re.compile(rf"\b({_WORD})\s+(node|instance|host|server|endpoint|bucket|security group|instance group)\b",
                        re.I)
NOT_NAMES = re.compile(r"^(?:(?:ml\.)?[a-z]+\d+[a-z]*\.(?:\d*x?large|metal)|p9\d|[45]xx|"
                       # NCCL's collectives, with torch.distributed's forms of them (all_gather_into_tensor,
                       # reduce_scatter_tensor, all_to_all_single, all_gather_object, *_coalesced) and NCCL's kernels
                       # as profilers and py-spy name them (ncclDevKernel_AllReduce_Sum_f32_RING_LL)
                       r"(?:all[-_]?(?:reduce|gather|to[-_]?all)|reduce[-_]?scatter)"
                       r"(?:[-_](?:into[-_]tensor|tensor|object|single|base|coalesced))*|nccl(?:Dev)?Kernel_\w+|"
                       r"(?:local|global|node|world|group)?[-_]?rank[-_=]?\d+|"  # a process's rank (rank-3)
                       # a network device: EFA's RDMA devices as ibv_devices/fi_info name them (rdmap0s31), an EFA
                       # interface by number, Ethernet and InfiniBand interfaces
                       r"rdmap\d+s\d+(?:-rdm|-dgrm)?|efa[-_]?\d+|eth\d+|ens\d+|enp\d+s\d+\w*|ib\d+|mlx5_\d+|"
                       r"(?-i:[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)|"  # an environment variable (NCCL_TIMEOUT, FI_PROVIDER)
                       r"kube-(?:system|public|node-lease)|"  # the namespaces Kubernetes starts with
                       r"(?:step|global_step|iter|epoch|checkpoint|ckpt)[-_=]?\d+|\d+[smhd]|tcp|udp|ipv4|ipv6|"
                       r"the|a|an|this|that|which|what|each|every|any|all|my|our|your|one|some|its|their|other|same|"
                       r"inference|gpu|training|compute|head|login|spot|worker|hyperpod|sagemaker|s3|efa|new|old|"
                       r"failed|slow|idle|sagemaker|real-time|serverless|async|cluster|is|are|of|for|with|on|to|"
                       r"from|in|no|not|p5|p4d|trn1|g5)$", re.I)
HEAD = re.compile(r"\b(?:the\s+)?(?:head|login)[- ]?node\b|\bthe head\b", re.I)
REACH = re.compile(r"\b(reach(?:able)?|connect(?:ed|s|ion)?|talk|ssh|ping|access|get to|route to|traffic)\b", re.I)


@dataclass(frozen=True)
class Named:
    text: str  # as the tools take it: 's3://bucket' for 'bucket x', 'endpoint/x' is left as the name
    start: int
    strong: bool
    kind: str = ""  # what the cluster's inventory says it is (find_names), when it was looked up


def named_things(question: str, recognised: list[Named] | None = None) -> list[Named]:
    """Names in the question, in order, without repeats (see the module docstring); ``recognised``: the names
    the cluster's inventory found in it (find_names), which come first whatever their shape."""
    found: dict[str, Named] = {n.text: n for n in recognised or ()}

    def add(text: str, start: int, strong: bool) -> None:
        text = text.rstrip(".,;:?!)'\"")
        if NOT_NAMES.match(text) or (text in found and (found[text].strong >= strong or found[text].kind)):
            return
        found[text] = Named(text, start, strong)

    for match in STRONG.finditer(question):
        add(match.group(0), match.start(), True)
    for pattern in (KIND_BEFORE, KIND_AFTER):
        for match in pattern.finditer(question):
            name, kind = match.group(1), match.group(0).lower()
            if not re.search(r"[-_.\d]", name):  # 'the endpoint healthy': names have a hyphen, digit or dot
                continue
            if "bucket" in kind and not name.lower().startswith("s3://"):
                name = f"s3://{name}"
            add(name, match.start(1), True)
    for match in TOKEN.finditer(question):  # weak: a hyphenated word with a digit ('gpu-4', 'worker-group-1')
        token = match.group(0).rstrip(".:")
        if WORD.match(token) and "-" in token and any(c.isdigit() for c in token) and "://" not in token:
            add(token, match.start(), False)
    covered = [n for n in found.values() if n.text.startswith("s3://")]  # 'bucket x' also matched as word x
    names = [n for n in found.values() if not any(c.text == f"s3://{n.text}" for c in covered)]
    return sorted(names, key=lambda n: n.start)


_KINDS = r"(?:node|instance|host|server|endpoint|bucket|security group|instance group)"


def without_names(question: str, names: list[Named]) -> str:
    """The question with the names (and the kind words beside them) blanked, so 'gpu-node-3' does not read as a
    question about GPUs, nor 'the bucket x' as one about storage access: the kind picks the checks."""
    for name in names:
        for text in dict.fromkeys((name.text, name.text.removeprefix("s3://"))):
            word = re.escape(text)
            question = re.sub(rf"\b{_KINDS}\s+(?:called\s+|named\s+)?{word}|{word}\s+{_KINDS}\b|{word}", " it ",
                              question, flags=re.I)
    return question


_PORT = re.compile(r"\b(?:port|tcp/|udp/)\s*(\d{1,5})\b|:(\d{2,5})\b", re.I)
_FROM = re.compile(r"\bfrom\s+(?:the\s+)?$", re.I)


def path_question(question: str, names: list[Named]) -> dict[str, object] | None:
    """why_not's arguments for "can X reach Y (on port P)?" naming at least one thing other than the head node;
    None when the question is not about a path."""
    if not names or not REACH.search(question):
        return None
    lowered = question.lower()
    ends: list[tuple[int, str]] = [(n.start, n.text) for n in names]
    head = HEAD.search(question)
    if head:
        ends.append((head.start(), "head"))
    for word, end in (("internet", "internet"), (" s3", "s3")):
        if word in lowered and not any(e[1].startswith("s3://") for e in ends):
            ends.append((lowered.index(word), end))
    ends.sort()
    sources = [text for start, text in ends if _FROM.search(question[:start])]
    source = sources[0] if sources else (ends[0][1] if len(ends) > 1 else "admin")
    destination = next((text for _, text in ends if text != source), None)
    if destination is None:
        return None
    args: dict[str, object] = {"source": source, "destination": destination}
    port = _PORT.search(question)
    if re.search(r"\befa\b", lowered):
        args["protocol"] = "efa"
    elif port:
        args.update(port=int(port.group(1) or port.group(2)), protocol="udp" if "udp" in lowered else "tcp")
    elif re.search(r"\bssh\b|\blog ?in", lowered):
        args.update(port=22, protocol="tcp")
    elif re.search(r"\bping\b|\bicmp\b", lowered):
        args["protocol"] = "icmp"
    elif destination.startswith("s3") or destination.startswith("fs-") or re.search(r"\bhttps\b", lowered):
        args.update(port=443 if "https" in lowered else None, protocol="tcp")
    else:
        args["protocol"] = "all"
    return {k: v for k, v in args.items() if v is not None}
