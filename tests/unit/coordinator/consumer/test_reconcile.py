"""Reconciliation, case by case (Kafka's CurrentAssignmentBuilderTest, with 4.2-4.3's fixes)."""

from __future__ import annotations

from coordinator.consumer.group import ConsumerMember, MemberState, reconcile

from .context import parts, tid

FOO = tid("foo")


def member(epoch: int, state: MemberState = MemberState.STABLE, **kwargs: object) -> ConsumerMember:
    return ConsumerMember("m", member_epoch=epoch, previous_member_epoch=epoch - 1, state=state, **kwargs)  # type: ignore[arg-type]


def nobody(topic_id: object, partition: int) -> None:
    return None


def test_stable_to_stable():
    m = member(10, assigned=parts(foo=[0, 1]))
    assert reconcile(m, 10, parts(foo=[0, 1]), parts(foo=[0, 1]), nobody) is m
    moved = reconcile(m, 11, parts(foo=[0, 1]), parts(foo=[0, 1]), nobody)
    assert (moved.state, moved.member_epoch, moved.previous_member_epoch) == (MemberState.STABLE, 11, 10)
    assert moved.assigned == parts(foo=[0, 1])


def test_stable_to_stable_with_new_partitions():
    m = member(10, assigned=parts(foo=[0, 1]))
    moved = reconcile(m, 11, parts(foo=[0, 1, 2]), parts(foo=[0, 1]), nobody)
    assert (moved.state, moved.member_epoch) == (MemberState.STABLE, 11)
    assert moved.assigned == parts(foo=[0, 1, 2])


def test_stable_to_unrevoked_partitions():
    m = member(10, assigned=parts(foo=[0, 1, 2]))
    moved = reconcile(m, 11, parts(foo=[0, 3]), parts(foo=[0, 1, 2]), nobody)
    assert (moved.state, moved.member_epoch) == (MemberState.UNREVOKED_PARTITIONS, 10)  # the epoch waits
    assert moved.assigned == parts(foo=[0])
    assert moved.pending_revocation == parts(foo=[1, 2])


def test_stable_to_unreleased_partitions():
    m = member(10, assigned=parts(foo=[0]))
    moved = reconcile(m, 11, parts(foo=[0, 1]), parts(foo=[0]), lambda t, p: "other" if p == 1 else None)
    assert (moved.state, moved.member_epoch) == (MemberState.UNRELEASED_PARTITIONS, 11)
    assert moved.assigned == parts(foo=[0])


def test_unrevoked_partitions_to_stable():
    m = member(
        10, MemberState.UNREVOKED_PARTITIONS, assigned=parts(foo=[0]), pending_revocation=parts(foo=[1])
    )
    moved = reconcile(m, 11, parts(foo=[0]), parts(foo=[0]), nobody)
    assert (moved.state, moved.member_epoch, moved.previous_member_epoch) == (MemberState.STABLE, 11, 10)
    assert moved.pending_revocation == {}


def test_remains_in_unrevoked_partitions():
    m = member(
        10, MemberState.UNREVOKED_PARTITIONS, assigned=parts(foo=[0]), pending_revocation=parts(foo=[1])
    )
    assert reconcile(m, 11, parts(foo=[0]), parts(foo=[0, 1]), nobody) is m
    assert reconcile(m, 11, parts(foo=[0]), None, nobody) is m  # no TopicPartitions: still owned


def test_unrevoked_partitions_to_unreleased_partitions():
    m = member(
        10, MemberState.UNREVOKED_PARTITIONS, assigned=parts(foo=[0]), pending_revocation=parts(foo=[1])
    )
    moved = reconcile(m, 11, parts(foo=[0, 2]), parts(foo=[0]), lambda t, p: "other" if p == 2 else None)
    assert (moved.state, moved.member_epoch) == (MemberState.UNRELEASED_PARTITIONS, 11)
    assert moved.assigned == parts(foo=[0])


def test_unreleased_partitions_to_stable():
    m = member(11, MemberState.UNRELEASED_PARTITIONS, assigned=parts(foo=[0]))
    moved = reconcile(m, 11, parts(foo=[0, 1]), parts(foo=[0]), nobody)
    assert (moved.state, moved.member_epoch) == (MemberState.STABLE, 11)
    assert moved.assigned == parts(foo=[0, 1])


def test_unreleased_partitions_to_unreleased_partitions():
    m = member(11, MemberState.UNRELEASED_PARTITIONS, assigned=parts(foo=[0]))
    assert reconcile(m, 11, parts(foo=[0, 1]), parts(foo=[0]), lambda t, p: "other") == m


def test_unreleased_partitions_to_unrevoked_partitions():
    m = member(11, MemberState.UNRELEASED_PARTITIONS, assigned=parts(foo=[0, 1]))
    moved = reconcile(m, 12, parts(foo=[0]), parts(foo=[0, 1]), nobody)
    assert (moved.state, moved.member_epoch) == (MemberState.UNREVOKED_PARTITIONS, 11)
    assert moved.pending_revocation == parts(foo=[1])


def test_own_pending_revocation_is_not_unreleased():
    # KAFKA-19449: a partition the member itself is revoking does not count as held by someone else.
    m = member(
        10, MemberState.UNREVOKED_PARTITIONS, assigned=parts(foo=[0]), pending_revocation=parts(foo=[1])
    )
    moved = reconcile(m, 12, parts(foo=[0, 1]), parts(foo=[0]), lambda t, p: "m" if p == 1 else None)
    assert (moved.state, moved.member_epoch) == (MemberState.STABLE, 12)
    assert moved.assigned == parts(foo=[0, 1])


def test_revoked_partitions_no_longer_owned_are_dropped_at_once():
    # A member that lists none of what it must give up moves on without an UNREVOKED round.
    m = member(10, assigned=parts(foo=[0, 1]))
    moved = reconcile(m, 11, parts(foo=[0]), parts(foo=[0]), nobody)
    assert (moved.state, moved.member_epoch) == (MemberState.STABLE, 11)
    assert moved.assigned == parts(foo=[0])


def test_unknown_state_member_owning_nothing_goes_on():
    m = member(10, MemberState.UNKNOWN, assigned=parts(foo=[0]))
    moved = reconcile(m, 11, parts(foo=[0]), {}, nobody)
    assert moved.state == MemberState.STABLE and moved.member_epoch == 11


def test_unknown_state_member_owning_partitions_is_fenced():
    import pytest

    from coordinator.consumer.group import MemberFenced

    m = member(10, MemberState.UNKNOWN, assigned=parts(foo=[0]))
    for owned in (parts(foo=[0]), None):
        with pytest.raises(MemberFenced):
            reconcile(m, 11, parts(foo=[0]), owned, nobody)
