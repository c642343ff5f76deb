"""moto's remembered action lists answer as moto's own listing does, including methods added later."""

from __future__ import annotations

from moto.core import responses, utils

from fmdoctor.demo import moto_compat


class _Actions:
    def describe_things(self) -> None: ...


def test_the_remembered_list_is_motos_and_sees_a_method_added_later():
    moto_compat.install()
    assert responses.method_names_from_class is not utils.method_names_from_class  # installed
    assert set(responses.method_names_from_class(_Actions)) == set(utils.method_names_from_class(_Actions))

    _Actions.create_thing = lambda self: None  # type: ignore[attr-defined]
    try:
        assert "create_thing" in responses.method_names_from_class(_Actions)
    finally:
        del _Actions.create_thing  # type: ignore[attr-defined]
    assert "create_thing" not in responses.method_names_from_class(_Actions)


def test_the_demos_added_placement_group_action_is_served(aws):
    ec2 = aws.client("ec2")
    ec2.create_placement_group(GroupName="pg", Strategy="cluster")
    [group] = ec2.describe_placement_groups()["PlacementGroups"]
    assert group["GroupName"] == "pg"
