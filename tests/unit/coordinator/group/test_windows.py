"""Static membership windows (KIP-345's registration and expansion timeouts), with a manual clock.

The two tables are the proposal's, with minutes scaled to seconds: registration timeout 15 s, expansion timeout
5 s. Times in the comments are mm:ss of the scaled table.
"""

from __future__ import annotations

from coordinator.group.events import MemberRemoved, RebalanceReason, RebalanceStarted, RemovalCause
from coordinator.group.settings import EXPANSION_TIMEOUT, REGISTRATION_TIMEOUT
from coordinator.group.windows import expansion_key, registration_key
from coordinator.records import (
    GroupOfflineKey,
    GroupOfflineValue,
    GroupSettingsKey,
    GroupSettingsValue,
    decode_record,
    decode_value,
    encode_value,
    new_group_offline_record,
)
from protocol.errors import ErrorCode

from .context import GroupTestContext

GROUP = "group-id"
STATIC = dict(rebalance_timeout_ms=60000, session_timeout_ms=3000, version=5)

CONSUMER_DEFAULTS = {"consumer.session.timeout.ms": 45000, "consumer.heartbeat.interval.ms": 5000}


class Events:
    def __init__(self) -> None:
        self.events: list[object] = []

    def on_group_event(self, event: object) -> None:
        self.events.append(event)

    def rebalances(self) -> list[RebalanceStarted]:
        return [e for e in self.events if isinstance(e, RebalanceStarted)]

    def removed(self) -> list[MemberRemoved]:
        return [e for e in self.events if isinstance(e, MemberRemoved)]


class Members:
    """Member ids by name, and heartbeats on a manual clock."""

    def __init__(self, ctx: GroupTestContext) -> None:
        self.ctx = ctx
        self.ids: dict[str, str] = {}
        self.instances: dict[str, str | None] = {}

    def heartbeat(self, name: str) -> ErrorCode:
        group = self.ctx.group()
        return self.ctx.heartbeat(
            GROUP, self.ids[name], group.generation_id, group_instance_id=self.instances[name]
        ).error

    def run_until(self, t_ms: int, alive: set[str], step_ms: int = 500) -> None:
        """Advance to `t_ms` (monotonic) in steps, heartbeating the `alive` members after each step."""
        while self.ctx.clock.monotonic_ms() < t_ms:
            self.ctx.advance(min(step_ms, t_ms - self.ctx.clock.monotonic_ms()))
            for name in sorted(alive):
                if self.ctx.group().has_member(self.ids[name]):
                    self.heartbeat(name)


def static_group(ctx: GroupTestContext, names: list[str]) -> Members:
    """A Stable group of static members (instance id = name); member i is assigned bytes([i + 1])."""
    members = Members(ctx)
    joins = {name: ctx.join_group(GROUP, group_instance_id=name, **STATIC) for name in names}
    while not all(join.done for join in joins.values()):
        ctx.advance(ctx.shard.settings.group_initial_rebalance_delay_ms)
    for name, join in joins.items():
        assert join.error == ErrorCode.none, (name, join.error)
        members.ids[name] = join.response.member_id
        members.instances[name] = name
    leader = names[0]
    assignments = {members.ids[n]: bytes([i + 1]) for i, n in enumerate(names)}
    assert (
        ctx.sync_group(GROUP, members.ids[leader], 1, group_instance_id=leader, assignments=assignments).error
        == ErrorCode.none
    )
    for name in names[1:]:
        assert ctx.sync_group(GROUP, members.ids[name], 1, group_instance_id=name).error == ErrorCode.none
    assert ctx.group().state.value == "Stable"
    return members


# -- group.static.registration.timeout.ms ----------------------------------------------------------------------


def test_registration_window_table_of_the_proposal():
    """A drops at 00:00, B at 00:10, A is back at 00:14, B gone too long at 00:25: exactly one rebalance, at
    00:25, removing B; A kept its place and assignment all along."""
    ctx = GroupTestContext(group_static_registration_timeout_ms=15000)
    members = static_group(ctx, ["L", "A", "B"])
    events = Events()
    ctx.shard.add_listener(events)
    last_a_ms = ctx.clock.monotonic_ms()
    assert members.heartbeat("A") == ErrorCode.none
    origin = last_a_ms + 3000  # 00:00: A's session expires

    members.run_until(origin, {"L", "B"})
    group = ctx.group()
    assert group.member(members.ids["A"]).offline_since_ms == origin
    assert ctx.deadline(registration_key(GROUP)) == 15000
    members.run_until(origin + 7000, {"L", "B"})  # B's last heartbeat: its session expires at 00:10
    members.run_until(origin + 10000, {"L"})
    assert group.member(members.ids["B"]).offline_since_ms == origin + 10000
    assert ctx.deadline(registration_key(GROUP)) == 5000  # still A's deadline, 00:15
    members.run_until(origin + 14000, {"L"})
    assert events.rebalances() == [] and group.state.value == "Stable"

    # 00:14: A restarts and takes its place back (Kafka's static rejoin: no rebalance in Stable).
    rejoin = ctx.join_group(GROUP, group_instance_id="A", **STATIC)
    assert rejoin.error == ErrorCode.none and rejoin.response.generation_id == 1
    members.ids["A"] = rejoin.response.member_id
    sync = ctx.sync_group(GROUP, members.ids["A"], 1, group_instance_id="A")
    assert sync.response.assignment == b"\x02"
    assert ctx.deadline(registration_key(GROUP)) == 11000  # now B's deadline, 00:25

    members.run_until(origin + 24500, {"L", "A"})
    assert events.rebalances() == [] and group.state.value == "Stable"
    assert group.member(members.ids["A"]).assignment == b"\x02"
    members.run_until(origin + 25000, {"L", "A"})
    rebalances = events.rebalances()
    assert len(rebalances) == 1
    assert rebalances[0].monotonic_ms == origin + 25000
    assert rebalances[0].reason is RebalanceReason.SESSION_EXPIRY
    assert [(e.member.group_instance_id, e.cause) for e in events.removed()] == [
        ("B", RemovalCause.SESSION_TIMEOUT)
    ]
    assert sorted(m.group_instance_id for m in group.all_members()) == ["A", "L"]

    # The members rejoin and the group settles in generation 2 without B: no further rebalance.
    joins = [ctx.join_group(GROUP, members.ids[n], group_instance_id=n, **STATIC) for n in ("L", "A")]
    assert [j.response.generation_id for j in joins] == [2, 2]
    assert len(events.rebalances()) == 1


def test_members_lost_together_cost_one_rebalance_at_the_earliest_deadline():
    ctx = GroupTestContext(group_static_registration_timeout_ms=15000)
    members = static_group(ctx, ["L", "A", "B"])
    events = Events()
    ctx.shard.add_listener(events)
    start = ctx.clock.monotonic_ms()
    members.run_until(start + 2000, {"L", "B"})  # A offline at start+3000, B at start+5000
    members.run_until(start + 3000 + 15000, {"L"})
    assert len(events.rebalances()) == 1
    assert events.rebalances()[0].monotonic_ms == start + 18000
    assert sorted(e.member.group_instance_id for e in events.removed()) == ["A", "B"]
    assert [m.group_instance_id for m in ctx.group().all_members()] == ["L"]


def test_an_offline_member_is_not_waited_for_by_a_join_phase_and_owes_no_sync():
    ctx = GroupTestContext(group_static_registration_timeout_ms=60000)
    members = static_group(ctx, ["L", "A"])
    start = ctx.clock.monotonic_ms()
    members.run_until(start + 3000, {"L"})
    assert ctx.group().member(members.ids["A"]).is_offline
    # A new member starts a rebalance: the join phase completes with L and the newcomer, A keeps its place.
    newcomer = ctx.join_group(GROUP, **{**STATIC, "version": 3})
    assert ctx.group().state.value == "PreparingRebalance"
    leader = ctx.join_group(GROUP, members.ids["L"], group_instance_id="L", **STATIC)
    assert leader.error == newcomer.error == ErrorCode.none
    assert {m.group_instance_id for m in leader.response.members} == {"L", "A", None}
    assert set(ctx.group().pending_sync_members()) == {members.ids["L"], newcomer.response.member_id}


def test_a_heartbeat_under_the_old_member_id_brings_an_offline_member_back():
    ctx = GroupTestContext(group_static_registration_timeout_ms=15000)
    members = static_group(ctx, ["L", "A"])
    start = ctx.clock.monotonic_ms()
    members.run_until(start + 4000, {"L"})
    assert ctx.group().member(members.ids["A"]).is_offline
    assert members.heartbeat("A") == ErrorCode.none
    assert not ctx.group().member(members.ids["A"]).is_offline
    assert not ctx.timer.is_scheduled(registration_key(GROUP))


def test_without_a_registration_window_a_static_member_is_removed_at_session_expiry():
    ctx = GroupTestContext()
    members = static_group(ctx, ["L", "A"])
    events = Events()
    ctx.shard.add_listener(events)
    start = ctx.clock.monotonic_ms()
    members.run_until(start + 3000, {"L"})
    assert [e.member.group_instance_id for e in events.removed()] == ["A"]
    assert len(events.rebalances()) == 1


def offline_records(ctx: GroupTestContext, since: int = 0) -> list[object]:
    """The GroupOffline values in the log, from its record `since` on."""
    return [decode_record(r)[1] for r in ctx.log[since:] if decode_record(r)[0] == GroupOfflineKey(GROUP)]


def restart(
    ctx: GroupTestContext, members: Members, down_ms: int, events: Events
) -> tuple[GroupTestContext, Members]:
    """ctx.restart, and the same members on the new coordinator."""
    restarted = ctx.restart(down_ms=down_ms, listener=events)
    again = Members(restarted)
    again.ids, again.instances = dict(members.ids), dict(members.instances)
    return restarted, again


def test_offline_marks_are_a_record_and_a_restart_keeps_the_time_the_window_has_left():
    ctx = GroupTestContext(group_static_registration_timeout_ms=15000)
    members = static_group(ctx, ["L", "A"])
    assert members.heartbeat("A") == ErrorCode.none
    offline_at = ctx.clock.monotonic_ms() + 3000
    members.run_until(offline_at, {"L"})
    offline_at_wall = ctx.clock.wall_ms() - (ctx.clock.monotonic_ms() - offline_at)
    assert offline_records(ctx) == [GroupOfflineValue(((members.ids["A"], offline_at_wall),))]
    members.run_until(offline_at + 4000, {"L"})

    # Down for 2 s: 6 s of A's 15 s window are gone when the log is loaded.
    events = Events()
    restarted, members = restart(ctx, members, 2000, events)
    group = restarted.group()
    assert group.state.value == "Stable" and group.member(members.ids["A"]).is_offline
    assert restarted.deadline(registration_key(GROUP)) == 9000
    loaded_at = restarted.clock.monotonic_ms()
    members.run_until(loaded_at + 8500, {"L"})
    assert events.rebalances() == [] and group.has_member(members.ids["A"])
    members.run_until(loaded_at + 9000, {"L"})
    assert [(e.member.group_instance_id, e.cause) for e in events.removed()] == [
        ("A", RemovalCause.SESSION_TIMEOUT)
    ]
    assert len(events.rebalances()) == 1
    assert offline_records(restarted)[-1] is None  # the marks are gone with the member


def test_a_member_offline_before_a_restart_comes_back_after_it_without_a_rebalance():
    ctx = GroupTestContext(group_static_registration_timeout_ms=15000)
    members = static_group(ctx, ["L", "A"])
    start = ctx.clock.monotonic_ms()
    members.run_until(start + 4000, {"L"})
    assert ctx.group().member(members.ids["A"]).is_offline
    events = Events()
    restarted, members = restart(ctx, members, 1000, events)
    assert members.heartbeat("A") == ErrorCode.none
    assert not restarted.group().member(members.ids["A"]).is_offline
    assert not restarted.timer.is_scheduled(registration_key(GROUP))
    assert events.rebalances() == []
    # A tombstone: nobody is offline any more.
    assert offline_records(restarted, since=len(ctx.log)) == [None]


def test_offline_records_round_trip_and_none_offline_is_a_tombstone():
    value = GroupOfflineValue((("m-1", 1_700_000_000_123), ("m-2", 5)))
    assert decode_value(GroupOfflineKey("g"), encode_value(value)) == value
    record = new_group_offline_record("g", {"m-2": 5, "m-1": 1_700_000_000_123})
    assert decode_record(record) == (GroupOfflineKey("g"), value)
    assert new_group_offline_record("g", {}).value is None


# -- group.expansion.timeout.ms --------------------------------------------------------------------------------


def test_expansion_window_table_of_the_proposal():
    """Timeout 00:05: A joins at 00:00, B at 00:03, the rebalance at 00:05 admits both; C joins at 00:06 and
    another rebalance follows at 00:11. The member already there heartbeats without REBALANCE_IN_PROGRESS
    until a window ends."""
    ctx = GroupTestContext(group_expansion_timeout_ms=5000)
    kwargs = dict(rebalance_timeout_ms=60000, session_timeout_ms=10000)
    first = ctx.join_group(GROUP, **kwargs)
    ctx.advance(3000)
    leader_id = first.response.member_id
    assert ctx.sync_group(GROUP, leader_id, 1, assignments={leader_id: b"L"}).error == ErrorCode.none
    events = Events()
    ctx.shard.add_listener(events)
    origin = ctx.clock.monotonic_ms()

    join_a = ctx.join_group(GROUP, **kwargs)  # 00:00
    assert not join_a.done and ctx.group().state.value == "Stable"
    assert ctx.deadline(expansion_key(GROUP)) == 5000
    ctx.advance(3000)
    join_b = ctx.join_group(GROUP, **kwargs)  # 00:03
    assert not join_b.done
    ctx.advance(1000)
    assert ctx.heartbeat(GROUP, leader_id, 1).error == ErrorCode.none  # 00:04: the group is still Stable
    assert ctx.group().num_members() == 1
    ctx.advance(1000)  # 00:05
    assert len(events.rebalances()) == 1 and events.rebalances()[0].monotonic_ms == origin + 5000
    assert events.rebalances()[0].reason is RebalanceReason.NEW_MEMBER
    assert ctx.heartbeat(GROUP, leader_id, 1).error == ErrorCode.rebalance_in_progress
    leader = ctx.join_group(GROUP, leader_id, **kwargs)
    assert leader.error == join_a.error == join_b.error == ErrorCode.none
    assert leader.response.generation_id == join_a.response.generation_id == 2
    assert len(leader.response.members) == 3
    a_id, b_id = join_a.response.member_id, join_b.response.member_id
    ctx.sync_group(GROUP, leader_id, 2, assignments={leader_id: b"L", a_id: b"A", b_id: b"B"})

    ctx.advance(1000)  # 00:06
    join_c = ctx.join_group(GROUP, **kwargs)
    assert not join_c.done and len(events.rebalances()) == 1
    ctx.advance(4999)
    assert len(events.rebalances()) == 1
    ctx.advance(1)  # 00:11
    assert len(events.rebalances()) == 2 and events.rebalances()[1].monotonic_ms == origin + 11000


def test_kip_394_joiners_and_static_joiners_are_held_back_too():
    ctx = GroupTestContext(group_expansion_timeout_ms=5000)
    kwargs = dict(rebalance_timeout_ms=60000, session_timeout_ms=10000)
    first = ctx.join_group(GROUP, **kwargs)
    ctx.advance(3000)
    leader_id = first.response.member_id
    ctx.sync_group(GROUP, leader_id, 1, assignments={leader_id: b"L"})
    required = ctx.join_group(GROUP, version=4, **kwargs)
    assert required.error == ErrorCode.member_id_required
    dynamic = ctx.join_group(GROUP, required.response.member_id, version=4, **kwargs)
    static = ctx.join_group(GROUP, group_instance_id="s", **kwargs)
    assert not dynamic.done and not static.done
    joiners = ctx.group().expansion_joiners
    assert len(joiners) == 2 and required.response.member_id in joiners
    assert sorted(str(m.group_instance_id) for m in joiners.values()) == ["None", "s"]
    assert ctx.group().num_pending_join_members() == 0
    # The static instance restarts while held back: the newer JoinGroup takes the place, the older is fenced.
    again = ctx.join_group(GROUP, group_instance_id="s", **kwargs)
    assert static.error == ErrorCode.fenced_instance_id and not again.done
    ctx.advance(5000)
    ctx.join_group(GROUP, leader_id, **kwargs)
    assert dynamic.error == again.error == ErrorCode.none
    assert {m.group_instance_id for m in ctx.group().all_members()} == {None, "s"}
    assert ctx.group().num_members() == 3


def test_a_held_back_joiner_that_leaves_is_forgotten_without_a_rebalance():
    ctx = GroupTestContext(group_expansion_timeout_ms=5000)
    kwargs = dict(rebalance_timeout_ms=60000, session_timeout_ms=10000)
    first = ctx.join_group(GROUP, **kwargs)
    ctx.advance(3000)
    leader_id = first.response.member_id
    ctx.sync_group(GROUP, leader_id, 1, assignments={leader_id: b"L"})
    events = Events()
    ctx.shard.add_listener(events)
    required = ctx.join_group(GROUP, version=4, **kwargs)
    joiner = ctx.join_group(GROUP, required.response.member_id, version=4, **kwargs)
    leave = ctx.leave_group(GROUP, [(required.response.member_id, None)])
    assert leave.response.members[0].error_code == ErrorCode.none
    assert joiner.error == ErrorCode.unknown_member_id
    assert not ctx.timer.is_scheduled(expansion_key(GROUP))
    ctx.advance(6000)
    assert ctx.heartbeat(GROUP, leader_id, 1).error == ErrorCode.none
    assert events.rebalances() == [] and ctx.group().state.value == "Stable"


def test_the_window_closes_by_half_the_rebalance_timeout_of_a_held_back_joiner():
    """A held-back JoinGroup must be answered before the client gives up on it (Java: rebalance timeout + 5 s),
    so the window ends no later than half a joiner's rebalance timeout after it joined."""
    ctx = GroupTestContext(group_expansion_timeout_ms=60000)
    first = ctx.join_group(GROUP, rebalance_timeout_ms=60000, session_timeout_ms=10000)
    ctx.advance(3000)
    leader_id = first.response.member_id
    ctx.sync_group(GROUP, leader_id, 1, assignments={leader_id: b"L"})
    ctx.join_group(GROUP, rebalance_timeout_ms=8000, session_timeout_ms=10000)
    assert ctx.deadline(expansion_key(GROUP)) == 4000


def test_a_rebalance_for_another_reason_admits_the_held_back_joiners_at_once():
    ctx = GroupTestContext(group_expansion_timeout_ms=5000)
    kwargs = dict(rebalance_timeout_ms=60000, session_timeout_ms=10000)
    first = ctx.join_group(GROUP, **kwargs)
    ctx.advance(3000)
    leader_id = first.response.member_id
    ctx.sync_group(GROUP, leader_id, 1, assignments={leader_id: b"L"})
    joiner = ctx.join_group(GROUP, **kwargs)
    leader = ctx.join_group(GROUP, leader_id, **kwargs)  # the leader rejoins: Kafka always rebalances then
    assert leader.error == joiner.error == ErrorCode.none
    assert joiner.response.generation_id == 2
    assert not ctx.timer.is_scheduled(expansion_key(GROUP))


# -- per-group settings ----------------------------------------------------------------------------------------


def test_per_group_settings_are_a_record_override_the_server_and_replay():
    ctx = GroupTestContext(group_expansion_timeout_ms=5000)
    token = ctx.token("settings")
    result = ctx.apply(ctx.shard.set_group_settings(token, GROUP, {REGISTRATION_TIMEOUT: 15000}))
    assert [decode_record(r) for r in result.records] == [
        (GroupSettingsKey(GROUP), GroupSettingsValue(((REGISTRATION_TIMEOUT, 15000),)))
    ]
    assert ctx.answers[token].data == {
        "settings": {REGISTRATION_TIMEOUT: 15000},
        "effective_settings": {REGISTRATION_TIMEOUT: 15000, EXPANSION_TIMEOUT: 5000, **CONSUMER_DEFAULTS},
    }
    assert ctx.shard.effective_settings("other") == {
        REGISTRATION_TIMEOUT: 0,
        EXPANSION_TIMEOUT: 5000,
        **CONSUMER_DEFAULTS,
    }
    ctx.apply(ctx.shard.set_group_settings(ctx.token("settings"), GROUP, {EXPANSION_TIMEOUT: 0}))

    restarted = GroupTestContext(loaded=False, group_expansion_timeout_ms=5000)
    for record in ctx.log:
        restarted.shard.replay(record)
    assert restarted.shard.effective_settings(GROUP) == {
        REGISTRATION_TIMEOUT: 15000,
        EXPANSION_TIMEOUT: 0,
        **CONSUMER_DEFAULTS,
    }

    token = ctx.token("settings")
    result = ctx.apply(
        ctx.shard.set_group_settings(token, GROUP, {REGISTRATION_TIMEOUT: None, EXPANSION_TIMEOUT: None})
    )
    assert [decode_record(r) for r in result.records] == [(GroupSettingsKey(GROUP), None)]
    assert GROUP not in ctx.shard.group_settings


def test_bad_per_group_settings_are_refused_without_a_record():
    ctx = GroupTestContext()
    for changes in (
        {"group.max.size": 3},
        {REGISTRATION_TIMEOUT: -1},
        {EXPANSION_TIMEOUT: "5"},
        {EXPANSION_TIMEOUT: True},
    ):
        token = ctx.token("settings")
        result = ctx.apply(ctx.shard.set_group_settings(token, GROUP, changes))
        assert result.records == [] and ctx.answers[token].error == ErrorCode.invalid_config


def test_a_per_group_window_applies_and_setting_it_to_zero_ends_it_now():
    ctx = GroupTestContext()
    ctx.apply(ctx.shard.set_group_settings(ctx.token("settings"), GROUP, {EXPANSION_TIMEOUT: 5000}))
    kwargs = dict(rebalance_timeout_ms=60000, session_timeout_ms=10000)
    first = ctx.join_group(GROUP, **kwargs)
    ctx.advance(3000)
    leader_id = first.response.member_id
    ctx.sync_group(GROUP, leader_id, 1, assignments={leader_id: b"L"})
    joiner = ctx.join_group(GROUP, **kwargs)
    assert not joiner.done and ctx.group().state.value == "Stable"
    ctx.apply(ctx.shard.set_group_settings(ctx.token("settings"), GROUP, {EXPANSION_TIMEOUT: 0}))
    ctx.advance(0)
    assert ctx.group().state.value == "PreparingRebalance"
    ctx.join_group(GROUP, leader_id, **kwargs)
    assert joiner.error == ErrorCode.none and joiner.response.generation_id == 2


def test_an_offline_leader_is_replaced_as_leader_by_the_next_rebalance_and_removed_at_the_window_end():
    ctx = GroupTestContext(group_static_registration_timeout_ms=20000)
    members = static_group(ctx, ["L", "A"])
    events = Events()
    ctx.shard.add_listener(events)
    start = ctx.clock.monotonic_ms()
    members.run_until(start + 3000, {"A"})
    group = ctx.group()
    assert group.member(members.ids["L"]).is_offline and group.is_leader(members.ids["L"])
    rejoin = ctx.join_group(
        GROUP,
        members.ids["A"],
        group_instance_id="A",
        **{**STATIC, "protocols": (("range", b"\x00\x00changed"),)},
    )
    # A changed its metadata: a rebalance, which completes without waiting for the offline leader.
    assert rejoin.error == ErrorCode.none and rejoin.response.leader == members.ids["A"]
    assert group.num_members() == 2 and group.pending_sync_members() == [members.ids["A"]]
    ctx.sync_group(
        GROUP,
        members.ids["A"],
        2,
        group_instance_id="A",
        assignments={members.ids["A"]: b"A", members.ids["L"]: b"L"},
    )
    assert group.state.value == "Stable" and group.member(members.ids["L"]).assignment == b"L"
    members.run_until(start + 3000 + 20000, {"A"})
    assert [e.member.group_instance_id for e in events.removed()] == ["L"]
    assert len(events.rebalances()) == 2 and events.rebalances()[1].monotonic_ms == start + 23000
