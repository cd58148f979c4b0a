"""The server-side assignors: balance, stickiness, range's contiguity."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.consumer.assignors import MemberSpec, range_, uniform

from .context import tid

FOO, BAR = tid("foo"), tid("bar")


def spec(member_id: str, *topics: uuid.UUID, current=None, instance_id=None) -> MemberSpec:
    return MemberSpec(member_id, instance_id, frozenset(topics), current or {})


def counts(assignment) -> dict[str, int]:
    return {m: sum(len(ps) for ps in a.values()) for m, a in assignment.items()}


def all_partitions(assignment) -> list[tuple[uuid.UUID, int]]:
    return sorted((t, p) for a in assignment.values() for t, ps in a.items() for p in ps)


def test_uniform_homogeneous_balances_and_covers_every_partition():
    out = uniform({m: spec(m, FOO, BAR) for m in ("a", "b", "c")}, {FOO: 6, BAR: 4})
    assert sorted(counts(out).values()) == [3, 3, 4]
    assert all_partitions(out) == sorted([(FOO, p) for p in range(6)] + [(BAR, p) for p in range(4)])


def test_uniform_homogeneous_join_moves_only_what_balance_needs():
    before = uniform({m: spec(m, FOO) for m in ("a", "b")}, {FOO: 6})
    members = {m: spec(m, FOO, current=before[m]) for m in ("a", "b")}
    members["c"] = spec("c", FOO)
    after = uniform(members, {FOO: 6})
    assert counts(after) == {"a": 2, "b": 2, "c": 2}
    for m in ("a", "b"):
        assert after[m][FOO] <= before[m][FOO]  # a and b only gave partitions away
    moved = sum(len(before[m][FOO] - after[m][FOO]) for m in ("a", "b"))
    assert moved == 2


def test_uniform_homogeneous_leave_keeps_the_survivors_partitions():
    before = uniform({m: spec(m, FOO) for m in ("a", "b", "c")}, {FOO: 7})
    after = uniform({m: spec(m, FOO, current=before[m]) for m in ("a", "b")}, {FOO: 7})
    for m in ("a", "b"):
        assert before[m][FOO] <= after[m][FOO]
    assert sorted(counts(after).values()) == [3, 4]


def test_uniform_hands_what_nobody_keeps_to_the_member_named_first():
    before = uniform({m: spec(m, FOO) for m in ("a", "b", "c", "d")}, {FOO: 4})  # one each
    survivors = {m: spec(m, FOO, current=before[m]) for m in ("a", "b", "c")}
    for first, taker in ((None, "a"), ("c", "c"), ("b", "b"), ("gone", "a")):
        after = uniform(survivors, {FOO: 4}, first)
        assert counts(after) == {m: 2 if m == taker else 1 for m in ("a", "b", "c")}
        assert after[taker][FOO] == before[taker][FOO] | before["d"][FOO]
    assert range_(survivors, {FOO: 4}, "c") == range_(survivors, {FOO: 4})  # range's layout has no choice


def test_uniform_more_members_than_partitions():
    out = uniform({m: spec(m, FOO) for m in ("a", "b", "c")}, {FOO: 2})
    assert sorted(counts(out).values()) == [0, 1, 1]


def test_uniform_heterogeneous_respects_subscriptions_and_balances():
    out = uniform({"a": spec("a", FOO), "b": spec("b", FOO, BAR), "c": spec("c", BAR)}, {FOO: 4, BAR: 4})
    assert set(out["a"]) <= {FOO} and set(out["c"]) <= {BAR}
    assert sorted(counts(out).values()) in ([2, 3, 3], [2, 2, 4])
    assert max(counts(out).values()) - min(counts(out).values()) <= 2
    assert len(all_partitions(out)) == 8


@settings(max_examples=60, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["a", "b", "c", "d", "e"]),
        st.sets(st.sampled_from(["foo", "bar", "baz"]), min_size=1),
        min_size=1,
    ),
    st.dictionaries(st.sampled_from(["foo", "bar", "baz"]), st.integers(1, 9), min_size=3),
)
def test_uniform_gives_every_subscribed_partition_to_exactly_one_subscriber(subscriptions, topic_sizes):
    topics = {tid(n): c for n, c in topic_sizes.items()}
    members = {m: spec(m, *(tid(t) for t in ts)) for m, ts in subscriptions.items()}
    out = uniform(members, topics)
    seen = all_partitions(out)
    assert len(seen) == len(set(seen))
    wanted = sorted(
        (tid(t), p) for t in {t for ts in subscriptions.values() for t in ts} for p in range(topic_sizes[t])
    )
    assert seen == wanted
    for m, a in out.items():
        assert set(a) <= members[m].subscribed


def test_range_gives_contiguous_ranges_static_members_first():
    out = range_({"z": spec("z", FOO, instance_id="i-1"), "a": spec("a", FOO), "b": spec("b", FOO)}, {FOO: 7})
    assert out["z"][FOO] == frozenset({0, 1, 2})  # static first, then by member id
    assert out["a"][FOO] == frozenset({3, 4})
    assert out["b"][FOO] == frozenset({5, 6})


def test_range_per_topic_over_its_subscribers():
    out = range_({"a": spec("a", FOO, BAR), "b": spec("b", FOO)}, {FOO: 4, BAR: 2})
    assert out["a"] == {FOO: frozenset({0, 1}), BAR: frozenset({0, 1})}
    assert out["b"] == {FOO: frozenset({2, 3})}


def test_range_is_sticky_when_a_member_leaves_or_joins():
    members = {m: spec(m, FOO) for m in ("a", "b", "c", "d", "e")}
    before = range_(members, {FOO: 10})
    assert [sorted(before[m][FOO]) for m in "abcde"] == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]]
    current = {m: spec(m, FOO, current=before[m]) for m in "abde"}  # c leaves
    after = range_(current, {FOO: 10})
    for m in "abde":  # the others keep theirs; c's partitions go to its neighbours, ranges stay contiguous
        assert before[m][FOO] <= after[m][FOO]
        ps = sorted(after[m][FOO])
        assert ps == list(range(ps[0], ps[0] + len(ps)))
    assert sorted(len(after[m][FOO]) for m in "abde") == [2, 2, 3, 3]
