"""Online migration between classic and consumer groups (KIP-848), on the manual clock: a classic group with
members upgraded by a consumer-protocol member's first heartbeat, classic members inside a consumer group
(JoinGroup, SyncGroup, Heartbeat, LeaveGroup, offset commits), and the downgrade when the last
consumer-protocol member leaves. Named after Kafka's GroupMetadataManagerTest cases where one matches."""

from __future__ import annotations

import io
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

import pytest
from kio.schema.consumer_protocol_subscription.v1.data import ConsumerProtocolSubscription as SubscriptionV1
from kio.schema.consumer_protocol_subscription.v1.data import TopicPartition
from kio.serial import entity_writer
from kio.static.primitive import i32

from coordinator.consumer import records as rec
from coordinator.consumer.group import MemberState
from coordinator.consumer.manager import ConsumerGroupSettings, join_key, session_key, sync_key
from coordinator.consumer.migration import parse_subscription
from coordinator.group.state import ClassicGroupState
from coordinator.records import GroupMetadataKey, decode_record
from protocol.consumer import ConsumerAssignment, assignment_partitions, decode_assignment, encode_assignment
from protocol.errors import ErrorCode
from tests.unit.coordinator.group.context import GroupTestContext

from .context import UNCHANGED, FakeTopics, heartbeat_request, parts, tid

FOO = tid("foo")


def subscription(topics: Iterable[str] = ("foo",), owned: Mapping[str, Iterable[int]] | None = None) -> bytes:
    """A consumer-protocol Subscription v1: topics and owned partitions."""
    buf = io.BytesIO()
    buf.write((1).to_bytes(2, "big"))
    entity_writer(SubscriptionV1)(
        buf,
        SubscriptionV1(
            topics=tuple(topics),
            user_data=None,
            owned_partitions=tuple(
                TopicPartition(topic=t, partitions=tuple(i32(p) for p in sorted(ps)))
                for t, ps in (owned or {}).items()
            ),
        ),
    )
    return buf.getvalue()


def assignment(**topics: Iterable[int]) -> bytes:
    return encode_assignment(
        ConsumerAssignment(1, tuple((t, tuple(sorted(ps))) for t, ps in topics.items()), None)
    )


def context(**consumer: Any) -> GroupTestContext:
    ctx = GroupTestContext(group_initial_rebalance_delay_ms=0)
    ctx.shard.consumer.topics = FakeTopics(foo=6)
    ctx.shard.consumer.settings = ConsumerGroupSettings(
        **{"assignment_interval_ms": 0, "join_window_ms": 0, "heartbeat_hold_ms": 0, **consumer}
    )
    return ctx


def cghb(
    ctx: GroupTestContext,
    member_id: str,
    epoch: int = 0,
    *,
    owned: Mapping[uuid.UUID, Iterable[int]] | None = UNCHANGED,
    instance_id: str | None = None,
) -> Any:
    token, result = _cghb_result(ctx, member_id, epoch, owned=owned, instance_id=instance_id)
    ctx.apply(result)
    return ctx.answers[token]


def classic_group(ctx: GroupTestContext, group_id: str = "grp") -> tuple[str, str]:
    """A classic group of two consumer-protocol members at generation 1: foo 0-2 and 3-5."""
    a = ctx.join_group(group_id, protocols=[("range", subscription())], rebalance_timeout_ms=10000)
    b = ctx.join_group(group_id, protocols=[("range", subscription())], rebalance_timeout_ms=10000)
    ctx.advance(0)
    leader, follower = a.response.member_id, b.response.member_id
    assert a.response.generation_id == 1
    ctx.sync_group(
        group_id,
        leader,
        1,
        assignments={leader: assignment(foo=[0, 1, 2]), follower: assignment(foo=[3, 4, 5])},
    )
    ctx.sync_group(group_id, follower, 1)
    assert ctx.shard.groups[group_id].state == ClassicGroupState.STABLE
    return leader, follower


def rejoin(
    ctx: GroupTestContext, member_id: str, owned: Mapping[str, Iterable[int]], group_id: str = "grp"
) -> Any:
    join = ctx.join_group(
        group_id, member_id, protocols=[("range", subscription(owned=owned))], rebalance_timeout_ms=10000
    )
    return join.response


def synced(
    ctx: GroupTestContext, member_id: str, generation: int, group_id: str = "grp"
) -> dict[str, list[int]]:
    sync = ctx.sync_group(group_id, member_id, generation)
    assert sync.error == ErrorCode.none, sync.error
    found = assignment_partitions(sync.response.assignment)
    assert found is not None
    return found


def test_subscription_versions_parse():
    parsed = parse_subscription(subscription(["foo", "bar"], {"foo": [2, 1]}))
    assert (parsed.version, parsed.topics, parsed.owned) == (1, ("foo", "bar"), {"foo": frozenset({1, 2})})


def test_consumer_group_heartbeat_with_stable_classic_group():
    ctx = context()
    leader, follower = classic_group(ctx)
    written = len(ctx.log)
    answer = cghb(ctx, "new")
    assert answer.error_code == ErrorCode.none
    assert "grp" not in ctx.shard.groups
    group = ctx.shard.consumer.groups["grp"]
    # the classic members are members at their generation, with their partitions; the joiner bumped the epoch
    assert group.members[leader].assigned == parts(foo=[0, 1, 2])
    assert group.members[follower].assigned == parts(foo=[3, 4, 5])
    assert group.members[leader].member_epoch == 1 and group.members[leader].uses_classic_protocol
    assert (group.group_epoch, answer.member_epoch, group.target["new"]) == (2, 2, parts(foo=[2, 5]))
    assert answer.assignment.topic_partitions == ()  # 2 and 5 are still held
    # the classic group's tombstone, then the consumer group's records (Kafka's order), then the joiner's
    records = ctx.log[written:]
    assert isinstance(decode_record(records[0])[0], GroupMetadataKey) and records[0].value is None
    assert [rec.record_type(r.key) for r in records[1:9]] == [5, 5, 3, 7, 7, 6, 8, 8]

    # the leader is told to rejoin; its JoinGroup (owning 0-2) leaves it 0-1, revoking 2
    assert ctx.heartbeat("grp", leader, 1).error == ErrorCode.rebalance_in_progress
    assert ctx.timer.is_scheduled(join_key("grp", leader))
    join = rejoin(ctx, leader, {"foo": [0, 1, 2]})
    assert (join.error_code, join.generation_id, join.leader, join.members) == (ErrorCode.none, 1, "", ())
    assert not ctx.timer.is_scheduled(join_key("grp", leader))
    assert synced(ctx, leader, 1) == {"foo": [0, 1]}
    assert ctx.heartbeat("grp", leader, 1).error == ErrorCode.rebalance_in_progress  # it owes the revocation
    join = rejoin(ctx, leader, {"foo": [0, 1]})
    assert join.generation_id == 2 and group.members[leader].state == MemberState.STABLE
    assert synced(ctx, leader, 2) == {"foo": [0, 1]}
    assert ctx.heartbeat("grp", leader, 2).error == ErrorCode.none
    # the follower the same way, giving up 5
    join = rejoin(ctx, follower, {"foo": [3, 4, 5]})
    assert synced(ctx, follower, join.generation_id) == {"foo": [3, 4]}
    join = rejoin(ctx, follower, {"foo": [3, 4]})
    assert synced(ctx, follower, join.generation_id) == {"foo": [3, 4]} and join.generation_id == 2
    # the new member picks up what was released
    answer = cghb(ctx, "new", 2, owned={})
    assert answer.assignment.topic_partitions[0].partitions == (2, 5)
    assert str(group.state) == "Stable"


def test_consumer_group_heartbeat_with_non_consumer_classic_group_is_refused():
    ctx = context()
    ctx.join_group("grp", protocol_type="connect", protocols=[("range", b"x")])
    ctx.advance(0)
    answer = cghb(ctx, "m1")
    assert answer.error_code == ErrorCode.group_id_not_found
    assert "grp" in ctx.shard.groups and "grp" not in ctx.shard.consumer.groups


def test_upgrade_disabled_by_policy():
    ctx = context(migration_policy="downgrade")
    classic_group(ctx)
    assert cghb(ctx, "m1").error_code == ErrorCode.group_id_not_found
    assert ctx.shard.groups["grp"].state == ClassicGroupState.STABLE


def test_consumer_group_heartbeat_with_preparing_rebalance_classic_group():
    ctx = context()
    leader, follower = classic_group(ctx)
    ctx.heartbeat("grp", leader, 1)
    join = ctx.join_group("grp", leader, protocols=[("range", subscription())], rebalance_timeout_ms=10000)
    assert not join.done  # parked: the group waits for the follower
    assert cghb(ctx, "new").error_code == ErrorCode.none
    assert join.error == ErrorCode.rebalance_in_progress  # answered by the upgrade
    assert ctx.heartbeat("grp", follower, 1).error == ErrorCode.rebalance_in_progress


def test_classic_member_joins_consumer_group():
    # testJoiningConsumerGroupWithNewDynamicMember
    ctx = context()
    assert cghb(ctx, "m1").error_code == ErrorCode.none
    group = ctx.shard.consumer.groups["grp"]
    first = ctx.join_group("grp", protocols=[("range", subscription())], version=9)
    assert first.error == ErrorCode.member_id_required
    member_id = first.response.member_id
    join = ctx.join_group("grp", member_id, protocols=[("range", subscription())], version=9)
    assert join.error == ErrorCode.none
    assert (join.response.generation_id, join.response.protocol_name, join.response.leader) == (
        2,
        "range",
        "",
    )
    assert ctx.timer.is_scheduled(sync_key("grp", member_id))
    assert group.members[member_id].classic is not None
    assert group.group_epoch == 2
    # m1 still holds everything: nothing for the classic member yet
    assert synced(ctx, member_id, 2) == {}
    assert not ctx.timer.is_scheduled(sync_key("grp", member_id))
    # m1 revokes half; the classic member is told to rejoin and gets them
    answer = cghb(ctx, "m1", 1, owned=parts(foo=range(6)))
    answer = cghb(ctx, "m1", 1, owned={FOO: answer.assignment.topic_partitions[0].partitions})
    assert answer.member_epoch == 2
    assert ctx.heartbeat("grp", member_id, 2).error == ErrorCode.rebalance_in_progress
    join = ctx.join_group("grp", member_id, protocols=[("range", subscription())], version=9)
    assert (
        synced(ctx, member_id, join.response.generation_id) == {"foo": [3, 4, 5]}
        or len(synced(ctx, member_id, join.response.generation_id)["foo"]) == 3
    )
    assert ctx.heartbeat("grp", member_id, 2).error == ErrorCode.none
    # describe says which protocol each member uses
    described = ctx.shard.consumer.describe(["grp"])[0]
    assert sorted(m["member_type"] for m in described["members"]) == [0, 1]


def test_classic_member_errors_in_consumer_group():
    ctx = context()
    cghb(ctx, "m1")
    join = ctx.join_group("grp", "c1", protocols=[("range", subscription())])
    assert join.error == ErrorCode.none
    generation = join.response.generation_id
    assert ctx.heartbeat("grp", "c1", generation + 5).error == ErrorCode.illegal_generation
    assert ctx.heartbeat("grp", "nobody", generation).error == ErrorCode.unknown_member_id
    assert ctx.heartbeat("grp", "m1", 1).error == ErrorCode.unknown_member_id  # a consumer-protocol member
    assert ctx.sync_group("grp", "c1", generation, protocol_name="other").error == (
        ErrorCode.inconsistent_group_protocol
    )
    bad = ctx.join_group("grp", "c2", protocols=[("roundrobin", subscription())])
    assert bad.error == ErrorCode.inconsistent_group_protocol

    # offsets: the classic member commits with its generation
    def commit(generation_id: int, version: int) -> ErrorCode:
        call = ctx.commit("grp", member_id="c1", generation_id=generation_id, version=version)
        return ErrorCode(call.response.topics[0].partitions[0].error_code)

    assert commit(generation, 7) == ErrorCode.none  # (a classic member needs no v9)
    assert commit(generation, 9) == ErrorCode.none
    assert commit(generation + 1, 7) == ErrorCode.illegal_generation


def test_classic_member_commits_at_its_previous_generation_what_it_held_then():
    # A commit sent right behind a JoinGroup carries the generation before: the rejoin is answered at once with a
    # new one. Accepted for partitions the member held at that generation and still holds (as for a member of the
    # consumer protocol); refused for one it was given only now, or at a generation it did not hold it at.
    ctx = context()
    epochs: dict[str, int] = {"m1": 0, "m2": 0}
    owned: dict[str, set[int]] = {"m1": set(), "m2": set()}

    def heartbeat(name: str) -> None:
        answer = cghb(ctx, name, epochs[name], owned={FOO: owned[name]} if epochs[name] else UNCHANGED)
        epochs[name] = answer.member_epoch
        if answer.assignment is not None:
            owned[name] = {p for t in answer.assignment.topic_partitions for p in t.partitions}

    heartbeat("m1")
    heartbeat("m2")
    ctx.join_group("grp", "c1", protocols=[("range", subscription())])
    group = ctx.shard.consumer.groups["grp"]
    held: list[int] = []
    for _ in range(3):  # two partitions each
        heartbeat("m1")
        heartbeat("m2")
        if ctx.heartbeat("grp", "c1", group.members["c1"].member_epoch).error != ErrorCode.none:
            joined = rejoin(ctx, "c1", {"foo": held})
            held = synced(ctx, "c1", joined.generation_id)["foo"]
    before = group.members["c1"].member_epoch
    assert len(held) == 2 and owned["m1"] | owned["m2"] | set(held) == set(range(6))
    assert cghb(ctx, "m2", -1).error_code == ErrorCode.none  # m2 leaves: c1 is given one more
    heartbeat("m1")
    assert ctx.heartbeat("grp", "c1", before).error == ErrorCode.rebalance_in_progress
    now = rejoin(ctx, "c1", {"foo": held}).generation_id
    assert now > before
    given = sorted(set(synced(ctx, "c1", now)["foo"]) - set(held))
    assert len(given) == 1

    def commit(generation_id: int, partition: int) -> ErrorCode:
        call = ctx.commit(
            "grp", {("foo", partition): 7}, member_id="c1", generation_id=generation_id, version=7
        )
        return ErrorCode(call.response.topics[0].partitions[0].error_code)

    assert commit(before, held[0]) == ErrorCode.none  # held since `before`
    assert commit(now, held[0]) == ErrorCode.none
    assert commit(now, given[0]) == ErrorCode.none
    assert commit(before, given[0]) == ErrorCode.illegal_generation  # given only at `now`
    assert commit(before - 1, held[0]) == ErrorCode.illegal_generation  # not held yet
    assert commit(now + 1, held[0]) == ErrorCode.illegal_generation


def test_classic_member_sync_timeout_and_session_timeout():
    ctx = context()
    cghb(ctx, "m1")
    join = ctx.join_group("grp", "c1", protocols=[("range", subscription())], rebalance_timeout_ms=1000)
    assert join.error == ErrorCode.none
    group = ctx.shard.consumer.groups["grp"]
    epoch = group.group_epoch
    ctx.advance(1000)
    assert "c1" not in group.members and group.group_epoch == epoch + 1
    join = ctx.join_group(
        "grp", "c2", protocols=[("range", subscription())], session_timeout_ms=700, rebalance_timeout_ms=5000
    )
    synced(ctx, "c2", join.response.generation_id)
    assert ctx.deadline(session_key("grp", "c2")) == 700
    ctx.advance(700)
    assert "c2" not in group.members


def test_last_consumer_protocol_member_leaving_in_consumer_group():
    # testLastConsumerProtocolMemberLeavingConsumerGroup
    ctx = context()
    leader, follower = classic_group(ctx)
    cghb(ctx, "new")
    group = ctx.shard.consumer.groups["grp"]
    epoch = group.group_epoch
    answer = cghb(ctx, "new", -1)
    assert answer.error_code == ErrorCode.none and answer.member_epoch == -1
    assert "grp" not in ctx.shard.consumer.groups
    classic = ctx.shard.groups["grp"]
    assert classic.state == ClassicGroupState.PREPARING_REBALANCE
    assert classic.generation_id == epoch and sorted(classic.all_member_ids()) == sorted([leader, follower])
    assert classic.protocol_name == "range"
    # each classic member's assignment is its target in the consumer group (the leaver's partitions: nobody's)
    assert {m.member_id: decode_assignment(m.assignment).partitions for m in classic.all_members()} == {
        leader: (("foo", (0, 1)),),
        follower: (("foo", (3, 4)),),
    }
    # the log holds the consumer group's tombstones, then the classic group's record
    key, value = decode_record(ctx.log[-1])
    assert isinstance(key, GroupMetadataKey) and value is not None and value.generation == epoch
    # the classic members rebalance as a classic group
    assert ctx.heartbeat("grp", leader, epoch).error == ErrorCode.rebalance_in_progress
    a = ctx.join_group("grp", leader, protocols=[("range", subscription())], rebalance_timeout_ms=10000)
    b = ctx.join_group("grp", follower, protocols=[("range", subscription())], rebalance_timeout_ms=10000)
    assert a.done and b.done and a.response.generation_id == epoch + 1
    # a restart reads the same
    again = ctx.restart()
    assert "grp" in again.shard.groups and "grp" not in again.shard.consumer.groups


def test_last_consumer_protocol_member_session_timeout_downgrades():
    # testLastConsumerProtocolMemberSessionTimeoutInConsumerGroup
    ctx = context(session_timeout_ms=45000)
    leader, follower = classic_group(ctx)  # session timeouts of 500 ms
    cghb(ctx, "new")
    group = ctx.shard.consumer.groups["grp"]
    for member_id, owned in (
        (leader, [0, 1, 2]),
        (follower, [3, 4, 5]),
    ):  # they catch up, as in the test above
        rejoin(ctx, member_id, {"foo": owned})
        join = rejoin(ctx, member_id, {"foo": [p for p in owned if p not in (2, 5)]})
        synced(ctx, member_id, join.generation_id)
    assert {group.members[m].member_epoch for m in (leader, follower)} == {2}
    for _ in range(150):  # the classic members heartbeat; the consumer-protocol member is silent
        ctx.advance(400)
        assert ctx.heartbeat("grp", leader, 2).error in (ErrorCode.none, ErrorCode.rebalance_in_progress)
        ctx.heartbeat("grp", follower, 2)
        if "grp" not in ctx.shard.consumer.groups:
            break
    else:
        raise AssertionError("the consumer-protocol member was never fenced")
    assert ctx.clock.monotonic_ms() >= 45000
    classic = ctx.shard.groups["grp"]
    assert classic.state == ClassicGroupState.PREPARING_REBALANCE and classic.num_members() == 2


def test_downgrade_disabled_by_policy():
    ctx = context(migration_policy="upgrade")
    classic_group(ctx)
    cghb(ctx, "new")
    cghb(ctx, "new", -1)
    group = ctx.shard.consumer.groups["grp"]
    assert "new" not in group.members and len(group.members) == 2


def static_consumer_and_classic_member(ctx: GroupTestContext) -> tuple[set[int], set[int]]:
    """A consumer group of a static consumer-protocol member "s" (instance "i2") and a classic member "c1", three
    partitions of foo each, reconciled: (the partitions of s, those of c1)."""
    epoch, owned = 0, set()

    def heartbeat() -> None:
        nonlocal epoch, owned
        answer = cghb(ctx, "s", epoch, owned={FOO: owned} if epoch else UNCHANGED, instance_id="i2")
        epoch = answer.member_epoch
        if answer.assignment is not None:
            owned = {p for t in answer.assignment.topic_partitions for p in t.partitions}

    heartbeat()
    ctx.join_group("grp", "c1", protocols=[("range", subscription())])
    group = ctx.shard.consumer.groups["grp"]
    held: list[int] = []
    for _ in range(3):
        heartbeat()
        if ctx.heartbeat("grp", "c1", group.members["c1"].member_epoch).error != ErrorCode.none:
            joined = rejoin(ctx, "c1", {"foo": held})
            held = synced(ctx, "c1", joined.generation_id)["foo"]
    assert len(owned) == 3 and owned | set(held) == set(range(6))
    return owned, set(held)


@pytest.mark.parametrize("changed", [False, True])
def test_last_static_consumer_protocol_member_replaced_by_classic_member(changed):
    # testLastStaticConsumerProtocolMemberReplacedByClassicProtocolMember: a classic static member joins in place
    # of the group's last consumer-protocol member (still in the group: only two consumer-protocol members must
    # have left for one to replace the other); the group becomes a classic group with the newcomer holding the
    # partitions of the one it replaced, Stable, or rebalancing when the newcomer's subscription differs.
    ctx = context()
    owned, held = static_consumer_and_classic_member(ctx)
    group_epoch = ctx.shard.consumer.groups["grp"].group_epoch

    topics = ["foo", "bar"] if changed else ["foo"]
    join = ctx.join_group(
        "grp", group_instance_id="i2", protocols=[("range", subscription(topics))], version=5
    )
    assert join.error == ErrorCode.none
    new_id = join.response.member_id
    assert new_id not in ("", "s") and join.response.leader == ""
    assert "grp" not in ctx.shard.consumer.groups
    classic = ctx.shard.groups["grp"]
    assert sorted(classic.all_member_ids()) == sorted(["c1", new_id])
    assert classic.generation_id == join.response.generation_id == group_epoch + (1 if changed else 0)
    assert classic.member(new_id).group_instance_id == "i2"
    assert decode_assignment(classic.member(new_id).assignment).partitions == (("foo", tuple(sorted(owned))),)
    assert decode_assignment(classic.member("c1").assignment).partitions == (("foo", tuple(sorted(held))),)
    key, value = decode_record(ctx.log[-1])
    assert (
        isinstance(key, GroupMetadataKey) and value is not None and value.generation == classic.generation_id
    )
    if changed:
        assert classic.state == ClassicGroupState.PREPARING_REBALANCE
        assert ctx.heartbeat("grp", "c1", classic.generation_id).error == ErrorCode.rebalance_in_progress
    else:
        assert classic.state == ClassicGroupState.STABLE
        assert synced(ctx, new_id, classic.generation_id) == {"foo": sorted(owned)}
        assert ctx.heartbeat("grp", "c1", classic.generation_id).error == ErrorCode.none
    # the member replaced is not in the group any more; a restart reads the same
    assert ctx.heartbeat("grp", "s", classic.generation_id).error == ErrorCode.unknown_member_id
    again = ctx.restart()
    assert "grp" in again.shard.groups and "grp" not in again.shard.consumer.groups
    assert sorted(again.shard.groups["grp"].all_member_ids()) == sorted(["c1", new_id])


def test_failed_replacement_downgrade_write_brings_the_consumer_group_back():
    ctx = context()
    static_consumer_and_classic_member(ctx)
    join = ctx.join_group(
        "grp", group_instance_id="i2", protocols=[("range", subscription())], version=5, apply=False
    )
    assert "grp" in ctx.shard.groups
    ctx.fail(join.result)
    assert "grp" not in ctx.shard.groups
    group = ctx.shard.consumer.groups["grp"]
    assert sorted(group.members) == ["c1", "s"] and group.static_member("i2").member_id == "s"


def test_classic_leave_group_in_consumer_group():
    ctx = context()
    cghb(ctx, "m1")
    join = ctx.join_group("grp", "c1", protocols=[("range", subscription())])
    assert join.error == ErrorCode.none
    leave = ctx.leave_group("grp", [("c1", None), ("ghost", None)])
    assert [m.error_code for m in leave.response.members] == [ErrorCode.none, ErrorCode.unknown_member_id]
    assert "c1" not in ctx.shard.consumer.groups["grp"].members


def test_classic_member_metadata_record_round_trip_and_reload():
    ctx = context()
    cghb(ctx, "m1")
    join = ctx.join_group("grp", "c1", protocols=[("range", subscription()), ("roundrobin", subscription())])
    assert join.error == ErrorCode.none
    member_records = [
        r for r in ctx.log if rec.record_type(r.key) == rec.MEMBER_METADATA and r.value is not None
    ]
    value = rec.decode_value(rec.decode_key(member_records[-1].key), member_records[-1].value)
    assert value.classic is not None and [n for n, _ in value.classic.protocols] == ["range", "roundrobin"]
    assert value.classic.session_timeout_ms == 500
    again = ctx.restart()
    again.shard.consumer.topics = ctx.shard.consumer.topics
    member = again.shard.consumer.groups["grp"].members["c1"]
    assert member.classic == value.classic
    assert again.deadline(session_key("grp", "c1")) == 500


def _cghb_result(ctx: GroupTestContext, member_id: str, epoch: int, **fields: Any) -> Any:
    token = ctx.token(f"cghb-{member_id}")
    request = heartbeat_request(member_id, epoch, **fields)
    return token, ctx.shard.consumer_group_heartbeat(token, 1, request, client_id="c", client_host="/h")


def test_failed_upgrade_write_brings_the_classic_group_back():
    ctx = context()
    leader, follower = classic_group(ctx)
    token, result = _cghb_result(ctx, "new", 0)
    assert "grp" in ctx.shard.consumer.groups and "grp" not in ctx.shard.groups
    ctx.fail(result)
    assert ctx.answers[token].error_code == ErrorCode.coordinator_not_available
    assert "grp" not in ctx.shard.consumer.groups
    classic = ctx.shard.groups["grp"]
    assert classic.state == ClassicGroupState.STABLE and sorted(classic.all_member_ids()) == sorted(
        [leader, follower]
    )
    assert ctx.heartbeat("grp", leader, 1).error == ErrorCode.none
    assert (
        ctx.session_deadline(leader, "grp") is not None and ctx.session_deadline(follower, "grp") is not None
    )


def test_failed_downgrade_write_brings_the_consumer_group_back():
    ctx = context()
    leader, follower = classic_group(ctx)
    cghb(ctx, "new")
    token, result = _cghb_result(ctx, "new", -1)
    assert "grp" in ctx.shard.groups
    ctx.fail(result)
    assert "grp" not in ctx.shard.groups
    group = ctx.shard.consumer.groups["grp"]
    assert sorted(group.members) == sorted([leader, follower, "new"])
    assert all(ctx.timer.is_scheduled(session_key("grp", m)) for m in group.members)


def test_upgrade_with_assignment_user_data():
    # librdkafka echoes subscription user data into assignments: accepted for the Kafka clients' own assignors,
    # refused for a custom one (Kafka refuses both: "userData from a custom assignor would be lost")
    for protocol, accepted in (("cooperative-sticky", True), ("my-assignor", False)):
        ctx = context()
        a = ctx.join_group("grp", protocols=[(protocol, subscription())], rebalance_timeout_ms=10000)
        ctx.advance(0)
        data = encode_assignment(ConsumerAssignment(1, (("foo", (0, 1, 2, 3, 4, 5)),), b"\x00\x01sticky"))
        ctx.sync_group(
            "grp", a.response.member_id, 1, protocol_name=protocol, assignments={a.response.member_id: data}
        )
        answer = cghb(ctx, "new")
        assert (answer.error_code == ErrorCode.none) is accepted, (protocol, answer)
        assert ("grp" in ctx.shard.consumer.groups) is accepted


def test_classic_member_waits_for_a_held_back_target_without_rejoining():
    # group.consumer.assignment.interval.ms: a rejoin could not move the member on before the target is computed
    ctx = context(assignment_interval_ms=1000, members_per_assignment_ms=0)
    cghb(ctx, "m1")  # the first target, at once
    join = ctx.join_group(
        "grp", "c1", protocols=[("range", subscription())], rebalance_timeout_ms=5000, session_timeout_ms=5000
    )
    assert join.error == ErrorCode.none and join.response.generation_id == 1  # the target is held back
    group = ctx.shard.consumer.groups["grp"]
    assert (group.group_epoch, group.assignment_epoch) == (2, 1)
    assert synced(ctx, "c1", 1) == {}
    assert ctx.heartbeat("grp", "c1", 1).error == ErrorCode.none
    ctx.advance(1000)  # the target for epoch 2
    assert group.assignment_epoch == 2
    assert ctx.heartbeat("grp", "c1", 1).error == ErrorCode.rebalance_in_progress
