"""GroupCoordinatorShard.replay_entries (the shortcut for offset commits without metadata), called once per record
as the runtime calls it per write and once over a whole log as loading calls it, leaves exactly the state
replay() leaves, whatever the mix of records."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.clock import ManualClock, ManualTimer
from coordinator.records import (
    CoordinatorRecord,
    new_empty_group_metadata_record,
    new_group_metadata_tombstone,
    new_offset_commit_record,
    new_offset_commit_tombstone,
)
from coordinator.shard import GroupCoordinatorShard

GROUPS = st.sampled_from(["g1", "g2", "gé", ""])
TOPICS = st.sampled_from(["t", "u", "topic-ü"])
OFFSETS = st.one_of(st.integers(0, 10**6), st.integers(-(2**63), 2**63 - 1))
EPOCHS = st.one_of(st.just(-1), st.integers(0, 5), st.integers(-(2**31), 2**31 - 1))


@st.composite
def records(draw: st.DrawFn) -> CoordinatorRecord:
    kind = draw(
        st.sampled_from(
            ["commit", "commit", "commit", "metadata", "offset-tombstone", "group", "group-tombstone"]
        )
    )
    group, topic, partition = draw(GROUPS), draw(TOPICS), draw(st.integers(0, 3))
    if kind == "offset-tombstone":
        return new_offset_commit_tombstone(group, topic, partition)
    if kind == "group":
        return new_empty_group_metadata_record(group, draw(st.integers(0, 10**12)))
    if kind == "group-tombstone":
        return new_group_metadata_tombstone(group)
    return new_offset_commit_record(
        group,
        topic,
        partition,
        draw(OFFSETS),
        leader_epoch=draw(EPOCHS),
        metadata="" if kind == "commit" else draw(st.text(max_size=5)),
        commit_timestamp_ms=draw(st.one_of(st.integers(0, 10**13), st.integers(-(2**63), 2**63 - 1))),
    )


def state(manager: GroupCoordinatorShard) -> tuple[object, ...]:
    store = manager.offsets.store
    offsets = {g: {t: dict(p) for t, p in store.group_offsets(g).items()} for g in list(manager.groups)}
    return sorted(manager.groups), offsets, store.num_offsets()


def fresh() -> GroupCoordinatorShard:
    clock = ManualClock()
    return GroupCoordinatorShard(clock, ManualTimer(clock))


@settings(max_examples=300, deadline=None)
@given(st.lists(records(), max_size=40))
def test_replay_entries_leaves_the_state_replay_leaves(log: list[CoordinatorRecord]):
    slow, fast, whole = fresh(), fresh(), fresh()
    for record in log:
        slow.replay(record)
        fast.replay_entries([(0, record.key, record.value, 0)])
    entries = [(seq, record.key, record.value, 1000 + seq) for seq, record in enumerate(log)]
    assert whole.replay_entries(iter(entries)) == len(log)
    assert state(fast) == state(slow)
    assert state(whole) == state(slow)
