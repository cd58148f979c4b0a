"""Pause and resume from the coordinator: records, filtered assignments, rebalances, replay (manual clock)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.group.events import RebalanceReason, RebalanceStarted
from coordinator.group.pause import PauseState
from coordinator.records import (
    GroupPauseKey,
    GroupPauseValue,
    GroupSettingsKey,
    GroupSettingsValue,
    RecordDecodeError,
    decode_key,
    decode_record,
    decode_value,
    encode_key,
    new_group_pause_record,
    new_group_settings_record,
)
from coordinator.shard import AdminAnswer
from protocol.consumer import (
    AssignmentDecodeError,
    ConsumerAssignment,
    decode_assignment,
    encode_assignment,
    filter_assignment,
)
from protocol.errors import ErrorCode

from .context import DELETE_GROUPS, DESCRIBE_GROUPS, GroupTestContext, subscription

GROUP = "group-id"
FOO_BAR = (("range", subscription("foo", "bar")),)


class Events:
    def __init__(self) -> None:
        self.events: list[object] = []

    def on_group_event(self, event: object) -> None:
        self.events.append(event)

    def rebalances(self) -> list[RebalanceStarted]:
        return [e for e in self.events if isinstance(e, RebalanceStarted)]


def assignment(parts: dict[str, list[int]], user_data: bytes | None = b"ud", version: int = 1) -> bytes:
    return encode_assignment(
        ConsumerAssignment(version, tuple((t, tuple(p)) for t, p in parts.items()), user_data)
    )


def topics_of(data: bytes) -> dict[str, tuple[int, ...]]:
    return dict(decode_assignment(data).partitions)


def pause(
    ctx: GroupTestContext, group_id: str = GROUP, topics: list[str] | None = None, *, apply: bool = True
):
    token = ctx.token("pause")
    result = ctx.shard.pause_group(token, group_id, topics)
    if apply:
        ctx.apply(result)
    return token, result


def resume(ctx: GroupTestContext, group_id: str = GROUP, topics: list[str] | None = None):
    token = ctx.token("resume")
    result = ctx.shard.resume_group(token, group_id, topics)
    ctx.apply(result)
    return token, result


def stable_pair(
    ctx: GroupTestContext,
    *,
    generation: int = 1,
    leader_id: str | None = None,
    follower_id: str | None = None,
) -> tuple[str, str]:
    """Two dynamic members subscribed to foo and bar; the leader assigns foo-0/bar-0 and foo-1/bar-1."""
    kwargs = dict(protocols=FOO_BAR, rebalance_timeout_ms=10000, session_timeout_ms=5000)
    if leader_id is None:
        first = ctx.join_group(GROUP, **kwargs)
        second = ctx.join_group(GROUP, **kwargs)
        ctx.advance(ctx.shard.settings.group_initial_rebalance_delay_ms)
        ctx.advance(ctx.shard.settings.group_initial_rebalance_delay_ms)
    else:
        first = ctx.join_group(GROUP, leader_id, **kwargs)
        second = ctx.join_group(GROUP, follower_id, **kwargs)
    assert first.error == second.error == ErrorCode.none
    leader_id, follower_id = first.response.member_id, second.response.member_id
    assert first.response.generation_id == generation
    leader_sync = ctx.sync_group(
        GROUP,
        leader_id,
        generation,
        assignments={
            leader_id: assignment({"foo": [0], "bar": [0]}),
            follower_id: assignment({"foo": [1], "bar": [1]}),
        },
    )
    follower_sync = ctx.sync_group(GROUP, follower_id, generation)
    assert leader_sync.error == follower_sync.error == ErrorCode.none
    ctx.last_syncs = (leader_sync, follower_sync)  # type: ignore[attr-defined]
    assert ctx.group().state.value == "Stable"
    return leader_id, follower_id


# -- records ---------------------------------------------------------------------------------------------------


def test_own_record_keys_use_versions_kafka_never_uses():
    assert struct.unpack(">h", encode_key(GroupPauseKey("g"))[:2])[0] == 0x7F01
    assert struct.unpack(">h", encode_key(GroupSettingsKey("g"))[:2])[0] == 0x7F02
    assert decode_key(encode_key(GroupPauseKey("g"))) == GroupPauseKey("g")
    assert decode_key(encode_key(GroupSettingsKey("g"))) == GroupSettingsKey("g")


def test_pause_and_settings_records_round_trip_and_empty_state_is_a_tombstone():
    record = new_group_pause_record("g", False, ["b", "a", "a"])
    assert decode_record(record) == (GroupPauseKey("g"), GroupPauseValue(False, ("a", "b")))
    assert decode_record(new_group_pause_record("g", True, ())) == (
        GroupPauseKey("g"),
        GroupPauseValue(True, ()),
    )
    assert new_group_pause_record("g", False, ()).value is None
    record = new_group_settings_record("g", {"group.expansion.timeout.ms": 5000, "a": 2**40})
    assert decode_record(record) == (
        GroupSettingsKey("g"),
        GroupSettingsValue((("a", 2**40), ("group.expansion.timeout.ms", 5000))),
    )
    assert new_group_settings_record("g", {}).value is None


@settings(max_examples=200)
@given(st.sampled_from([GroupPauseKey("g"), GroupSettingsKey("g")]), st.binary(max_size=64))
def test_garbage_own_values_only_raise_record_decode_error(key, data):
    try:
        decode_value(key, data)
    except RecordDecodeError:
        pass


# -- the consumer-protocol Assignment codec --------------------------------------------------------------------


@pytest.mark.parametrize("version", [0, 1, 2, 3])
@pytest.mark.parametrize("user_data", [None, b"", b"\x00sticky"])
def test_assignment_round_trips_and_filtering_keeps_version_and_user_data(version, user_data):
    data = assignment({"foo": [0, 2], "bar": [1]}, user_data, version)
    decoded = decode_assignment(data)
    assert decoded == ConsumerAssignment(version, (("foo", (0, 2)), ("bar", (1,))), user_data)
    assert encode_assignment(decoded) == data
    filtered = decode_assignment(filter_assignment(data, lambda t: t == "foo"))
    assert filtered == ConsumerAssignment(version, (("bar", (1,)),), user_data)
    assert filter_assignment(data, lambda t: False) is data  # nothing paused: the very same bytes


def test_a_newer_assignment_version_keeps_its_unknown_trailing_fields():
    data = assignment({"foo": [0], "bar": [0]}, b"u", 4) + b"\x01\x02future"
    filtered = filter_assignment(data, lambda t: t == "bar")
    assert filtered == assignment({"foo": [0]}, b"u", 4) + b"\x01\x02future"


def test_undecodable_or_empty_assignments_pass_unchanged():
    assert filter_assignment(b"", lambda t: True) == b""
    assert filter_assignment(b"\x01", lambda t: True) == b"\x01"
    with pytest.raises(AssignmentDecodeError):
        decode_assignment(assignment({"foo": [0]}, None, 0) + b"x")  # trailing bytes in a known version


@settings(max_examples=300)
@given(st.binary(max_size=80))
def test_garbage_assignments_only_raise_assignment_decode_error(data):
    try:
        decode_assignment(data)
    except AssignmentDecodeError:
        pass


# -- pausing a topic -------------------------------------------------------------------------------------------


def test_pausing_a_topic_records_it_rebalances_and_withholds_its_partitions_from_everyone():
    ctx = GroupTestContext()
    events = Events()
    ctx.shard.add_listener(events)
    leader_id, follower_id = stable_pair(ctx)
    token, result = pause(ctx, topics=["foo"])
    assert [decode_record(r) for r in result.records] == [
        (GroupPauseKey(GROUP), GroupPauseValue(False, ("foo",)))
    ]
    answer = ctx.answers[token]
    assert isinstance(answer, AdminAnswer) and answer.error == ErrorCode.none
    assert answer.data == {"paused": {"group": False, "topics": ["foo"]}}
    # The rebalance starts at once: members learn of it from their next heartbeat.
    assert ctx.group().state.value == "PreparingRebalance"
    assert events.rebalances()[-1].reason is RebalanceReason.PAUSE
    assert ctx.heartbeat(GROUP, follower_id, 1).error == ErrorCode.rebalance_in_progress
    stable_pair(ctx, generation=2, leader_id=leader_id, follower_id=follower_id)
    leader_sync, follower_sync = ctx.last_syncs
    assert topics_of(leader_sync.response.assignment) == {"bar": (0,)}
    assert topics_of(follower_sync.response.assignment) == {"bar": (1,)}
    assert decode_assignment(follower_sync.response.assignment).user_data == b"ud"
    # What the leader assigned is stored as it was; only what is handed out is filtered.
    assert topics_of(ctx.group().member(leader_id).assignment) == {"foo": (0,), "bar": (0,)}
    # A SyncGroup in Stable (a member that lost its answer) gets the filtered assignment too.
    again = ctx.sync_group(GROUP, follower_id, 2)
    assert topics_of(again.response.assignment) == {"bar": (1,)}
    # DescribeGroups shows what members hold.
    described = ctx.send("describe_groups", DESCRIBE_GROUPS, None, "describe", groups=[GROUP]).response
    held = {m.member_id: topics_of(m.member_assignment) for m in described.groups[0].members}
    assert held == {leader_id: {"bar": (0,)}, follower_id: {"bar": (1,)}}


def test_pausing_the_whole_group_hands_out_empty_assignments_with_user_data():
    ctx = GroupTestContext()
    leader_id, follower_id = stable_pair(ctx)
    pause(ctx)
    stable_pair(ctx, generation=2, leader_id=leader_id, follower_id=follower_id)
    for sync in ctx.last_syncs:
        assert decode_assignment(sync.response.assignment) == ConsumerAssignment(1, (), b"ud")


def test_resuming_tombstones_the_pause_rebalances_and_hands_out_everything_again():
    ctx = GroupTestContext()
    events = Events()
    ctx.shard.add_listener(events)
    leader_id, follower_id = stable_pair(ctx)
    pause(ctx, topics=["foo", "bar"])
    stable_pair(ctx, generation=2, leader_id=leader_id, follower_id=follower_id)
    token, result = resume(ctx, topics=["bar"])
    assert [decode_record(r) for r in result.records] == [
        (GroupPauseKey(GROUP), GroupPauseValue(False, ("foo",)))
    ]
    stable_pair(ctx, generation=3, leader_id=leader_id, follower_id=follower_id)
    assert topics_of(ctx.last_syncs[0].response.assignment) == {"bar": (0,)}
    token, result = resume(ctx)
    assert [decode_record(r) for r in result.records] == [(GroupPauseKey(GROUP), None)]
    assert ctx.answers[token].data == {"paused": {"group": False, "topics": []}}
    assert ctx.group().state.value == "PreparingRebalance"
    stable_pair(ctx, generation=4, leader_id=leader_id, follower_id=follower_id)
    assert topics_of(ctx.last_syncs[1].response.assignment) == {"foo": (1,), "bar": (1,)}
    assert [e.reason for e in events.rebalances()][-3:] == [RebalanceReason.PAUSE] * 3
    assert GROUP not in ctx.shard.pauses


def test_pausing_what_is_already_paused_writes_nothing_and_does_not_rebalance():
    ctx = GroupTestContext()
    leader_id, follower_id = stable_pair(ctx)
    pause(ctx, topics=["foo"])
    stable_pair(ctx, generation=2, leader_id=leader_id, follower_id=follower_id)
    token, result = pause(ctx, topics=["foo"])
    assert result.records == [] and ctx.answers[token].error == ErrorCode.none
    assert ctx.group().state.value == "Stable"


def test_resuming_a_topic_of_a_group_paused_as_a_whole_leaves_the_other_topics_paused():
    ctx = GroupTestContext()
    leader_id, follower_id = stable_pair(ctx)
    pause(ctx)
    stable_pair(ctx, generation=2, leader_id=leader_id, follower_id=follower_id)
    token, result = resume(ctx, topics=["foo"])
    assert ctx.answers[token].error == ErrorCode.none
    assert [decode_record(r) for r in result.records] == [
        (GroupPauseKey(GROUP), GroupPauseValue(True, (), ("foo",)))
    ]
    assert struct.unpack(">h", result.records[0].value[:2])[0] == 1  # v1: the value that has resumed_topics
    assert ctx.answers[token].data == {"paused": {"group": True, "topics": [], "resumed_topics": ["foo"]}}
    stable_pair(ctx, generation=3, leader_id=leader_id, follower_id=follower_id)
    assert topics_of(ctx.last_syncs[0].response.assignment) == {"foo": (0,)}
    assert topics_of(ctx.last_syncs[1].response.assignment) == {"foo": (1,)}
    # Pausing that topic again takes it out of the exempt ones; pausing the whole group clears them all.
    pause(ctx, topics=["foo"])
    assert ctx.shard.pause_state(GROUP) == PauseState(True, frozenset({"foo"}), frozenset())
    resume(ctx, topics=["foo", "bar"])
    assert ctx.shard.pause_state(GROUP) == PauseState(True, frozenset(), frozenset({"foo", "bar"}))
    pause(ctx)
    assert ctx.shard.pause_state(GROUP) == PauseState(True, frozenset())
    # Survives a restart (the record is replayed).
    resume(ctx, topics=["bar"])
    restarted = ctx.restart()
    assert restarted.shard.pause_state(GROUP) == PauseState(True, frozenset(), frozenset({"bar"}))
    # Resuming the whole group resumes everything.
    token, result = resume(ctx)
    assert [decode_record(r) for r in result.records] == [(GroupPauseKey(GROUP), None)]


def test_a_group_of_another_protocol_type_cannot_be_paused():
    ctx = GroupTestContext()
    join = ctx.join_group(GROUP, protocol_type="connect", protocols=(("default", b"\x00\x01"),))
    ctx.advance(ctx.shard.settings.group_initial_rebalance_delay_ms)
    assert join.error == ErrorCode.none
    token, result = pause(ctx)
    assert result.records == []
    answer = ctx.answers[token]
    assert answer.error == ErrorCode.inconsistent_group_protocol
    assert "'connect'" in answer.message and "'consumer'" in answer.message
    assert GROUP not in ctx.shard.pauses


def test_a_group_can_be_paused_before_it_exists_and_forms_paused():
    ctx = GroupTestContext()
    token, result = pause(ctx, topics=["foo"])
    assert ctx.answers[token].error == ErrorCode.none and len(result.records) == 1
    assert GROUP not in ctx.shard.groups
    stable_pair(ctx)
    assert [topics_of(s.response.assignment) for s in ctx.last_syncs] == [{"bar": (0,)}, {"bar": (1,)}]


def test_a_static_member_that_rejoins_gets_its_stored_assignment_filtered():
    ctx = GroupTestContext()
    kwargs = dict(protocols=FOO_BAR, rebalance_timeout_ms=10000, session_timeout_ms=5000)
    join_a = ctx.join_group(GROUP, group_instance_id="a", **kwargs)
    join_b = ctx.join_group(GROUP, group_instance_id="b", **kwargs)
    ctx.advance(3000)
    ctx.advance(3000)
    a, b = join_a.response.member_id, join_b.response.member_id
    pause(ctx, topics=["bar"])  # the group is CompletingRebalance: it rebalances again
    assert ctx.group().state.value == "PreparingRebalance"
    join_a = ctx.join_group(GROUP, a, group_instance_id="a", **kwargs)
    join_b = ctx.join_group(GROUP, b, group_instance_id="b", **kwargs)
    assert join_a.response.generation_id == 2
    ctx.sync_group(
        GROUP,
        a,
        2,
        group_instance_id="a",
        assignments={a: assignment({"foo": [0], "bar": [0]}), b: assignment({"foo": [1], "bar": [1]})},
    )
    # b restarts: a JoinGroup with its instance id and no member id takes its place back without a rebalance.
    rejoin = ctx.join_group(GROUP, group_instance_id="b", **kwargs)
    assert rejoin.error == ErrorCode.none and ctx.group().state.value == "Stable"
    new_b = rejoin.response.member_id
    sync = ctx.sync_group(GROUP, new_b, 2, group_instance_id="b")
    assert topics_of(sync.response.assignment) == {"foo": (1,)}


# -- in effect: every member has synced it -------------------------------------------------------------------


def test_a_pause_is_in_effect_once_every_member_has_synced_the_generation_that_withholds():
    ctx = GroupTestContext()
    leader_id, follower_id = stable_pair(ctx)
    assert ctx.shard.pause_progress(GROUP)["in_effect"] is True  # nothing paused, everything delivered
    pause(ctx, topics=["foo"])
    progress = ctx.shard.pause_progress(GROUP)
    assert progress["in_effect"] is False and progress["state"] == "PreparingRebalance"
    assert progress["pending_members"] == sorted([leader_id, follower_id])
    kwargs = dict(protocols=FOO_BAR, rebalance_timeout_ms=10000, session_timeout_ms=5000)
    ctx.join_group(GROUP, leader_id, **kwargs)
    ctx.join_group(GROUP, follower_id, **kwargs)
    assigned = {
        leader_id: assignment({"foo": [0], "bar": [0]}),
        follower_id: assignment({"foo": [1], "bar": [1]}),
    }
    ctx.sync_group(GROUP, leader_id, 2, assignments=assigned)
    # Stable with the leader's answer out; the follower has not asked for its assignment yet.
    progress = ctx.shard.pause_progress(GROUP)
    assert progress == {
        "in_effect": False,
        "state": "Stable",
        "generation": 2,
        "members_synced": 1,
        "pending_members": [follower_id],
    }
    assert topics_of(ctx.sync_group(GROUP, follower_id, 2).response.assignment) == {"bar": (1,)}
    assert ctx.shard.pause_progress(GROUP) == {
        "in_effect": True,
        "state": "Stable",
        "generation": 2,
        "members_synced": 2,
        "pending_members": [],
    }
    # Resuming is pending again until both have the partitions back.
    resume(ctx)
    assert ctx.shard.pause_progress(GROUP)["in_effect"] is False
    stable_pair(ctx, generation=3, leader_id=leader_id, follower_id=follower_id)
    assert ctx.shard.pause_progress(GROUP)["in_effect"] is True


def test_a_pause_of_a_group_without_members_is_in_effect_at_once():
    ctx = GroupTestContext()
    pause(ctx, "not-yet")
    assert ctx.shard.pause_progress("not-yet") == {
        "in_effect": True,
        "state": "Dead",
        "generation": -1,
        "members_synced": 0,
        "pending_members": [],
    }


def test_a_pause_recorded_after_the_loaded_assignments_rebalances_the_group_when_loaded():
    """The coordinator stopped after writing the pause but before the rebalance handed it out: the members still
    hold the paused partitions and have no reason to rejoin, so loading the log starts that rebalance."""
    ctx = GroupTestContext()
    leader_id, follower_id = stable_pair(ctx)
    pause(ctx, topics=["foo"])  # recorded; the rebalance it started never completes here

    events = Events()
    restarted = ctx.restart(listener=events)
    assert restarted.group().state.value == "PreparingRebalance"
    assert [e.reason for e in events.rebalances()] == [RebalanceReason.PAUSE]
    assert restarted.shard.pause_progress(GROUP)["in_effect"] is False


def test_a_group_loaded_with_its_pause_already_handed_out_does_not_rebalance():
    ctx = GroupTestContext()
    leader_id, follower_id = stable_pair(ctx)
    pause(ctx, topics=["foo"])
    stable_pair(ctx, generation=2, leader_id=leader_id, follower_id=follower_id)

    restarted = ctx.restart()
    assert restarted.group().state.value == "Stable"
    assert restarted.shard.pause_progress(GROUP)["in_effect"] is True


# -- durability ------------------------------------------------------------------------------------------------


def test_replaying_the_log_restores_the_pause_and_filtering():
    ctx = GroupTestContext()
    leader_id, follower_id = stable_pair(ctx)
    pause(ctx, topics=["foo"])
    stable_pair(ctx, generation=2, leader_id=leader_id, follower_id=follower_id)
    pause(ctx, "other-group")

    restarted = ctx.restart()
    assert restarted.shard.pause_state(GROUP) == PauseState(False, frozenset({"foo"}))
    assert restarted.shard.pause_state("other-group") == PauseState(True, frozenset())
    sync = restarted.sync_group(GROUP, follower_id, 2)
    assert topics_of(sync.response.assignment) == {"bar": (1,)}


def test_replay_of_a_tombstone_resumes_while_loading():
    ctx = GroupTestContext(loaded=False)
    ctx.shard.replay(new_group_pause_record("g", True, ()))
    ctx.shard.replay(new_group_pause_record("g", False, ()))
    assert "g" not in ctx.shard.pauses


def test_a_failed_pause_write_changes_nothing_and_answers_the_error():
    ctx = GroupTestContext()
    leader_id, follower_id = stable_pair(ctx)
    token, result = pause(ctx, topics=["foo"], apply=False)
    assert ctx.shard.pause_state(GROUP).topics == {"foo"}
    ctx.fail(result)
    assert ctx.answers[token].error == ErrorCode.coordinator_not_available
    assert ctx.shard.pause_state(GROUP) == PauseState()
    stable_pair(ctx, generation=2, leader_id=leader_id, follower_id=follower_id)
    assert topics_of(ctx.last_syncs[0].response.assignment) == {"foo": (0,), "bar": (0,)}


def test_delete_groups_tombstones_the_pause_and_settings_but_offset_expiry_keeps_them():
    ctx = GroupTestContext()
    ctx.commit("g1", {("foo", 0): 1})
    ctx.commit("g2", {("foo", 0): 1})
    pause(ctx, "g1")
    pause(ctx, "g2", ["foo"])
    ctx.apply(ctx.shard.set_group_settings(ctx.token("settings"), "g1", {"group.expansion.timeout.ms": 10}))
    deleted = ctx.send("delete_groups", DELETE_GROUPS, None, "delete", groups_names=["g1"])
    assert deleted.response.results[0].error_code == ErrorCode.none
    assert (GroupPauseKey("g1"), None) in [decode_record(r) for r in deleted.records]
    assert (GroupSettingsKey("g1"), None) in [decode_record(r) for r in deleted.records]
    assert "g1" not in ctx.shard.pauses and "g1" not in ctx.shard.group_settings
    ctx.clock.advance(ctx.shard.settings.offsets_retention_ms + 1)
    expired = ctx.apply(ctx.shard.expire_offsets())
    assert "g2" not in ctx.shard.groups
    assert not [r for r in expired.records if decode_record(r)[0] == GroupPauseKey("g2")]
    assert ctx.shard.pause_state("g2").topics == {"foo"}
