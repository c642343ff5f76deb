"""VPC endpoint policies: AWS's default full-access policy passes; any other is reported as not evaluated.

The VPC guide (docs.aws.amazon.com/vpc/latest/privatelink/vpc-endpoints-access.html): "An endpoint policy is a
resource-based policy that you attach to a VPC endpoint to control which AWS principals can use the endpoint to
access an AWS service", and "The default endpoint policy grants full access to the endpoint" (Allow, Principal
"*", Action "*", Resource "*"). A custom one admits only what it names, which fmdoctor does not evaluate, so a
path through it is "not verified", never "pass".
"""

from __future__ import annotations

import json

from fmdoctor.net.hops import Trace
from fmdoctor.net.topology import VpcEndpoint


def endpoint_policy(trace: Trace, endpoint: VpcEndpoint, what: str) -> None:
    """An endpoint with AWS's full-access policy passes; a custom policy decides which buckets and actions go
    through it, which is not evaluated, so the path is not verified (never healthy by assumption)."""
    if full_access(endpoint.policy):
        trace.hop("vpc-endpoint", endpoint.id, f"{what} (full-access policy)")
    else:
        trace.unverified("vpc-endpoint", endpoint.id, f"{what}: its custom endpoint policy decides which buckets "
                         "and actions it admits, and fmdoctor does not evaluate it; check it admits the buckets the "
                         "nodes use (aws ec2 describe-vpc-endpoints --query 'VpcEndpoints[].PolicyDocument')")


def full_access(policy: str | None) -> bool:
    """AWS's default policy (or one that says the same): an unconditional allow of everything, and no deny."""
    if not policy:
        return True
    try:
        statements = json.loads(policy).get("Statement", [])
    except (ValueError, AttributeError):
        return False
    statements = statements if isinstance(statements, list) else [statements]
    if any(not isinstance(s, dict) or s.get("Effect") != "Allow" for s in statements):
        return False
    return any(s.get("Effect") == "Allow" and s.get("Principal") in ("*", {"AWS": "*"}) and s.get("Action") in
               ("*", ["*"]) and s.get("Resource") in ("*", ["*"]) and not s.get("Condition") for s in statements)
