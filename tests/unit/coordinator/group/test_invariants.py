"""Invariants under random traffic: every request is answered exactly once, and nothing raises.

Random sequences of JoinGroup (dynamic v3/v4/v9, static, rejoins with known and stale ids), SyncGroup,
Heartbeat, LeaveGroup, OffsetCommit and time passing, with some appends failing, run against one group. At the
end the coordinator is unloaded, which answers whatever is still parked; every token must then have exactly
one answer (the context fails a test on a second answer).
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .context import GroupTestContext, to_protocols

INSTANCES = ["a", "b", "c"]
PROTOCOLS = [to_protocols("range"), to_protocols("range", "roundrobin"), to_protocols("roundrobin", "range")]

actions = st.lists(
    st.one_of(
        st.tuples(st.just("join_new"), st.sampled_from([3, 4, 9]), st.integers(0, 2)),
        st.tuples(
            st.just("join_static"), st.sampled_from(INSTANCES), st.sampled_from([5, 9]), st.integers(0, 2)
        ),
        st.tuples(st.just("rejoin"), st.integers(0, 20), st.integers(0, 2)),
        st.tuples(st.just("sync"), st.integers(0, 20), st.booleans()),
        st.tuples(st.just("heartbeat"), st.integers(0, 20)),
        st.tuples(st.just("leave"), st.integers(0, 20), st.booleans()),
        st.tuples(st.just("commit"), st.integers(0, 20)),
        st.tuples(st.just("advance"), st.sampled_from([1, 100, 500, 2500, 3000, 5000, 10000])),
    ),
    max_size=40,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(actions, st.randoms(use_true_random=False))
def test_every_request_is_answered_exactly_once(steps, rnd):
    ctx = GroupTestContext(group_initial_rebalance_delay_ms=100)
    known: list[tuple[str, str | None]] = []  # (member id, instance id) seen in answers
    calls = []

    def learn(call):
        member_id = getattr(call.response, "member_id", "") if call.done else ""
        if not member_id:
            return
        group = ctx.shard.groups.get("group-id")
        instance_id = (
            group.member(member_id).group_instance_id if group and group.has_member(member_id) else None
        )
        if (member_id, instance_id) not in known:
            known.append((member_id, instance_id))

    def pick(i):
        return known[i % len(known)] if known else ("nobody", None)

    def run(call):
        result = call.result
        if result.on_append_failure is not None and rnd.random() < 0.2:
            ctx.fail(result)
        else:
            ctx.apply(result)
        calls.append(call)
        return call

    def generation():
        group = ctx.shard.groups.get("group-id")
        return group.generation_id if group else 0

    for step in steps:
        kind = step[0]
        if kind == "join_new":
            run(
                ctx.join_group(
                    version=step[1],
                    protocols=PROTOCOLS[step[2]],
                    session_timeout_ms=3000,
                    rebalance_timeout_ms=4000,
                    apply=False,
                )
            )
        elif kind == "join_static":
            run(
                ctx.join_group(
                    group_instance_id=step[1],
                    version=step[2],
                    protocols=PROTOCOLS[step[3]],
                    session_timeout_ms=3000,
                    rebalance_timeout_ms=4000,
                    apply=False,
                )
            )
        elif kind == "rejoin":
            member_id, instance_id = pick(step[1])
            run(
                ctx.join_group(
                    member_id=member_id,
                    group_instance_id=instance_id,
                    version=9,
                    protocols=PROTOCOLS[step[2]],
                    session_timeout_ms=3000,
                    rebalance_timeout_ms=4000,
                    apply=False,
                )
            )
        elif kind == "sync":
            member_id, instance_id = pick(step[1])
            assignments = {m: b"x" for m, _ in known} if step[2] else {}
            run(
                ctx.sync_group(
                    member_id=member_id,
                    generation_id=generation(),
                    group_instance_id=instance_id,
                    assignments=assignments,
                    apply=False,
                )
            )
        elif kind == "heartbeat":
            member_id, instance_id = pick(step[1])
            calls.append(
                ctx.heartbeat(member_id=member_id, generation_id=generation(), group_instance_id=instance_id)
            )
        elif kind == "leave":
            member_id, instance_id = pick(step[1])
            identity = ("", instance_id) if step[2] and instance_id else (member_id, instance_id)
            run(ctx.leave_group(members=[identity], apply=False))
        elif kind == "commit":
            member_id, instance_id = pick(step[1])
            run(
                ctx.commit(
                    member_id=member_id,
                    generation_id=generation(),
                    group_instance_id=instance_id,
                    apply=False,
                )
            )
        else:
            ctx.advance(step[1])
        for call in calls:
            learn(call)

    ctx.apply(ctx.shard.on_unloaded())
    for call in calls:
        assert call.done, f"{call.token} was never answered"
    # whatever timers are left (an old static member id's session) fire without effect on the unloaded shard
    assert all(not r.records and not r.responses for r in ctx.advance(10**7))
