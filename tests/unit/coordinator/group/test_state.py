"""The classic group state table (Kafka's ClassicGroupState.validPreviousStates)."""

import pytest

from coordinator.group import ClassicGroup, ClassicGroupState, IllegalStateTransition

S = ClassicGroupState

VALID = {
    (S.PREPARING_REBALANCE, S.EMPTY),
    (S.STABLE, S.PREPARING_REBALANCE),
    (S.COMPLETING_REBALANCE, S.PREPARING_REBALANCE),
    (S.EMPTY, S.PREPARING_REBALANCE),
    (S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE),
    (S.COMPLETING_REBALANCE, S.STABLE),
    (S.STABLE, S.DEAD),
    (S.PREPARING_REBALANCE, S.DEAD),
    (S.COMPLETING_REBALANCE, S.DEAD),
    (S.EMPTY, S.DEAD),
    (S.DEAD, S.DEAD),
}


@pytest.mark.parametrize("source", list(S))
@pytest.mark.parametrize("target", list(S))
def test_transition_table(source, target):
    group = ClassicGroup("g", source, current_state_timestamp_ms=1)
    if (source, target) in VALID:
        group.transition_to(target, 2)
        assert group.state is target
        assert group.previous_state is source
        assert group.current_state_timestamp_ms == 2
    else:
        with pytest.raises(IllegalStateTransition):
            group.transition_to(target, 2)
        # nothing changed
        assert group.state is source
        assert group.previous_state is S.DEAD
        assert group.current_state_timestamp_ms == 1


def test_state_names_are_kafkas():
    assert [str(s) for s in S] == ["Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"]


def test_can_rebalance():
    assert [s for s in S if ClassicGroup("g", s).can_rebalance()] == [
        S.EMPTY,
        S.COMPLETING_REBALANCE,
        S.STABLE,
    ]
