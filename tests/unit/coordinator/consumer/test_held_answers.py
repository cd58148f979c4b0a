"""Ours: the join window (group.consumer.join.window.ms) and heartbeat answers held while a member waits
(group.consumer.heartbeat.hold.ms), on the manual clock."""

from __future__ import annotations

from coordinator.consumer import records as rec
from coordinator.consumer.group import ConsumerGroupState, MemberState
from coordinator.consumer.manager import JOIN_WINDOW_MAX_WINDOWS, join_window_limit_ms
from protocol.errors import ErrorCode

from .context import ConsumerContext, assignment_of, ok, parts, record_types

# the window's limit with a 50 ms window and the default 5 s interval: three quarters of the interval
LIMIT = 3750


def held_context(**settings: int) -> ConsumerContext:
    return ConsumerContext(**{"join_window_ms": 50, "heartbeat_hold_ms": 200, **settings})


def count(assignment: dict[object, frozenset[int]]) -> int:
    return sum(len(ps) for ps in assignment.values())


def targets_computed(ctx: ConsumerContext) -> int:
    return sum(1 for r in ctx.log if rec.record_type(r.key) == rec.TARGET_ASSIGNMENT_METADATA and r.value)


def test_members_joining_together_are_assigned_once_and_answered_when_the_window_ends():
    ctx = held_context()
    t1, _ = ctx.send("m1")
    ctx.advance(30)
    t2, _ = ctx.send("m2")
    assert t1 not in ctx.answers and t2 not in ctx.answers  # held: the group is still forming
    assert ctx.group().state == ConsumerGroupState.ASSIGNING and targets_computed(ctx) == 0
    ctx.advance(49)
    assert t1 not in ctx.answers  # 50 ms have not passed since the last join
    ctx.advance(1)
    a1, a2 = ok(ctx.answers[t1]), ok(ctx.answers[t2])
    assert targets_computed(ctx) == 1  # one target for both: nobody was given partitions to give up
    assert (a1.member_epoch, a2.member_epoch) == (2, 2)
    assert assignment_of(a1) == parts(foo=[0, 1, 2]) and assignment_of(a2) == parts(foo=[3, 4, 5])
    assert ctx.group().state == ConsumerGroupState.STABLE


def test_the_join_window_closes_at_most_its_limit_after_the_first_join():
    ctx = held_context()
    tokens = []
    for i in range(LIMIT // 40 + 1):  # a join every 40 ms up to the limit: the window never goes quiet
        tokens.append(ctx.send(f"m{i}")[0])
        ctx.advance(40)
    # closed at the limit: every join up to it assigned together, answered then
    assert targets_computed(ctx) == 1
    assert all(t in ctx.answers for t in tokens)
    assert {ok(ctx.answers[t]).member_epoch for t in tokens} == {len(tokens)}


def test_the_windows_limit_is_twenty_windows_or_three_quarters_of_the_interval():
    assert join_window_limit_ms(50, 5000) == LIMIT
    assert join_window_limit_ms(100, 1000) == 20 * 100
    assert join_window_limit_ms(250, 5000) == 20 * 250
    assert join_window_limit_ms(0, 5000) == 0  # no window


def test_joins_coming_for_seconds_are_batched_until_three_quarters_of_the_interval():
    # clients starting on a busy machine: one, a pause, then the rest for seconds
    ctx = held_context()
    t1, _ = ctx.send("m1")
    ctx.advance(50)  # the window went quiet: m1 is assigned every partition
    assert targets_computed(ctx) == 1 and assignment_of(ok(ctx.answers[t1])) == parts(foo=range(6))
    ctx.advance(950)  # past 20 windows (1 s), the limit before it was stretched to the interval
    late = []
    for i in range(2, 29):  # a join every 100 ms, within three windows of the last, up to 3.7 s
        late.append(ctx.send(f"m{i}")[0])
        ctx.advance(100)
    assert targets_computed(ctx) == 1 and not set(late) & set(ctx.answers)
    ctx.advance(LIMIT - 3700 - 1)
    assert targets_computed(ctx) == 1
    ctx.advance(1)  # the limit: one target for every late joiner, so m1 gives partitions up once
    assert targets_computed(ctx) == 2
    answer, _ = ctx.heartbeat("m1", 1, owned=parts(foo=range(6)))
    kept = assignment_of(ok(answer))
    assert count(kept) <= 1
    ok(ctx.heartbeat("m1", 1, owned=kept)[0])
    # every late joiner answered: with a partition m1 let go of, or with none (28 members, 6 partitions)
    assert set(late) <= set(ctx.answers)
    assert sum(count(assignment_of(ok(ctx.answers[t]))) for t in late) == 6 - count(kept)
    assert targets_computed(ctx) == 2


def test_joins_after_a_pause_are_still_batched_until_the_windows_limit():
    ctx = held_context()
    t1, _ = ctx.send("m1")
    ctx.advance(50)  # the window went quiet: m1 is assigned every partition
    assert targets_computed(ctx) == 1 and assignment_of(ok(ctx.answers[t1])) == parts(foo=range(6))
    ctx.advance(10)
    t2, _ = ctx.send("m2")
    ctx.advance(40)
    t3, _ = ctx.send("m3")
    ctx.advance(20)
    held, _ = ctx.send("m1", 1, owned=parts(foo=range(6)))  # not a join: the window still counts from m3's
    ctx.advance(129)
    assert targets_computed(ctx) == 1 and not {t2, t3, held} & set(ctx.answers)
    ctx.advance(1)  # after a pause of three windows, one target for both late joiners: m1 gives up once
    assert targets_computed(ctx) == 2
    assert assignment_of(ok(ctx.answers[held])) == parts(foo=[0, 1])  # m1's held heartbeat answered at once
    ok(ctx.heartbeat("m1", 1, owned=parts(foo=[0, 1]))[0])
    assert assignment_of(ok(ctx.answers[t2])) == parts(foo=[2, 3])
    assert assignment_of(ok(ctx.answers[t3])) == parts(foo=[4, 5])
    # past the limit a join is assigned at once, as Kafka does
    ctx.advance(LIMIT)
    ctx.send("m4")
    assert targets_computed(ctx) == 3


def test_a_leave_ends_the_batching_of_late_joins():
    ctx = held_context()
    ctx.send("m1")
    ctx.send("m2")
    ctx.advance(50)
    assert targets_computed(ctx) == 1
    ctx.heartbeat("m2", -1)  # m2 leaves: assigned at m1's next heartbeat, and the next join at once
    ok(ctx.heartbeat("m1", 2, owned=parts(foo=[0, 1, 2]))[0])
    assert targets_computed(ctx) == 2
    ctx.send("m3")
    assert targets_computed(ctx) == 3


def test_a_group_its_last_member_left_batches_its_next_joins_as_a_new_group_does():
    ctx = held_context()
    t1, _ = ctx.send("m1")
    ctx.advance(50)
    ok(ctx.answers[t1])
    ok(ctx.heartbeat("m1", -1)[0])  # the whole group stops (a restart, a redeploy)
    ctx.advance(5000)
    computed = targets_computed(ctx)
    t2, _ = ctx.send("m2")
    ctx.advance(30)
    t3, _ = ctx.send("m3")
    assert t2 not in ctx.answers and t3 not in ctx.answers  # held: the group is forming again
    ctx.advance(50)
    a2, a3 = ok(ctx.answers[t2]), ok(ctx.answers[t3])
    assert targets_computed(ctx) == computed + 1  # one target for both, no partition given to be taken back
    assert assignment_of(a2) == parts(foo=[0, 1, 2]) and assignment_of(a3) == parts(foo=[3, 4, 5])


def test_a_joiner_waits_for_partitions_being_revoked_and_gets_them_as_they_are_freed():
    ctx = held_context(join_window_ms=0)
    ok(ctx.heartbeat("m1"))  # alone: every partition at once
    t2, _ = ctx.send("m2")  # its partitions are still m1's
    assert t2 not in ctx.answers
    assert ctx.group().members["m2"].state == MemberState.UNRELEASED_PARTITIONS
    answer, _ = ctx.heartbeat("m1", 1, owned=parts(foo=range(6)))  # told to revoke: never held
    assert assignment_of(ok(answer)) == parts(foo=[0, 1, 2]) and t2 not in ctx.answers
    answer, result = ctx.heartbeat("m1", 1, owned=parts(foo=[0, 1, 2]))  # revoked
    ok(answer)
    a2 = ok(ctx.answers[t2])  # answered with the partitions m1 let go of, in the same result
    assert any(token == t2 for token, _ in result.responses)
    assert (a2.member_epoch, assignment_of(a2)) == (2, parts(foo=[3, 4, 5]))
    assert ctx.group().state == ConsumerGroupState.STABLE
    # that answer may never reach the client (timed out): its retry, listing nothing, gets the partitions again
    answer, _ = ctx.heartbeat("m2", 2, owned=None)
    assert assignment_of(ok(answer)) == parts(foo=[3, 4, 5])


def test_a_held_answer_goes_when_the_hold_ends_as_a_heartbeat_then_would_be_answered():
    ctx = held_context(join_window_ms=0)
    ok(ctx.heartbeat("m1"))
    t2, _ = ctx.send("m2")
    ctx.advance(199)
    assert t2 not in ctx.answers
    ctx.advance(1)
    a2 = ok(ctx.answers[t2])
    assert (a2.member_id, a2.member_epoch, assignment_of(a2)) == ("m2", 2, {})  # Kafka's answer, later


def test_a_joiner_of_a_settled_group_waits_up_to_half_an_interval_for_partitions_being_freed():
    ctx = held_context()
    t1, _ = ctx.send("m1")
    ctx.advance(LIMIT)  # m1 alone and assigned: the group's join window is over
    assert assignment_of(ok(ctx.answers[t1])) == parts(foo=range(6))
    ok(ctx.heartbeat("m1", 1, owned=parts(foo=range(6))))
    t2, _ = ctx.send("m2")
    ctx.advance(600)  # longer than a waiting member's hold (200 ms), but m2 joined
    assert t2 not in ctx.answers
    answer, _ = ctx.heartbeat("m1", 1, owned=parts(foo=range(6)))  # m1 learns of its revocation
    assert assignment_of(ok(answer)) == parts(foo=[0, 1, 2]) and t2 not in ctx.answers
    ok(ctx.heartbeat("m1", 1, owned=parts(foo=[0, 1, 2])))
    assert assignment_of(ok(ctx.answers[t2])) == parts(foo=[3, 4, 5])  # at once, not one interval later
    # nobody letting go: answered empty after half the interval (the window's limit is longer)
    t3, _ = ctx.send("m3")
    ctx.advance(2500 - 1)
    assert t3 not in ctx.answers
    ctx.advance(1)
    assert assignment_of(ok(ctx.answers[t3])) == {}


def test_a_member_waiting_for_the_target_of_its_groups_join_window_learns_it_when_it_is_computed():
    ctx = held_context()
    t1, _ = ctx.send("m1")
    ctx.advance(50)  # the window went quiet: m1 is assigned every partition
    assert assignment_of(ok(ctx.answers[t1])) == parts(foo=range(6))
    ctx.advance(10)
    ctx.send("m2")  # joins keep coming: the window's next target is held back
    ctx.advance(10)
    held, _ = ctx.send("m1", 1, owned=parts(foo=range(6)))
    for i in range(3, 6):
        ctx.advance(100)
        ctx.send(f"m{i}")
    ctx.advance(149)  # 439 ms after m1's heartbeat, longer than a waiting member's hold (200 ms)
    assert held not in ctx.answers
    # the joins paused for three windows: the target, and m1 is told at once to give partitions up
    ctx.advance(1)
    answer = ok(ctx.answers[held])
    assert answer.member_epoch == 1 and assignment_of(answer) == parts(foo=[0, 1])


def test_a_joiners_hold_is_at_most_half_the_heartbeat_interval():
    # (a client rejoining after it was fenced times its heartbeat out after one interval)
    ctx = held_context(heartbeat_interval_ms=1000, min_heartbeat_interval_ms=1)
    ctx.send("m1")
    ctx.advance(JOIN_WINDOW_MAX_WINDOWS * 50)
    t2, _ = ctx.send("m2")
    ctx.advance(499)
    assert t2 not in ctx.answers
    ctx.advance(1)
    assert assignment_of(ok(ctx.answers[t2])) == {}


def test_the_hold_is_at_most_a_quarter_of_the_heartbeat_interval():
    ctx = held_context(join_window_ms=0, heartbeat_interval_ms=400, min_heartbeat_interval_ms=1)
    ok(ctx.heartbeat("m1"))
    t2, _ = ctx.send("m2")
    ctx.advance(99)
    assert t2 not in ctx.answers
    ctx.advance(1)
    ok(ctx.answers[t2])


def test_a_members_next_heartbeat_answers_its_held_one_first():
    ctx = held_context(join_window_ms=0)
    ok(ctx.heartbeat("m1"))
    t2, _ = ctx.send("m2")
    t3, result = ctx.send("m2", 2, owned={})
    assert [token for token, _ in result.responses] == [t2]  # (and the new one is held in its turn)
    ctx.advance(200)
    assert ok(ctx.answers[t3]).member_epoch == 2


def test_no_hold_is_kafkas_behaviour():
    ctx = ConsumerContext()  # (the test context's defaults: no window, no hold)
    ok(ctx.heartbeat("m1"))
    answer, _ = ctx.heartbeat("m2")
    assert (ok(answer).member_epoch, assignment_of(answer)) == (2, {})


def test_a_held_heartbeat_whose_write_fails_is_answered_with_the_error():
    ctx = held_context()
    t1, result = ctx.send("m1")
    assert record_types(result) and t1 not in ctx.answers
    assert result.on_append_failure is not None
    failed = ctx.apply(result.on_append_failure(ErrorCode.not_coordinator))
    assert [token for token, _ in failed.responses] == [t1]
    assert ctx.answers[t1].error_code == ErrorCode.not_coordinator
    ctx.advance(1000)  # nothing answered twice (the context asserts it)


def test_a_refused_heartbeat_answers_the_held_one_as_it_stands_and_writes_nothing():
    ctx = held_context(join_window_ms=0)
    ok(ctx.heartbeat("m1"))
    t2, _ = ctx.send("m2")
    t3, result = ctx.send("m2", 7, owned={})  # a stale epoch: refused
    assert [token for token, _ in result.responses] == [t2, t3] and not result.records
    assert (ok(ctx.answers[t2]).member_epoch, assignment_of(ctx.answers[t2])) == (2, {})
    assert ctx.answers[t3].error_code == ErrorCode.fenced_member_epoch
