"""ConsumerGroupHeartbeat on the manual clock, with exact records and answers (cases named after Kafka's
GroupMetadataManagerTest)."""

from __future__ import annotations

import pytest

from coordinator.consumer import records as rec
from coordinator.consumer.group import ConsumerGroupState, MemberState
from coordinator.consumer.manager import rebalance_key, session_key
from protocol.errors import ErrorCode

from .context import ConsumerContext, FakeTopics, assignment_of, ok, parts, record_types, tid

FOO = tid("foo")
META, MEMBER, TARGET_META, TARGET, CURRENT = (
    rec.GROUP_METADATA,
    rec.MEMBER_METADATA,
    rec.TARGET_ASSIGNMENT_METADATA,
    rec.TARGET_ASSIGNMENT_MEMBER,
    rec.CURRENT_MEMBER_ASSIGNMENT,
)


def value_of(result, kind: int, member_id: str = ""):
    for record in result.records:
        key = rec.decode_key(record.key)
        if key.type == kind and key.member_id == member_id:
            return rec.decode_value(key, record.value)
    raise AssertionError(f"no record of type {kind} for {member_id!r}")


def two_stable_members(ctx: ConsumerContext) -> None:
    """m1 and m2 share foo's 6 partitions, both stable at epoch 2."""
    ok(ctx.heartbeat("m1"))
    ok(ctx.heartbeat("m2"))
    ok(ctx.heartbeat("m1", 1, owned=parts(foo=range(6))))
    ok(ctx.heartbeat("m1", 1, owned=parts(foo=[0, 1, 2])))
    ok(ctx.heartbeat("m2", 2, owned={}))
    assert ctx.group().state == ConsumerGroupState.STABLE


def test_member_joins_empty_consumer_group():
    ctx = ConsumerContext()
    answer, result = ctx.heartbeat("m1", assignor="range")
    ok(answer)
    assert (answer.member_id, answer.member_epoch) == ("m1", 1)
    assert answer.heartbeat_interval.total_seconds() == 5
    assert assignment_of(answer) == parts(foo=range(6))
    assert record_types(result) == [
        (MEMBER, False),
        (META, False),
        (TARGET, False),
        (TARGET_META, False),
        (CURRENT, False),
    ]
    member = value_of(result, MEMBER, "m1")
    assert member.subscribed_topic_names == ("foo",) and member.server_assignor == "range"
    assert member.client_id == "client" and member.rebalance_timeout_ms == 5000
    assert value_of(result, META).epoch == 1
    assert value_of(result, TARGET_META).assignment_epoch == 1
    current = value_of(result, CURRENT, "m1")
    assert (current.member_epoch, current.previous_member_epoch, current.state) == (1, 0, 0)
    assert current.assigned == parts(foo=range(6))


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(member_id=""), "MemberId can't be empty."),
        (dict(group_id=""), "GroupId can't be empty."),
        (dict(instance_id=""), "InstanceId can't be empty."),
        (dict(rack_id=""), "RackId can't be empty."),
        (dict(rebalance_timeout_ms=-1), "RebalanceTimeoutMs must be provided in first request."),
        (dict(owned=None), "TopicPartitions must be empty when (re-)joining."),
        (dict(owned=parts(foo=[0])), "TopicPartitions must be empty when (re-)joining."),
        (dict(topics=None), "SubscribedTopicNames or SubscribedTopicRegex must be set in first request."),
        (dict(member_epoch=-2), "InstanceId can't be null when MemberEpoch is -2."),
        (dict(member_epoch=-3), "MemberEpoch is invalid: -3."),
    ],
)
def test_consumer_heartbeat_request_validation(fields, message):
    ctx = ConsumerContext()
    answer, result = ctx.heartbeat(**fields)
    assert answer.error_code == ErrorCode.invalid_request
    assert answer.error_message == message
    assert not result.records


def test_unsupported_assignor_and_empty_subscription():
    ctx = ConsumerContext()
    answer, _ = ctx.heartbeat(assignor="sticky")
    assert answer.error_code == ErrorCode.unsupported_assignor
    ok(ctx.heartbeat("m2", topics=[]))  # an empty subscription is allowed


def test_member_id_generation_on_v0():
    ctx = ConsumerContext()
    answer, _ = ctx.heartbeat("", version=0)
    ok(answer)
    assert len(answer.member_id) == 36
    assert ctx.heartbeat("", version=1)[0].error_code == ErrorCode.invalid_request


def test_unknown_member_id_joins_consumer_group():
    ctx = ConsumerContext()
    assert ctx.heartbeat("m1", 1)[0].error_code == ErrorCode.group_id_not_found
    ok(ctx.heartbeat("m1"))
    answer, _ = ctx.heartbeat("nobody", 1)
    assert answer.error_code == ErrorCode.unknown_member_id


def test_consumer_group_member_epoch_validation():
    ctx = ConsumerContext()
    ok(ctx.heartbeat("m1"))
    assert ctx.heartbeat("m1", 2, owned=parts(foo=range(6)))[0].error_code == ErrorCode.fenced_member_epoch
    two = ConsumerContext()
    two_stable_members(two)
    # epoch 1 was m1's previous epoch: a retry after a lost answer, accepted while it owns a subset
    ok(two.heartbeat("m1", 1, owned=parts(foo=[0, 1, 2])))
    assert two.heartbeat("m1", 1, owned=parts(foo=[0, 5]))[0].error_code == ErrorCode.fenced_member_epoch
    assert two.heartbeat("m2", 0 + 1, owned={})[0].error_code == ErrorCode.fenced_member_epoch


def test_epoch_zero_rejoin_of_a_known_member_keeps_its_assignment():
    # Kafka 4.3 (KAFKA-19233): a fenced client rejoining with its id is not fenced again.
    ctx = ConsumerContext()
    two_stable_members(ctx)
    answer, _ = ctx.heartbeat("m1")
    ok(answer)
    assert answer.member_epoch == 2 and assignment_of(answer) == parts(foo=[0, 1, 2])
    assert ctx.group().group_epoch == 2


def test_reconciliation_process():
    ctx = ConsumerContext()
    ok(ctx.heartbeat("m1"))
    answer, result = ctx.heartbeat("m2")
    assert (answer.member_epoch, assignment_of(answer)) == (2, {})  # foo 3-5 still held by m1
    assert ctx.group().members["m2"].state == MemberState.UNRELEASED_PARTITIONS
    # m1 is asked to give up 3-5: its epoch stays at 1 until it has
    answer, result = ctx.heartbeat("m1", 1, owned=parts(foo=range(6)))
    assert (answer.member_epoch, assignment_of(answer)) == (1, parts(foo=[0, 1, 2]))
    assert ctx.group().members["m1"].state == MemberState.UNREVOKED_PARTITIONS
    assert ctx.timer.is_scheduled(rebalance_key("grp", "m1"))
    # m2 asks again: still unreleased, nothing written
    answer, result = ctx.heartbeat("m2", 2, owned={})
    assert assignment_of(answer) is None and not result.records
    # m1 revoked: stable at epoch 2, rebalance timer gone
    answer, result = ctx.heartbeat("m1", 1, owned=parts(foo=[0, 1, 2]))
    assert answer.member_epoch == 2 and assignment_of(answer) is None
    assert record_types(result) == [(CURRENT, False)]
    assert not ctx.timer.is_scheduled(rebalance_key("grp", "m1"))
    answer, _ = ctx.heartbeat("m2", 2, owned={})
    assert assignment_of(answer) == parts(foo=[3, 4, 5])
    assert ctx.group().state == ConsumerGroupState.STABLE
    assert ctx.group().owners == {(FOO, p): "m1" if p < 3 else "m2" for p in range(6)}


def test_full_request_gets_the_assignment():
    ctx = ConsumerContext()
    two_stable_members(ctx)
    answer, _ = ctx.heartbeat("m1", 2, owned=parts(foo=[0, 1, 2]))
    assert assignment_of(answer) is None
    answer, _ = ctx.heartbeat("m1", 2, owned=parts(foo=[0, 1, 2]), rebalance_timeout_ms=5000, topics=["foo"])
    assert assignment_of(answer) == parts(foo=[0, 1, 2])


def test_a_heartbeat_that_changes_nothing_keeps_the_member_and_writes_nothing():
    ctx = ConsumerContext()
    two_stable_members(ctx)
    before = ctx.group().members["m1"]
    answer, result = ctx.heartbeat("m1", 2)
    assert (answer.error_code, answer.member_id, answer.member_epoch) == (ErrorCode.none, "m1", 2)
    assert answer.heartbeat_interval.total_seconds() == 5 and assignment_of(answer) is None
    assert not result.records and ctx.group().members["m1"] is before
    # the same values sent again change nothing either; a new one is written, the fields left null kept
    answer, result = ctx.heartbeat("m1", 2, topics=["foo"], rebalance_timeout_ms=5000)
    assert not result.records and ctx.group().members["m1"] is before
    answer, result = ctx.heartbeat("m1", 2, rack_id="rack-a")
    assert record_types(result) == [(MEMBER, False)]
    after = ctx.group().members["m1"]
    assert (after.rack_id, after.subscribed_topic_names, after.assigned) == (
        "rack-a",
        ("foo",),
        before.assigned,
    )


def test_updating_subscription_triggers_new_target_assignment():
    ctx = ConsumerContext()
    ok(ctx.heartbeat("m1"))
    answer, result = ctx.heartbeat("m1", 1, topics=["foo", "bar"], owned=parts(foo=range(6)))
    assert answer.member_epoch == 2
    assert assignment_of(answer) == {**parts(foo=range(6)), **parts(bar=range(3))}
    assert [t for t, _ in record_types(result)] == [MEMBER, META, TARGET, TARGET_META, CURRENT]


def test_leaving_member_bumps_group_epoch():
    ctx = ConsumerContext()
    two_stable_members(ctx)
    answer, result = ctx.heartbeat("m2", -1, owned=None)
    ok(answer)
    assert (answer.member_id, answer.member_epoch) == ("m2", -1)
    assert record_types(result) == [(CURRENT, True), (TARGET, True), (MEMBER, True), (META, False)]
    assert value_of(result, META).epoch == 3
    assert not ctx.timer.is_scheduled(session_key("grp", "m2"))
    answer, _ = ctx.heartbeat("m1", 2, owned=parts(foo=[0, 1, 2]))
    assert answer.member_epoch == 3 and assignment_of(answer) == parts(foo=range(6))
    assert ctx.heartbeat("m2", -1)[0].error_code == ErrorCode.unknown_member_id
    assert ctx.heartbeat("m1", -1, group_id="other")[0].error_code == ErrorCode.group_id_not_found


def test_new_member_is_rejected_when_maximum_members_is_reached():
    ctx = ConsumerContext(max_size=1)
    ok(ctx.heartbeat("m1"))
    assert ctx.heartbeat("m2")[0].error_code == ErrorCode.group_max_size_reached
    ok(ctx.heartbeat("m1", 1, owned=parts(foo=range(6))))


def test_consumer_group_states():
    ctx = ConsumerContext()
    ok(ctx.heartbeat("m1"))
    assert ctx.group().state == ConsumerGroupState.STABLE
    ok(ctx.heartbeat("m2"))
    assert ctx.group().state == ConsumerGroupState.RECONCILING
    ok(ctx.heartbeat("m1", -1))
    ok(ctx.heartbeat("m2", -1))
    assert ctx.group().state == ConsumerGroupState.EMPTY


# -- static members ------------------------------------------------------------------------------------------


def test_static_member_gets_back_assignment_upon_rejoin_without_epoch_bump():
    ctx = ConsumerContext()
    ok(ctx.heartbeat("m1", instance_id="i1"))
    ok(ctx.heartbeat("m2", instance_id="i2"))
    ok(ctx.heartbeat("m1", 1, owned=parts(foo=range(6)), instance_id="i1"))
    ok(ctx.heartbeat("m1", 1, owned=parts(foo=[0, 1, 2]), instance_id="i1"))
    ok(ctx.heartbeat("m2", 2, owned={}, instance_id="i2"))
    # testNoGroupEpochBumpWhenStaticMemberTemporarilyLeaves
    answer, result = ctx.heartbeat("m2", -2, instance_id="i2", owned=None)
    assert answer.member_epoch == -2 and record_types(result) == [(CURRENT, False)]
    assert ctx.group().group_epoch == 2
    assert ctx.timer.is_scheduled(session_key("grp", "m2"))  # its session keeps running
    # its partitions stay its own while it is away
    answer, _ = ctx.heartbeat("m1", 2, owned=parts(foo=[0, 1, 2]), instance_id="i1")
    assert assignment_of(answer) is None
    answer, result = ctx.heartbeat("m2-again", instance_id="i2")
    ok(answer)
    assert (answer.member_epoch, assignment_of(answer)) == (2, parts(foo=[3, 4, 5]))
    assert ctx.group().group_epoch == 2
    assert record_types(result)[:3] == [(CURRENT, True), (TARGET, True), (MEMBER, True)]
    assert set(ctx.group().members) == {"m1", "m2-again"}
    assert ctx.group().static_members == {"i1": "m1", "i2": "m2-again"}


def test_unreleased_instance_id_when_new_member_joins_with_in_use_instance_id():
    ctx = ConsumerContext()
    ok(ctx.heartbeat("m1", instance_id="i1"))
    assert ctx.heartbeat("m2", instance_id="i1")[0].error_code == ErrorCode.unreleased_instance_id


def test_unknown_static_member_and_fenced_instance_id():
    ctx = ConsumerContext()
    ok(ctx.heartbeat("m1", instance_id="i1"))
    assert ctx.heartbeat("m1", 1, instance_id="nope", owned=None)[0].error_code == ErrorCode.unknown_member_id
    assert ctx.heartbeat("m9", 1, instance_id="i1", owned=None)[0].error_code == ErrorCode.fenced_instance_id
    assert ctx.heartbeat("m9", -2, instance_id="i1", owned=None)[0].error_code == ErrorCode.fenced_instance_id


def test_leaving_static_member_bumps_group_epoch():
    ctx = ConsumerContext()
    ok(ctx.heartbeat("m1", instance_id="i1"))
    answer, result = ctx.heartbeat("m1", -1, instance_id="i1", owned=None)
    assert answer.member_epoch == -1
    assert ctx.group().group_epoch == 2 and not ctx.group().static_members


# -- timers --------------------------------------------------------------------------------------------------


def test_session_timeout_expiration():
    ctx = ConsumerContext()
    two_stable_members(ctx)
    ctx.advance(40_000)
    ok(ctx.heartbeat("m1", 2, owned=parts(foo=[0, 1, 2])))
    (result,) = ctx.advance(5_000)  # m2's session: 45 s after its last heartbeat
    assert record_types(result) == [(CURRENT, True), (TARGET, True), (MEMBER, True), (META, False)]
    assert set(ctx.group().members) == {"m1"}


def settle(ctx: ConsumerContext, members: list[str]) -> dict[str, dict]:
    """Heartbeat each member in turn, owning what it was last given, until the group is stable: what each holds."""
    held: dict[str, dict] = {}
    epochs: dict[str, int] = {}
    for member_id in members:
        answer = ok(ctx.heartbeat(member_id))
        held[member_id], epochs[member_id] = assignment_of(answer) or {}, answer.member_epoch
    for _ in range(10):
        if ctx.group().state == ConsumerGroupState.STABLE:
            return held
        for member_id in members:
            answer = ok(ctx.heartbeat(member_id, epochs[member_id], owned=held[member_id]))
            epochs[member_id] = answer.member_epoch
            if answer.assignment is not None:
                held[member_id] = assignment_of(answer)
    raise AssertionError("the group did not settle")


@pytest.mark.parametrize("gone", ["leave", "session"])
def test_what_nobody_keeps_goes_to_the_member_whose_heartbeat_computes_the_target(gone):
    # (ours) Kafka hands a leaver's partitions out in its assignor's order, and the member given them learns of
    # it at its own next heartbeat. Here the member whose heartbeat computes the target is handed them first and
    # learns of it in that heartbeat's answer.
    ctx = ConsumerContext(FakeTopics(foo=3))
    held = settle(ctx, ["m1", "m2", "m3"])
    assert sorted(len(held[m][FOO]) for m in held) == [1, 1, 1]
    epoch = ctx.group().group_epoch
    if gone == "leave":
        ok(ctx.heartbeat("m1", -1, owned=None))
    else:
        for _ in range(8):
            ctx.advance(5_000)
            ok(ctx.heartbeat("m2", epoch, owned=held["m2"]))
            ok(ctx.heartbeat("m3", epoch, owned=held["m3"]))
        ctx.advance(5_000)  # m1's session ends (45 s)
    assert set(ctx.group().members) == {"m2", "m3"}
    answer = ok(ctx.heartbeat("m3", epoch, owned=held["m3"]))  # the first heartbeat after: m3 takes m1's
    assert answer.member_epoch == epoch + 1
    assert assignment_of(answer) == parts(foo=held["m3"][FOO] | held["m1"][FOO])
    answer = ok(ctx.heartbeat("m2", epoch, owned=held["m2"]))  # (the assignor's order would have given it m2)
    assert answer.member_epoch == epoch + 1 and assignment_of(answer) is None
    assert ctx.group().state == ConsumerGroupState.STABLE


def test_session_timeout_expiration_static_member():
    ctx = ConsumerContext()
    ok(ctx.heartbeat("m1", instance_id="i1"))
    ok(ctx.heartbeat("m1", -2, instance_id="i1", owned=None))
    ctx.advance(45_000)
    assert not ctx.group().members and ctx.group().group_epoch == 2


def test_rebalance_timeout_expiration():
    ctx = ConsumerContext()
    ok(ctx.heartbeat("m1", rebalance_timeout_ms=1000))
    ok(ctx.heartbeat("m2"))
    ok(ctx.heartbeat("m1", 1, owned=parts(foo=range(6))))  # asked to revoke 3-5
    results = ctx.advance(1000)
    assert len(results) == 1 and "m1" not in ctx.group().members
    answer, _ = ctx.heartbeat("m1", 1, owned=parts(foo=range(6)))
    assert answer.error_code == ErrorCode.unknown_member_id
    answer, _ = ctx.heartbeat("m2", 2, owned={})
    assert answer.member_epoch == 3 and assignment_of(answer) == parts(foo=range(6))


# -- topics and regular expressions --------------------------------------------------------------------------


def test_new_partitions_trigger_epoch_bump():
    topics = FakeTopics(foo=2)
    ctx = ConsumerContext(topics)
    ok(ctx.heartbeat("m1"))
    topics.create("foo", 4)  # same id, more partitions
    answer, result = ctx.heartbeat("m1", 1, owned=parts(foo=[0, 1]))
    assert answer.member_epoch == 2 and assignment_of(answer) == parts(foo=range(4))


def test_subscription_to_a_topic_created_later():
    topics = FakeTopics()
    ctx = ConsumerContext(topics)
    answer, _ = ctx.heartbeat("m1", topics=["later"])
    assert assignment_of(answer) == {}
    topics.create("later", 2)
    answer, _ = ctx.heartbeat("m1", 1, owned={})
    assert answer.member_epoch == 2 and assignment_of(answer) == parts(later=[0, 1])


def test_consumer_group_member_joins_with_new_regex():
    topics = FakeTopics(foo=2, foobar=1, bar=1)
    ctx = ConsumerContext(topics)
    answer, _ = ctx.heartbeat("m1", regex="foo.*", topics=None)
    ok(answer)
    assert assignment_of(answer) == {**parts(foo=[0, 1]), **parts(foobar=[0])}
    topics.create("food", 1)
    answer, _ = ctx.heartbeat("m1", 1, owned={**parts(foo=[0, 1]), **parts(foobar=[0])})
    assert answer.member_epoch == 2 and parts(food=[0]).items() <= assignment_of(answer).items()


def test_regex_is_a_full_match():
    topics = FakeTopics(t=1, t1=1)
    ctx = ConsumerContext(topics)
    answer, _ = ctx.heartbeat("m1", regex="^t", topics=None)  # librdkafka's "^t" means exactly "t" here
    assert assignment_of(answer) == parts(t=[0])


def test_invalid_regular_expression():
    ctx = ConsumerContext()
    answer, result = ctx.heartbeat("m1", regex="(?<=x)y", topics=None)  # lookbehind: not RE2
    assert answer.error_code == ErrorCode.invalid_regular_expression
    assert not result.records and "grp" not in ctx.consumer.groups
