"""fmdoctor.engine.entities over inventories as discovery builds them: what a name resolves to, which findings
are on it or involve it, and a miss that says what could not be read instead of 'not found'."""

from __future__ import annotations

import dataclasses

import pytest

from fmdoctor.engine import entities as e
from fmdoctor.engine.endpoints import Endpoint
from fmdoctor.engine.errors import AwsFailure, TargetNotFound
from fmdoctor.engine.hyperpod import HyperPodCluster, HyperPodGroup
from fmdoctor.engine.inventory import HEAD, Instance, Inventory, NetworkInterface, SecurityGroup, UnavailablePart


def _inventory(**parts) -> Inventory:
    head = Instance("i-00000000000000001", "m5.large", "running", "subnet-a", "vpc-1", "us-west-2a",
                    private_ip="10.0.0.5", role=HEAD, tags={"Name": "head-node"}, interface_ids=("eni-1",))
    node = Instance("i-00000000000000003", "p5.48xlarge", "running", "subnet-a", "vpc-1", "us-west-2a",
                    private_ip="10.0.0.7", tags={"Name": "gpu-node-3"}, interface_ids=("eni-3",))
    fields = {
        "interfaces": {"eni-1": NetworkInterface("eni-1", "subnet-a", "vpc-1", ("sg-1",), ("10.0.0.5",)),
                       "eni-3": NetworkInterface("eni-3", "subnet-a", "vpc-1", ("sg-1",), ("10.0.0.7",))},
        "security_groups": {"sg-1": SecurityGroup("sg-1", "llm-efa", "vpc-1")},
        "endpoints": (Endpoint("llm-chat", "arn:chat", "InService"), Endpoint("llm-chat-canary", "arn:c", "Failed")),
        **parts,
    }
    return Inventory("llm", "us-west-2", (head, node), **fields)


@pytest.mark.parametrize("text, kind, entity_id", [
    ("gpu-node-3", e.NODE, "i-00000000000000003"),
    ("i-00000000000000003", e.NODE, "i-00000000000000003"),
    ("10.0.0.7", e.NODE, "i-00000000000000003"),
    ("eni-3", e.NODE, "i-00000000000000003"),
    ("ip-10-0-0-7.ec2.internal", e.NODE, "i-00000000000000003"),  # any DNS form: the resolver's (issue 36)
    ("ip-10-0-0-7", e.NODE, "i-00000000000000003"),
    ("hyperpod-i-00000000000000003", e.NODE, "i-00000000000000003"),
    ("head", e.NODE, "i-00000000000000001"),
    ("llm-efa", e.SECURITY_GROUP, "sg-1"),
    ("llm-chat", e.ENDPOINT, "llm-chat"),
    ("endpoint/llm-chat-canary", e.ENDPOINT, "llm-chat-canary"),
    ("s3://ckpts/run-1/", e.BUCKET, "ckpts"),
])
def test_names_resolve_in_order(text, kind, entity_id):
    entity = e.find_entity(_inventory(), text)
    assert (entity.kind, entity.id) == (kind, entity_id)


def test_a_miss_names_what_was_tried_and_what_is_close():
    with pytest.raises(TargetNotFound) as caught:
        e.find_entity(_inventory(), "gpu-node-9")
    message = caught.value.message
    assert ("'gpu-node-9' is not a node, group, endpoint, file system, job or bucket of cluster llm (tried, in order:"
            in message)
    assert caught.value.hint == "did you mean gpu-node-3?"
    with pytest.raises(TargetNotFound):
        e.find_entity(_inventory(), "ckpts")  # a bare word is never a bucket


def test_a_miss_where_part_of_the_inventory_was_unreadable_says_so():
    denied = UnavailablePart("security_groups", AwsFailure("UnauthorizedOperation", "no", "ec2:DescribeSecurityGroups",
                                                           "access-denied"))
    with pytest.raises(TargetNotFound, match="not verified: security groups could not be read, so it may be there"):
        e.find_entity(_inventory(security_groups=denied), "llm-efa")
    assert e.find_entity(_inventory(security_groups=denied), "gpu-node-3").kind == e.NODE


def test_findings_on_and_involving_a_thing():
    node = e.find_entity(_inventory(), "gpu-node-3")
    chat = e.find_entity(_inventory(), "llm-chat")

    def finding(resource, summary="", **evidence):
        return {"check": "c", "resource": resource, "summary": summary, "evidence": evidence}

    assert e.relation(node, finding("i-00000000000000003")) == e.ON
    assert e.relation(node, finding("sg-1")) == e.INVOLVES  # its security group
    assert e.relation(node, finding("fs-1", instances=["i-00000000000000003"])) == e.INVOLVES
    assert e.relation(node, finding("i-00000000000000001", "head-node (i-00000000000000001)")) is None
    assert e.relation(chat, finding("endpoint/llm-chat/variant/AllTraffic")) == e.ON
    assert e.relation(chat, finding("endpoint/llm-chat-canary", "llm-chat-canary is Failed")) is None
    assert e.concerns_error(node, {"unverified": "GPU idleness of gpu-node-3 (i-00000000000000003)"}, [])
    assert not e.concerns_error(node, {"unverified": "of i-00000000000000001"}, ["i-00000000000000001"])
    assert e.concerns_error(node, {"unverified": "everything gpu-idle checks"}, ["i-00000000000000001"])


KNOWN = e.Known(locations=("s3://ckpts/llama-70b/run-0412/", "fsx://fs-0123456789abcdef0/eval/"),
                file_systems={"fs-0123456789abcdef0": "llm-scratch", "fs-00000000000000aaa": ""})


@pytest.mark.parametrize("text, kind, entity_id", [
    ("llm-scratch", e.FILE_SYSTEM, "fs-0123456789abcdef0"),  # its Name tag
    ("fs-0123456789abcdef0", e.FILE_SYSTEM, "fs-0123456789abcdef0"),
    ("fsx://fs-0123456789abcdef0/eval", e.FILE_SYSTEM, "fs-0123456789abcdef0"),
    ("fs-00000000000000bbb", e.FILE_SYSTEM, "fs-00000000000000bbb"),  # an FSx id, like s3://, names one anyway
    ("run-0412", e.JOB, "run-0412"),  # the run a checkpoint location names
    ("llama-70b/run-0412", e.JOB, "llama-70b/run-0412"),
    ("ckpts", e.BUCKET, "ckpts"),  # the bare name of a checkpoint location's bucket
    ("s3://other-bucket", e.BUCKET, "other-bucket"),
])
def test_names_from_the_settings_resolve(text, kind, entity_id):
    entity = e.find_entity(_inventory(), text, KNOWN)
    assert (entity.kind, entity.id) == (kind, entity_id)


def test_a_miss_with_known_names_suggests_them():
    with pytest.raises(TargetNotFound) as caught:
        e.find_entity(_inventory(), "llm-scratc", KNOWN)
    assert caught.value.hint.startswith("did you mean llm-scratch?")
    assert "an FSx file system (fs-0123456789abcdef0, fs-00000000000000aaa)" in caught.value.message


@pytest.mark.parametrize("question, found", [
    ("why is llm-chat slow?", [("llm-chat", e.ENDPOINT)]),  # no digit, no 'endpoint': the inventory knows it
    ("is ip-10-0-0-7.ec2.internal healthy?", [("ip-10-0-0-7.ec2.internal", e.NODE)]),
    ("does llm-efa block gpu-node-3, or 10.0.0.7?", [("llm-efa", e.SECURITY_GROUP), ("gpu-node-3", e.NODE)]),
    ("is llm-scratch full and run-0412 stalled?", [("llm-scratch", e.FILE_SYSTEM), ("run-0412", e.JOB)]),
    ("what is wrong with ckpts?", [("ckpts", e.BUCKET)]),
    ("is llama-70b healthy?", []),  # shaped like a name, but nothing of the cluster
    ("is the head node healthy?", []),  # 'head' is left to the planner (an English word too)
    # typographic quotes and apostrophes (a chat client's, a word processor's) are not part of a name
    ("is “gpu-node-3” ok? and ‘llm-chat’?", [("gpu-node-3", e.NODE), ("llm-chat", e.ENDPOINT)]),
    ("is *gpu-node-3* ok? and <llm-chat>, [ckpts]?", [("gpu-node-3", e.NODE), ("llm-chat", e.ENDPOINT),
                                                    ("ckpts", e.BUCKET)]),
    ("gpu-node-3’s GPUs, «llm-efa», „run-0412“", [("gpu-node-3", e.NODE), ("llm-efa", e.SECURITY_GROUP),
                                                ("run-0412", e.JOB)]),
    # as a person reads it: non-breaking hyphens pasted from a document, fullwidth letters, a zero-width space
    ("is gpu\u2011node\u20113 ok?", [("gpu\u2011node\u20113", e.NODE)]),
    ("is \uff47\uff50\uff55-node-3 ok, and llm\u200b-chat?", [("\uff47\uff50\uff55-node-3", e.NODE),
                                                           ("llm\u200b-chat", e.ENDPOINT)]),
])
def test_names_in_a_sentence_come_from_the_inventory(question, found):
    assert [(word, entity.kind) for word, entity in e.mentioned(_inventory(), question, KNOWN)] == found


def test_a_word_shaped_like_a_name_close_to_one_is_a_near_miss():
    found = [w for w, _ in e.mentioned(_inventory(), "is llm-chatt or gpu-node-3 slow?", KNOWN)]
    close = e.near_misses(_inventory(), "is llm-chatt or gpu-node-3 slow?", KNOWN, found)
    assert list(close) == ["llm-chatt"] and close["llm-chatt"][0] == "llm-chat"  # gpu-node-3 is a name: no miss
    assert e.near_misses(_inventory(), "is the chat endpoint slow? my cluster is healthy", KNOWN) == {}


def test_every_cluster_check_says_what_it_concerns():
    from fmdoctor.engine.registry import default_registry

    checks = default_registry().select(None)
    assert all(c.concerns and c.concerns <= e.KINDS for c in checks), [c.id for c in checks if not c.concerns]
    node = e.find_entity(_inventory(), "gpu-node-3")
    for_node = e.checks_for(node, checks)
    assert {"training-stalled", "capacity-block-expiring", "spot-interruption", "gpu-xid-metrics"} <= set(for_node)
    assert not {"inference-latency-slo", "checkpoint-stale"} & set(for_node)  # not a serving node, no checkpoints
    chat = e.find_entity(_inventory(), "llm-chat")
    assert set(e.checks_for(chat, checks)) == {c.id for c in checks if c.family == "inference"}
    job = e.find_entity(_inventory(), "run-0412", KNOWN)
    assert {"training-stalled", "checkpoint-stale", "spot-interruption-unprotected", "capacity-block-expiring"} \
        <= set(e.checks_for(job, checks))
    fs = e.find_entity(_inventory(), "llm-scratch", KNOWN)
    assert "fsx-unreachable" in e.checks_for(fs, checks) and "gpu-idle" not in e.checks_for(fs, checks)


def test_a_job_is_on_its_checkpoints_and_involved_in_its_checks_findings():
    job = e.find_entity(_inventory(), "run-0412", KNOWN)
    finding = {"check": "checkpoint-stale", "resource": "s3://ckpts/llama-70b/run-0412/", "summary": ""}
    assert e.relation(job, finding) == e.ON
    stalled = {"check": "training-stalled", "resource": "i-00000000000000003", "summary": "Training stalled"}
    assert e.relation(job, stalled) is None
    assert e.relation(job, stalled, via=["training-stalled"]) == e.INVOLVES
    other_run = {"check": "checkpoint-missing", "resource": "s3://ckpts/llama-70b/eval-0412/", "summary": ""}
    assert e.relation(job, other_run, via=["checkpoint-missing"]) is None


def test_a_folder_named_like_a_word_is_no_run():
    known = e.Known(locations=("s3://ckpts/llm/checkpoints/", "s3://ckpts/llm/run-7/"))
    assert set(known.runs()) == {"run-7", "llm/run-7"}
    assert e.mentioned(_inventory(), "are the checkpoints of run-7 fresh?", known)[0][1].kind == e.JOB
    assert [w for w, _ in e.mentioned(_inventory(), "are the checkpoints of run-7 fresh?", known)] == ["run-7"]


@pytest.mark.parametrize("text, known, named", [
    ("is gpu-node-2 of cluster prod-train healthy?", (), ["prod-train"]),
    ("is the prod-train cluster ok?", (), ["prod-train"]),
    ("cluster named 'llm_70b' health", (), ["llm_70b"]),
    ("how is prod-train today?", ("prod-train",), ["prod-train"]),  # a configured name, shaped as a name
    ("how is prod today?", ("prod",), []),  # a plain word counts only where it stands as a cluster's name
    ("is the cluster prod ok? and the train cluster?", ("prod", "train"), ["prod", "train"]),
    ("on prod, is it ok?", ("prod",), ["prod"]),  # opening the question, as a place
    ("why is training slow? is the train job slow? train/val split?", ("train", "training"), []),
    ("is @prod:gpu-node-3 ok?", ("prod",), ["prod"]),
    ("compare cluster a-1 with the b-2 cluster", (), ["a-1", "b-2"]),
    ("is my cluster healthy?", (), []),
    ("is the whole cluster slow?", (), []),
    ("is the p5 cluster slow?", (), []),  # an instance family
    ("the p4d.24xlarge cluster", (), []),  # an instance type
    ("a 16-node cluster", (), []),  # a size
    ("the us-west-2 cluster", (), []),  # a region
    ("is the cluster-wide EFA ok?", (), []),
    ("the 8xH100 cluster", (), []),  # a count of accelerators
    ("my 2nd cluster", (), []),  # an ordinal
    ("is the 70B cluster or the 1.5b cluster slow? the 80GB cluster?", (), []),  # a model's size, memory
    ("the EKS-1.29 cluster and the k8s-1.30 cluster", (), []),  # versions
    ("is the cluster 10.0.1.12 slow", (), []),  # a node's address
    ("cluster i-0abc1234 health", (), []),  # a node's id
    ("the cluster ip-10-0-1-12 node", (), []),  # a node's DNS name
    ("the k8s-prod cluster", (), ["k8s-prod"]),  # begins like an instance family, but is a name
    ("the p5-train cluster", (), ["p5-train"]),
    ("see arn:aws:eks:us-west-2:123456789012:cluster/prod-eks", (), ["prod-eks"]),  # an EKS cluster's ARN
    ("https://console.aws.amazon.com/eks/home?region=us-west-2#/clusters/eks-b", (), ["eks-b"]),
    ("https://console.aws.amazon.com/sagemaker/home#/cluster-management/hp-b", (), ["hp-b"]),
    ("see https://example.com/x/prod?c=prod", ("prod",), []),  # another site's path
    ("is s3://ckpt/prod-train/run-1 fresh?", ("prod-train",), []),  # a path of a bucket both clusters use
    ("is prod-train/gpu-node-2 ok? and @prod-train:gpu-node-3?", ("prod-train",), ["prod-train"]),  # cluster/node
    ("arn:aws:eks:us-west-2:1:cluster/prod is slow", ("prod",), ["prod"]),  # a configured name in an ARN
    ("https://us-west-2.console.aws.amazon.com/sagemaker/home#/cluster-management/prod", ("prod",), ["prod"]),
    ("arn:aws:sagemaker:us-west-2:123456789012:cluster/2hd31rmi9mde", (),  # an id, not a name: the ARN stands
     ["arn:aws:sagemaker:us-west-2:123456789012:cluster/2hd31rmi9mde"]),
    ("the us-west-2a cluster or the usw2-az1 cluster", (), []),  # Availability Zones
    ("is /fsx/clusters/run-7/checkpoints fresh?", (), []),  # a path, not a console address
    ("see https://github.com/org/infra/clusters/prod-eks", (), []),
    # a configuration or a command line pasted: 'cluster: x', 'cluster=x', '--cluster=x', 'cluster_name: x'
    ("is gpu-node-2 of cluster: staging-9 ok?", (), ["staging-9"]),
    ("fmdoctor ask --cluster=staging-9 is gpu-node-2 ok", (), ["staging-9"]),
    ("hyperpod:\n  cluster_name: hp-b\nis gpu-node-2 ok?", (), ["hp-b"]),
    ("is gpu-node-2 in clusters staging-9 and prod-b?", (), ["staging-9"]),
    # the AWS CLI's, eksctl's, HyperPod CLI's and Slurm's own flags (sbatch -M/--clusters)
    ("aws sagemaker describe-cluster --cluster-name hp-b; eksctl get nodegroup --cluster eks-b", (), ["hp-b", "eks-b"]),
    ("sbatch --clusters=slurm-b train.sbatch hangs on gpu-node-2", (), ["slurm-b"]),
    # the kind of cluster between its name and the word
    ("is gpu-node-2 in the staging-9 EKS cluster? the hp-b HyperPod cluster?", (), ["staging-9", "hp-b"]),
    ("is the 16-node EKS cluster ok? the p5 Slurm cluster? the us-west-2 EKS cluster?", (), []),
    ("is the cluster-wide EFA ok? cluster: is it ok?", (), []),
    # another partition's or an EKS resource's ARN, GovCloud's console, the EKS console's path addresses
    ("is arn:aws-us-gov:eks:us-gov-west-1:123456789012:cluster/gov-eks ok?", (), ["gov-eks"]),
    ("arn:aws:eks:us-west-2:123456789012:nodegroup/eks-b/p5-workers/8ec5a1d2-0b3c-4e0f-9d6a-0c1f6a2b3c4d", (),
     ["eks-b"]),
    ("arn:aws-cn:eks:cn-north-1:123456789012:addon/eks-cn/vpc-cni/a2c5d6e7-1111-2222-3333-444455556666", (),
     ["eks-cn"]),
    ("https://console.amazonaws-us-gov.com/eks/home?region=us-gov-west-1#/clusters/gov-eks", (), ["gov-eks"]),
    ("https://us-west-2.console.aws.amazon.com/eks/clusters/eks-b?region=us-west-2&selectedTab=nodes", (),
     ["eks-b"]),
    # read as a person reads it: fullwidth letters, a zero-width space, a non-breaking hyphen
    ("is gpu-node-2 of \uff43luster staging-9 ok?", (), ["staging-9"]),
    ("is gpu-node-2 of clus\u200bter staging-9 ok?", (), ["staging-9"]),
    ("is gpu-node-2 of cluster staging\u20119 ok?", (), ["staging-9"]),
    ("is gpu-node-2 of cluster \uff33\uff34\uff21\uff27\uff29\uff2e\uff27-9 ok?", (), ["STAGING-9"]),
    ("is gpu-node-2 on pr\u200bod-train?", ("prod-train",), ["prod-train"]),  # a configured name, split unseen
    ("is gpu-node-2 on\u2028prod-train?", ("prod-train",), ["prod-train"]),  # a line separator separates words
])
def test_the_clusters_a_question_names(text, known, named):
    from fmdoctor.engine.entities import clusters_named

    assert clusters_named(text, known) == named


# the things of a cluster, as the inventory would resolve them (names_a_thing), for the table below
THINGS = {"gpu-node-2", "gpu-node-3", "demo-llm-chat", "efa-sg", "workers-p5", "run-0412", "llama-70b/run-0412",
          "prod"}


@pytest.mark.parametrize("text, known, named", [
    ("is gpu-node-2 on prod-train healthy?", (), ["prod-train"]),  # right after a thing of the cluster
    ("is demo-llm-chat in staging-9 slow?", (), ["staging-9"]),
    ("is gpu-node-2 healthy on prod-train?", (), ["prod-train"]),  # ending a clause that names a thing of it
    ("is demo-llm-chat still slow in staging-9, or fine?", (), ["staging-9"]),
    ("is gpu-node-2 slow in multi-node runs?", (), []),  # not where the clause ends: a word of the trade
    ("is the job slow on multi-node?", (), []),  # a clause that names nothing of the cluster
    ("gpu-node-2 is slow. Is it bad on multi-node?", (), []),  # the thing is in another sentence
    ("On prod-train, is gpu-node-2 ok?", (), ["prod-train"]),  # opening the question
    ("gpu-node-2 is slow. In prod_b, is it?", (), ["prod_b"]),  # opening a sentence
    ("is prod-train/gpu-node-2 ok? and @staging-9:gpu-node-3?", (), ["prod-train", "staging-9"]),
    ("is gpu-node-2 on staging healthy?", ("staging",), ["staging"]),  # a configured plain-word name as a place
    ("is gpu-node-2 on prod healthy?", ("prod",), []),  # ... unless a thing of this cluster has that name
    ("is gpu-node-2 on gpu-node-3's switch?", (), []),  # a thing of this cluster
    ("is gpu-node-2 in workers-p5?", (), []),  # its instance group
    ("is gpu-node-2 in efa-sg?", (), []),  # its security group
    ("is gpu-node-2 on us-west-2a?", (), []),  # a zone
    ("is gpu-node-2 on p5.48xlarge, in ml.p5.48xlarge?", (), []),  # instance types
    ("is gpu-node-2 in llama-70b or in a100-80gb?", (), []),  # a model's or memory's size in the name
    ("is gpu-node-2 on v2.5 or in EKS-1.29?", (), []),  # versions
    ("is gpu-node-2 in train.py?", (), []),  # a file: no cluster name has a dot
    ("is gpu-node-2 on i-0abc1234 or sg-0abc1234?", (), []),  # ids
    ("is NCCL stuck in all-reduce on gpu-node-2?", (), []),  # 'in' after a word, not a thing of the cluster
    ("is the job slow on multi-node runs?", (), []),
    ("is llama-70b/run-0412 fresh?", (), []),  # a run of the cluster, as it stands
    ("is s3://ckpt/prod-train/run-0412 fresh? see /fsx/prod-train/gpu-node-2", (), []),  # paths
    ("is gpu-node-2 on prod healthy?", (), []),  # 'prod' is a thing of the cluster here (a Name tag)
    ("is gpu-node-2 on gpu-node-2x?", (), ["gpu-node-2x"]),  # no thing of the cluster: maybe another cluster
    ("is the demo-llm-chat endpoint on prod-train slow?", (), ["prod-train"]),  # its kind between
    ("is the gpu-node-2 node in staging-9 ok?", (), ["staging-9"]),
    ("is the job on multi-node slow? the node in us-west-2a?", (), []),  # a kind word after no thing
    ("is gpu-node-2 of staging-9 slow?", (), ["staging-9"]),  # 'of' places it as 'on' and 'in' do
    ("what is the state of gpu-node-2? the rest of gpu-node-3? the logs of step-4000?", (), []),
    # Markdown's and Slack's marks around a name are no part of it
    ("is *gpu-node-2* on *staging-9*? and gpu-node-3 in <prod_b>, [hp-c] or ~eks-d~?", (),
     ["staging-9", "prod_b"]),
])
def test_a_name_standing_where_a_clusters_does(text, known, named):
    from fmdoctor.engine.entities import PLACED, cluster_mentions

    mentions = cluster_mentions(text, known, names=lambda w: w.lower() in THINGS)
    assert [m.name for m in mentions] == named
    assert all(m.how == e.NAMED or (m.how == PLACED and not m.sure) for m in mentions)
    assert e.clusters_named(text, known) == [m.name for m in mentions if m.how == e.NAMED]  # without the inventory


@pytest.mark.parametrize("text, named", [
    ("is the cluster gpu-node-2 slow? my cluster: gpu-node-3 is down", []),  # its things beside the word
    ("is the cluster gpu-node-2x slow?", ["gpu-node-2x"]),  # nothing of it: a cluster's name
])
def test_a_thing_of_the_cluster_beside_the_word_is_no_cluster(text, named):
    assert [m.name for m in e.cluster_mentions(text, (), names=lambda w: w.lower() in THINGS)] == named


@pytest.mark.parametrize("text, how, cluster_id", [
    ("arn:aws:sagemaker:us-west-2:123456789012:cluster/2hd31rmi9mde", e.HYPERPOD_ARN, "2hd31rmi9mde"),
    ("arn:aws-cn:sagemaker:cn-north-1:123456789012:cluster/abcdefghij12", e.HYPERPOD_ARN, "abcdefghij12"),
    ("arn:aws:eks:us-west-2:123456789012:cluster/prod-eks", e.EKS_ARN, None),
    ("https://console.aws.amazon.com/eks/home#/clusters/eks-b", e.CONSOLE, None),
    ("the prod-eks cluster", e.BESIDE, None),
])
def test_how_a_cluster_is_named(text, how, cluster_id):
    [mention] = e.cluster_mentions(text)
    assert (mention.how, mention.cluster_id, mention.sure) == (how, cluster_id, True)


def test_the_identities_of_a_cluster():
    """Its name, its HyperPod cluster's name, ARN and id, the EKS cluster that HyperPod cluster runs in, and the
    cluster names its instances' tags carry."""
    from fmdoctor.engine.hyperpod import HyperPodCluster

    hyperpod = HyperPodCluster("hp-a", "arn:aws:sagemaker:us-west-2:123456789012:cluster/2hd31rmi9mde", "InService",
                               eks_cluster_arn="arn:aws:eks:us-west-2:123456789012:cluster/eks-a")
    tagged = Instance("i-00000000000000009", "p5.48xlarge", "running", "subnet-a", "vpc-1", "us-west-2a",
                      tags={"eks:cluster-name": "EKS-Prod", "Name": "gpu-node-9"})
    inventory = Inventory("llm", "us-west-2", (tagged,), hyperpod=hyperpod)
    assert e.cluster_identities(inventory) == {
        "llm", "hp-a", "arn:aws:sagemaker:us-west-2:123456789012:cluster/2hd31rmi9mde", "2hd31rmi9mde",
        "arn:aws:eks:us-west-2:123456789012:cluster/eks-a", "eks-a", "eks-prod"}


@pytest.mark.parametrize("name, meant, typo", [
    ("llm-trian", "llm-train", True), ("LLM-TRAIN", "llm-train", True), ("llm-trainn", "llm-train", True),
    ("llm_train", "llm-train", True), ("llm-train-2", "llm-train", False), ("prod-3", "prod-2", False),
    ("prod-train", "llm-train", False), ("llm-tr", "llm-train", False),
])
def test_a_mistyped_name(name, meant, typo):
    assert e.mistyped(name, meant) is typo


@pytest.mark.parametrize("question, found", [
    ("why is chatbot slow?", [("chatbot", e.ENDPOINT)]),  # a plain word: no hyphen, digit or kind word
    ("is Chatbot ok?", []),  # endpoint names are case-sensitive in SageMaker: another name
    ("is LLM scratch full?", [("LLM scratch", e.FILE_SYSTEM)]),  # a Name tag of two words, as it stands
    ("is llm scratch full, and gpu node 7?", [("LLM scratch", e.FILE_SYSTEM), ("GPU node 7", e.NODE)]),
    ("is the scratch space of gpu node 70 full?", []),  # parts of names are no names
    ("does sg default block it?", [("default", e.SECURITY_GROUP)]),
    ("does the default security group block it?", [("default", e.SECURITY_GROUP)]),
    ("is the default NCCL timeout too short?", []),  # a word of the language, not the security group
    ("is the worker group healthy?", [("worker", e.INSTANCE_GROUP)]),
    ("is the worker on gpu node 7 healthy?", [("GPU node 7", e.NODE)]),
])
def test_plain_word_and_several_word_names_come_from_the_inventory(question, found):
    seven = Instance("i-00000000000000007", "p5.48xlarge", "running", "subnet-a", "vpc-1", "us-west-2a",
                     private_ip="10.0.0.9", tags={"Name": "GPU node 7"})
    base = _inventory()
    inventory = Inventory("llm", "us-west-2", (*base.instances, seven),
                          interfaces=dict(base.interfaces.items()),
                          security_groups={"sg-2": SecurityGroup("sg-2", "default", "vpc-1")},
                          endpoints=(Endpoint("chatbot", "arn:bot", "InService"),),
                          hyperpod=HyperPodCluster("hp", "arn:hp", "InService",
                                                   groups=(HyperPodGroup("worker", "ml.p5.48xlarge", 1, 1),)))
    known = e.Known(file_systems={"fs-0123456789abcdef0": "LLM scratch"})
    assert [(word, entity.kind) for word, entity in e.mentioned(inventory, question, known)] == found


def test_a_hostname_tag_the_configuration_names_resolves_for_every_reader():
    """``gpu.hostname_tags`` names the tag that holds a node's Slurm host name (ParallelCluster's
    ``queue1-st-p5-3``): the inventory carries the setting, so a question ("is queue1-st-p5-3 ok?"), why-not and
    every other reader of node names resolve it, not only the callers that were handed the setting."""
    base = _inventory()
    tagged = dataclasses.replace(base.instances[1], tags={**base.instances[1].tags, "slurm:hostname": "queue1-st-p5-3"})
    inventory = dataclasses.replace(Inventory("llm", "us-west-2", (base.instances[0], tagged),
                                              interfaces=dict(base.interfaces.items())),
                                    hostname_tags=("slurm:hostname",))
    entity = e.find_entity(inventory, "queue1-st-p5-3")
    assert (entity.kind, entity.id) == (e.NODE, "i-00000000000000003")
    assert [w for w, _ in e.mentioned(inventory, "is queue1-st-p5-3 ok?")] == ["queue1-st-p5-3"]
    with pytest.raises(TargetNotFound):  # without the setting the tag is just a tag
        e.find_entity(dataclasses.replace(inventory, hostname_tags=()), "queue1-st-p5-3")


def test_a_long_question_is_looked_up_in_the_inventory_as_far_as_find_names_reads():
    """The inventory is asked about the first 200 words only (mentioned's limit): a pasted log of 15,000 words with
    a name-shaped word after every 'on' would otherwise look each one up."""
    asked: list[str] = []

    def names(word: str) -> bool:
        asked.append(word)
        return word == "gpu-node-2"

    text = "is gpu-node-2 on prod-train healthy? " + " ".join(f"word{i} on x-{i}" for i in range(5000))
    assert [m.name for m in e.cluster_mentions(text, (), names)] == ["prod-train"]
    assert len(asked) <= 2 * 200


def test_a_thing_beside_the_word_cluster_in_a_long_question_is_looked_up_within_the_limit():
    """'the cluster gpu-node-2' opening a question with a pasted log after it is still a thing of the cluster; a name
    beside 'cluster' past the first 200 words is not looked up (it counts as a cluster's, as without an inventory)."""
    log = " ".join(f"word{i}" for i in range(500))
    names = e.cluster_mentions(f"is the cluster gpu-node-2 slow? {log} cluster gpu-node-3",
                               (), names=lambda w: w.lower() in THINGS)
    assert [m.name for m in names] == ["gpu-node-3"]
