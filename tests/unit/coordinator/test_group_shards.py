"""Groups split into shards (coordinator.sharding, coordinator.server.shards and .group_service): routing, requests naming several
groups, shards this part does not own, and a shard whose log hangs failing alone and being reloaded.

The production group part runs on the test's loop with its logs on a FaultFS (the harness of
test_group_runtime.py)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from coordinator.config import Config
from coordinator.server.group_service import GroupCoordinatorService
from coordinator.server.metrics import ShardCollector
from coordinator.server.shards import Shards, ShardState
from coordinator.sharding import java_string_hash, shard_of
from protocol.errors import ErrorCode
from storage.fakefs import FaultFS, MemFS

from .test_group_runtime import (
    COMMIT_TIMEOUT_MS,
    NOT_AVAILABLE,
    P0,
    P1,
    Shard,
    durable_offset,
    load_manager,
)

DESCRIBE_GROUPS, LIST_GROUPS, DELETE_GROUPS, OFFSET_FETCH, HEARTBEAT = 15, 16, 42, 9, 12


def groups_in(shard: int, num_shards: int, count: int = 1, prefix: str = "g") -> list[str]:
    found = []
    i = 0
    while len(found) < count:
        name = f"{prefix}{i}"
        if shard_of(name, num_shards) == shard:
            found.append(name)
        i += 1
    return found


def test_shard_of_follows_kafka():
    # Values printed by Java 17's String.hashCode() on this machine.
    for text, expected in [
        ("", 0),
        ("a", 97),
        ("hello", 99162322),
        ("test-group", 627841412),
        ("spark-kafka-source-x", -1638101251),
        ("\u00e9t\u00e9", 227742),
        ("\U0001f600g", 54959972),
    ]:
        assert java_string_hash(text) == expected
    assert shard_of("test-group", 50) == 627841412 % 50
    assert shard_of("spark-kafka-source-x", 50) == 1638101251 % 50


@pytest.fixture
async def make(tmp_path) -> Any:
    made: list[Shard] = []

    async def build(owned: frozenset[int] | None = None, **settings: Any) -> Shard:
        fs = FaultFS(MemFS())
        harness = Shard(
            str(tmp_path / f"d{len(made)}"), fs, **{"offsets.topic.num.partitions": 4, **settings}
        )
        if owned is not None:
            harness.part = GroupCoordinatorService(Shards(harness.config, harness.data_dir, owned, fs=fs))
            harness.table = type(harness.table)()
            harness.part.register(harness.table)
        made.append(harness)
        await harness.start()
        return harness

    yield build
    for harness in made:
        await harness.close()


async def test_each_group_lives_in_its_own_shard_log(make):
    h = await make()
    a, b = groups_in(0, 4)[0], groups_in(3, 4)[0]
    assert await h.commit(a, {P0: 1}) == {P0: ErrorCode.none}
    assert await h.commit(b, {P0: 2}) == {P0: ErrorCode.none}
    crashed = h.fs.inner.crash()
    shard0 = load_manager(crashed, f"{h.data_dir}/groups/shard-0")
    shard3 = load_manager(crashed, f"{h.data_dir}/groups/shard-3")
    assert durable_offset(shard0, a, *P0) == 1 and durable_offset(shard0, b, *P0) is None
    assert durable_offset(shard3, b, *P0) == 2 and durable_offset(shard3, a, *P0) is None
    assert h.part.shards.load_stats["shards"] == 4


async def test_requests_naming_several_groups_are_split_by_shard_and_merged_in_order(make):
    h = await make()
    names = [groups_in(2, 4)[0], groups_in(0, 4)[0], groups_in(2, 4, 2)[1], groups_in(1, 4)[0]]
    for offset, name in enumerate(names):
        assert await h.commit(name, {P0: offset, P1: offset}) == {P0: ErrorCode.none, P1: ErrorCode.none}
    await h.stable_group(names[1])

    fetch = await h.call(
        OFFSET_FETCH,
        8,
        require_stable=False,
        groups=[
            {"group_id": n, "topics": [{"name": P0[0], "partition_indexes": [P0[1], P1[1]]}]} for n in names
        ],
    )
    assert [g.group_id for g in fetch.groups] == names
    assert [[p.committed_offset for p in g.topics[0].partitions] for g in fetch.groups] == [
        [i, i] for i in range(4)
    ]

    described = await h.call(
        DESCRIBE_GROUPS, 5, groups=[*names, "missing"], include_authorized_operations=False
    )
    assert [g.group_id for g in described.groups] == [*names, "missing"]
    assert [g.group_state for g in described.groups] == ["Empty", "Stable", "Empty", "Empty", "Dead"]

    listed = await h.call(LIST_GROUPS, 4, states_filter=[])
    assert listed.error_code == ErrorCode.none
    assert sorted(g.group_id for g in listed.groups) == sorted(names)

    deleted = await h.call(DELETE_GROUPS, 2, groups_names=[names[3], names[1], names[0]])
    assert [(r.group_id, r.error_code) for r in deleted.results] == [
        (names[3], ErrorCode.none),
        (names[1], ErrorCode.non_empty_group),
        (names[0], ErrorCode.none),
    ]


async def test_a_group_of_a_shard_not_owned_gets_not_coordinator(make):
    h = await make(owned=frozenset({0, 2}))
    mine, other = groups_in(0, 4)[0], groups_in(1, 4)[0]
    assert await h.commit(mine, {P0: 5}) == {P0: ErrorCode.none}
    assert await h.commit(other, {P0: 5}) == {P0: ErrorCode.not_coordinator}
    assert await h.heartbeat(other, "m", 1, None) == ErrorCode.not_coordinator
    join = await h.join(other, "a")
    assert join.error_code == ErrorCode.not_coordinator
    described = await h.call(DESCRIBE_GROUPS, 5, groups=[other, mine], include_authorized_operations=False)
    assert [g.error_code for g in described.groups] == [ErrorCode.not_coordinator, ErrorCode.none]
    assert sorted(h.part.shards.by_index) == [0, 2]
    assert h.part.shards.for_group(mine) is not None and h.part.shards.for_group(other) is None


async def _wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


async def test_a_hung_shard_fails_alone_then_is_reloaded_from_its_log(make):
    h = await make(**{"coordinator.shard.failure.timeout.ms": 1000})
    sick = groups_in(1, 4)[0]
    members, healthy = groups_in(2, 4, 2)
    assert await h.commit(sick, {P0: 10}) == {P0: ErrorCode.none}
    (leader, leader_iid), _ = await h.stable_group(members)

    h.fs.hang_fsyncs(path_contains="shard-1")
    pending = asyncio.create_task(h.commit(sick, {P0: 11}))
    assert await asyncio.to_thread(h.fs.wait_until_hung, 5)
    # The other shards do not wait for the sick one's disk.
    t0 = time.monotonic()
    assert await h.commit(healthy, {P0: 20}) == {P0: ErrorCode.none}
    assert await h.heartbeat(members, leader.member_id, leader.generation_id, leader_iid) == ErrorCode.none
    assert time.monotonic() - t0 < COMMIT_TIMEOUT_MS / 1000
    # The sick shard answers its own requests with a retriable error within the commit timeout.
    assert await asyncio.wait_for(pending, COMMIT_TIMEOUT_MS / 1000 + 2) == {P0: NOT_AVAILABLE}
    await _wait_for(
        lambda: h.part.shards.status().get("stalled") == [1] or h.part.shards.failures, 2, "stalled"
    )

    # Past coordinator.shard.failure.timeout.ms it is marked failed and reloaded from what is on disk: the
    # commit that timed out had reached the file (only its fsync hung), so the reloaded shard knows it.
    await _wait_for(lambda: h.part.shards.failures == 1, 5, "the shard to be failed")
    metrics = {
        (m.name, tuple(s.labels.items())): s.value
        for m in ShardCollector(h.part.shards).collect()
        for s in m.samples
    }
    assert metrics[("kafka_group_coordinator_group_shard_failures", ())] == 1
    by_state = {
        state: metrics[("kafka_group_coordinator_group_shards", (("state", state),))]
        for state in ShardCollector.STATES
    }
    assert sum(by_state.values()) == 4 and by_state["active"] >= 3  # shard 1 may be reloaded already
    await _wait_for(lambda: h.part.shards.by_index[1].state is ShardState.ACTIVE, 5, "the reload")
    assert h.part.ready
    assert await h.fetch(sick, [P0]) == {P0: 11}
    assert await h.fetch(healthy, [P0]) == {P0: 20}

    h.fs.release_fsyncs()
    assert await h.commit(sick, {P0: 12}) == {P0: ErrorCode.none}
    assert durable_offset(load_manager(h.fs.inner.crash(), f"{h.data_dir}/groups/shard-1"), sick, *P0) == 12
    assert h.part.shards.failures == 1


async def test_a_data_dir_keeps_its_shard_count(make):
    h = await make()
    await h.close()
    with pytest.raises(SystemExit, match="cannot change"):
        await Shards(Config({"offsets.topic.num.partitions": 8}), h.data_dir, fs=h.fs).start()


async def test_a_group_waits_only_for_its_own_group_metadata_writes(make):
    """Group-metadata writes are barriers for their own group only: while one group's write hangs on the disk,
    another group of the same shard (same log) still gets its heartbeats answered at once."""
    h = await make(**{"offsets.topic.num.partitions": 1})
    (leader, leader_iid), _ = await h.stable_group("steady")
    h.fs.hang_fsyncs()
    joining = asyncio.create_task(h.join("forming", "x"))  # a new group: its metadata write is a barrier
    assert await asyncio.to_thread(h.fs.wait_until_hung, 5)
    t0 = time.monotonic()
    assert await h.heartbeat("steady", leader.member_id, leader.generation_id, leader_iid) == ErrorCode.none
    assert time.monotonic() - t0 < COMMIT_TIMEOUT_MS / 1000 / 2  # not held until the other write times out
    h.fs.release_fsyncs()
    await asyncio.wait_for(joining, COMMIT_TIMEOUT_MS / 1000 + 2)


class _LeasedLog:
    """A shard log held under a lease, as a state topic's TopicLog is (coordinator.front.state): in memory, every
    append acknowledged at once."""

    compacts_itself = True

    def __init__(self, lease: Any) -> None:
        from storage.log import Recovery

        self.lease = lease
        self.recovery = Recovery(segments=0, entries=0, bytes=0)
        self.entries: list[tuple[bytes, bytes | None]] = []

    def replay(self, progress: Any = None) -> Any:
        return iter(())

    def append(self, entries: Any, timestamp_ms: int | None = None) -> asyncio.Future[int]:
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.entries.extend(entries)
        future.set_result(len(self.entries) - 1)
        return future

    def close(self, timeout: float | None = None) -> None:
        pass

    def abandon(self, compaction_wait_s: float = 1.0) -> None:
        pass


async def test_a_shard_on_a_lease_answers_only_inside_it_and_not_at_all_once_fenced():
    """A shard whose log is held under a lease (a state topic's writer): it answers from the lease's start, not
    after it lapses (COORDINATOR_NOT_AVAILABLE, until confirmed again), and once another server claimed it, never:
    NOT_COORDINATOR, not ready, its groups no longer shown; the other shards go on."""
    from coordinator.front.state import ShardFenced, Writer

    lease_s = 0.3
    writers: dict[int, Writer] = {}
    claims: list[int] = []

    async def opener(index: int) -> _LeasedLog:
        claims.append(index)
        if index in writers and writers[index].fenced:
            raise ShardFenced("claimed elsewhere")
        now = time.monotonic()
        # Shard 0's lease is left to lapse below; shard 1's holds through the test once confirmed.
        writer = Writer(f"state-{index}", 1, 0, lease_s if index == 0 else 60.0, serve_from=now + lease_s)
        writer.confirm(now)
        writers[index] = writer
        return _LeasedLog(writer)

    h = Shard("", FaultFS(MemFS()), **{"offsets.topic.num.partitions": 2, "offsets.commit.timeout.ms": 1000})
    h.part = GroupCoordinatorService(Shards(h.config, None, log_opener=opener))
    h.table = type(h.table)()
    h.part.register(h.table)
    started = time.monotonic()
    await h.start()
    try:
        fenced_group, other_group = groups_in(0, 2)[0], groups_in(1, 2)[0]
        # Loading ends once the lease begins: the previous holder's has ended by then.
        assert time.monotonic() - started >= lease_s and h.part.ready
        writers[0].serve_from = time.monotonic() + 60
        assert await h.commit(fenced_group, {P0: 1}) == {P0: ErrorCode.coordinator_load_in_progress}
        assert not h.part.ready
        writers[0].serve_from = 0.0
        for writer in writers.values():
            writer.confirm(time.monotonic())
        assert h.part.ready
        assert await h.commit(fenced_group, {P0: 1}) == {P0: ErrorCode.none}
        assert await h.commit(other_group, {P0: 2}) == {P0: ErrorCode.none}
        assert fenced_group in h.part.shards.view.groups

        # Unconfirmed past the lease: no answer, reads included, until the cluster confirms it again. A request
        # waits for the lease to come back (its transaction coordinator moving), up to offsets.commit.timeout.ms
        # (1 s here), instead of failing at once: a DescribeGroups naming several groups as a commit does.
        def describe(*groups: str) -> Any:
            return h.call(DESCRIBE_GROUPS, 5, groups=list(groups), include_authorized_operations=False)

        writers[0].owned_until = time.monotonic()
        waiting = asyncio.create_task(describe(fenced_group))
        await asyncio.sleep(0.1)
        assert not waiting.done()
        writers[0].confirm(time.monotonic())
        assert (await waiting).groups[0].error_code == ErrorCode.none
        writers[0].owned_until = time.monotonic()
        waiting = asyncio.create_task(describe(fenced_group, other_group))
        await asyncio.sleep(0.1)
        assert not waiting.done()
        writers[0].confirm(time.monotonic())
        assert [g.error_code for g in (await waiting).groups] == [ErrorCode.none, ErrorCode.none]
        writers[0].owned_until = time.monotonic()
        started = time.monotonic()
        assert (await describe(fenced_group)).groups[0].error_code == ErrorCode.coordinator_not_available
        assert time.monotonic() - started >= 1.0
        # A commit waits the same way; and gives up when the shard is claimed meanwhile.
        waiting = asyncio.create_task(h.commit(fenced_group, {P0: 2}))
        await asyncio.sleep(0.1)
        assert not waiting.done()
        writers[0].confirm(time.monotonic())
        assert await waiting == {P0: ErrorCode.none}
        writers[0].owned_until = time.monotonic()
        waiting = asyncio.create_task(h.commit(fenced_group, {P0: 3}))
        await asyncio.sleep(0.1)

        # Claimed by another server: NOT_COORDINATOR at once, then dropped for good (not reloaded).
        writers[0].fenced = True
        assert await waiting == {P0: ErrorCode.not_coordinator}
        assert await h.commit(fenced_group, {P0: 3}) == {P0: ErrorCode.not_coordinator}
        await _wait_for(lambda: h.part.shards.status().get("fenced") == [0], 2, "the shard to be fenced")
        assert not h.part.ready
        assert fenced_group not in h.part.shards.view.groups
        described = await describe(fenced_group, other_group)
        assert [g.error_code for g in described.groups] == [ErrorCode.not_coordinator, ErrorCode.none]
        assert await h.commit(other_group, {P0: 4}) == {P0: ErrorCode.none}
        await asyncio.sleep(0.5)
        assert sorted(claims) == [0, 1]  # never reloaded

        # A shard that failed finds out at its reload that another server claimed it meanwhile: fenced too.
        writers[1].fenced = True
        h.part.shards._fail(1, "a test")
        await _wait_for(lambda: h.part.shards.status().get("fenced") == [0, 1], 2, "the reload to be refused")
        assert sorted(claims) == [0, 1, 1]
        assert await h.commit(other_group, {P0: 5}) == {P0: ErrorCode.not_coordinator}
    finally:
        await h.part.close()


class _SharedTopic:
    """Shard logs in memory that every server of a test sees, as the partitions of a state topic: what one server
    writes, another follows (a hot standby) or loads. `opened`: (shard, with a follower, records read) per load."""

    lease_s = 0.0

    def __init__(self) -> None:
        self.records: dict[int, list[tuple[int, bytes, bytes | None, int]]] = {}
        self.opened: list[tuple[int, bool, int]] = []

    def follower(self, index: int) -> Any:
        from coordinator.front.state import Follower

        return Follower(index)

    async def read_on(self, follower: Any) -> list[tuple[int, bytes, bytes | None, int]]:
        records = self.records.setdefault(follower.partition, [])
        start, follower.position = max(follower.position, 0), len(records)
        return records[start:]

    async def __call__(self, index: int, follower: Any = None) -> _SharedLog:
        tail = await self.read_on(follower if follower is not None else self.follower(index))
        self.opened.append((index, follower is not None, len(tail)))
        return _SharedLog(self, index, tail)


class _SharedLog(_LeasedLog):
    def __init__(self, topic: _SharedTopic, index: int, records: list[Any]) -> None:
        super().__init__(None)  # no lease: the shard is this server's
        self.topic, self.index, self.records = topic, index, records

    def replay(self, progress: Any = None) -> Any:
        return iter(self.records)

    def append(self, entries: Any, timestamp_ms: int | None = None) -> asyncio.Future[int]:
        written = self.topic.records.setdefault(self.index, [])
        for key, value in entries:
            written.append((len(written), bytes(key), None if value is None else bytes(value), 0))
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        future.set_result(len(written) - 1)
        return future


def _on_topic(topic: _SharedTopic, **settings: Any) -> Shard:
    """A server of 2 shards whose logs are `topic`'s partitions, given its shards later (Shards.assign)."""
    h = Shard("", FaultFS(MemFS()), **{"offsets.topic.num.partitions": 2, **settings})
    h.part = GroupCoordinatorService(Shards(h.config, None, log_opener=topic, assigned_later=True))
    h.table = type(h.table)()
    h.part.register(h.table)
    return h


async def test_a_hot_standby_takes_a_shard_over_replaying_only_what_it_had_not():
    """A server that follows a shard another server owns (Shards.follow) keeps its state replayed as the owner
    writes; given the shard, it loads only the records it had not read, and serves everything the owner
    acknowledged."""
    topic = _SharedTopic()

    owner, standby = _on_topic(topic), _on_topic(topic)
    await owner.start()
    await standby.start()
    try:
        owner.part.shards.assign(frozenset({0, 1}))
        standby.part.shards.assign(frozenset())
        standby.part.shards.follow(frozenset({0}))
        assert standby.part.shards.followed() == {0}
        await _wait_for(lambda: owner.part.shards.ready, 3, "the owner to serve")
        group = groups_in(0, 2)[0]
        for offset in (1, 2, 3):
            assert await owner.commit(group, {P0: offset}) == {P0: ErrorCode.none}
        following = standby.part.shards.standby[0]
        await _wait_for(
            lambda: following.follower.position == len(topic.records[0]) and following.replaying is None,
            3,
            "the standby to follow the owner's writes",
        )
        assert following.machine.offsets.store.get(group, *P0).committed_offset == 3  # replayed, not served
        assert await standby.commit(group, {P0: 9}) == {P0: ErrorCode.not_coordinator}
        assert await owner.commit(group, {P0: 10}) == {P0: ErrorCode.none}  # (most likely not followed yet)

        owner.part.shards.assign(frozenset({1}))  # the owner gives shard 0 up; the standby takes it
        standby.part.shards.assign(frozenset({0}))
        standby.part.shards.follow(frozenset())
        await _wait_for(lambda: standby.part.shards.ready, 3, "the standby to serve the shard")
        index, followed, tail = topic.opened[-1]
        assert (index, followed) == (0, True) and tail <= 1  # only what it had not read yet
        assert standby.part.shards.by_index[0] is following and standby.part.shards.standby == {}
        assert await standby.fetch(group, [P0]) == {P0: 10}
        assert await standby.commit(group, {P0: 11}) == {P0: ErrorCode.none}
    finally:
        await owner.close()
        await standby.close()


async def test_a_standby_taking_its_shard_over_waits_for_the_replay_under_way():
    """A standby's replay runs in a thread that cancelling its following cannot stop: taken over meanwhile, the
    shard loads only once that replay has ended (never two replays of one state machine at once)."""
    import threading

    topic = _SharedTopic()

    owner, standby = _on_topic(topic), _on_topic(topic)
    await owner.start()
    await standby.start()
    gate, entered = threading.Event(), threading.Event()
    try:
        owner.part.shards.assign(frozenset({0, 1}))
        standby.part.shards.assign(frozenset())
        await _wait_for(lambda: owner.part.shards.ready, 3, "the owner to serve")
        group = groups_in(0, 2)[0]
        assert await owner.commit(group, {P0: 4}) == {P0: ErrorCode.none}

        standby.part.shards.follow(frozenset({0}))
        machine = standby.part.shards.standby[0].machine
        replay = machine.replay_entries

        def slow_replay(records: Any) -> int:
            if not entered.is_set():  # the following's replay; the load's own goes straight on
                entered.set()
                gate.wait(5)
            return replay(records)

        machine.replay_entries = slow_replay  # type: ignore[method-assign]
        await _wait_for(entered.is_set, 3, "the standby's replay to start")

        owner.part.shards.assign(frozenset({1}))
        standby.part.shards.assign(frozenset({0}))
        standby.part.shards.follow(frozenset())
        await asyncio.sleep(0.3)
        assert not standby.part.shards.ready  # still loading: its replay has not ended
        gate.set()
        await _wait_for(lambda: standby.part.shards.ready, 3, "the standby to serve the shard")
        assert standby.part.shards.by_index[0].machine is machine
        assert await standby.fetch(group, [P0]) == {P0: 4}
    finally:
        gate.set()
        await owner.close()
        await standby.close()


async def test_a_shard_whose_replay_outlasts_the_failure_timeout_loads_once():
    """The failure timeout bounds a load's opening of its log, not its replay (CPU in a thread that cannot be
    stopped): a shard too big to replay within it is replayed once and served, not reloaded over and over with
    replays piling up in one state machine."""
    topic = _SharedTopic()

    first, second = (_on_topic(topic, **{"coordinator.shard.failure.timeout.ms": 200}) for _ in range(2))
    await first.start()
    await second.start()
    try:
        first.part.shards.assign(frozenset({0, 1}))
        await _wait_for(lambda: first.part.shards.ready, 3, "the first server to serve")
        group = groups_in(0, 2)[0]
        assert await first.commit(group, {P0: 6}) == {P0: ErrorCode.none}
        first.part.shards.assign(frozenset({1}))

        second.part.shards.assign(frozenset({0}))
        machine = second.part.shards.by_index[0].machine
        replay, calls = machine.replay_entries, []

        def slow_replay(records: Any) -> int:
            calls.append(time.monotonic())
            time.sleep(1.5)  # past the 1 s a load's opening may take here
            return replay(records)

        machine.replay_entries = slow_replay  # type: ignore[method-assign]
        await _wait_for(lambda: second.part.shards.ready, 5, "the second server to serve")
        assert len(calls) == 1
        assert await second.fetch(group, [P0]) == {P0: 6}
    finally:
        await first.close()
        await second.close()
