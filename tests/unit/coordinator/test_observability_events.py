"""The state machine's events and the rebalance history: every code path that starts a rebalance names its
category, member removals carry their cause, and durations come from the injected clock."""

from __future__ import annotations

import logging

import pytest

from coordinator.group.events import (
    GroupRemoved,
    MemberFenced,
    RebalanceReason,
    RebalanceStarted,
    RemovalCause,
    StaticMemberReplaced,
    leave_reason,
)
from coordinator.observability.history import GroupHistory
from protocol.errors import ErrorCode

from .group.context import LEAVE_GROUP, GroupTestContext, to_protocols

GROUP = "group-id"


class Recorder:
    def __init__(self) -> None:
        self.events: list[object] = []

    def on_group_event(self, event: object) -> None:
        self.events.append(event)

    def of(self, kind: type) -> list:
        return [e for e in self.events if isinstance(e, kind)]


@pytest.fixture
def ctx() -> GroupTestContext:
    return GroupTestContext()


@pytest.fixture
def history(ctx: GroupTestContext) -> GroupHistory:
    history = GroupHistory(timeline_size=10)
    ctx.shard.add_listener(history)
    return history


@pytest.fixture
def recorder(ctx: GroupTestContext) -> Recorder:
    recorder = Recorder()
    ctx.shard.add_listener(recorder)
    return recorder


def reasons(history: GroupHistory) -> list[str]:
    return [r.reason.value for r in history.timeline(GROUP)]


def leave(ctx: GroupTestContext, member_id: str, instance_id: str | None = None, reason: str | None = None):
    return ctx.send(
        "leave_group",
        LEAVE_GROUP,
        5,
        "leave",
        group_id=GROUP,
        members=[{"member_id": member_id, "group_instance_id": instance_id, "reason": reason}],
    )


# -- categorisation ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("member_id", "instance_id", "reason", "expected"),
    [
        ("m-1", None, None, RebalanceReason.LEAVE),
        ("m-1", None, "the consumer is being closed", RebalanceReason.LEAVE),
        (
            "m-1",
            None,
            "consumer poll timeout has expired. This means the time between subsequent calls to poll() "
            "was longer than the configured max.poll.interval.ms",
            RebalanceReason.REBALANCE_TIMEOUT,
        ),
        ("", "node-1", None, RebalanceReason.ADMIN),
        ("m-1", None, "member was removed by an admin.", RebalanceReason.ADMIN),
        ("m-1", "node-1", None, RebalanceReason.LEAVE),
    ],
)
def test_leave_reason_categories(member_id, instance_id, reason, expected):
    assert leave_reason(member_id, instance_id, reason) is expected


# -- each code path ------------------------------------------------------------------------------------------


def test_new_members_one_rebalance_for_the_initial_join_then_one_per_newcomer(ctx, history):
    result = ctx.two_members_stable()
    [first] = history.timeline(GROUP)
    assert first.reason is RebalanceReason.NEW_MEMBER and first.member.member_id == result.leader_id
    assert first.outcome == "stable" and first.generation == 1 and first.previous_state == "Empty"
    assert {m.member_id for m in first.members_in} == {result.leader_id, result.follower_id}
    assert first.duration_ms == 2 * 3000  # the initial delay, extended once by the second member (KIP-134)
    first_try = ctx.join_group(GROUP, version=8)  # KIP-394: MEMBER_ID_REQUIRED, no rebalance yet
    assert first_try.error == ErrorCode.member_id_required and len(history.timeline(GROUP)) == 1
    member_id = first_try.response.member_id
    ctx.join_group(GROUP, member_id, version=8, reason="need to re-join with the given member-id")
    [_, second] = history.timeline(GROUP)
    assert second.reason is RebalanceReason.NEW_MEMBER
    assert second.client_reason == "need to re-join with the given member-id"
    assert second.member.member_id == member_id and second.previous_state == "Stable"
    assert history.rebalances(GROUP) == {"new_member": 2}


def test_leave_records_the_member_and_its_kip800_reason(ctx, history):
    result = ctx.two_members_stable()
    assert leave(ctx, result.follower_id, reason="the consumer is being closed").response.error_code == 0
    entry = history.timeline(GROUP)[-1]
    assert entry.reason is RebalanceReason.LEAVE and entry.client_reason == "the consumer is being closed"
    assert entry.member.member_id == result.follower_id
    assert [(m.member_id, c) for m, c in entry.members_out] == [(result.follower_id, RemovalCause.LEFT)]
    assert history.expirations(GROUP) == {}  # leaving is not an expiration


def test_a_java_poll_timeout_leave_is_a_rebalance_timeout(ctx, history):
    result = ctx.two_members_stable()
    leave(ctx, result.follower_id, reason="consumer poll timeout has expired.")
    assert reasons(history)[-1] == "rebalance_timeout"


def test_admin_removal_of_a_static_member(ctx, history):
    result = ctx.static_members_join_and_rebalance()
    leave(ctx, "", "follower")
    entry = history.timeline(GROUP)[-1]
    assert entry.reason is RebalanceReason.ADMIN
    assert [(m.member_id, c) for m, c in entry.members_out] == [
        (result.follower_id, RemovalCause.ADMIN_REMOVED)
    ]


def test_session_expiry_then_rebalance_timeout_eviction(ctx, history):
    result = ctx.two_members_stable()  # session 5 s, rebalance timeout 10 s
    ctx.advance(2500)
    ctx.heartbeat(GROUP, result.leader_id, 1)
    ctx.advance(2600)  # the follower's session ran out
    entry = history.timeline(GROUP)[-1]
    assert entry.reason is RebalanceReason.SESSION_EXPIRY and entry.member.member_id == result.follower_id
    assert entry.outcome == "in_progress"
    assert [(m.member_id, c) for m, c in entry.members_out] == [
        (result.follower_id, RemovalCause.SESSION_TIMEOUT)
    ]
    assert history.expirations(GROUP) == {"session_timeout": 1}
    # The leader keeps heartbeating but never rejoins: the join phase ends after the rebalance timeout without it.
    for _ in range(4):
        assert ctx.heartbeat(GROUP, result.leader_id, 1).error == ErrorCode.rebalance_in_progress
        ctx.advance(2500)
    assert entry.outcome == "empty" and entry.generation == 2
    assert entry.duration_ms == 10000
    assert {c for _, c in entry.members_out} == {RemovalCause.SESSION_TIMEOUT, RemovalCause.REBALANCE_TIMEOUT}
    assert history.expirations(GROUP) == {"session_timeout": 1, "rebalance_timeout": 1}
    assert history.durations(GROUP).count == 2


def test_members_that_do_not_sync_in_time_rebalance_with_reason_rebalance_timeout(ctx, history):
    kwargs = {"session_timeout_ms": 30000, "rebalance_timeout_ms": 5000, "version": 3}
    leader = ctx.join_group(GROUP, **kwargs)
    follower = ctx.join_group(GROUP, **kwargs)
    ctx.advance(3000)
    ctx.advance(3000)
    leader_id, follower_id = leader.response.member_id, follower.response.member_id
    ctx.sync_group(GROUP, leader_id, 1, assignments={leader_id: b"", follower_id: b""})
    ctx.advance(5000)  # the follower never sent SyncGroup
    entry = history.timeline(GROUP)[-1]
    assert entry.reason is RebalanceReason.REBALANCE_TIMEOUT and entry.member.member_id == follower_id
    assert history.expirations(GROUP) == {"sync_timeout": 1}


def test_leader_rejoin_and_metadata_change(ctx, history):
    result = ctx.two_members_stable()
    ctx.join_group(GROUP, result.leader_id, session_timeout_ms=5000, rebalance_timeout_ms=10000, version=5)
    assert reasons(history)[-1] == "leader_rejoin"
    ctx.join_group(GROUP, result.follower_id, session_timeout_ms=5000, rebalance_timeout_ms=10000, version=5)
    leader_sync = ctx.sync_group(GROUP, result.leader_id, 2)
    ctx.sync_group(GROUP, result.follower_id, 2)
    assert leader_sync.error == ErrorCode.none and reasons(history)[-1] == "leader_rejoin"
    assert history.timeline(GROUP)[-1].outcome == "stable"
    ctx.join_group(
        GROUP,
        result.follower_id,
        protocols=to_protocols("range", "roundrobin"),
        session_timeout_ms=5000,
        rebalance_timeout_ms=10000,
        version=5,
    )
    assert reasons(history)[-1] == "metadata_change"


def test_static_replacement_in_place_is_not_a_rebalance_but_fences_the_old_member(ctx, history, recorder):
    result = ctx.static_members_join_and_rebalance()
    before = len(history.timeline(GROUP))
    rejoin = ctx.join_group(
        GROUP,
        group_instance_id="follower",
        protocols=to_protocols("range", "roundrobin"),
        session_timeout_ms=5000,
        rebalance_timeout_ms=10000,
        version=5,
    )
    assert rejoin.error == ErrorCode.none
    assert len(history.timeline(GROUP)) == before
    [replaced] = recorder.of(StaticMemberReplaced)
    assert (replaced.old_member_id, replaced.group_instance_id) == (result.follower_id, "follower")
    old = ctx.heartbeat(GROUP, result.follower_id, 1, group_instance_id="follower")
    assert old.error == ErrorCode.fenced_instance_id
    [fenced] = recorder.of(MemberFenced)
    assert (fenced.member_id, fenced.holder_member_id, fenced.api) == (
        result.follower_id,
        rejoin.response.member_id,
        "Heartbeat",
    )
    assert history.fenced(GROUP) == {"FENCED_INSTANCE_ID": 1}


def test_static_replacement_that_changes_the_protocol(ctx, history):
    join = ctx.join_group(
        GROUP,
        group_instance_id="node-1",
        protocols=to_protocols("range", "roundrobin"),
        session_timeout_ms=5000,
        rebalance_timeout_ms=10000,
        version=5,
    )
    ctx.advance(3000)
    member_id = join.response.member_id
    ctx.sync_group(GROUP, member_id, 1, group_instance_id="node-1", assignments={member_id: b""})
    ctx.join_group(
        GROUP,
        group_instance_id="node-1",
        protocols=to_protocols("roundrobin", "range"),
        session_timeout_ms=5000,
        rebalance_timeout_ms=10000,
        version=5,
        client_id="restarted",
    )
    entry = history.timeline(GROUP)[-1]
    assert entry.reason is RebalanceReason.STATIC_REPLACEMENT
    assert entry.member.group_instance_id == "node-1" and entry.member.client_id == "restarted"


def test_superseded_rebalance_and_the_structured_log(ctx, history, caplog):
    caplog.set_level(logging.INFO, logger="coordinator.rebalance")
    leader = ctx.join_group(GROUP, session_timeout_ms=5000, rebalance_timeout_ms=10000, version=3)
    ctx.advance(3000)  # generation 1, the leader alone, CompletingRebalance
    ctx.advance(100)
    ctx.join_group(GROUP, session_timeout_ms=5000, rebalance_timeout_ms=10000, version=3, client_id="late")
    first, second = history.timeline(GROUP)
    assert (first.outcome, first.generation, first.duration_ms) == ("superseded", 1, 3100)
    assert second.outcome == "in_progress" and second.member.client_id == "late"
    assert history.durations(GROUP) is None  # superseded rebalances are not durations of completed ones
    ended = [r for r in caplog.records if r.getMessage().startswith("rebalance ended")]
    assert len(ended) == 1 and ended[0].rebalance["outcome"] == "superseded"
    line = ended[0].getMessage()
    for field in (
        "group=group-id",
        "generation=1",
        "reason=new_member",
        "duration_ms=3100",
        f"member={leader.response.member_id}",
        "outcome=superseded",
    ):
        assert field in line, line
    assert any(
        r.getMessage().startswith("rebalance started") and "client_id=late" in r.getMessage()
        for r in caplog.records
    )


def test_deleting_a_group_forgets_its_history(ctx, history, recorder):
    result = ctx.two_members_stable()
    leave(ctx, result.follower_id)
    leave(ctx, result.leader_id)
    assert history.group_ids() == [GROUP]
    ctx.send("delete_groups", 42, 2, "delete", groups_names=[GROUP])
    assert history.group_ids() == [] and history.timeline(GROUP) == []
    assert recorder.of(GroupRemoved) == [GroupRemoved(GROUP, ctx.clock.wall_ms())]
    assert history.completed_rebalances == 1


def test_offsets_written_are_counted(ctx, history):
    ctx.commit(GROUP, {("foo", 0): 1, ("foo", 1): 2})
    ctx.commit(GROUP, {("foo", 0): 3})
    assert history.offsets_committed == 3


def test_a_failing_listener_changes_nothing(ctx, history):
    class Broken:
        def on_group_event(self, event: object) -> None:
            raise RuntimeError("boom")

    ctx.shard.calls.listeners.insert(0, Broken())
    ctx.two_members_stable()
    assert reasons(history) == ["new_member"]


def test_without_listeners_no_events_are_built(ctx):
    assert ctx.shard.calls.listeners == []
    ctx.two_members_stable()  # and nothing fails


def test_every_started_event_has_a_category(ctx, recorder):
    result = ctx.two_members_stable()
    leave(ctx, result.follower_id)
    started = recorder.of(RebalanceStarted)
    assert [e.reason for e in started] == [RebalanceReason.NEW_MEMBER, RebalanceReason.LEAVE]
    assert all(e.wall_ms == ctx.clock.wall_ms() or e.wall_ms < ctx.clock.wall_ms() for e in started)
