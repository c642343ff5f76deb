"""Which accounts and regions a fleet scan covers: the accounts file, precedence, shards, discovery grouping."""

from __future__ import annotations

import pytest

from fmdoctor.config import Settings
from fmdoctor.engine.errors import ConfigError, UsageError
from fmdoctor.fleet import AccountTarget, build_plan, parse_shard
from fmdoctor.fleet.discovery import HYPERPOD, TAGGED, DiscoveredCluster, clusters_from_instances, merge_hyperpod
from fmdoctor.fleet.targets import parse_accounts, take_shard

ROLE = "fmdoctor-read-only"


def parse(text, regions=("us-west-2",)):
    return parse_accounts(text, "accounts.yaml", ROLE, list(regions))


def test_yaml_accounts_take_their_own_role_and_regions_else_the_files_else_the_flags():
    targets = parse(
        """
role_name: ops/fmdoctor-audit
regions: [us-east-1]
accounts:
  - "111111111111"
  - id: "222222222222"
    role_arn: arn:aws:iam::222222222222:role/custom
    regions: [eu-west-1, eu-central-1]
    external_id: ext-1
  - id: 012345678901
    name: research
"""
    )
    assert targets == [
        AccountTarget("111111111111", ("us-east-1",), "arn:aws:iam::111111111111:role/ops/fmdoctor-audit"),
        AccountTarget("222222222222", ("eu-west-1", "eu-central-1"), "arn:aws:iam::222222222222:role/custom",
                      "ext-1"),
        # A leading zero stays: the file is read as strings, never as an (octal) number.
        AccountTarget("012345678901", ("us-east-1",), "arn:aws:iam::012345678901:role/ops/fmdoctor-audit",
                      name="research"),
    ]


def test_plain_lines_and_bare_lists_use_the_flag_defaults():
    plain = parse("# prod\n111111111111\n\n222222222222  # gpu\n")
    listed = parse("- '111111111111'\n- '222222222222'\n")
    assert plain == listed
    assert [t.role_arn for t in plain] == [f"arn:aws:iam::{a}:role/{ROLE}" for a in ("111111111111", "222222222222")]
    assert {t.regions for t in plain} == {("us-west-2",)}


def test_china_and_govcloud_regions_get_their_partition():
    [target] = parse("accounts: ['111111111111']\nregions: [cn-north-1]\n")
    assert target.role_arn == "arn:aws-cn:iam::111111111111:role/fmdoctor-read-only"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("111111111111\n12345\n", "accounts.yaml:2: '12345' is not a 12-digit account id"),
        ("accounts:\n  - id: '111111111111'\n  - id: '12'\n", "accounts.yaml:3: accounts.1.id: '12' is not a 12-digit"),
        ("accounts:\n  - id: '111111111111'\n    role: x\n", "unknown key 'accounts.0.role'"),
        ("accounts: ['111111111111', '111111111111']\n", "account 111111111111 is listed twice"),
        ("accounts:\n  - id: '111111111111'\n    role_arn: arn:aws:iam::222222222222:role/x\n",
         "is in account 222222222222"),
        ("accounts: ['111111111111']\nregions: [narnia]\n", "'narnia' is not an AWS region name"),
        ("accounts: []\n", "accounts.yaml:1: accounts: List should have at least 1 item"),
        ("# nobody yet\n", "List should have at least 1 item"),
    ],
)
def test_mistakes_name_the_file_line_and_key(text, message):
    with pytest.raises(ConfigError) as raised:
        parse(text)
    assert message in str(raised.value)


def test_an_account_without_any_region_is_refused():
    with pytest.raises(ConfigError, match="has no regions"):
        parse("111111111111\n", regions=())


def test_regions_precedence(monkeypatch):
    configured = Settings.model_validate({"region": "eu-west-1", "fleet": {"regions": ["us-east-1", "us-east-2"]}})
    assert build_plan(configured, regions=["ap-south-1"]).regions == ("ap-south-1",)
    assert build_plan(configured).regions == ("us-east-1", "us-east-2")
    assert build_plan(Settings.model_validate({"region": "eu-west-1"})).regions == ("eu-west-1",)
    assert build_plan(Settings(), connection_region="sa-east-1").regions == ("sa-east-1",)
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    with pytest.raises(ConfigError, match="no regions"):
        build_plan(Settings())


def test_role_name_flag_beats_config_and_one_account_source_only():
    settings = Settings.model_validate({"fleet": {"role_name": "from-config"}})
    plan = build_plan(settings, regions=["us-west-2"], accounts=["111111111111"], role_name="from-flag")
    assert plan.accounts[0].role_arn == "arn:aws:iam::111111111111:role/from-flag"
    assert build_plan(settings, regions=["us-west-2"], organization=True).role_name == "from-config"
    with pytest.raises(UsageError, match="choose one"):
        build_plan(settings, regions=["us-west-2"], accounts=["111111111111"], organization=True)


@pytest.mark.parametrize("value", ["4/4", "a/b", "1", "-1/2", "0/0"])
def test_bad_shards_are_usage_errors(value):
    with pytest.raises(UsageError):
        parse_shard(value)


def test_shards_cover_every_account_once():
    targets = [AccountTarget(f"{n:012d}", ("us-west-2",)) for n in (5, 3, 9, 1, 7, 2, 8)]
    shards = [take_shard(targets, parse_shard(f"{i}/3")) for i in range(3)]
    ids = [t.account_id for shard in shards for t in shard]
    assert sorted(ids) == sorted(t.account_id for t in targets) and len(ids) == len(set(ids))
    assert [len(s) for s in shards] == [3, 2, 2]


def instance(**tags):
    return {"InstanceId": "i-1", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}


def test_discovery_groups_instances_by_any_configured_key():
    keys = ["fmdoctor:cluster", "parallelcluster:cluster-name", "eks:cluster-name"]
    found = clusters_from_instances(
        [
            instance(**{"fmdoctor:cluster": "a", "parallelcluster:cluster-name": "a"}),  # one cluster, counted once
            instance(**{"parallelcluster:cluster-name": "a"}),
            instance(**{"eks:cluster-name": "b", "fmdoctor:cluster": "c"}),  # two names: found in both
            instance(**{"Name": "bastion"}),  # no configured key
            instance(**{"fmdoctor:cluster": ""}),  # empty value names nothing
        ],
        keys,
    )
    assert found == [
        DiscoveredCluster("a", (TAGGED,), 2, ("fmdoctor:cluster", "parallelcluster:cluster-name")),
        DiscoveredCluster("b", (TAGGED,), 1, ("eks:cluster-name",)),
        DiscoveredCluster("c", (TAGGED,), 1, ("fmdoctor:cluster",)),
    ]


def test_hyperpod_names_merge_with_tagged_clusters():
    tagged = [DiscoveredCluster("a", (TAGGED,), 2, ("fmdoctor:cluster",))]
    merged = merge_hyperpod(tagged, ["hp", "a"])
    assert merged == [DiscoveredCluster("a", (TAGGED, HYPERPOD), 2, ("fmdoctor:cluster",)),
                      DiscoveredCluster("hp", (HYPERPOD,))]
