"""DescribeGroups, ListGroups and DeleteGroups.

Scenarios are ported from Kafka's GroupMetadataManagerTest; each test names its upstream test.
"""

from __future__ import annotations

import pytest

from coordinator.group import ClassicGroupState
from coordinator.records import (
    CoordinatorRecord,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    encode_key,
    encode_value,
    new_group_metadata_tombstone,
    new_offset_commit_tombstone,
)
from protocol.errors import ErrorCode

from .context import DELETE_GROUPS, DESCRIBE_GROUPS, LIST_GROUPS, GroupTestContext

S = ClassicGroupState


def group_metadata_record(group_id: str, value: GroupMetadataValue) -> CoordinatorRecord:
    return CoordinatorRecord(encode_key(GroupMetadataKey(group_id)), encode_value(value))


MEMBER = MemberMetadata(
    "member-id", "group-instance-id", "client-id", "client-host", 9000, 4000, b"\x00\x01\x02", b"\x00"
)


def loaded_context(*values: tuple[str, GroupMetadataValue], **settings) -> GroupTestContext:
    ctx = GroupTestContext(loaded=False, **settings)
    for group_id, value in values:
        ctx.shard.replay(group_metadata_record(group_id, value))
    ctx.apply(ctx.shard.on_loaded())
    return ctx


def describe(ctx, *group_ids: str, version: int = 6):
    return ctx.send(
        "describe_groups",
        DESCRIBE_GROUPS,
        version,
        "describe",
        groups=list(group_ids),
        include_authorized_operations=False,
    ).response.groups


def list_groups(ctx, version: int = 5, states=(), types=()):
    return ctx.send(
        "list_groups", LIST_GROUPS, version, "list", states_filter=list(states), types_filter=list(types)
    ).response.groups


def delete_groups(ctx, *group_ids: str, version: int = 2, apply: bool = True):
    return ctx.send(
        "delete_groups", DELETE_GROUPS, version, "delete", apply=apply, groups_names=list(group_ids)
    )


def test_describe_group_stable():
    # testDescribeGroupStable
    ctx = loaded_context(("group-id", GroupMetadataValue("consumer", 1, "range", "member-id", 5, (MEMBER,))))
    [group] = describe(ctx, "group-id")
    assert group.error_code == ErrorCode.none
    assert (group.group_id, group.group_state, group.protocol_type, group.protocol_data) == (
        "group-id",
        "Stable",
        "consumer",
        "range",
    )
    [member] = group.members
    assert (
        member.member_id,
        member.group_instance_id,
        member.client_id,
        member.client_host,
        member.member_metadata,
        member.member_assignment,
    ) == ("member-id", "group-instance-id", "client-id", "client-host", b"\x00\x01\x02", b"\x00")


def test_describe_group_rebalancing():
    # testDescribeGroupRebalancing: no protocol data and no member metadata while rebalancing
    other = MemberMetadata("other-id", None, "client-id", "client-host", 9000, 4000, b"\x00\x01\x02", b"\x01")
    ctx = loaded_context(
        ("group-id", GroupMetadataValue("consumer", 1, "range", "member-id", 5, (MEMBER, other)))
    )
    ctx.join_group(
        member_id="member-id",
        group_instance_id="group-instance-id",
        protocols=(("range", b"\x00\x01\x02"),),
        version=5,
    )
    [group] = describe(ctx, "group-id")
    assert (group.group_state, group.protocol_type, group.protocol_data) == (
        "PreparingRebalance",
        "consumer",
        "",
    )
    assert [(m.member_id, m.member_metadata, m.member_assignment) for m in group.members] == [
        ("member-id", b"", b"\x00"),
        ("other-id", b"", b"\x01"),
    ]


@pytest.mark.parametrize("version", [0, 3, 5])
def test_describe_unknown_group_is_dead_before_v6(version):
    # testDescribeGroupsGroupIdNotFoundException
    ctx = GroupTestContext()
    [group] = describe(ctx, "group-id", version=version)
    assert (group.group_id, group.group_state, group.error_code, group.members) == ("group-id", "Dead", 0, ())


def test_describe_unknown_group_v6_is_group_id_not_found():
    ctx = GroupTestContext()
    [group] = describe(ctx, "group-id", version=6)
    assert group.error_code == ErrorCode.group_id_not_found
    assert group.group_state == "Dead"
    assert group.error_message == "Group group-id not found."


def test_describe_simple_group_is_empty_with_no_protocol_type():
    ctx = GroupTestContext()
    ctx.commit("simple", {("t", 0): 1})
    [group] = describe(ctx, "simple")
    assert (group.group_state, group.protocol_type, group.protocol_data, group.members) == (
        "Empty",
        "",
        "",
        (),
    )


def test_describe_reports_static_instance_ids():
    ctx = GroupTestContext()
    result = ctx.static_members_join_and_rebalance()
    [group] = describe(ctx, "group-id")
    assert {(m.member_id, m.group_instance_id) for m in group.members} == {
        (result.leader_id, "leader"),
        (result.follower_id, "follower"),
    }
    assert {m.member_assignment for m in group.members} == {b"\x01", b"\x02"}
    assert {m.client_host for m in group.members} == {"/127.0.0.1"}


def test_list_groups():
    # testListGroups (classic part): all groups, state and type filters (case-insensitive)
    ctx = GroupTestContext()
    ctx.commit("simple", {("t", 0): 1})
    ctx.static_members_join_and_rebalance("stable-group")
    ctx.join_group("rebalancing-group")
    listed = {g.group_id: (g.protocol_type, g.group_state, g.group_type) for g in list_groups(ctx)}
    assert listed == {
        "simple": ("", "Empty", "classic"),
        "stable-group": ("consumer", "Stable", "classic"),
        "rebalancing-group": ("consumer", "PreparingRebalance", "classic"),
    }
    assert [g.group_id for g in list_groups(ctx, states=["stable"])] == ["stable-group"]
    assert {g.group_id for g in list_groups(ctx, states=["Empty", "PreparingRebalance"])} == {
        "simple",
        "rebalancing-group",
    }
    assert [g.group_id for g in list_groups(ctx, states=["Dead"])] == []
    assert len(list_groups(ctx, types=["Classic"])) == 3
    assert list_groups(ctx, types=["consumer"]) == ()
    assert list_groups(ctx, types=["unknown"]) == ()
    # older versions ignore the filters they do not have
    assert len(list_groups(ctx, version=0)) == 3


def test_classic_group_delete():
    # testClassicGroupDelete
    ctx = GroupTestContext()
    ctx.commit("group-id", {("foo", 0): 1, ("foo", 1): 2})
    call = delete_groups(ctx, "group-id")
    assert [(r.group_id, r.error_code) for r in call.response.results] == [("group-id", ErrorCode.none)]
    assert call.records == [
        new_offset_commit_tombstone("group-id", "foo", 0),
        new_offset_commit_tombstone("group-id", "foo", 1),
        new_group_metadata_tombstone("group-id"),
    ]
    assert "group-id" not in ctx.shard.groups
    assert ctx.shard.offsets.store.num_offsets() == 0
    [described] = describe(ctx, "group-id", version=5)
    assert described.group_state == "Dead"


def test_delete_groups_errors():
    ctx = GroupTestContext()
    ctx.static_members_join_and_rebalance("busy")
    ctx.commit("idle", {("t", 0): 1})
    call = delete_groups(ctx, "busy", "missing", "idle")
    assert [(r.group_id, r.error_code) for r in call.response.results] == [
        ("busy", ErrorCode.non_empty_group),
        ("missing", ErrorCode.group_id_not_found),
        ("idle", ErrorCode.none),
    ]
    assert "busy" in ctx.shard.groups and "idle" not in ctx.shard.groups


def test_delete_group_failure_restores_it():
    ctx = GroupTestContext()
    ctx.commit("group-id", {("foo", 0): 1})
    call = delete_groups(ctx, "group-id", apply=False)
    ctx.fail(call.result, ErrorCode.not_coordinator)
    assert [(r.group_id, r.error_code) for r in call.response.results] == [
        ("group-id", ErrorCode.not_coordinator)
    ]
    assert "group-id" in ctx.shard.groups
    assert ctx.shard.offsets.store.get("group-id", "foo", 0) is not None


def test_deleted_group_can_be_created_again():
    ctx = GroupTestContext()
    leader = ctx.join_as_dynamic_member_and_complete_rebalance()
    ctx.leave_group(members=[(leader.member_id, None)])
    delete_groups(ctx, "group-id")
    call = ctx.join_group(version=4)
    assert call.error == ErrorCode.member_id_required
    assert ctx.group().generation_id == 0
    assert call.records  # the group is written again
