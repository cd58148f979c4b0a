"""The group shards a server owns, each a pure state machine run on the event loop with its own log.

Groups are partitioned into shards as Kafka partitions __consumer_offsets: group G belongs to shard
abs(hashCode(G)) % offsets.topic.num.partitions (coordinator.sharding). A `Shard` is one pure state machine
(coordinator.shard.GroupCoordinatorShard) with a clock and a timer on the event loop, its own log (storage.Log
under DATA_DIR/groups/shard-N) and the ShardRuntime that persists what it emits before answering. `Shards` is the
set a server owns (all of them, or a worker's share: coordinator.cluster.topology).

At start every owned shard's log is replayed into a fresh state machine in a worker thread while the listener
already answers (coordinator.server.group_service answers COORDINATOR_LOAD_IN_PROGRESS meanwhile), and /readyz is
not ready until all are loaded.

Timeouts, not retries: every wait on a shard's log is bounded (offsets.commit.timeout.ms per append,
group.coordinator.compaction.timeout.ms per compaction). A shard whose log fails or stalls answers its own
requests with COORDINATOR_NOT_AVAILABLE within that bound while the other shards go on serving; once it has been
failing for coordinator.shard.failure.timeout.ms it is marked failed (in /readyz and the metrics), its state
machine is dropped, its log abandoned (the writer may be stuck in a fsync) and the shard is reloaded from what is
on disk, answering COORDINATOR_LOAD_IN_PROGRESS meanwhile. Reloading also makes memory agree with the disk again
about writes that timed out but landed later.

A shard whose log lives on the upstream cluster's state topic (coordinator.front.state) has a lease there: it answers
only while its log says so (`lease.refusal`), and once another server has claimed it (ShardOwnedElsewhere, or its
lease says fenced) it is FENCED: dropped, not reloaded, answering NOT_COORDINATOR.

A server in front of a cluster may also be the hot standby of shards another server owns (`follow`, given by
coordinator.front.instances): it reads what their owners write every FOLLOW_INTERVAL_S and replays it into a state
machine that answers nothing; given such a shard (`assign`), it stops following, claims it and replays only the
records it had not read (`_promote`).

Shutdown (`unload`) is Kafka's unload of every shard: parked JoinGroup and SyncGroup answers go out at once
(NOT_COORDINATOR) instead of holding the shutdown until their rebalance ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import gc
import json
import logging
import math
import os
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any

from coordinator.clock import OFFSETS_EXPIRATION_KEY
from coordinator.config import Config
from coordinator.consumer.group import ConsumerGroup
from coordinator.consumer.manager import ConsumerGroupSettings, TopicImage
from coordinator.group.events import GroupEventListener
from coordinator.group.group import ClassicGroup
from coordinator.group.pause import NOT_PAUSED, PauseState
from coordinator.offsets.store import OffsetAndMetadata, OffsetStore, PartitionOffsets
from coordinator.shard import GroupCoordinatorShard
from coordinator.sharding import shard_of
from coordinator.tasks import cancel_and_wait
from protocol.errors import ErrorCode
from storage import FS, Log, OsFS

from .runtime import AsyncioTimer, LoopClock, ShardRuntime

log = logging.getLogger(__name__)

LOAD_PROGRESS_INTERVAL_S = 2.0
LAYOUT_FILE = "layout.json"
MONITOR_INTERVAL_S = 0.25
QUICK_LOAD_WAIT_S = 1.0

Observer = Callable[[float], None]
LogOpener = Callable[..., Awaitable[Any]]  # (index, follower=None) -> the shard's log
FOLLOW_INTERVAL_S = 0.5  # how often a hot standby reads what its shard's owner wrote
FOLLOW_SLACK_S = 0.02  # a standby's next read is on a mark at least this far away (_follow)
# How long a new standby waits for this server's loading shards before its first read.
FOLLOW_START_WAIT_S = 30.0


class ShardState(enum.Enum):
    LOADING = "loading"  # replaying its log (first start or after a failure)
    ACTIVE = "active"
    STALLED = "stalled"  # its log fails or times out; requests get a retriable error
    FAILED = "failed"  # given up; being reloaded from its log
    FENCED = "fenced"  # another server claimed it; not reloaded


class ShardOwnedElsewhere(Exception):
    """Opening or writing a shard's log found that another server claimed the shard."""


class Shard:
    """One shard: a state machine, its runtime, clock, timer and log."""

    def __init__(
        self,
        index: int,
        config: Config,
        data_dir: str | None,
        fs: FS,
        on_append: Observer | None = None,
        log_opener: LogOpener | None = None,
        topics: TopicImage | None = None,
    ) -> None:
        self.index = index
        self.log_opener = log_opener
        self.config = config
        self.fs = fs
        self.directory = os.path.join(data_dir, "groups", f"shard-{index}") if data_dir else None
        self.runtime = ShardRuntime(timeout_ms=config["offsets.commit.timeout.ms"], on_append=on_append)
        self.clock = LoopClock()
        self.timer = AsyncioTimer(self.runtime)
        self.machine = GroupCoordinatorShard(self.clock, self.timer, config, topics=topics)
        self.runtime.machine = self.machine
        self.loaded = False
        self.state = ShardState.LOADING
        self.load_stats: dict[str, Any] = {}
        self.compaction: asyncio.Future[Any] | None = None
        # The log's lease on the shard (a state topic's writer): `.refusal(time.monotonic())` says why the shard
        # may not answer now, `.fenced` whether another server claimed it. None: the shard is this server's.
        self.lease: Any = None
        # A hot standby's reader of the shard's log (Shards.follow): what it has replayed already, so a load
        # reads and replays only the rest. None: a load reads the whole log.
        self.follower: Any = None
        self.replaying: asyncio.Future[Any] | None = None  # a standby's replay running in a thread

    @property
    def serving(self) -> bool:
        return self.loaded and self.state in (ShardState.ACTIVE, ShardState.STALLED)

    @property
    def fenced(self) -> bool:
        return self.lease is not None and self.lease.fenced

    async def load(self, open_timeout_s: float | None = None) -> None:
        """Open the shard's log (within `open_timeout_s`: TimeoutError) and replay it, however long that takes."""
        started = time.monotonic()
        if self.log_opener is not None:
            # A hot standby's read goes on from where it stopped; should this load fail, the next reads everything
            # (what this one read may not all have been replayed).
            follower, self.follower = self.follower, None
            async with asyncio.timeout(open_timeout_s):
                if follower is not None:
                    opened = await self.log_opener(self.index, follower=follower)
                else:
                    opened = await self.log_opener(self.index)
            try:
                count = await self._replay(opened)
            except BaseException:
                opened.close()
                raise
            self.runtime.log = opened
            self.lease = getattr(opened, "lease", None)
            self.load_stats = {"records": count, "bytes": opened.recovery.bytes}
            if follower is not None:
                self.load_stats["standby"] = True  # what a hot standby had not replayed yet, only
        elif self.directory is not None:
            directory = self.directory
            async with asyncio.timeout(open_timeout_s):
                the_log = await asyncio.to_thread(
                    Log.open,
                    directory,
                    fs=self.fs,
                    segment_bytes=self.config["offsets.topic.segment.bytes"],
                    linger_ms=self.config["group.coordinator.append.linger.ms"],
                    settled=self.runtime.settled_hook(),
                )
            recovery = the_log.recovery
            if recovery.truncation is not None or recovery.lost_segments:
                log.warning("group log %s recovery: %s", directory, recovery)
            try:
                count = await self._replay(the_log)
            except BaseException:
                await asyncio.to_thread(the_log.close)
                raise
            self.runtime.log = the_log
            self.load_stats = {"records": count, "bytes": recovery.bytes}
        self.load_stats["seconds"] = time.monotonic() - started
        self.runtime.apply(self.machine.on_loaded())
        self._schedule_offset_expiration()
        self.loaded = True
        self.state = ShardState.ACTIVE

    async def _replay(self, the_log: Any) -> int:
        """Replay the log in a worker thread, to its end: a thread cannot be stopped, so a load cancelled meanwhile
        waits for it before it ends (never two replays of one state machine at once, nor a log closed under one).
        A replay is CPU and reads only: it has no timeout of its own."""
        replay = asyncio.ensure_future(asyncio.to_thread(self._replay_all, the_log))
        try:
            return await asyncio.shield(replay)
        except asyncio.CancelledError:
            await asyncio.wait({replay})
            raise

    def _replay_all(self, the_log: Any) -> int:
        """Runs in a worker thread; nothing else touches the state machine until loading ends."""
        started = time.monotonic()
        last = [started]

        def progress(bytes_done: int, bytes_total: int, entries: int) -> None:
            now = time.monotonic()
            if now - last[0] >= LOAD_PROGRESS_INTERVAL_S:
                last[0] = now
                log.info(
                    "loading group shard %d: %d records, %d of %d bytes (%.0f%%), %.0f records/s",
                    self.index,
                    entries,
                    bytes_done,
                    bytes_total,
                    100 * bytes_done / max(bytes_total, 1),
                    entries / (now - started),
                )

        return self.machine.replay_entries(the_log.replay(progress=progress))

    def _schedule_offset_expiration(self) -> None:
        interval = self.config["offsets.retention.check.interval.ms"]

        def expire() -> Any:
            result = self.machine.expire_offsets()
            self.timer.schedule(OFFSETS_EXPIRATION_KEY, interval, expire)
            return result

        self.timer.schedule(OFFSETS_EXPIRATION_KEY, interval, expire)

    @property
    def log(self) -> Any:
        return self.runtime.log

    async def close(self) -> None:
        self.timer.cancel_all()
        await self.runtime.drain()
        if self.runtime.log is not None:
            await asyncio.to_thread(self.runtime.log.close)

    def abandon(self) -> None:
        """Drop this shard without waiting for its log (see the module doc)."""
        self.state = ShardState.FAILED
        self.timer.cancel_all()
        self.runtime.abort()
        the_log = self.runtime.log
        if the_log is not None:
            the_log.abandon()


class Shards:
    """The shards a server owns: loading, stall monitoring, failure and reload, compaction, unloading."""

    def __init__(
        self,
        config: Config,
        data_dir: str | None,
        owned: frozenset[int] | None = None,
        *,
        fs: FS | None = None,
        on_append: Observer | None = None,
        on_compaction: Observer | None = None,
        log_opener: LogOpener | None = None,
        topics: TopicImage | None = None,
        assigned_later: bool = False,
    ) -> None:
        """`owned`: the shard indexes to serve (default: all); `assigned_later`: none until `assign` says which
        (the instances of coordinator.front.instances divide them); `on_append` / `on_compaction`: told how long each
        successful append (until durable) and compaction took, in seconds. `log_opener(index)`: each shard's log
        somewhere else than DATA_DIR/groups (the state topic of a server in front of a cluster,
        coordinator.front.state), which compacts itself. `topics`: what consumer groups are assigned from (the
        embedded data plane; None: ConsumerGroupHeartbeat is not served)."""
        self.config = config
        self.topics = topics
        self.log_opener = log_opener
        self.data_dir = data_dir
        self.fs: FS = fs or OsFS()
        self.num_shards: int = config["offsets.topic.num.partitions"]
        self._on_append = on_append
        self._on_compaction = on_compaction
        self.assigned = not assigned_later
        indexes = () if assigned_later else range(self.num_shards) if owned is None else sorted(owned)
        self.by_index: dict[int, Shard] = {i: self._new_shard(i) for i in indexes}
        self.failure_timeout_s = config["coordinator.shard.failure.timeout.ms"] / 1000
        self.failures = 0
        self.loaded = False
        self.load_stats: dict[str, Any] = {}
        self.unloaded = False  # shutting down: every shard unloaded
        self._listeners: list[GroupEventListener] = []
        self._tasks: set[asyncio.Task[Any]] = set()
        self._load_task: asyncio.Task[None] | None = None
        self._reloads: dict[int, asyncio.Task[None]] = {}
        # Hot standbys (`follow`): shards another server owns whose state this one keeps replaying.
        self.standby: dict[int, Shard] = {}
        self._following: dict[int, asyncio.Task[None]] = {}
        self.view = ShardedView(self)

    def _new_shard(self, index: int) -> Shard:
        return Shard(
            index, self.config, self.data_dir, self.fs, self._on_append, self.log_opener, self.topics
        )

    # -- which shard -----------------------------------------------------------------------------------------

    def index_of(self, group_id: str) -> int:
        return shard_of(group_id, self.num_shards)

    def for_group(self, group_id: str) -> Shard | None:
        """The shard that owns `group_id`, or None if this server does not own it."""
        return self.by_index.get(self.index_of(group_id))

    def add_listener(self, listener: GroupEventListener) -> None:
        """Group events of every shard, now and after reloads, go to `listener` (see coordinator.observability)."""
        self._listeners.append(listener)
        for shard in self.by_index.values():
            shard.machine.add_listener(listener)

    def status(self) -> dict[str, list[int]]:
        """Shard indexes by state (only states other than active are listed)."""
        out: dict[str, list[int]] = {}
        for index, shard in self.by_index.items():
            if shard.state is not ShardState.ACTIVE:
                out.setdefault(shard.state.value, []).append(index)
        return out

    @property
    def ready(self) -> bool:
        # A stalled shard still answers (with retriable errors) and may recover by itself; a failed or loading
        # one does not answer at all, nor does one claimed a moment ago (its lease begins later) or by another
        # server.
        now = time.monotonic()
        return (
            self.loaded
            and self.assigned
            and all(
                s.serving and (s.lease is None or (not s.lease.fenced and s.lease.serve_from <= now))
                for s in self.by_index.values()
            )
        )

    def logs(self) -> list[Any]:
        return [s.runtime.log for s in self.by_index.values() if s.runtime.log is not None]

    # -- lifecycle -------------------------------------------------------------------------------------------

    async def start(self) -> None:
        if self.data_dir is not None:
            self._check_layout()
        self._load_task = asyncio.create_task(self._load())
        # A small log loads in well under a second: wait for it before the listener opens, so a fresh server is
        # ready when it says it is listening. A big one goes on loading while clients get LOAD_IN_PROGRESS.
        # Shards held under a lease (a state topic's) also wait for it to begin.
        lease_s = getattr(self.log_opener, "lease_s", 0.0)
        await asyncio.wait({self._load_task}, timeout=QUICK_LOAD_WAIT_S + lease_s)
        if self._load_task.done() and self._load_task.exception() is not None:
            raise self._load_task.exception()  # type: ignore[misc]

    def _check_layout(self) -> None:
        directory = os.path.join(self.data_dir or ".", "groups")
        path = os.path.join(directory, LAYOUT_FILE)
        if not self.fs.exists(path):
            self.fs.make_dirs(directory)
            self.fs.write_atomically(path, json.dumps({"shards": self.num_shards}).encode())
            return
        layout_file = self.fs.open_read(path)
        try:
            layout = json.loads(layout_file.read_at(0, layout_file.size()))
        finally:
            layout_file.close()
        if layout.get("shards") != self.num_shards:
            raise SystemExit(
                f"{directory} holds groups in {layout.get('shards')} shards, but offsets.topic.num.partitions is "
                f"{self.num_shards}; the shard count of a data directory cannot change (as in Kafka)"
            )

    def unload(self) -> None:
        """Shutdown, as Kafka unloads its shards (see the module doc). What was written stays written; the groups
        come back from the log at the next start."""
        self.unloaded = True
        for shard in self.by_index.values():
            if shard.serving:
                shard.runtime.apply(shard.machine.on_unloaded())

    async def close(self) -> None:
        await asyncio.gather(*(self._unfollow(index) for index in list(self.standby)))
        tasks = [t for t in (self._load_task, *self._reloads.values(), *self._tasks) if t is not None]
        await cancel_and_wait(tasks, "closing the group shards' loads and compactions")
        await asyncio.gather(
            *(
                shard.close()
                for shard in self.by_index.values()
                if shard.state not in (ShardState.FAILED, ShardState.FENCED)
            ),
            return_exceptions=True,
        )
        close_opener = getattr(self.log_opener, "close", None)  # the state topic's lease keeper
        if close_opener is not None:
            await close_opener()

    async def _load(self) -> None:
        started = time.monotonic()
        if self.log_opener is None:
            for shard in self.by_index.values():
                await shard.load()
        else:  # logs on the cluster: their claims and reads are round trips, made side by side
            await asyncio.gather(*(shard.load() for shard in self.by_index.values()))
        # Shards claimed from another server answer once that server's lease has ended.
        begins = max((s.lease.serve_from for s in self.by_index.values() if s.lease is not None), default=0.0)
        if begins > time.monotonic():
            await asyncio.sleep(begins - time.monotonic())
        elapsed = time.monotonic() - started
        self.load_stats = {
            "shards": len(self.by_index),
            "records": sum(s.load_stats.get("records", 0) for s in self.by_index.values()),
            "bytes": sum(s.load_stats.get("bytes", 0) for s in self.by_index.values()),
            "seconds": elapsed,
        }
        # What was loaded lives long: keep it out of the cyclic collector's full passes, which otherwise walk
        # every loaded offset and set the commit p99 (measured: 60-250 ms pauses, gone after freezing).
        gc.collect()
        gc.freeze()
        self.loaded = True
        log.info("group coordinator loaded in %.2fs: %s", elapsed, self.load_stats)
        self._spawn(self._monitor())
        if self.data_dir is not None:
            self._spawn(self._compact_periodically())

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- stalls and failures ---------------------------------------------------------------------------------

    async def _monitor(self) -> None:
        while True:
            await asyncio.sleep(MONITOR_INTERVAL_S)
            for index, shard in list(self.by_index.items()):
                if not shard.loaded or shard.state in (ShardState.FAILED, ShardState.FENCED):
                    continue
                if shard.fenced:
                    self._fence(index)
                    continue
                stalled_for = shard.runtime.stalled_for()
                if stalled_for == 0.0:
                    if shard.state is ShardState.STALLED:
                        log.info("group shard %d: its log works again", index)
                        shard.state = ShardState.ACTIVE
                    continue
                if shard.state is ShardState.ACTIVE:
                    log.warning(
                        "group shard %d: its log fails or stalls; answering COORDINATOR_NOT_AVAILABLE", index
                    )
                    shard.state = ShardState.STALLED
                if stalled_for >= self.failure_timeout_s:
                    self._fail(index, f"its log failed or stalled for {stalled_for:.1f}s")

    def _fail(self, index: int, why: str) -> None:
        shard = self.by_index[index]
        self.failures += 1
        log.error("group shard %d failed (%s): reloading it from its log", index, why)
        shard.abandon()
        fresh = self._new_shard(index)
        fresh.state = ShardState.FAILED
        for listener in self._listeners:
            fresh.machine.add_listener(listener)
        self.by_index[index] = fresh
        self._reloads[index] = asyncio.create_task(self._reload(fresh))

    # -- shards given and taken (coordinator.front.instances) -------------------------------------------------

    def assign(self, owned: frozenset[int]) -> None:
        """Serve these shards from now on: the others are unloaded at once (their requests get NOT_COORDINATOR),
        new ones loaded (claimed from their last owner, which fences it) while they answer LOAD_IN_PROGRESS."""
        self.assigned = True
        if self.unloaded:
            return
        for index in sorted(set(self.by_index) - owned):
            self._release(index)
        for index in sorted(owned):
            shard = self.by_index.get(index)
            if shard is not None and shard.state is not ShardState.FENCED:
                continue
            if shard is not None:
                self._forget_writer(index)  # claimed elsewhere before this plan: claimed anew, not bumped
            if index in self.standby:  # a hot standby: only what it has not replayed yet is read
                placeholder = self.by_index[index] = self._new_shard(index)  # LOADING until it is promoted
                promote = self._promote(index, self._unfollow(index), placeholder)
                self._reloads[index] = asyncio.create_task(promote)
                continue
            fresh = self._new_shard(index)
            for listener in self._listeners:
                fresh.machine.add_listener(listener)
            self.by_index[index] = fresh
            self._reloads[index] = asyncio.create_task(self._reload(fresh))

    # -- hot standbys (coordinator.front.instances) ------------------------------------------------------------

    def follow(self, indexes: frozenset[int]) -> None:
        """Keep these shards' state replayed from their logs as their owners write (hot standbys), so that taking
        one over reads and replays only what came after; stop following the others."""
        if self.unloaded or self.log_opener is None or not hasattr(self.log_opener, "follower"):
            return
        for index in sorted(set(self.standby) - indexes):
            self._unfollow(index)
        for index in sorted(indexes - set(self.standby) - set(self.by_index)):
            shard = self.standby[index] = self._standby_shard(index)
            self._following[index] = asyncio.create_task(self._follow(shard))

    def _standby_shard(self, index: int) -> Shard:
        """A fresh state machine for following shard `index`, with a reader from the log's start."""
        shard = self._new_shard(index)
        shard.follower = self.log_opener.follower(index)  # type: ignore[union-attr]
        return shard

    def followed(self) -> frozenset[int]:
        return frozenset(self.standby)

    def _loading(self) -> bool:
        return any(s.state is ShardState.LOADING for s in self.by_index.values())

    async def _follow(self, shard: Shard) -> None:
        """Read and replay what the owner wrote, every FOLLOW_INTERVAL_S. A read that fails is tried again from
        where the last one ended; a follower whose position left the log, or whose replay failed, starts over with
        a fresh state machine."""
        loop = asyncio.get_running_loop()
        failures = 0
        # A first read is a whole shard: not while shards of this server load (a takeover), which it would slow.
        deadline = time.monotonic() + FOLLOW_START_WAIT_S
        while self._loading() and time.monotonic() < deadline:
            await asyncio.sleep(FOLLOW_INTERVAL_S)
        while True:
            if failures or shard.follower.position >= 0:
                # On the loop clock's FOLLOW_INTERVAL_S marks: every standby of this server reads in the same
                # turn, so their reads' last stable offsets are asked for together (StateTopic.last_stable). The
                # next mark at least FOLLOW_SLACK_S away: a timer may fire a little before its mark.
                now = loop.time()
                await asyncio.sleep(
                    math.ceil((now + FOLLOW_SLACK_S) / FOLLOW_INTERVAL_S) * FOLLOW_INTERVAL_S - now
                )
            try:
                records = await self.log_opener.read_on(shard.follower)  # type: ignore[union-attr]
                if records:
                    shard.replaying = loop.run_in_executor(None, shard.machine.replay_entries, records)
                    # Shielded: cancelling the wait must not mark the replay done while its thread still runs
                    # (_await_replay waits for the thread itself).
                    await asyncio.shield(shard.replaying)
                    shard.replaying = None
                failures = 0
                continue
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - a standby is a help, never a failure of the shard
                failures += 1
                again = (
                    shard.replaying is None and getattr(exc, "code", None) != ErrorCode.offset_out_of_range
                )
                if failures == 1 or failures % 20 == 0:
                    log.warning(
                        "group shard %d: following it failed (%r); %s",
                        shard.index,
                        exc,
                        "trying again" if again else "starting over",
                    )
                if again:
                    continue
            await self._await_replay(shard)
            self.standby[shard.index] = shard = self._standby_shard(shard.index)

    @staticmethod
    async def _await_replay(shard: Shard) -> None:
        """A replay in its thread is not cancelled with its task: wait for it to end before the state machine
        is touched again."""
        replaying, shard.replaying = shard.replaying, None
        if replaying is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait({replaying})

    def _unfollow(self, index: int) -> asyncio.Future[Shard | None]:
        """Stop following `index` now; the future: the standby shard (its state as replayed so far), or None, once
        nothing touches it any more."""
        shard = self.standby.pop(index, None)
        task = self._following.pop(index, None)
        if task is not None:
            task.cancel()

        async def stopped() -> Shard | None:
            if task is not None:
                await cancel_and_wait([task], f"following group shard {index}")
            if shard is not None:
                await self._await_replay(shard)
            return shard

        future = asyncio.ensure_future(stopped())
        self._tasks.add(future)  # (the loop holds tasks weakly)
        future.add_done_callback(self._tasks.discard)
        return future

    async def _promote(self, index: int, stopping: asyncio.Future[Shard | None], placeholder: Shard) -> None:
        """A standby becomes the shard's owner: once its following has stopped, it claims the shard (fencing the
        last owner), reads and replays what it had not, and serves a lease after the claim."""
        shard = await asyncio.shield(stopping)
        if self.by_index.get(index) is not placeholder:
            return  # taken away again meanwhile
        if shard is None:
            shard = placeholder
        for listener in self._listeners:
            shard.machine.add_listener(listener)
        self.by_index[index] = shard
        await self._reload(shard)

    def _forget_writer(self, index: int) -> None:
        release = getattr(self.log_opener, "release", None)  # the state topic's (coordinator.front.state)
        if release is not None:
            release(index)

    def held(self) -> frozenset[int]:
        """The shards this server serves or is loading (not those another server claimed from it)."""
        return frozenset(i for i, s in self.by_index.items() if s.state is not ShardState.FENCED)

    def _release(self, index: int) -> None:
        shard = self.by_index.pop(index)
        reload = self._reloads.pop(index, None)
        if reload is not None:
            reload.cancel()
        if shard.serving:
            shard.runtime.apply(shard.machine.on_unloaded())
        self._forget_writer(index)  # a later claim of it is a claim anew, never a bump of this one

        async def unload() -> None:
            if reload is not None:
                with contextlib.suppress(asyncio.CancelledError):
                    await reload
            if shard.state not in (ShardState.FAILED, ShardState.FENCED):
                try:
                    await shard.close()
                except Exception:  # noqa: BLE001 - the shard is given up either way
                    log.exception("group shard %d: closing it after it was taken away failed", index)
            log.info("group shard %d: given up (another instance serves it now)", index)

        self._spawn(unload())

    def _fence(self, index: int) -> None:
        """Another server claimed the shard: drop it for good (its requests get NOT_COORDINATOR)."""
        log.error("group shard %d: another server claimed it; no longer answering for its groups", index)
        self.by_index[index].abandon()
        fresh = self._new_shard(index)  # empty: what the old one held is no longer this server's to show
        fresh.state = ShardState.FENCED
        self.by_index[index] = fresh

    async def _reload(self, shard: Shard) -> None:
        try:
            while True:
                shard.state = ShardState.LOADING
                try:
                    await shard.load(open_timeout_s=max(self.failure_timeout_s, 1.0))
                except asyncio.CancelledError:
                    raise
                except ShardOwnedElsewhere:
                    log.error("group shard %d: another server claimed it; not reloading it", shard.index)
                    shard.state = ShardState.FENCED
                    return
                except Exception as exc:
                    shard.state = ShardState.FAILED
                    log.error(
                        "group shard %d: reload failed (%r); retrying in %.1fs",
                        shard.index,
                        exc,
                        self.failure_timeout_s,
                    )
                    await asyncio.sleep(self.failure_timeout_s)
                    continue
                log.info(
                    "group shard %d reloaded in %.2fs: %s",
                    shard.index,
                    shard.load_stats["seconds"],
                    shard.load_stats,
                )
                return
        finally:
            if self._reloads.get(shard.index) is asyncio.current_task():
                del self._reloads[shard.index]

    async def _compact_periodically(self) -> None:
        interval_s = self.config["offsets.topic.compaction.interval.ms"] / 1000
        retention = self.config["log.cleaner.delete.retention.ms"]
        budget_s = self.config["group.coordinator.compaction.timeout.ms"] / 1000
        while True:
            await asyncio.sleep(interval_s)
            for index, shard in list(self.by_index.items()):
                if not shard.serving or shard.runtime.log is None:
                    continue
                if shard.compaction is not None and not shard.compaction.done():
                    log.warning("group shard %d: the last compaction is still running; skipped", index)
                    continue
                try:
                    started = time.perf_counter()
                    shard.compaction = asyncio.wrap_future(
                        shard.runtime.log.compact(shard.clock.wall_ms(), retention)
                    )
                    async with asyncio.timeout(budget_s):
                        result = await asyncio.shield(shard.compaction)
                    if self._on_compaction is not None:
                        self._on_compaction(time.perf_counter() - started)
                    log.info("group shard %d compacted: %s", index, result)
                except TimeoutError:
                    log.warning(
                        "group shard %d: compaction went past its %.0fs budget; not waiting for it",
                        index,
                        budget_s,
                    )
                except Exception:
                    log.exception("group shard %d: compaction failed; will retry", index)


class ShardedView:
    """The shards' state machines seen as one, for observers (coordinator.observability's CoordinatorView):
    `.groups` maps every group id to its group, `.offsets.store` answers for every group's offsets."""

    def __init__(self, shards: Shards) -> None:
        self._shards = shards
        self.groups = _MergedGroups(shards)
        self.consumer_groups = _MergedConsumerGroups(shards)
        self.offsets = self
        self.store = _MergedStore(shards)

    def consumer_topic_name(self, topic_id: uuid.UUID) -> str | None:
        topics = self._shards.topics
        return None if topics is None else topics.topic_name(topic_id)

    @property
    def consumer_settings(self) -> ConsumerGroupSettings:
        for shard in self._shards.by_index.values():
            return shard.machine.consumer_settings
        return ConsumerGroupSettings.from_config(self._shards.config)

    def pause_state(self, group_id: str) -> PauseState:
        shard = self._shards.for_group(group_id)
        return NOT_PAUSED if shard is None else shard.machine.pause_state(group_id)


class _MergedGroups(Mapping[str, ClassicGroup]):
    def __init__(self, shards: Shards) -> None:
        self._s = shards

    def __getitem__(self, group_id: str) -> ClassicGroup:
        shard = self._s.for_group(group_id)
        if shard is None:
            raise KeyError(group_id)
        return shard.machine.groups[group_id]

    def __iter__(self) -> Iterator[str]:
        for shard in list(self._s.by_index.values()):
            yield from list(shard.machine.groups)

    def __len__(self) -> int:
        return sum(len(s.machine.groups) for s in self._s.by_index.values())

    def values(self) -> Any:
        return [
            group
            for shard in list(self._s.by_index.values())
            for group in list(shard.machine.groups.values())
        ]


class _MergedConsumerGroups(Mapping[str, ConsumerGroup]):
    def __init__(self, shards: Shards) -> None:
        self._s = shards

    def __getitem__(self, group_id: str) -> ConsumerGroup:
        shard = self._s.for_group(group_id)
        if shard is None:
            raise KeyError(group_id)
        return shard.machine.consumer_groups[group_id]

    def __iter__(self) -> Iterator[str]:
        for shard in list(self._s.by_index.values()):
            yield from list(shard.machine.consumer_groups)

    def __len__(self) -> int:
        return sum(len(s.machine.consumer_groups) for s in self._s.by_index.values())


class _MergedStore:
    def __init__(self, shards: Shards) -> None:
        self._s = shards

    def _store(self, group_id: str) -> OffsetStore | None:
        shard = self._s.for_group(group_id)
        return None if shard is None else shard.machine.offsets.store

    def group_offsets(self, group_id: str) -> dict[str, PartitionOffsets]:
        store = self._store(group_id)
        return {} if store is None else store.group_offsets(group_id)

    def topics(self, group_id: str) -> list[str]:
        store = self._store(group_id)
        return [] if store is None else store.topics(group_id)

    def get(self, group_id: str, topic: str, partition: int) -> OffsetAndMetadata | None:
        store = self._store(group_id)
        return None if store is None else store.get(group_id, topic, partition)

    def num_offsets(self) -> int:
        return sum(s.machine.offsets.store.num_offsets() for s in self._s.by_index.values())
