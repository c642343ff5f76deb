"""Which accounts and regions a fleet scan covers: the accounts file, AWS Organizations, shards.

The accounts file is YAML (a mapping with ``accounts:``, or a bare list) or plain lines of account
ids. It is read with YAML's string-only loader, so ``012345678901`` stays an account id and never
becomes an octal number.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from fmdoctor.config import Region, Settings, _describe_validation, validate_region
from fmdoctor.engine.errors import AwsUnavailable, ConfigError, UsageError, describe_aws_failure

ACCOUNT_ID = re.compile(r"^\d{12}$")
ROLE_NAME = re.compile(r"^[A-Za-z0-9_+=,.@/-]{1,512}$")  # a role name, optionally under its path
ROLE_ARN = re.compile(r"^arn:aws[a-z-]*:iam::(\d{12}):role/[A-Za-z0-9_+=,.@/-]+$")
EXTERNAL_ID = re.compile(r"^[A-Za-z0-9_+=,.@:/-]{2,1224}$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AccountEntry(_Strict):
    """One line of the accounts file; unset fields take the file's defaults, then the flags'."""

    id: str
    name: str | None = None
    role_name: str | None = Field(None, pattern=ROLE_NAME.pattern)
    role_arn: str | None = Field(None, pattern=ROLE_ARN.pattern)
    external_id: str | None = Field(None, pattern=EXTERNAL_ID.pattern)
    regions: list[Region] | None = None

    @field_validator("id")
    @classmethod
    def _account_id(cls, value: str) -> str:
        if not ACCOUNT_ID.match(value):
            raise ValueError(f"{value!r} is not a 12-digit account id")
        return value


class AccountsFile(_Strict):
    role_name: str | None = Field(None, pattern=ROLE_NAME.pattern)
    external_id: str | None = Field(None, pattern=EXTERNAL_ID.pattern)
    regions: list[Region] | None = None
    accounts: list[AccountEntry] = Field(min_length=1)

    @field_validator("accounts", mode="before")
    @classmethod
    def _bare_ids(cls, value: Any) -> Any:
        # '- "111111111111"' is shorthand for '- id: "111111111111"'.
        if isinstance(value, list):
            return [{"id": v} if isinstance(v, str) else v for v in value]
        return value


@dataclass(frozen=True)
class AccountTarget:
    """One account to scan: how to get in (``role_arn`` None means the caller's own credentials)."""

    account_id: str
    regions: tuple[str, ...]
    role_arn: str | None = None
    external_id: str | None = None
    name: str | None = None


@dataclass(frozen=True)
class FleetPlan:
    """What to scan. ``accounts`` empty: the caller's own account; ``organization``: list it at scan time."""

    regions: tuple[str, ...]
    accounts: tuple[AccountTarget, ...] = ()
    organization: bool = False
    role_name: str = "fmdoctor-read-only"
    external_id: str | None = None
    shard: tuple[int, int] | None = None  # (index, count): this run takes every count-th account from index
    home_region: str | None = None  # where STS and Organizations are called (default: the first region)
    tag_keys: tuple[str, ...] = field(default_factory=tuple)

    @property
    def sts_region(self) -> str:
        return self.home_region or self.regions[0]


def partition_for(region: str) -> str:
    if region.startswith("cn-"):
        return "aws-cn"
    if region.startswith("us-gov-"):
        return "aws-us-gov"
    return "aws"


def role_arn_for(account_id: str, role_name: str, region: str = "us-east-1") -> str:
    return f"arn:{partition_for(region)}:iam::{account_id}:role/{role_name.strip('/')}"


def load_accounts_file(path: str, role_name: str, regions: Sequence[str],
                       external_id: str | None = None) -> list[AccountTarget]:
    """Targets from FILE; per-account values beat the file's defaults, which beat ``role_name``/``regions``."""
    try:
        text = Path(path).expanduser().read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read accounts file {path}: {exc}") from None
    return parse_accounts(text, path, role_name, regions, external_id)


def parse_accounts(text: str, source: str, role_name: str, regions: Sequence[str],
                   external_id: str | None = None) -> list[AccountTarget]:
    try:
        root = yaml.compose(text, Loader=yaml.BaseLoader)
        data = yaml.load(text, Loader=yaml.BaseLoader)  # BaseLoader builds only str, list and dict
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML ({getattr(exc, 'problem', None) or exc})") from None
    if isinstance(data, str) or data is None:
        data = {"accounts": _plain_lines(text, source)}
    elif isinstance(data, list):
        data = {"accounts": data}
    try:
        parsed = AccountsFile.model_validate(data)
    except ValidationError as exc:
        described = _describe_validation(exc, root if isinstance(root, yaml.MappingNode) else None, source)
        raise ConfigError(described.replace("invalid configuration", "invalid accounts file")) from None
    seen: set[str] = set()
    targets = []
    for entry in parsed.accounts:
        if entry.id in seen:
            raise ConfigError(f"{source}: account {entry.id} is listed twice")
        seen.add(entry.id)
        chosen = tuple(entry.regions or parsed.regions or regions)
        if not chosen:
            raise ConfigError(f"{source}: account {entry.id} has no regions",
                              hint="pass --regions, or set regions in the file or fleet.regions in the config")
        arn = entry.role_arn or role_arn_for(entry.id, entry.role_name or parsed.role_name or role_name, chosen[0])
        match = ROLE_ARN.match(arn)
        if match and match.group(1) != entry.id:
            raise ConfigError(f"{source}: account {entry.id}: role_arn {arn} is in account {match.group(1)}")
        targets.append(AccountTarget(entry.id, chosen, arn, entry.external_id or parsed.external_id or external_id,
                                     entry.name))
    return targets


def _plain_lines(text: str, source: str) -> list[str]:
    ids = []
    for number, line in enumerate(text.splitlines(), start=1):
        value = line.split("#", 1)[0].strip()
        if not value:
            continue
        if not ACCOUNT_ID.match(value):
            raise ConfigError(f"{source}:{number}: {value!r} is not a 12-digit account id",
                              hint="one account id per line, or YAML with 'accounts:' for per-account roles")
        ids.append(value)
    return ids


def parse_shard(value: str) -> tuple[int, int]:
    """'2/4' -> (2, 4): the third of four shards (0-based, as a Kubernetes Indexed Job numbers its pods)."""
    match = re.fullmatch(r"(\d+)/(\d+)", value.strip())
    if not match or not 0 <= int(match.group(1)) < int(match.group(2)):
        raise UsageError(f"--shard {value!r}: expected INDEX/COUNT with 0 <= INDEX < COUNT, e.g. 0/4")
    return int(match.group(1)), int(match.group(2))


def take_shard(targets: Sequence[AccountTarget], shard: tuple[int, int] | None) -> list[AccountTarget]:
    """A stable slice: accounts in id order, every COUNT-th from INDEX, so shards never overlap or miss one."""
    ordered = sorted(targets, key=lambda t: t.account_id)
    if shard is None:
        return ordered
    index, count = shard
    return ordered[index::count]


def list_org_accounts(organizations: Any) -> list[tuple[str, str | None]]:
    """(id, name) of the organization's active accounts; ListAccounts pages hold at most 20."""
    accounts = []
    for page in organizations.get_paginator("list_accounts").paginate(PaginationConfig={"PageSize": 20}):
        for raw in page.get("Accounts", []):
            state = raw.get("State") or raw.get("Status")
            if state == "ACTIVE":
                accounts.append((raw["Id"], raw.get("Name")))
    return accounts


def build_plan(
    settings: Settings,
    connection_region: str | None = None,
    regions: Sequence[str] | None = None,
    accounts_file: str | None = None,
    accounts: Sequence[str] | None = None,
    organization: bool = False,
    role_name: str | None = None,
    external_id: str | None = None,
    shard: tuple[int, int] | None = None,
    home_region: str | None = None,
) -> FleetPlan:
    """The plan from flags (or an MCP tool's arguments), the ``fleet:`` config section and the environment.

    Regions: ``regions``, else ``fleet.regions``, else the one region of the connection/config/AWS_REGION.
    Accounts: ``accounts_file`` or ``accounts`` (ids) or ``organization``; none of them: the caller's own.
    """
    if sum(bool(x) for x in (accounts_file, accounts, organization)) > 1:
        raise UsageError("choose one of --accounts FILE, account ids and --org")
    chosen = [validate_region_arg(r) for r in regions or settings.fleet.regions]
    if not chosen:
        single = (connection_region or settings.region or os.environ.get("AWS_REGION")
                  or os.environ.get("AWS_DEFAULT_REGION"))
        chosen = [validate_region_arg(single)] if single else []
    if not chosen:
        raise ConfigError("no regions to scan", hint="pass --regions us-east-1,us-west-2 or set fleet.regions")
    role = role_name or settings.fleet.role_name
    if not ROLE_NAME.match(role):
        raise UsageError(f"--role-name {role!r} is not an IAM role name")
    targets: list[AccountTarget] = []
    if accounts_file:
        targets = load_accounts_file(accounts_file, role, chosen, external_id)
    elif accounts:
        targets = parse_accounts("\n".join(accounts), "account ids", role, chosen, external_id)
    return FleetPlan(regions=tuple(dict.fromkeys(chosen)), accounts=tuple(targets), organization=organization,
                     role_name=role, external_id=external_id, shard=shard,
                     home_region=validate_region_arg(home_region) if home_region else None)


def validate_region_arg(value: str) -> str:
    try:
        return validate_region(value)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def resolve_targets(plan: FleetPlan, own_account: str, source: Any) -> list[AccountTarget]:
    """The accounts this run scans, this shard's share of them."""
    if plan.organization:
        try:
            listed = list_org_accounts(source.client("organizations"))
        except Exception as exc:
            failure = describe_aws_failure(exc)
            if failure is None:
                raise
            raise AwsUnavailable(f"cannot list the organization's accounts ({failure.code}): {failure.message}",
                                 hint="--org needs organizations:ListAccounts in the management or a delegated "
                                 "administrator account; or pass --accounts FILE") from None
        targets = [AccountTarget(account, plan.regions, role_arn_for(account, plan.role_name, plan.sts_region),
                                 plan.external_id, name) for account, name in listed]
    elif plan.accounts:
        targets = list(plan.accounts)
    else:
        targets = [AccountTarget(own_account, plan.regions)]
    return take_shard(targets, plan.shard)
