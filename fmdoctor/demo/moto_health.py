"""moto shims for the health checks' demo: Spot requests, HyperPod node pagination, and AWS's own side.

Fidelity patches, installed by :func:`fmdoctor.demo.moto_compat.install`:

- ``run_instances`` with ``InstanceMarketOptions`` Spot makes a Spot *instance* in moto but no Spot
  *request*; real EC2 creates a one-time request (``sir-...``) and sets ``SpotInstanceRequestId``. The
  request is created here, so DescribeSpotInstanceRequests sees every Spot node as AWS would.
- moto's ListClusterNodes paginates on an ``arn`` its nodes lack, so every page repeats the first; nodes
  get one here (real HyperPod nodes need none: its service pages them).
- moto names HyperPod nodes ``<instance group>-<n>``; real ListClusterNodes returns EC2 instance ids
  (``i-0123456789abcdef0``, in a SageMaker-owned account), which BatchRebootClusterNodes and
  BatchReplaceClusterNodes take. Nodes get such ids here, so fix hints built from them are real; and
  ListClusterNodes' PrivateDnsHostname, which moto leaves out, is returned once the demo sets one.
- moto has no ListClusterExtensions: it answers as SageMaker does for a cluster without extensions (an empty
  ``Extensions`` list), so metrics.source auto's look for a Slurm cluster's observability extension finds none.

Helpers play AWS's part in the demo story, things no customer API can do: time passing for objects,
instances and endpoints that already exist (:func:`backdate_s3_object`, :func:`backdate_launch`,
:func:`backdate_endpoint`), EC2 marking a Spot request for interruption (:func:`mark_spot_request`),
HyperPod's health agents failing a node (:func:`set_hyperpod_node_status`), HyperPod naming a node's host
(:func:`set_hyperpod_node_dns`) and SageMaker failing an
endpoint's deployment (:func:`fail_endpoint`).
They touch moto's in-process state only; checks read everything back through the ordinary APIs.
"""

from __future__ import annotations

import functools
from datetime import UTC, datetime
from typing import Any

import boto3

from fmdoctor.demo import moto_capacity


def install() -> None:
    moto_capacity.install()  # first: its RunInstances tells capacity-block instances from Spot ones
    _patch_spot_requests()
    _patch_hyperpod_nodes()


def _patch_spot_requests() -> None:
    from moto.ec2.models.spot_requests import SpotInstanceRequest
    from moto.ec2.responses.instances import InstanceResponse
    from moto.ec2.utils import random_spot_request_id

    class AdoptedSpotRequest(SpotInstanceRequest):
        """The one-time request EC2 makes behind a Spot run_instances, adopting the instance moto launched."""

        def __init__(self, backend: Any, instance: Any):
            self._adopted = instance
            super().__init__(
                ec2_backend=backend, spot_request_id=random_spot_request_id(), price="", image_id=instance.image_id,
                spot_instance_type="one-time", valid_from=None, valid_until=None, launch_group=None,
                availability_zone_group=None, key_name=instance.key_name,
                security_groups=[g.id for g in instance.security_groups], user_data=None,
                instance_type=instance.instance_type, placement=None, kernel_id=None, ramdisk_id=None,
                monitoring_enabled=False, subnet_id=instance.subnet_id, tags={}, spot_fleet_id=None,
                instance_interruption_behaviour="terminate",
            )

        def launch_instance(self) -> Any:
            return self._adopted

    original_run = InstanceResponse.run_instances

    @functools.wraps(original_run)
    def run_instances(self: Any) -> Any:
        result = original_run(self)
        for instance in result.result.instances:
            if instance.lifecycle == "spot" and not getattr(instance, "spot_instance_request_id", None):
                request = AdoptedSpotRequest(self.ec2_backend, instance)
                self.ec2_backend.spot_instance_requests[request.id] = request
                instance.spot_instance_request_id = request.id
        return result

    InstanceResponse.run_instances = run_instances

    original_status = SpotInstanceRequest.status

    def status(self: Any) -> dict[str, Any]:
        data = dict(original_status.fget(self))
        updated = getattr(self, "_fmdoctor_update_time", None)
        if updated is not None:  # moto reports 2015-01-01 for every status change
            data["UpdateTime"] = updated.strftime("%Y-%m-%dT%H:%M:%S.000Z")
        return data

    SpotInstanceRequest.status = property(status)


def _patch_hyperpod_nodes() -> None:
    from moto.ec2.utils import random_instance_id
    from moto.sagemaker.models import ClusterNode, SageMakerModelBackend

    original_create = SageMakerModelBackend.create_cluster

    @functools.wraps(original_create)
    def create_cluster(self: Any, *args: Any, **kwargs: Any) -> Any:
        before = set(self.clusters)
        arn = original_create(self, *args, **kwargs)
        for name in set(self.clusters) - before:
            cluster = self.clusters[name]
            for node in cluster.nodes.values():
                node.instance_id = random_instance_id()
            cluster.nodes = {node.instance_id: node for node in cluster.nodes.values()}
        return arn

    SageMakerModelBackend.create_cluster = create_cluster

    ClusterNode.arn = property(
        lambda self: f"arn:aws:sagemaker:{self.region_name}:{self.account_id}:cluster/{self.cluster_name}/"
        f"node/{self.instance_id}"
    )
    original_summary = ClusterNode.summary

    @functools.wraps(original_summary)
    def summary(self: Any) -> dict[str, Any]:
        data = original_summary(self)
        data["InstanceStatus"]["Message"] = getattr(self, "_fmdoctor_message", "")  # moto says "message"
        if getattr(self, "_fmdoctor_private_dns", None):  # moto leaves PrivateDnsHostname out
            data["PrivateDnsHostname"] = self._fmdoctor_private_dns
        return data

    ClusterNode.summary = summary

    from moto.core.responses import ActionResult
    from moto.sagemaker.responses import SageMakerResponse

    if not hasattr(SageMakerResponse, "list_cluster_extensions"):
        SageMakerResponse.list_cluster_extensions = lambda self: ActionResult({"Extensions": []})


@functools.lru_cache(maxsize=8)  # sessions hash by identity; the demo writes many objects with one
def _account(session: boto3.Session) -> str:
    return str(session.client("sts").get_caller_identity()["Account"])


def backdate_s3_object(session: boto3.Session, bucket: str, key: str, when: datetime) -> None:
    """Make an object look written at ``when`` (moto stamps uploads with 'now'; the demo needs history)."""
    from moto.s3.models import s3_backends

    backend = s3_backends[_account(session)]["aws"]
    backend.get_object(bucket, key).last_modified = when.astimezone(UTC).replace(tzinfo=None)


def backdate_launch(session: boto3.Session, region: str, instance_id: str, when: datetime) -> None:
    """Make an instance look launched at ``when`` (every demo node is otherwise seconds old)."""
    from moto.ec2.models import ec2_backends

    instance = ec2_backends[_account(session)][region].get_instance(instance_id)
    instance.launch_time = when.astimezone(UTC).replace(tzinfo=None)


def mark_spot_request(session: boto3.Session, region: str, instance_id: str, code: str, message: str,
                      when: datetime) -> str:
    """Set the status EC2 gives the Spot request of ``instance_id`` when it interrupts it; returns the request id."""
    from moto.ec2.models import ec2_backends

    backend = ec2_backends[_account(session)][region]
    request = next(r for r in backend.spot_instance_requests.values() if r.instance.id == instance_id)
    request._status_code = code
    request.status_message = message
    request._fmdoctor_update_time = when.astimezone(UTC)
    return str(request.id)


def set_hyperpod_node_status(session: boto3.Session, region: str, cluster: str, node_id: str, status: str,
                             message: str) -> None:
    """What HyperPod's health monitoring reports for a node (moto keeps every node 'Running')."""
    from moto.sagemaker.models import sagemaker_backends

    node = sagemaker_backends[_account(session)][region].clusters[cluster].nodes[node_id]
    node.status = status
    node._fmdoctor_message = message


def set_hyperpod_node_dns(session: boto3.Session, region: str, cluster: str, node_id: str, hostname: str) -> None:
    """The PrivateDnsHostname ListClusterNodes reports for a node (ip-10-1-0-10.<region>.compute.internal)."""
    from moto.sagemaker.models import sagemaker_backends

    sagemaker_backends[_account(session)][region].clusters[cluster].nodes[node_id]._fmdoctor_private_dns = hostname


def create_p5_hyperpod(session: boto3.Session, region: str, name: str, workers: int = 4) -> list[str]:
    """A HyperPod cluster of ``workers`` p5 workers and a controller, each worker's ListClusterNodes
    PrivateDnsHostname set as HyperPod sets it (ip-10-1-0-10.<region>.compute.internal, ...); the workers' ids."""
    sagemaker = session.client("sagemaker", region_name=region)
    lifecycle = {"SourceS3Uri": "s3://sagemaker-hp-lifecycle/", "OnCreate": "on_create.sh"}
    role = "arn:aws:iam::123456789012:role/hp-execution"
    sagemaker.create_cluster(ClusterName=name, InstanceGroups=[
        {"InstanceGroupName": "controller", "InstanceType": "ml.m5.xlarge", "InstanceCount": 1,
         "LifeCycleConfig": lifecycle, "ExecutionRole": role, "ThreadsPerCore": 1},
        {"InstanceGroupName": "workers", "InstanceType": "ml.p5.48xlarge", "InstanceCount": workers,
         "LifeCycleConfig": lifecycle, "ExecutionRole": role, "ThreadsPerCore": 1}])
    ids = [n["InstanceId"] for n in sagemaker.list_cluster_nodes(
        ClusterName=name, InstanceGroupNameContains="workers")["ClusterNodeSummaries"]]
    for n, node in enumerate(ids):
        set_hyperpod_node_dns(session, region, name, node, f"ip-10-1-0-{10 + n}.{region}.compute.internal")
    return ids


def _endpoint(session: boto3.Session, region: str, name: str) -> Any:
    from moto.sagemaker.models import sagemaker_backends

    return sagemaker_backends[_account(session)][region].endpoints[name]


def backdate_endpoint(session: boto3.Session, region: str, name: str, when: datetime) -> None:
    """Make an endpoint look created (and last updated) at ``when``: it has served, or idled, since."""
    endpoint = _endpoint(session, region, name)
    endpoint.creation_time = endpoint.last_modified_time = when.astimezone(UTC).replace(tzinfo=None)


def fail_endpoint(session: boto3.Session, region: str, name: str, reason: str, when: datetime) -> None:
    """What SageMaker reports when an endpoint's creation fails (moto makes every endpoint InService)."""
    endpoint = _endpoint(session, region, name)
    endpoint.endpoint_status = "Failed"
    endpoint.failure_reason = reason
    endpoint.last_modified_time = when.astimezone(UTC).replace(tzinfo=None)
