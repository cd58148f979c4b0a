"""Fault injection through the real runtime: GroupCoordinatorService + Shards + ShardRuntime + storage.Log on a FaultFS.

Every test runs the production group part (coordinator/server/groups.py) on the test's event loop; only its
log is opened on a `FaultFS` around a `MemFS` (the module's `Log` is swapped for one that passes `fs=`), so
faults can be switched on and off while requests are in flight, and `MemFS.crash()` tells what a power cut
would leave. Requests are kio entities sent through the part's registered handlers exactly as the dispatcher
calls them; the answers are rebuilt as the response entity of the request's version.

What is checked:

* a write that fails (ENOSPC) or whose fsync fails (EIO): the commit answers COORDINATOR_NOT_AVAILABLE per
  partition, the committed offset in memory did not move, and once the fault is cleared the next commit
  succeeds and survives a power cut;
* a fsync that hangs: the commit answers a retriable error within offsets.commit.timeout.ms, reads and
  heartbeats still answer, and once the fsync is released new commits succeed;
* a JoinGroup whose group-creating record fails is answered with the error and leaves no group behind;
* the leader's SyncGroup whose GroupMetadata append fails: every member waiting in SyncGroup gets the error,
  the group rebalances, nobody holds an assignment that is not on disk, and the next generation works;
* loading: while the log loads, group APIs answer COORDINATOR_LOAD_IN_PROGRESS, Heartbeat answers NONE and
  /readyz is 503 (loading is held by a gate in the file system, so the window is deterministic).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import errno
import itertools
import json
import os
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from coordinator import app
from coordinator.clock import ManualClock, ManualTimer
from coordinator.config import Config
from coordinator.group import ClassicGroupState
from coordinator.records import (
    CoordinatorRecord,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    decode_record,
    encode_key,
    encode_value,
    new_offset_commit_record,
)
from coordinator.result import CoordinatorResult
from coordinator.server.group_service import GroupCoordinatorService
from coordinator.server.runtime import Ready, ShardAborted, ShardRuntime
from coordinator.server.shards import Shards
from coordinator.shard import GroupCoordinatorShard
from protocol.api import ApiTable, RequestContext, response_class
from protocol.build import build
from protocol.errors import ErrorCode
from storage import Log, OsFS
from storage.fakefs import FaultFS, MemFS
from tests.support.waits import until
from tests.support.wire import WireClient

from .consumer.context import FakeTopics, tid
from .group.context import request, subscription
from .server_thread import running, running_app

OFFSET_COMMIT, OFFSET_FETCH, JOIN_GROUP, HEARTBEAT, SYNC_GROUP, DESCRIBE_GROUPS = 8, 9, 11, 12, 14, 15
CONSUMER_GROUP_HEARTBEAT = 68
NOT_AVAILABLE = ErrorCode.coordinator_not_available
COMMIT_TIMEOUT_MS = 300
S = ClassicGroupState


# ------------------------------------------------------------------------------------------------------------
# The harness


class Shard:
    """The production group part on the test's loop, its log on `fs` (a FaultFS over a MemFS)."""

    def __init__(self, data_dir: str, fs: FaultFS, topics: Any = None, **settings: Any) -> None:
        values = {
            "offsets.commit.timeout.ms": COMMIT_TIMEOUT_MS,
            "group.initial.rebalance.delay.ms": 0,
            "group.min.session.timeout.ms": 10,
            "group.coordinator.append.linger.ms": 0,
            "offsets.topic.num.partitions": 1,  # one shard: every group's records in one log (sharding: test_group_shards)
        }
        values.update(settings)
        self.config = Config(values)
        self.fs = fs
        self.data_dir = data_dir
        self.directory = os.path.join(data_dir, "groups", "shard-0")
        # topics: the data plane's (a TopicImage with catch_up), for consumer groups and OffsetCommit's checks
        self.part = GroupCoordinatorService(
            Shards(self.config, data_dir, fs=fs, topics=topics), topics=topics
        )
        self.table = ApiTable()
        self.part.register(self.table)
        self._correlation = itertools.count(1)

    @property
    def machine(self) -> GroupCoordinatorShard:
        return self.part.shards.by_index[0].machine

    async def start(self) -> None:
        await self.part.start()
        deadline = time.monotonic() + 10
        while not self.part.shards.loaded:
            assert time.monotonic() < deadline, "the group part did not load"
            await asyncio.sleep(0.005)

    async def close(self) -> None:
        self.fs.clear()  # release anything hung so the log can close
        await self.part.close()

    async def call(self, api_key: int, version: int, client_id: str = "client", **fields: Any) -> Any:
        ctx = RequestContext(api_key, version, next(self._correlation), client_id, "127.0.0.1", 1)
        answer = await self.table.spec(api_key).handler(ctx, request(api_key, version, **fields))
        return build(response_class(api_key, version), answer)

    # -- requests ----------------------------------------------------------------------------------

    async def commit(
        self,
        group: str,
        offsets: dict[tuple[str, int], int],
        *,
        generation: int = -1,
        member_id: str = "",
        instance_id: str | None = None,
    ) -> dict[tuple[str, int], ErrorCode]:
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for (topic, partition), offset in offsets.items():
            by_topic.setdefault(topic, []).append(
                {
                    "partition_index": partition,
                    "committed_offset": offset,
                    "committed_leader_epoch": -1,
                    "committed_metadata": "",
                }
            )
        response = await self.call(
            OFFSET_COMMIT,
            8,
            group_id=group,
            generation_id_or_member_epoch=generation,
            member_id=member_id,
            group_instance_id=instance_id,
            topics=[{"name": t, "partitions": p} for t, p in by_topic.items()],
        )
        return {
            (t.name, p.partition_index): ErrorCode(p.error_code)
            for t in response.topics
            for p in t.partitions
        }

    async def fetch(self, group: str, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in partitions:
            by_topic.setdefault(topic, []).append(partition)
        response = await self.call(
            OFFSET_FETCH,
            8,
            require_stable=False,
            groups=[
                {
                    "group_id": group,
                    "topics": [{"name": t, "partition_indexes": p} for t, p in by_topic.items()],
                }
            ],
        )
        (answer,) = response.groups
        assert answer.error_code == ErrorCode.none, answer
        out = {}
        for t in answer.topics:
            for p in t.partitions:
                assert p.error_code == ErrorCode.none, p
                out[(t.name, p.partition_index)] = p.committed_offset
        return out

    async def join(self, group: str, instance_id: str, member_id: str = "", topic: str = "foo") -> Any:
        return await self.call(
            JOIN_GROUP,
            5,
            client_id=instance_id,
            group_id=group,
            session_timeout=10_000,
            rebalance_timeout=5_000,
            member_id=member_id,
            group_instance_id=instance_id,
            protocol_type="consumer",
            protocols=[{"name": "range", "metadata": subscription(topic)}],
        )

    async def sync(
        self,
        group: str,
        member_id: str,
        generation: int,
        instance_id: str,
        assignments: dict[str, bytes] | None = None,
    ) -> Any:
        return await self.call(
            SYNC_GROUP,
            5,
            group_id=group,
            generation_id=generation,
            member_id=member_id,
            group_instance_id=instance_id,
            protocol_type="consumer",
            protocol_name="range",
            assignments=[{"member_id": m, "assignment": a} for m, a in (assignments or {}).items()],
        )

    async def heartbeat(
        self, group: str, member_id: str, generation: int, instance_id: str | None
    ) -> ErrorCode:
        response = await self.call(
            HEARTBEAT,
            4,
            group_id=group,
            generation_id=generation,
            member_id=member_id,
            group_instance_id=instance_id,
        )
        return ErrorCode(response.error_code)

    async def stable_group(self, group: str = "g") -> tuple[Any, Any]:
        """Two static members, generation 1, Stable, assignments b"A" (leader) and b"B"."""
        a, b = await asyncio.gather(self.join(group, "a"), self.join(group, "b"))
        assert a.error_code == b.error_code == ErrorCode.none, (a, b)
        leader, follower = (a, b) if a.leader == a.member_id else (b, a)
        leader_iid, follower_iid = ("a", "b") if leader is a else ("b", "a")
        ls, fs = await asyncio.gather(
            self.sync(
                group,
                leader.member_id,
                leader.generation_id,
                leader_iid,
                {leader.member_id: b"A", follower.member_id: b"B"},
            ),
            self.sync(group, follower.member_id, follower.generation_id, follower_iid),
        )
        assert ls.error_code == fs.error_code == ErrorCode.none
        assert (bytes(ls.assignment), bytes(fs.assignment)) == (b"A", b"B")
        return (leader, leader_iid), (follower, follower_iid)

    # -- what is on disk ---------------------------------------------------------------------------

    def after_power_cut(self) -> GroupCoordinatorShard:
        """A fresh state machine loaded from what a power cut would leave of the log right now."""
        crashed = self.fs.inner.crash()
        return load_manager(crashed, self.directory)

    def durable_records(self) -> list[tuple[Any, Any]]:
        crashed = self.fs.inner.crash()
        with Log.open(self.directory, fs=crashed) as the_log:
            return [decode_record(CoordinatorRecord(e.key, e.value)) for e in the_log.replay()]


def load_manager(fs: Any, directory: str) -> GroupCoordinatorShard:
    clock = ManualClock()
    manager = GroupCoordinatorShard(clock, ManualTimer(clock))
    with Log.open(directory, fs=fs) as the_log:
        for entry in the_log.replay():
            manager.replay(CoordinatorRecord(entry.key, entry.value))
    return manager


def durable_offset(manager: GroupCoordinatorShard, group: str, topic: str, partition: int) -> int | None:
    offset = manager.offsets.store.get(group, topic, partition)
    return None if offset is None else offset.committed_offset


@pytest.fixture
async def make_shard(tmp_path) -> Any:
    """make_shard(**settings) -> a started Shard on a fresh FaultFS(MemFS()); closed at teardown."""
    made: list[Shard] = []

    async def make(**settings: Any) -> Shard:
        fs = FaultFS(MemFS())
        s = Shard(str(tmp_path / f"shard{len(made)}"), fs, **settings)
        made.append(s)
        await s.start()
        return s

    yield make
    for s in made:
        await s.close()


@pytest.fixture
async def shard(make_shard) -> Shard:
    return await make_shard()


P0, P1 = ("t", 0), ("t", 1)


# ------------------------------------------------------------------------------------------------------------
# OffsetCommit: failed writes, failed fsyncs


class Topics:
    """A data plane's topics (GroupCoordinatorService's `topics`): `later` appear once caught up with, as a
    topic created on the process a forwarder follows does."""

    def __init__(self, counts: dict[str, int], later: dict[str, int] | None = None) -> None:
        self.counts = dict(counts)
        self.later = dict(later or {})
        self.catch_ups = 0

    def partition_count(self, topic: str) -> int | None:
        return self.counts.get(topic)

    async def catch_up(self) -> None:
        self.catch_ups += 1
        self.counts.update(self.later)


class LaggingTopics(FakeTopics):
    """A data plane's topics followed through a cache (a worker's forwarder, the front): `later` are created
    once caught up with."""

    def __init__(self, later: dict[str, int], **topics: int) -> None:
        super().__init__(**topics)
        self.later = dict(later)
        self.catch_ups = 0

    async def catch_up(self) -> None:
        self.catch_ups += 1
        await asyncio.sleep(0)  # a round trip to the process followed
        for name, count in self.later.items():
            self.create(name, count)
        self.later.clear()


async def test_a_consumer_group_join_to_a_topic_created_a_moment_ago_is_assigned_its_partitions(make_shard):
    # A topic created on worker 0 (or upstream) a moment before a member subscribes to it: the group's worker
    # catches up before it computes the target, so the first answer assigns its partitions (not the next
    # heartbeat's, a heartbeat interval later, after the next refresh).
    topics = LaggingTopics({"fresh": 3}, old=2)
    shard = await make_shard(topics=topics)

    async def join(group: str, topic: str) -> Any:
        answer = await shard.call(
            CONSUMER_GROUP_HEARTBEAT,
            0,
            group_id=group,
            member_id="",
            member_epoch=0,
            instance_id=None,
            rack_id=None,
            rebalance_timeout=5000,
            subscribed_topic_names=[topic],
            server_assignor=None,
            topic_partitions=[],
        )
        assert answer.error_code == ErrorCode.none, answer
        return {(t.topic_id, p) for t in answer.assignment.topic_partitions for p in t.partitions}

    assert await join("g1", "old") == {(tid("old"), 0), (tid("old"), 1)}
    assert topics.catch_ups == 0  # every subscribed topic known: no catching up
    assert await join("g2", "fresh") == {(tid("fresh"), p) for p in range(3)}
    assert topics.catch_ups == 1
    assert await join("g3", "missing") == set()  # still unknown once caught up: nothing to assign
    assert topics.catch_ups == 2
    assert await join("g4", "missing") == set()
    assert topics.catch_ups == 2  # found missing a moment ago: not asked for again within a second
    # Members joining together share one catching up (each is a refresh of every topic).
    topics.later = {"fresh2": 2}
    joined = await asyncio.gather(join("g5", "fresh2"), join("g6", "fresh2"), join("g7", "fresh2"))
    assert joined == [{(tid("fresh2"), 0), (tid("fresh2"), 1)}] * 3
    assert topics.catch_ups == 3


async def test_commits_to_partitions_that_do_not_exist_are_unknown_and_not_committed(shard: Shard):
    topics = shard.part.topics = Topics({"t": 2}, later={"new": 1})
    answer = await shard.commit("g", {("t", 0): 5, ("t", 1): 6})
    assert answer == {("t", 0): ErrorCode.none, ("t", 1): ErrorCode.none}
    assert topics.catch_ups == 0  # every partition known: no catching up
    answer = await shard.commit("g", {("t", 1): 7, ("t", 2): 8, ("gone", 0): 9, ("new", 0): 10, ("t", -1): 1})
    assert answer == {
        ("t", 1): ErrorCode.none,
        ("t", 2): ErrorCode.unknown_topic_or_partition,  # beyond the partition count
        ("t", -1): ErrorCode.unknown_topic_or_partition,
        ("gone", 0): ErrorCode.unknown_topic_or_partition,  # no such topic
        ("new", 0): ErrorCode.none,  # created a moment ago: known once caught up
    }
    assert topics.catch_ups == 1
    assert await shard.fetch("g", [("t", 0), ("t", 1), ("new", 0)]) == {
        ("t", 0): 5,
        ("t", 1): 7,
        ("new", 0): 10,
    }
    assert durable_offset(shard.machine, "g", "t", 2) is None
    assert durable_offset(shard.machine, "g", "gone", 0) is None
    # Nothing that exists: the group is not even asked (as Kafka), so an unknown member is not an error here.
    answer = await shard.commit("g", {("gone", 0): 1}, generation=7, member_id="nobody")
    assert answer == {("gone", 0): ErrorCode.unknown_topic_or_partition}
    # What exists is still checked by the group.
    answer = await shard.commit("g", {("gone", 0): 1, ("t", 0): 1}, generation=7, member_id="nobody")
    assert answer == {
        ("gone", 0): ErrorCode.unknown_topic_or_partition,
        ("t", 0): ErrorCode.unknown_member_id,
    }


@pytest.mark.parametrize("fault", ["enospc-write", "eio-fsync", "torn-write"])
async def test_failed_append_answers_not_available_and_changes_nothing(shard: Shard, fault: str):
    assert await shard.commit("g", {P0: 10, P1: 20}) == {P0: ErrorCode.none, P1: ErrorCode.none}
    if fault == "enospc-write":
        shard.fs.fail_writes(errno.ENOSPC)
    elif fault == "eio-fsync":
        shard.fs.fail_fsyncs(errno.EIO)
    else:
        shard.fs.fail_writes(errno.EIO, keep_bytes=7)  # a prefix of the entry lands, then EIO

    started = time.monotonic()
    answer = await shard.commit("g", {P0: 11, P1: 21})
    assert answer == {P0: NOT_AVAILABLE, P1: NOT_AVAILABLE}  # per partition, a retriable error
    assert time.monotonic() - started < COMMIT_TIMEOUT_MS / 1000  # it failed; it did not time out
    assert shard.part.shards.by_index[0].runtime.append_failures == 1
    assert await shard.fetch("g", [P0, P1]) == {P0: 10, P1: 20}  # memory did not move
    assert not shard.machine.offsets.store.pending_partitions("g")
    # Retrying while the fault is still on fails the same way and still changes nothing.
    assert await shard.commit("g", {P0: 12}) == {P0: NOT_AVAILABLE}
    assert await shard.fetch("g", [P0, P1]) == {P0: 10, P1: 20}
    disk = shard.after_power_cut()
    assert (durable_offset(disk, "g", *P0), durable_offset(disk, "g", *P1)) == (10, 20)

    shard.fs.clear()
    assert await shard.commit("g", {P0: 13, P1: 23}) == {P0: ErrorCode.none, P1: ErrorCode.none}
    assert await shard.fetch("g", [P0, P1]) == {P0: 13, P1: 23}
    disk = shard.after_power_cut()  # acknowledged means durable: it survives a power cut
    assert (durable_offset(disk, "g", *P0), durable_offset(disk, "g", *P1)) == (13, 23)
    # Nothing of the failed appends is on disk: exactly the two good commits, in order.
    offsets = [(k.partition, v.offset) for k, v in shard.durable_records() if hasattr(v, "offset")]
    assert offsets == [(0, 10), (1, 20), (0, 13), (1, 23)]


async def test_fault_during_a_burst_fails_only_the_batches_it_hits(shard: Shard):
    """Waves of concurrent commits of many groups (group commit puts each wave in one or a few batches); one
    write fails with ENOSPC in the middle wave: every request is answered all-or-nothing, and memory and the
    durable log agree on every group afterwards."""
    answers: dict[str, dict[tuple[str, int], ErrorCode]] = {}
    for wave in range(3):
        if wave == 1:
            shard.fs.fail_writes(errno.ENOSPC, times=1)
        groups = [f"g{wave}-{i}" for i in range(30)]
        results = await asyncio.gather(*(shard.commit(g, {P0: i, P1: i}) for i, g in enumerate(groups)))
        answers.update(zip(groups, results, strict=True))
    ok = {g for g, a in answers.items() if a == {P0: ErrorCode.none, P1: ErrorCode.none}}
    failed = {g for g, a in answers.items() if a == {P0: NOT_AVAILABLE, P1: NOT_AVAILABLE}}
    assert len(ok) + len(failed) == 90 and failed and ok
    assert all(g.startswith("g1-") for g in failed)
    disk = shard.after_power_cut()
    for group in answers:
        expected = int(group.split("-")[1]) if group in ok else None
        assert durable_offset(disk, group, *P0) == durable_offset(disk, group, *P1) == expected
        assert (
            durable_offset(shard.machine, group, *P0) == durable_offset(shard.machine, group, *P1) == expected
        )


# ------------------------------------------------------------------------------------------------------------
# A hanging fsync


async def test_hanging_fsync_times_out_then_recovers(shard: Shard):
    (leader, leader_iid), _ = await shard.stable_group("members")
    assert await shard.commit("g", {P0: 10}) == {P0: ErrorCode.none}

    shard.fs.hang_fsyncs()
    started = time.monotonic()
    pending = asyncio.create_task(shard.commit("g", {P0: 11}))
    assert await asyncio.to_thread(shard.fs.wait_until_hung, 5)
    # While the commit waits on the disk, reads and heartbeats do not wait behind the log for longer than
    # the commit timeout (a read may wait for writes already in flight, never for the disk itself).
    t0 = time.monotonic()
    assert (
        await shard.heartbeat("members", leader.member_id, leader.generation_id, leader_iid) == ErrorCode.none
    )
    assert await shard.fetch("g", [P0]) == {P0: 10}
    assert time.monotonic() - t0 < COMMIT_TIMEOUT_MS / 1000 + 0.5

    answer = await asyncio.wait_for(pending, COMMIT_TIMEOUT_MS / 1000 + 2)
    elapsed = time.monotonic() - started
    assert answer == {P0: NOT_AVAILABLE}
    assert COMMIT_TIMEOUT_MS / 1000 * 0.9 <= elapsed < COMMIT_TIMEOUT_MS / 1000 + 1.0
    # More commits while the disk still hangs: each times out on its own, none hangs.
    answers = await asyncio.wait_for(
        asyncio.gather(*(shard.commit("g", {P1: n}) for n in range(5))), COMMIT_TIMEOUT_MS / 1000 + 2
    )
    assert all(a == {P1: NOT_AVAILABLE} for a in answers)
    assert await shard.fetch("g", [P0, P1]) == {P0: 10, P1: -1}
    # With nothing in flight, a heartbeat answers at once even though the disk still hangs.
    t0 = time.monotonic()
    assert (
        await shard.heartbeat("members", leader.member_id, leader.generation_id, leader_iid) == ErrorCode.none
    )
    assert time.monotonic() - t0 < 0.25  # well below the commit timeout: it waited for nothing
    assert shard.fs.hung == 1

    shard.fs.release_fsyncs()
    assert await shard.commit("g", {P0: 12, P1: 12}) == {P0: ErrorCode.none, P1: ErrorCode.none}
    assert await shard.fetch("g", [P0, P1]) == {P0: 12, P1: 12}
    disk = shard.after_power_cut()
    assert (durable_offset(disk, "g", *P0), durable_offset(disk, "g", *P1)) == (12, 12)
    assert (
        await shard.heartbeat("members", leader.member_id, leader.generation_id, leader_iid) == ErrorCode.none
    )


async def test_commit_timed_out_on_a_hung_fsync_lands_on_disk_after_release(shard: Shard):
    """Documents what a timeout means: the commit answered with an error may still become durable once the
    disk comes back (the append cannot be withdrawn once its fsync started). Memory does not learn of it,
    so OffsetFetch and the log disagree until the next commit of that partition or a restart."""
    assert await shard.commit("g", {P0: 10}) == {P0: ErrorCode.none}
    shard.fs.hang_fsyncs()
    assert await shard.commit("g", {P0: 11}) == {P0: NOT_AVAILABLE}
    shard.fs.release_fsyncs()
    await until(lambda: durable_offset(shard.after_power_cut(), "g", *P0) == 11, "the released flush")
    assert await shard.fetch("g", [P0]) == {P0: 10}  # memory: the failed commit was not applied
    assert durable_offset(shard.after_power_cut(), "g", *P0) == 11  # disk: it landed
    # The next acknowledged commit makes them agree again.
    assert await shard.commit("g", {P0: 12}) == {P0: ErrorCode.none}
    assert await shard.fetch("g", [P0]) == {P0: 12}
    assert durable_offset(shard.after_power_cut(), "g", *P0) == 12


# ------------------------------------------------------------------------------------------------------------
# JoinGroup / SyncGroup


async def test_join_creating_a_group_fails_with_the_append(make_shard):
    # The initial rebalance delay keeps the join phase open until the failed append is known.
    shard = await make_shard(**{"group.initial.rebalance.delay.ms": 200})
    shard.fs.fail_writes(errno.ENOSPC)
    answer = await asyncio.wait_for(shard.join("new", "a"), 5)
    assert answer.error_code == NOT_AVAILABLE
    assert "new" not in shard.machine.groups
    assert "new" not in shard.after_power_cut().groups
    shard.fs.clear()
    answer = await asyncio.wait_for(shard.join("new", "a"), 5)
    assert answer.error_code == ErrorCode.none and answer.generation_id == 1
    assert "new" in shard.after_power_cut().groups


async def test_join_completed_while_the_group_creating_append_fails_is_not_answered_ok(shard: Shard):
    # group.initial.rebalance.delay.ms=0: the join phase completes (a timer op without records, generation 1)
    # while the record creating the group is still being written; then that write fails.
    shard.fs.slow_fsyncs(0.1)
    shard.fs.fail_fsyncs(errno.EIO, times=1)
    answer = await asyncio.wait_for(shard.join("new", "a"), 5)
    assert shard.after_power_cut().groups.get("new") is None  # nothing about the group is on disk
    assert answer.error_code != ErrorCode.none  # so the member must not be told it joined generation 1


@pytest.mark.parametrize("fault", ["enospc-write", "eio-fsync"])
async def test_leader_sync_append_failure_rebalances(shard: Shard, fault: str):
    group = "g"
    a, b = await asyncio.gather(shard.join(group, "a"), shard.join(group, "b"))
    leader, follower = (a, b) if a.leader == a.member_id else (b, a)
    leader_iid, follower_iid = ("a", "b") if leader is a else ("b", "a")
    assert leader.generation_id == follower.generation_id == 1
    # The follower's SyncGroup arrives first and waits for the leader's assignment.
    follower_sync = asyncio.create_task(shard.sync(group, follower.member_id, 1, follower_iid))
    await until(
        lambda: shard.machine.groups[group].member(follower.member_id).is_awaiting_sync,
        "the follower's SyncGroup parks",
    )
    assert not follower_sync.done()
    if fault == "enospc-write":
        shard.fs.fail_writes(errno.ENOSPC)
    else:
        shard.fs.fail_fsyncs(errno.EIO)
    leader_sync = await shard.sync(
        group, leader.member_id, 1, leader_iid, {leader.member_id: b"A", follower.member_id: b"B"}
    )
    follower_answer = await asyncio.wait_for(follower_sync, 5)
    assert leader_sync.error_code == NOT_AVAILABLE and bytes(leader_sync.assignment) == b""
    assert follower_answer.error_code == NOT_AVAILABLE and bytes(follower_answer.assignment) == b""
    g = shard.machine.groups[group]
    assert g.state == S.PREPARING_REBALANCE  # the group rebalances
    assert all(m.assignment == b"" for m in g.all_members())  # nobody holds an assignment not on disk
    disk = shard.after_power_cut()
    assert disk.groups[group].state == S.EMPTY and disk.groups[group].generation_id == 0
    for m, iid in ((leader, leader_iid), (follower, follower_iid)):
        assert await shard.heartbeat(group, m.member_id, 1, iid) == ErrorCode.rebalance_in_progress

    shard.fs.clear()
    a2, b2 = await asyncio.wait_for(
        asyncio.gather(
            shard.join(group, leader_iid, leader.member_id),
            shard.join(group, follower_iid, follower.member_id),
        ),
        10,
    )
    assert a2.error_code == b2.error_code == ErrorCode.none and a2.generation_id == b2.generation_id == 2
    leader2 = a2 if a2.leader == a2.member_id else b2
    follower2 = b2 if leader2 is a2 else a2
    l_iid, f_iid = (leader_iid, follower_iid) if leader2 is a2 else (follower_iid, leader_iid)
    s1, s2 = await asyncio.gather(
        shard.sync(
            group, leader2.member_id, 2, l_iid, {leader2.member_id: b"A2", follower2.member_id: b"B2"}
        ),
        shard.sync(group, follower2.member_id, 2, f_iid),
    )
    assert (s1.error_code, bytes(s1.assignment), s2.error_code, bytes(s2.assignment)) == (0, b"A2", 0, b"B2")
    on_disk = shard.after_power_cut().groups[group]
    assert on_disk.state == S.STABLE and on_disk.generation_id == 2
    assert on_disk.member(leader2.member_id).assignment == b"A2"
    assert on_disk.member(follower2.member_id).assignment == b"B2"


async def test_follower_sync_during_failing_leader_write_gets_no_assignment(shard: Shard):
    group = "g"
    a, b = await asyncio.gather(shard.join(group, "a"), shard.join(group, "b"))
    leader, follower = (a, b) if a.leader == a.member_id else (b, a)
    leader_iid, follower_iid = ("a", "b") if leader is a else ("b", "a")
    # The leader's SyncGroup comes first; its GroupMetadata append takes 200 ms and then fails (EIO).
    shard.fs.slow_fsyncs(0.2)
    shard.fs.fail_fsyncs(errno.EIO, times=1)
    leader_sync = asyncio.create_task(
        shard.sync(group, leader.member_id, 1, leader_iid, {leader.member_id: b"A", follower.member_id: b"B"})
    )
    # Applied in memory before the write is durable.
    await until(lambda: shard.machine.groups[group].state == S.STABLE, "the leader's assignment is applied")
    follower_answer = await shard.sync(group, follower.member_id, 1, follower_iid)
    leader_answer = await leader_sync
    assert leader_answer.error_code == NOT_AVAILABLE
    assert shard.machine.groups[group].state == S.PREPARING_REBALANCE
    assert all(m.assignment == b"" for m in shard.machine.groups[group].all_members())
    assert shard.after_power_cut().groups[group].generation_id == 0  # generation 1 was never written
    # The follower must not be told it owns b"B" of generation 1: that assignment is on no disk.
    assert (follower_answer.error_code, bytes(follower_answer.assignment)) != (ErrorCode.none, b"B")


async def test_static_member_replacement_append_failure_keeps_old_id(shard: Shard):
    (leader, leader_iid), (follower, follower_iid) = await shard.stable_group("g")
    shard.fs.fail_writes(errno.ENOSPC)
    # The follower restarts (unknown member id, same instance id): replaced in place, which is written.
    answer = await asyncio.wait_for(shard.join("g", follower_iid), 5)
    assert answer.error_code == NOT_AVAILABLE
    g = shard.machine.groups["g"]
    assert g.static_member_id(follower_iid) == follower.member_id  # the old id is back
    assert g.state == S.STABLE and g.generation_id == 1
    assert await shard.heartbeat("g", follower.member_id, 1, follower_iid) == ErrorCode.none
    shard.fs.clear()
    answer = await asyncio.wait_for(shard.join("g", follower_iid), 5)
    assert answer.error_code == ErrorCode.none and answer.member_id != follower.member_id
    on_disk = shard.after_power_cut().groups["g"]
    assert on_disk.static_member_id(follower_iid) == answer.member_id and on_disk.generation_id == 1


# ------------------------------------------------------------------------------------------------------------
# Loading


class _GatedFile:
    def __init__(self, inner: Any, gate: threading.Event) -> None:
        self._inner = inner
        self._gate = gate

    def read_at(self, offset: int, size: int) -> bytes:
        self._gate.wait()
        return self._inner.read_at(offset, size)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class GatedFS(OsFS):
    """Real files whose reads wait until the gate opens: holds loading in progress for as long as a test
    needs."""

    def __init__(self) -> None:
        self.gate = threading.Event()

    def open_read(self, path: str) -> Any:
        return _GatedFile(super().open_read(path), self.gate)


def _write_big_log(directory: str, groups: int, partitions: int) -> None:
    now = int(time.time() * 1000)
    member = MemberMetadata(
        "static-1", "instance-1", "client", "/127.0.0.1", 30000, 30000, subscription("t"), b"assigned"
    )
    value = GroupMetadataValue("consumer", 3, "range", "static-1", now, (member,))
    with Log.open(directory, linger_ms=0) as the_log:
        the_log.append([(encode_key(GroupMetadataKey("stable")), encode_value(value))]).result()
        batch = []
        for g in range(groups):
            for p in range(partitions):
                r = new_offset_commit_record(f"group-{g}", "t", p, 1000 + p, commit_timestamp_ms=now)
                batch.append((r.key, r.value))
            if len(batch) >= 5000:
                the_log.append(batch).result()
                batch = []
        if batch:
            the_log.append(batch).result()


def _readyz(built: Any) -> int:
    host, port = built.admin.bound
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/readyz", timeout=5) as resp:
            json.load(resp)
            return resp.status
    except urllib.error.HTTPError as exc:
        exc.read()
        exc.close()
        return exc.code


@pytest.fixture
def loading_server(tmp_path) -> Iterator[tuple[Any, GatedFS]]:
    data_dir = tmp_path / "data"
    _write_big_log(str(data_dir / "groups" / "shard-0"), groups=200, partitions=100)  # 20,000 offsets
    fs = GatedFS()
    config = Config({"offsets.topic.num.partitions": 1})
    try:
        with running_app(
            app.build(config, ("127.0.0.1", 0), ("127.0.0.1", 0), None, str(data_dir), fs=fs)
        ) as built:
            yield built, fs
    finally:
        fs.gate.set()


def test_loading_answers_load_in_progress_and_not_ready(loading_server):
    server, fs = loading_server
    # Topic "t" exists (creating it would wait for the gate too): a commit to one that does not is answered
    # UNKNOWN_TOPIC_OR_PARTITION before its group's shard is asked, loading or not.
    server.groups.topics = Topics({"t": 100})
    with WireClient(*server.server.bound) as c:
        for _ in range(3):  # stays so for as long as loading takes
            fetch = c.call(
                request(
                    OFFSET_FETCH,
                    8,
                    require_stable=False,
                    groups=[{"group_id": "group-1", "topics": [{"name": "t", "partition_indexes": [0]}]}],
                )
            )
            assert [g.error_code for g in fetch.groups] == [ErrorCode.coordinator_load_in_progress]
            old_fetch = c.call(
                request(OFFSET_FETCH, 5, group_id="group-1", topics=[{"name": "t", "partition_indexes": [0]}])
            )
            assert old_fetch.error_code == ErrorCode.coordinator_load_in_progress
            join = c.call(
                request(
                    JOIN_GROUP,
                    5,
                    group_id="stable",
                    session_timeout=30000,
                    rebalance_timeout=30000,
                    member_id="",
                    group_instance_id="instance-2",
                    protocol_type="consumer",
                    protocols=[{"name": "range", "metadata": subscription("t")}],
                )
            )
            assert join.error_code == ErrorCode.coordinator_load_in_progress
            heartbeat = c.call(
                request(
                    HEARTBEAT,
                    4,
                    group_id="stable",
                    generation_id=3,
                    member_id="static-1",
                    group_instance_id="instance-1",
                )
            )
            assert heartbeat.error_code == ErrorCode.none
            commit = c.call(
                request(
                    OFFSET_COMMIT,
                    8,
                    group_id="group-1",
                    generation_id_or_member_epoch=-1,
                    member_id="",
                    group_instance_id=None,
                    topics=[
                        {
                            "name": "t",
                            "partitions": [
                                {
                                    "partition_index": 0,
                                    "committed_offset": 5,
                                    "committed_leader_epoch": -1,
                                    "committed_metadata": "",
                                }
                            ],
                        }
                    ],
                )
            )
            assert commit.topics[0].partitions[0].error_code == ErrorCode.coordinator_load_in_progress
            describe = c.call(
                request(DESCRIBE_GROUPS, 5, groups=["stable"], include_authorized_operations=False)
            )
            assert describe.groups[0].error_code == ErrorCode.coordinator_load_in_progress
            assert _readyz(server) == 503
            assert not server.groups.shards.loaded
            time.sleep(0.1)

        fs.gate.set()
        deadline = time.monotonic() + 30
        while _readyz(server) != 200:
            assert time.monotonic() < deadline, "did not finish loading"
            time.sleep(0.02)
        assert server.groups.shards.load_stats["records"] == 20_001
        fetch = c.call(
            request(
                OFFSET_FETCH,
                8,
                require_stable=False,
                groups=[{"group_id": "group-199", "topics": [{"name": "t", "partition_indexes": [0, 99]}]}],
            )
        )
        assert [
            (p.partition_index, p.committed_offset, p.error_code)
            for p in fetch.groups[0].topics[0].partitions
        ] == [(0, 1000, 0), (99, 1099, 0)]
        # The loaded static member is still in its group: its heartbeat is good, its assignment kept.
        heartbeat = c.call(
            request(
                HEARTBEAT,
                4,
                group_id="stable",
                generation_id=3,
                member_id="static-1",
                group_instance_id="instance-1",
            )
        )
        assert heartbeat.error_code == ErrorCode.none
        describe = c.call(request(DESCRIBE_GROUPS, 5, groups=["stable"], include_authorized_operations=False))
        (group,) = describe.groups
        assert group.group_state == "Stable"
        assert [(m.member_id, m.group_instance_id, bytes(m.member_assignment)) for m in group.members] == [
            ("static-1", "instance-1", b"assigned")
        ]


def test_shutdown_answers_parked_joins_not_coordinator_without_waiting_for_the_rebalance(tmp_path):
    """Server.close() asks every part to stop waiting: the group part unloads its shards as Kafka does, so a
    JoinGroup parked in a 30 s initial rebalance delay is answered NOT_COORDINATOR at once and the shutdown does
    not sit out shutdown.timeout.ms (10 s) for it."""

    def setup(server: Any) -> None:
        server.add_part(GroupCoordinatorService(Shards(server.config, str(tmp_path / "data"))))

    join = request(
        JOIN_GROUP,
        9,
        group_id="parked",
        session_timeout=30000,
        rebalance_timeout=30000,
        member_id="",
        group_instance_id="instance-1",
        protocol_type="consumer",
        reason=None,
        protocols=[{"name": "range", "metadata": subscription("t")}],
    )
    with running(
        setup, **{"group.initial.rebalance.delay.ms": 30000, "offsets.topic.num.partitions": 1}
    ) as server:
        c = WireClient(*server.bound)
        c.send(join)
        time.sleep(0.3)  # parked in the delay
        closing = time.monotonic()
    took = time.monotonic() - closing  # leaving the block closed the server
    with c:
        _cid, answer = c.recv(join)
    assert answer.error_code == ErrorCode.not_coordinator
    assert took < 3.0, f"the shutdown took {took:.1f} s"


async def test_the_runtime_times_appends_until_durable_and_not_failed_ones():
    """ShardRuntime(on_append=...) reports how long each append took from queueing to durable (the storage
    histogram of /metrics); an append that fails is not a duration of a durable append."""
    seen: list[float] = []
    futures: list[concurrent.futures.Future[Any]] = []

    class OneLog:
        def append(self, entries: Any) -> concurrent.futures.Future[Any]:
            future: concurrent.futures.Future[Any] = concurrent.futures.Future()
            futures.append(future)
            return future

    runtime = ShardRuntime(log=OneLog(), timeout_ms=5000, on_append=seen.append)
    runtime.machine = GroupCoordinatorShard(ManualClock(), ManualTimer(ManualClock()))
    record = new_offset_commit_record("g", "t", 0, 5, commit_timestamp_ms=1)
    runtime.apply(CoordinatorResult(records=[record]))
    await asyncio.sleep(0)
    futures[0].set_result(1)
    await runtime.drain()
    assert len(seen) == 1 and seen[0] >= 0
    runtime.apply(CoordinatorResult(records=[record], on_append_failure=lambda code: CoordinatorResult()))
    await asyncio.sleep(0)
    futures[1].set_exception(OSError("disk"))
    await runtime.drain()
    assert len(seen) == 1


async def test_the_writes_of_one_loop_iteration_share_one_append_and_settle_in_order():
    """Results applied before the write task of the first of them started go in its append, in the order they were
    applied; each result's answer waits for that append; a result applied after the task started gets an append
    of its own. When the shared append fails, every result in it is undone, in order, and answered its failure."""
    appends: list[list[Any]] = []
    futures: list[concurrent.futures.Future[Any]] = []

    class RecordingLog:
        def append(self, entries: Any) -> concurrent.futures.Future[Any]:
            appends.append(list(entries))
            future: concurrent.futures.Future[Any] = concurrent.futures.Future()
            futures.append(future)
            return future

    runtime = ShardRuntime(log=RecordingLog(), timeout_ms=5000)
    runtime.machine = GroupCoordinatorShard(ManualClock(), ManualTimer(ManualClock()))
    loop = asyncio.get_running_loop()
    answers: dict[str, asyncio.Future[Any]] = {}
    undone: list[str] = []

    def commit(group: str, offset: int) -> CoordinatorResult:
        token = object()
        answers[group] = loop.create_future()
        runtime._futures[token] = (answers[group], None)

        def failed(code: int) -> CoordinatorResult:
            undone.append(group)
            return CoordinatorResult(responses=[(token, ("failed", code))])

        record = new_offset_commit_record(group, "t", 0, offset, commit_timestamp_ms=1)
        return CoordinatorResult(
            records=[record], responses=[(token, ("ok", group))], on_append_failure=failed
        )

    for i, group in enumerate(("a", "b", "c")):
        runtime.apply(commit(group, i), group)
    await asyncio.sleep(0)  # the write task starts: one append of three records
    runtime.apply(commit("d", 3), "d")
    await asyncio.sleep(0)
    assert [len(entries) for entries in appends] == [3, 1]
    assert [key for key, _ in appends[0]] == [
        new_offset_commit_record(g, "t", 0, 0, commit_timestamp_ms=1).key for g in ("a", "b", "c")
    ]
    assert not any(f.done() for f in answers.values())
    futures[1].set_result(4)  # the later append settles first: its answer still waits for the earlier one
    await asyncio.sleep(0.01)
    assert not answers["d"].done()
    futures[0].set_result(3)
    await runtime.drain()
    assert [answers[g].result() for g in "abcd"] == [("ok", g) for g in "abcd"]

    answers.clear()
    runtime.apply(commit("e", 5), "e")
    runtime.apply(commit("f", 6), "f")
    await asyncio.sleep(0)
    futures[2].set_exception(OSError("disk"))
    await runtime.drain()
    assert undone == ["e", "f"]
    assert [answers[g].result() for g in "ef"] == [("failed", runtime.failure_error)] * 2


async def test_submit_answers_at_once_or_once_durable_and_gives_the_aborted_answer_when_given_up():
    """ShardRuntime.submit, the hot path's call: an answer released at once is Ready (no future); one that waits
    for a write is a future settled once the write is durable; when the shard is given up, a waiting submit gets
    its `aborted` answer and a waiting call still fails with ShardAborted."""
    futures: list[concurrent.futures.Future[Any]] = []

    class RecordingLog:
        at_once = False  # appends are durable as soon as made

        def append(self, entries: Any) -> concurrent.futures.Future[Any]:
            futures.append(concurrent.futures.Future())
            if self.at_once:
                futures[-1].set_result(len(futures))
            return futures[-1]

    log = RecordingLog()
    runtime = ShardRuntime(log=log, timeout_ms=5000)
    runtime.machine = GroupCoordinatorShard(ManualClock(), ManualTimer(ManualClock()))

    def heartbeat(token: object) -> CoordinatorResult:
        return CoordinatorResult(responses=[(token, "beat")])

    def commit(token: object, group: str, offset: int) -> CoordinatorResult:
        record = new_offset_commit_record(group, "t", 0, offset, commit_timestamp_ms=1)
        return CoordinatorResult(records=[record], responses=[(token, ("ok", offset))])

    def answer(text: str) -> str:
        return text

    aborted = (answer, "aborted")

    beat = runtime.submit(heartbeat, group="a", aborted=aborted)
    assert isinstance(beat, Ready) and beat.value == "beat" and await beat == "beat"
    committed = runtime.submit(commit, "a", 1, group="a", aborted=aborted)
    behind = runtime.submit(heartbeat, group="a", aborted=aborted)  # waits for its group's write
    elsewhere = runtime.submit(heartbeat, group="b", aborted=aborted)  # another group's does not
    assert isinstance(elsewhere, Ready)
    assert isinstance(committed, asyncio.Future) and isinstance(behind, asyncio.Future)
    await asyncio.sleep(0)
    assert not committed.done() and not behind.done()
    futures[0].set_result(1)
    assert await committed == ("ok", 1) and await behind == "beat"
    assert not runtime._futures

    def failing(token: object) -> CoordinatorResult:
        raise RuntimeError("in the state machine")

    with pytest.raises(RuntimeError):
        runtime.submit(failing, group="a", aborted=aborted)
    assert isinstance(runtime.submit(heartbeat, group="a", aborted=aborted), Ready)

    stuck = runtime.submit(commit, "b", 2, group="b", aborted=aborted)
    called = asyncio.ensure_future(runtime.call(commit, "c", 3, group="c"))
    await asyncio.sleep(0)
    runtime.abort()
    assert await stuck == "aborted"
    with pytest.raises(ShardAborted):
        await called
    log.at_once = True  # the writes still in flight settle (their answers are dropped with the shard)
    for future in futures:
        if not future.done():
            future.set_result(0)
    await runtime.drain()


async def test_answers_waiting_for_writes_are_released_by_the_write_itself_and_wait_for_every_write_they_follow():
    """An answer without records that waits for writes in flight is released in the same step as the answers of
    the last of those writes (no loop turn of its own between the append and the wire); one that follows both its
    group's write and a later write of no group waits for both; one that waits for a write that fails is
    released after that write's failure answer."""
    futures: list[concurrent.futures.Future[Any]] = []

    class RecordingLog:
        def append(self, entries: Any) -> concurrent.futures.Future[Any]:
            futures.append(concurrent.futures.Future())
            return futures[-1]

    runtime = ShardRuntime(log=RecordingLog(), timeout_ms=5000)
    runtime.machine = GroupCoordinatorShard(ManualClock(), ManualTimer(ManualClock()))
    loop = asyncio.get_running_loop()
    released: list[str] = []

    def answer() -> tuple[object, Any]:
        token = object()
        future = loop.create_future()
        future.add_done_callback(lambda f: released.append(f.result()))
        runtime._futures[token] = (future, None)
        return token, future

    def write(name: str, group: str | None, offset: int, **kwargs: Any) -> asyncio.Future[Any]:
        token, future = answer()
        record = new_offset_commit_record(group or "x", "t", 0, offset, commit_timestamp_ms=1)
        runtime.apply(CoordinatorResult(records=[record], responses=[(token, name)], **kwargs), group)
        return future

    def read(name: str, group: str | None) -> asyncio.Future[Any]:
        token, future = answer()
        runtime.apply(CoordinatorResult(responses=[(token, name)]), group)
        return future

    committed = write("commit a", "a", 1)
    behind = read("heartbeat a", "a")
    await asyncio.sleep(0)
    ungrouped = write("timer", None, 2)  # a second append: no group's own
    behind_both = read("heartbeat a after the timer", "a")
    anyone = read("no group", None)
    await asyncio.sleep(0)
    assert len(futures) == 2 and not behind.done()
    futures[0].set_result(1)
    await committed
    assert behind.done() and not behind_both.done() and not anyone.done()
    futures[1].set_result(2)
    await ungrouped
    assert behind_both.done() and anyone.done()
    await asyncio.sleep(0)  # (the futures' done callbacks run in the order the futures were settled)
    assert released == ["commit a", "heartbeat a", "timer", "heartbeat a after the timer", "no group"]

    released.clear()
    failing = write("commit b", "b", 3, on_append_failure=lambda code: CoordinatorResult())
    after_failure = read("heartbeat b", "b")
    await asyncio.sleep(0)
    futures[2].set_exception(OSError("disk"))
    await runtime.drain()
    assert not failing.done()  # its failure answer (none here) was given instead
    assert after_failure.done() and released == ["heartbeat b"]
    assert not runtime._followers and not runtime._writes
