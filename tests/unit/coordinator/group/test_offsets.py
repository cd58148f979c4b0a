"""OffsetCommit, OffsetFetch, OffsetDelete and offset retention (KIP-211).

Scenarios are ported from Kafka's OffsetMetadataManagerTest; each test names its upstream test.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.group import ClassicGroupState
from coordinator.offsets import OffsetAndMetadata, OffsetStore
from coordinator.records import (
    GroupMetadataKey,
    OffsetCommitKey,
    OffsetCommitValue,
    decode_record,
    new_group_metadata_tombstone,
    new_offset_commit_tombstone,
)
from protocol.errors import ErrorCode

from .context import OFFSET_DELETE, GroupTestContext, subscription, to_protocols

S = ClassicGroupState
DELAY = 3000


@pytest.fixture
def ctx() -> GroupTestContext:
    return GroupTestContext()


def commit_errors(call) -> dict[tuple[str, int], ErrorCode]:
    return {
        (t.name, p.partition_index): ErrorCode(p.error_code)
        for t in call.response.topics
        for p in t.partitions
    }


def fetched(call, group_index: int = 0) -> dict[tuple[str, int], tuple[int, int, str, ErrorCode]]:
    topics = (
        call.response.groups[group_index].topics if hasattr(call.response, "groups") else call.response.topics
    )
    return {
        (t.name, p.partition_index): (
            p.committed_offset,
            p.committed_leader_epoch,
            p.metadata,
            ErrorCode(p.error_code),
        )
        for t in topics
        for p in t.partitions
    }


def delete_offsets(ctx, group_id: str, topics: dict[str, list[int]], apply: bool = True):
    return ctx.send(
        "offset_delete",
        OFFSET_DELETE,
        0,
        "offset-delete",
        apply=apply,
        group_id=group_id,
        topics=[{"name": t, "partitions": [{"partition_index": p} for p in ps]} for t, ps in topics.items()],
    )


def stable_consumer_group(ctx, topics=("foo",), session_timeout_ms=5000):
    """One dynamic consumer subscribed to `topics`, Stable at generation 1."""
    return ctx.join_as_dynamic_member_and_complete_rebalance(
        protocols=(("range", subscription(*topics)),), session_timeout_ms=session_timeout_ms
    )


# -- OffsetCommit --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "version, expected",
    [(v, ErrorCode.illegal_generation) for v in range(2, 9)] + [(9, ErrorCode.group_id_not_found)],
)
def test_offset_commit_with_unknown_group(ctx, version, expected):
    # testOffsetCommitWithUnknownGroup
    call = ctx.commit("foo", {("bar", 0): 100}, member_id="member", generation_id=10, version=version)
    assert commit_errors(call) == {("bar", 0): expected}
    assert not call.records
    assert "foo" not in ctx.shard.groups


def test_simple_group_offset_commit(ctx):
    # testSimpleGroupOffsetCommit: generation -1 creates a protocol-less Empty group
    call = ctx.commit("foo", {("bar", 0): 100})
    assert commit_errors(call) == {("bar", 0): ErrorCode.none}
    assert [decode_record(r) for r in call.records] == [
        (OffsetCommitKey("foo", "bar", 0), OffsetCommitValue(100, -1, "", ctx.clock.wall_ms(), -1))
    ]
    group = ctx.group("foo")
    assert group.is_in_state(S.EMPTY) and group.protocol_type is None and group.generation_id == 0
    assert group.is_simple_group()
    # a second simple commit to the existing Empty group is accepted as well
    assert commit_errors(ctx.commit("foo", {("bar", 0): 101})) == {("bar", 0): ErrorCode.none}
    assert fetched(ctx.fetch("foo", {"bar": [0]}))[("bar", 0)] == (101, -1, "", ErrorCode.none)


def test_simple_group_offset_commit_with_instance_id(ctx):
    # testSimpleGroupOffsetCommitWithInstanceId: the instance id is ignored for a generation -1 commit
    call = ctx.commit("foo", {("bar", 0): 100}, group_instance_id="instance-id")
    assert commit_errors(call) == {("bar", 0): ErrorCode.none}


def test_generic_group_offset_commit_with_unknown_member_id(ctx):
    # testGenericGroupOffsetCommitWithUnknownMemberId
    stable_consumer_group(ctx)
    call = ctx.commit(offsets={("bar", 0): 100}, member_id="member", generation_id=1)
    assert commit_errors(call) == {("bar", 0): ErrorCode.unknown_member_id}


def test_generic_group_offset_commit_with_illegal_generation(ctx):
    # testGenericGroupOffsetCommitWithIllegalGeneration
    leader = stable_consumer_group(ctx)
    call = ctx.commit(offsets={("bar", 0): 100}, member_id=leader.member_id, generation_id=10)
    assert commit_errors(call) == {("bar", 0): ErrorCode.illegal_generation}


def test_generic_group_offset_commit_with_unknown_instance_id(ctx):
    # testGenericGroupOffsetCommitWithUnknownInstanceId
    leader = stable_consumer_group(ctx)
    call = ctx.commit(
        offsets={("bar", 0): 100}, member_id=leader.member_id, generation_id=1, group_instance_id="instanceid"
    )
    assert commit_errors(call) == {("bar", 0): ErrorCode.unknown_member_id}


def test_generic_group_offset_commit_with_fenced_instance_id(ctx):
    # testGenericGroupOffsetCommitWithFencedInstanceId
    result = ctx.static_members_join_and_rebalance()
    call = ctx.commit(
        offsets={("bar", 0): 100}, member_id="other", generation_id=1, group_instance_id="leader"
    )
    assert commit_errors(call) == {("bar", 0): ErrorCode.fenced_instance_id}
    ok = ctx.commit(
        offsets={("bar", 0): 100}, member_id=result.leader_id, generation_id=1, group_instance_id="leader"
    )
    assert commit_errors(ok) == {("bar", 0): ErrorCode.none}


def test_generic_group_offset_commit_while_in_completing_rebalance_state(ctx):
    # testGenericGroupOffsetCommitWhileInCompletingRebalanceState
    ctx.create_group()
    leader = ctx.join_as_dynamic_member_and_complete_join()
    call = ctx.commit(offsets={("bar", 0): 100}, member_id=leader.member_id, generation_id=1)
    assert commit_errors(call) == {("bar", 0): ErrorCode.rebalance_in_progress}


def test_generic_group_offset_commit_in_preparing_rebalance_with_current_generation(ctx):
    leader = stable_consumer_group(ctx)
    ctx.join_group(rebalance_timeout_ms=10000, session_timeout_ms=5000)  # rebalance
    assert ctx.group().is_in_state(S.PREPARING_REBALANCE)
    call = ctx.commit(offsets={("foo", 0): 7}, member_id=leader.member_id, generation_id=1)
    assert commit_errors(call) == {("foo", 0): ErrorCode.none}


def test_generic_group_offset_commit_without_member_id_and_generation(ctx):
    # testGenericGroupOffsetCommitWithoutMemberIdAndGeneration: not accepted unless the group is Empty
    stable_consumer_group(ctx)
    call = ctx.commit(offsets={("bar", 0): 100})
    assert commit_errors(call) == {("bar", 0): ErrorCode.unknown_member_id}


def test_admin_commit_to_an_empty_consumer_group(ctx):
    leader = stable_consumer_group(ctx)
    ctx.leave_group(members=[(leader.member_id, None)])
    assert ctx.group().is_in_state(S.EMPTY)
    call = ctx.commit(offsets={("foo", 0): 5})
    assert commit_errors(call) == {("foo", 0): ErrorCode.none}


def test_generic_group_offset_commit_with_retention_time(ctx):
    # testGenericGroupOffsetCommitWithRetentionTime: v2-v4 RetentionTimeMs -> a v1 record with an expire
    # timestamp
    leader = stable_consumer_group(ctx)
    call = ctx.commit(
        offsets={("bar", 0): 100},
        member_id=leader.member_id,
        generation_id=1,
        retention_time_ms=1234,
        version=2,
    )
    assert commit_errors(call) == {("bar", 0): ErrorCode.none}
    now = ctx.clock.wall_ms()
    assert [decode_record(r) for r in call.records] == [
        (OffsetCommitKey("group-id", "bar", 0), OffsetCommitValue(100, -1, "", now, now + 1234))
    ]
    assert call.records[0].value[:2] == b"\x00\x01"  # value version 1


def test_generic_group_offset_commit_maintains_session(ctx):
    # testGenericGroupOffsetCommitMaintainsSession
    leader = stable_consumer_group(ctx)
    ctx.advance(2500)
    ctx.commit(offsets={("bar", 0): 100}, member_id=leader.member_id, generation_id=1)
    ctx.advance(2500)
    assert ctx.group().has_member(leader.member_id)
    ctx.advance(2500)
    assert not ctx.group().has_member(leader.member_id)


def test_offset_commit_with_offset_metadata_too_large():
    ctx = GroupTestContext(offset_metadata_max_bytes=5)
    call = ctx.commit("foo", {("bar", 0): 1, ("bar", 1): 2}, metadata="123456")
    assert commit_errors(call) == {
        ("bar", 0): ErrorCode.offset_metadata_too_large,
        ("bar", 1): ErrorCode.offset_metadata_too_large,
    }
    assert not call.records
    assert commit_errors(ctx.commit("foo", {("bar", 0): 1}, metadata="12345")) == {("bar", 0): ErrorCode.none}


def test_the_answer_to_a_commit_of_the_same_partitions_is_made_once():
    """A consumer commits the same few partitions again and again: their answer is one object, given again for the
    same partitions and outcomes (entities are immutable); other partitions, other outcomes, or more partitions
    than the codec keeps answers for, get answers of their own."""
    from protocol.api import CACHED_COMMIT_PARTITIONS

    ctx = GroupTestContext(offset_metadata_max_bytes=5)
    first = ctx.commit("foo", {("bar", 0): 1, ("baz", 2): 1}).response
    again = ctx.commit("other", {("bar", 0): 7, ("baz", 2): 8}).response
    assert again is first
    assert commit_errors(ctx.commit("foo", {("bar", 1): 1})) == {("bar", 1): ErrorCode.none}
    too_large = ctx.commit("foo", {("bar", 0): 1, ("baz", 2): 1}, metadata="123456").response
    assert (
        too_large is not first
        and too_large.topics[0].partitions[0].error_code == ErrorCode.offset_metadata_too_large
    )
    assert ctx.commit("foo", {("bar", 0): 2, ("baz", 2): 2}).response is first
    many = {("bar", p): 1 for p in range(CACHED_COMMIT_PARTITIONS + 1)}
    big = ctx.commit("foo", many).response
    assert ctx.commit("foo", many).response is not big and ctx.commit("foo", many).response == big


def test_committed_leader_epoch_and_metadata_are_kept(ctx):
    ctx.commit("foo", {("bar", 0): 42}, metadata="meta", leader_epoch=7, version=6)
    assert fetched(ctx.fetch("foo", {"bar": [0]}))[("bar", 0)] == (42, 7, "meta", ErrorCode.none)


def test_commit_timestamp_comes_from_the_wall_clock(ctx):
    ctx.clock.advance(12345)
    call = ctx.commit("foo", {("bar", 0): 1})
    _, value = decode_record(call.records[0])
    assert value.commit_timestamp_ms == ctx.clock.wall_ms()


def test_failed_commit_answers_the_error_for_every_partition(ctx):
    call = ctx.commit("foo", {("bar", 0): 1, ("baz", 3): 2}, apply=False)
    ctx.fail(call.result, ErrorCode.not_coordinator)
    assert commit_errors(call) == {
        ("bar", 0): ErrorCode.not_coordinator,
        ("baz", 3): ErrorCode.not_coordinator,
    }
    assert ctx.shard.offsets.store.get("foo", "bar", 0) is None
    assert not ctx.shard.offsets.store.has_pending("foo", "bar", 0)


# -- OffsetFetch ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [1, 2, 5, 7, 8, 9])
def test_fetch_offsets_with_unknown_group(ctx, version):
    # testFetchOffsetsWithUnknownGroup: -1, epoch -1, metadata "", NONE
    call = ctx.fetch("unknown", {"foo": [0, 1]}, version=version)
    assert fetched(call) == {
        ("foo", 0): (-1, -1, "", ErrorCode.none),
        ("foo", 1): (-1, -1, "", ErrorCode.none),
    }
    error = call.response.error_code if version < 8 else call.response.groups[0].error_code
    assert error == ErrorCode.none


@pytest.mark.parametrize("version", [2, 7, 8, 9])
def test_fetch_all_offsets_with_unknown_group(ctx, version):
    # testFetchAllOffsetsWithUnknownGroup
    assert fetched(ctx.fetch("unknown", None, version=version)) == {}


def test_fetch_offsets_of_known_and_unknown_partitions(ctx):
    ctx.commit("foo", {("bar", 0): 10, ("bar", 1): 11, ("baz", 0): 20}, metadata="m")
    call = ctx.fetch("foo", {"bar": [0, 2], "qux": [0]})
    assert fetched(call) == {
        ("bar", 0): (10, -1, "m", ErrorCode.none),
        ("bar", 2): (-1, -1, "", ErrorCode.none),
        ("qux", 0): (-1, -1, "", ErrorCode.none),
    }


@pytest.mark.parametrize("version", [2, 7, 9])
def test_fetch_all_offsets(ctx, version):
    # testFetchAllOffsetsAtDifferentCommittedOffset (the committed part)
    ctx.commit("foo", {("bar", 0): 10, ("bar", 1): 11, ("baz", 0): 20})
    call = ctx.fetch("foo", None, version=version)
    assert fetched(call) == {
        ("bar", 0): (10, -1, "", ErrorCode.none),
        ("bar", 1): (11, -1, "", ErrorCode.none),
        ("baz", 0): (20, -1, "", ErrorCode.none),
    }


def test_fetch_shapes_v1_and_v8(ctx):
    ctx.commit("foo", {("bar", 0): 10})
    old = ctx.fetch("foo", {"bar": [0]}, version=1)
    assert not hasattr(old.response, "groups")
    new = ctx.fetch("foo", {"bar": [0]}, version=8)
    assert [g.group_id for g in new.response.groups] == ["foo"]


def test_fetch_many_groups_v8(ctx):
    ctx.commit("a", {("t", 0): 1})
    ctx.commit("b", {("t", 0): 2})
    call = ctx.send(
        "offset_fetch",
        9,
        8,
        "fetch",
        require_stable=False,
        groups=[
            {"group_id": "a", "topics": [{"name": "t", "partition_indexes": [0]}]},
            {"group_id": "b", "topics": None},
            {"group_id": "c", "topics": None},
        ],
    )
    assert [g.group_id for g in call.response.groups] == ["a", "b", "c"]
    assert fetched(call, 0) == {("t", 0): (1, -1, "", ErrorCode.none)}
    assert fetched(call, 1) == {("t", 0): (2, -1, "", ErrorCode.none)}
    assert fetched(call, 2) == {}


def test_fetch_reads_only_durable_offsets(ctx):
    call = ctx.commit("foo", {("bar", 0): 10}, apply=False)
    assert fetched(ctx.fetch("foo", {"bar": [0]}))[("bar", 0)] == (-1, -1, "", ErrorCode.none)
    ctx.apply(call.result)
    assert fetched(ctx.fetch("foo", {"bar": [0]}))[("bar", 0)] == (10, -1, "", ErrorCode.none)


def test_require_stable_answers_unstable_offset_commit_while_a_commit_is_in_flight(ctx):
    ctx.commit("foo", {("bar", 0): 10})
    call = ctx.commit("foo", {("bar", 0): 11, ("new", 0): 1}, apply=False)
    stable = ctx.fetch("foo", {"bar": [0]}, require_stable=True, version=7)
    assert fetched(stable)[("bar", 0)] == (-1, -1, "", ErrorCode.unstable_offset_commit)
    all_stable = ctx.fetch("foo", None, require_stable=True, version=9)
    assert fetched(all_stable) == {
        ("bar", 0): (-1, -1, "", ErrorCode.unstable_offset_commit),
        ("new", 0): (-1, -1, "", ErrorCode.unstable_offset_commit),
    }
    # without RequireStable, the last durable offset
    assert fetched(ctx.fetch("foo", {"bar": [0]}, version=6))[("bar", 0)] == (10, -1, "", ErrorCode.none)
    ctx.apply(call.result)
    assert fetched(ctx.fetch("foo", {"bar": [0]}, require_stable=True))[("bar", 0)] == (
        11,
        -1,
        "",
        ErrorCode.none,
    )


# -- OffsetDelete --------------------------------------------------------------------------------------------


def test_generic_group_offset_delete(ctx):
    # testGenericGroupOffsetDelete
    ctx.commit("foo", {("bar", 0): 100})
    call = delete_offsets(ctx, "foo", {"bar": [0]})
    assert call.response.error_code == ErrorCode.none
    assert call.records == [new_offset_commit_tombstone("foo", "bar", 0)]
    assert ctx.shard.offsets.store.get("foo", "bar", 0) is None


def test_generic_group_offset_delete_with_errors(ctx):
    # testGenericGroupOffsetDeleteWithErrors
    stable_consumer_group(ctx, topics=("bar",))
    ctx.commit(offsets={("bar", 0): 100}, member_id=ctx.group().leader_id, generation_id=1)
    missing = delete_offsets(ctx, "group-id", {"bar1": [0]})
    assert [(p.partition_index, p.error_code) for p in missing.response.topics[0].partitions] == [(0, 0)]
    assert not missing.records
    subscribed = delete_offsets(ctx, "group-id", {"bar": [0]})
    assert [(p.partition_index, p.error_code) for p in subscribed.response.topics[0].partitions] == [
        (0, ErrorCode.group_subscribed_to_topic)
    ]
    assert not subscribed.records


def test_offset_delete_invalid_group_id(ctx):
    assert delete_offsets(ctx, "", {"bar": [0]}).response.error_code == ErrorCode.invalid_group_id


def test_empty_group_id_is_accepted_for_commit_and_fetch(ctx):
    """Kafka keeps accepting the empty group id for OffsetCommit and OffsetFetch (backward compatibility)."""
    assert commit_errors(ctx.commit("", {("t", 0): 3})) == {("t", 0): ErrorCode.none}
    assert fetched(ctx.fetch("", {"t": [0]}))[("t", 0)] == (3, -1, "", ErrorCode.none)


def test_offset_delete_unknown_group(ctx):
    call = delete_offsets(ctx, "unknown", {"bar": [0]})
    assert call.response.error_code == ErrorCode.group_id_not_found


def test_offset_delete_in_non_empty_non_consumer_group(ctx):
    ctx.create_group()
    leader = ctx.join_as_dynamic_member_and_complete_join(protocol_type="connect")
    ctx.sync_group(member_id=leader.member_id, generation_id=1, protocol_type="connect")
    assert ctx.group().is_in_state(S.STABLE)
    call = delete_offsets(ctx, "group-id", {"bar": [0]})
    assert call.response.error_code == ErrorCode.non_empty_group


def test_offset_delete_covers_commits_in_flight(ctx):
    commit = ctx.commit("foo", {("bar", 0): 100}, apply=False)
    call = delete_offsets(ctx, "foo", {"bar": [0]})
    assert call.records == [new_offset_commit_tombstone("foo", "bar", 0)]
    ctx.apply(commit.result)


# -- retention (KIP-211) -------------------------------------------------------------------------------------


def test_cleanup_expired_offsets():
    # testCleanupExpiredOffsets: a Stable consumer group expires only offsets of topics it does not subscribe
    # to, counted from their commit.
    ctx = GroupTestContext(offsets_retention_ms=60_000)
    leader = stable_consumer_group(ctx, topics=("firstTopic",), session_timeout_ms=120_000)
    ctx.commit(
        offsets={("firstTopic", 0): 100, ("secondTopic", 0): 100}, member_id=leader.member_id, generation_id=1
    )
    ctx.advance(500)
    ctx.commit(offsets={("secondTopic", 1): 100}, member_id=leader.member_id, generation_id=1)
    ctx.advance(60_000 - 500)
    assert ctx.group().is_in_state(S.STABLE)
    result = ctx.apply(ctx.shard.expire_offsets())
    assert result.records == [new_offset_commit_tombstone("group-id", "secondTopic", 0)]
    ctx.clock.advance(500)
    result = ctx.apply(ctx.shard.expire_offsets())
    assert result.records == [new_offset_commit_tombstone("group-id", "secondTopic", 1)]
    assert ctx.shard.offsets.store.get("group-id", "firstTopic", 0) is not None
    assert "group-id" in ctx.shard.groups


def test_empty_group_offsets_expire_from_when_the_group_became_empty():
    ctx = GroupTestContext(offsets_retention_ms=60_000)
    leader = stable_consumer_group(ctx)
    ctx.commit(offsets={("foo", 0): 1}, member_id=leader.member_id, generation_id=1)
    ctx.advance(30_000)  # the member's session expires after 5 s: Empty since then
    group = ctx.group()
    assert group.is_in_state(S.EMPTY)
    empty_since = group.current_state_timestamp_ms
    ctx.clock.advance(empty_since + 60_000 - 1 - ctx.clock.wall_ms())
    assert not ctx.apply(ctx.shard.expire_offsets()).records
    ctx.clock.advance(1)
    result = ctx.apply(ctx.shard.expire_offsets())
    # every offset expired and the group is Empty: the group goes too
    assert result.records == [
        new_offset_commit_tombstone("group-id", "foo", 0),
        new_group_metadata_tombstone("group-id"),
    ]
    assert "group-id" not in ctx.shard.groups


def test_simple_group_offsets_expire_from_their_commit():
    ctx = GroupTestContext(offsets_retention_ms=1000)
    ctx.commit("simple", {("t", 0): 1})
    ctx.clock.advance(500)
    ctx.commit("simple", {("t", 1): 1})
    ctx.clock.advance(500)
    assert ctx.apply(ctx.shard.expire_offsets()).records == [new_offset_commit_tombstone("simple", "t", 0)]
    ctx.clock.advance(500)
    assert ctx.apply(ctx.shard.expire_offsets()).records == [
        new_offset_commit_tombstone("simple", "t", 1),
        new_group_metadata_tombstone("simple"),
    ]


def test_explicit_expire_timestamp_wins():
    ctx = GroupTestContext(offsets_retention_ms=10**9)
    ctx.commit("simple", {("t", 0): 1}, retention_time_ms=100, version=2)
    ctx.clock.advance(99)
    assert not ctx.apply(ctx.shard.expire_offsets()).records
    ctx.clock.advance(1)
    assert ctx.apply(ctx.shard.expire_offsets()).records[0] == new_offset_commit_tombstone("simple", "t", 0)


def test_rebalancing_groups_keep_their_offsets():
    ctx = GroupTestContext(offsets_retention_ms=1)
    leader = stable_consumer_group(ctx)
    ctx.commit(offsets={("other", 0): 1}, member_id=leader.member_id, generation_id=1)
    ctx.join_group(rebalance_timeout_ms=10000, session_timeout_ms=5000)
    assert ctx.group().is_in_state(S.PREPARING_REBALANCE)
    ctx.clock.advance(100)
    assert not ctx.shard.expire_offsets().records


def test_empty_group_without_offsets_is_deleted(ctx):
    leader = stable_consumer_group(ctx)
    ctx.leave_group(members=[(leader.member_id, None)])
    result = ctx.apply(ctx.shard.expire_offsets())
    assert [decode_record(r) for r in result.records] == [(GroupMetadataKey("group-id"), None)]
    assert "group-id" not in ctx.shard.groups


def test_uncommitted_group_protocol_type_consumer(ctx):
    """to_protocols metadata is a real Subscription: the group knows what it subscribes to."""
    ctx.join_as_dynamic_member_and_complete_rebalance(protocols=to_protocols("range", "roundrobin"))
    assert ctx.group().subscribed_topics == frozenset({"foo"})


# -- the store's compact representation ----------------------------------------------------------------------
# OffsetStore keeps most offsets packed into one int and builds OffsetAndMetadata on the way out: whatever it
# keeps, what it returns must be what a plain dict of OffsetAndMetadata.from_record(value) would return.

_i32 = st.integers(-(2**31), 2**31 - 1)
_i64 = st.integers(-(2**63), 2**63 - 1)
_store_values = st.builds(
    OffsetCommitValue,
    st.one_of(st.integers(0, 10**7), _i64),
    st.one_of(st.sampled_from([-1, 0, 7]), _i32),
    st.sampled_from(["", "", "m", "é"]),
    st.one_of(st.integers(1_700_000_000_000, 1_800_000_000_000), _i64),
    st.one_of(st.just(-1), _i64),
)
_store_keys = st.builds(
    OffsetCommitKey, st.sampled_from(["g1", "g2"]), st.sampled_from(["t1", "t2"]), st.integers(0, 3)
)


def _model_view(model: dict[str, dict[str, dict[int, OffsetAndMetadata]]], group: str):
    return {topic: dict(partitions) for topic, partitions in model.get(group, {}).items()}


@settings(max_examples=200)
@given(st.lists(st.tuples(_store_keys, st.none() | _store_values, st.booleans()), max_size=40))
def test_store_returns_what_it_was_given(ops):
    store = OffsetStore()
    model: dict[str, dict[str, dict[int, OffsetAndMetadata]]] = {}
    for key, value, as_commit in ops:
        if value is None:
            store.replay(key, None)
            topics = model.get(key.group, {})
            topics.get(key.topic, {}).pop(key.partition, None)
            if key.topic in topics and not topics[key.topic]:
                del topics[key.topic]
            if key.group in model and not topics:
                del model[key.group]
        else:
            if as_commit:
                store.replay_commit(key, value)
            else:
                store.replay(key, value)
            model.setdefault(key.group, {}).setdefault(key.topic, {})[key.partition] = (
                OffsetAndMetadata.from_record(value)
            )
        for group in ("g1", "g2"):
            expected = _model_view(model, group)
            got = store.group_offsets(group)
            assert {topic: dict(partitions) for topic, partitions in got.items()} == expected
            in_order = [(t, p, o) for t, partitions in expected.items() for p, o in partitions.items()]
            assert [(t, p, o) for t, partitions in got.items() for p, o in partitions.items()] == in_order
            assert list(store.partitions(group)) == in_order
            assert store.partition_keys(group) == [(t, p) for t, p, _ in in_order]
            assert store.topics(group) == list(expected)
            assert store.has_offsets(group) == bool(expected)
            for topic in ("t1", "t2"):
                for partition in range(4):
                    assert store.get(group, topic, partition) == expected.get(topic, {}).get(partition)
        assert store.num_offsets() == sum(len(p) for topics in model.values() for p in topics.values())


def test_store_snapshot_is_a_read_only_mapping_that_does_not_follow_the_store():
    store = OffsetStore()
    key = OffsetCommitKey("g", "t", 0)
    store.replay(key, OffsetCommitValue(5, 1, "", 1000))
    snapshot = store.group_offsets("g")["t"]
    store.replay(key, OffsetCommitValue(6, 1, "", 2000))
    store.replay(OffsetCommitKey("g", "t", 1), OffsetCommitValue(7, 1, "", 2000))
    assert snapshot == {0: OffsetAndMetadata(5, 1, "", 1000, -1)}
    assert snapshot.copy() == {0: OffsetAndMetadata(5, 1, "", 1000, -1)}
    assert snapshot[0].committed_offset == 5 and 0 in snapshot and 1 not in snapshot and len(snapshot) == 1
    with pytest.raises(TypeError):
        snapshot[0] = OffsetAndMetadata(1, 1, "", 1, -1)  # type: ignore[index]


def test_store_replay_commit_settles_one_pending_commit():
    store = OffsetStore()
    store.add_pending("g", "t", 0)
    store.add_pending("g", "t", 0)
    store.replay_commit(OffsetCommitKey("g", "t", 0), OffsetCommitValue(1, -1, "", 1))
    assert store.has_pending("g", "t", 0)
    store.replay_commit(OffsetCommitKey("g", "t", 0), OffsetCommitValue(2, -1, "", 2))
    assert not store.has_pending("g", "t", 0) and store.pending_partitions("g") == []
    assert store.get("g", "t", 0) == OffsetAndMetadata(2, -1, "", 2, -1)
