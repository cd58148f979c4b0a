"""The group coordinator part: the group and offset APIs, served by shards on the event loop.

Groups are partitioned into shards as Kafka partitions __consumer_offsets: group G belongs to shard
abs(hashCode(G)) % offsets.topic.num.partitions (coordinator.sharding). A shard is one pure state machine
(coordinator.shard.GroupCoordinatorShard) with a clock and a timer on the event loop, its own log (storage.Log under
DATA_DIR/groups/shard-N) and the ShardRuntime that persists what it emits before answering. A part may own only
some shards (workers: see coordinator.server.workers); a group of a shard it does not own gets NOT_COORDINATOR.

At start every owned shard's log is replayed into a fresh state machine in a worker thread while the listener
already answers: until its shard is loaded a group's requests get COORDINATOR_LOAD_IN_PROGRESS (Heartbeat: NONE),
never an empty result, and /readyz is not ready until all are. Requests naming several groups (DescribeGroups,
DeleteGroups, OffsetFetch v8+) are split by shard and their answers merged in request order; ListGroups asks every
shard.

Timeouts, not retries: every wait on a shard's log is bounded (offsets.commit.timeout.ms per append,
group.coordinator.compaction.timeout.ms per compaction). A shard whose log fails or stalls answers its own
requests with COORDINATOR_NOT_AVAILABLE within that bound while the other shards go on serving; once it has been
failing for coordinator.shard.failure.timeout.ms it is marked failed (in /readyz and the metrics), its state
machine is dropped, its log abandoned (the writer may be stuck in a fsync) and the shard is reloaded from what is
on disk, answering COORDINATOR_LOAD_IN_PROGRESS meanwhile. Reloading also makes memory agree with the disk again
about writes that timed out but landed later.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import gc
import json
import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from coordinator.clock import OFFSETS_EXPIRATION_KEY
from coordinator.config import Config
from coordinator.group.pause import NOT_PAUSED
from coordinator.shard import GroupCoordinatorShard
from coordinator.sharding import shard_of
from protocol.api import ApiTable, RequestContext
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from storage import Log

from .runtime import AsyncioTimer, LoopClock, ShardAborted, ShardRuntime

log = logging.getLogger(__name__)


# (api key, min version, max version, shard method): Kafka 4.1's ranges for the classic protocol, floors
# kept low so older clients still work (Kafka 4.0 dropped some and broke them).
GROUP_APIS = (
    (ApiKey.OFFSET_COMMIT, 2, 9, "offset_commit"),
    (ApiKey.OFFSET_FETCH, 1, 9, "offset_fetch"),
    (ApiKey.JOIN_GROUP, 0, 9, "join_group"),
    (ApiKey.HEARTBEAT, 0, 4, "heartbeat"),
    (ApiKey.LEAVE_GROUP, 0, 5, "leave_group"),
    (ApiKey.SYNC_GROUP, 0, 5, "sync_group"),
    (ApiKey.DESCRIBE_GROUPS, 0, 6, "describe_groups"),
    (ApiKey.LIST_GROUPS, 0, 5, "list_groups"),
    (ApiKey.DELETE_GROUPS, 0, 2, "delete_groups"),
    (ApiKey.OFFSET_DELETE, 0, 0, "offset_delete"),
)

# Requests that read or change membership wait for in-flight group-metadata writes (see ShardRuntime).
GATED_APIS = frozenset({ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP, ApiKey.HEARTBEAT, ApiKey.LEAVE_GROUP, ApiKey.OFFSET_COMMIT, ApiKey.DELETE_GROUPS, ApiKey.OFFSET_DELETE})

METHODS = {api_key: method for api_key, _lo, _hi, method in GROUP_APIS}

LOAD_PROGRESS_INTERVAL_S = 2.0


LAYOUT_FILE = "layout.json"
MONITOR_INTERVAL_S = 0.25
QUICK_LOAD_WAIT_S = 1.0


class ShardState(enum.Enum):
    LOADING = "loading"  # replaying its log (first start or after a failure)
    ACTIVE = "active"
    STALLED = "stalled"  # its log fails or times out; requests get a retriable error
    FAILED = "failed"  # given up; being reloaded from its log


class Shard:
    """One shard: a state machine, its runtime, clock, timer and log."""

    def __init__(self, index: int, config: Config, data_dir: str | None) -> None:
        self.index = index
        self.config = config
        self.directory = os.path.join(data_dir, "groups", f"shard-{index}") if data_dir else None
        self.runtime = ShardRuntime(timeout_ms=config["offsets.commit.timeout.ms"])
        self.clock = LoopClock()
        self.timer = AsyncioTimer(self.runtime)
        self.machine = GroupCoordinatorShard(self.clock, self.timer, config)
        self.runtime.machine = self.machine
        self.loaded = False
        self.state = ShardState.LOADING
        self.load_stats: dict[str, Any] = {}
        self.compaction: asyncio.Future[Any] | None = None

    @property
    def serving(self) -> bool:
        return self.loaded and self.state in (ShardState.ACTIVE, ShardState.STALLED)

    async def load(self, log_wrapper: Callable[[Any], Any] | None = None) -> None:
        started = time.monotonic()
        if self.directory is not None:
            directory = self.directory
            os.makedirs(directory, exist_ok=True)
            the_log = await asyncio.to_thread(
                Log.open, directory, segment_bytes=self.config["offsets.topic.segment.bytes"],
                linger_ms=self.config["group.coordinator.append.linger.ms"],
            )
            recovery = the_log.recovery
            if recovery.truncation is not None or recovery.lost_segments:
                log.warning("group log %s recovery: %s", directory, recovery)
            try:
                count = await asyncio.to_thread(self._replay_all, the_log)
            except BaseException:
                await asyncio.to_thread(the_log.close)
                raise
            self.runtime.log = log_wrapper(the_log) if log_wrapper is not None else the_log
            self.load_stats = {"records": count, "bytes": recovery.bytes}
        self.load_stats["seconds"] = time.monotonic() - started
        self.runtime.apply(self.machine.on_loaded())
        self._schedule_offset_expiration()
        self.loaded = True
        self.state = ShardState.ACTIVE

    def _replay_all(self, the_log: Log) -> int:
        """Runs in a worker thread; nothing else touches the state machine until loading ends."""
        started = time.monotonic()
        last = [started]

        def progress(bytes_done: int, bytes_total: int, entries: int) -> None:
            now = time.monotonic()
            if now - last[0] >= LOAD_PROGRESS_INTERVAL_S:
                last[0] = now
                log.info("loading group shard %d: %d records, %d of %d bytes (%.0f%%), %.0f records/s", self.index,
                         entries, bytes_done, bytes_total, 100 * bytes_done / max(bytes_total, 1),
                         entries / (now - started))

        count = 0
        replay = self.machine.replay_entry
        for _seq, key, value, _timestamp_ms in the_log.replay(progress=progress):
            replay(key, value)
            count += 1
        return count

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
            abandon = getattr(the_log, "abandon", None)
            if abandon is not None:
                abandon()


class GroupCoordinator:
    def __init__(self, config: Config, data_dir: str | None, owned: frozenset[int] | None = None) -> None:
        self.config = config
        self.data_dir = data_dir
        self.num_shards: int = config["offsets.topic.num.partitions"]
        indexes = range(self.num_shards) if owned is None else sorted(owned)
        self.shards: dict[int, Shard] = {i: Shard(i, config, data_dir) for i in indexes}
        self.failure_timeout_s = config["coordinator.shard.failure.timeout.ms"] / 1000
        self.shard_failures = 0
        self.loaded = False
        self.load_stats: dict[str, Any] = {}
        self._listeners: list[Any] = []
        self._log_wrapper: Callable[[Any], Any] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._load_task: asyncio.Task[None] | None = None
        self._reloads: dict[int, asyncio.Task[None]] = {}
        self.view = ShardedView(self)
        # `serve --workers N`: who owns a shard this part does not, and how to reach it (forward.PeerRelay).
        # Without them a group owned elsewhere is answered NOT_COORDINATOR.
        self.owner_of_shard: Callable[[int], int] | None = None
        self.relay: Any = None
        self.stopping = False  # shutting down: every shard unloaded (stop_waiting)

    # -- shards -----------------------------------------------------------------------------------

    def shard_index(self, group_id: str) -> int:
        return shard_of(group_id, self.num_shards)

    def owns(self, group_id: str) -> bool:
        return self.shard_index(group_id) in self.shards

    def shard_for(self, group_id: str) -> Shard | None:
        """The shard that owns `group_id` (with `.machine` and `.runtime`), or None if this part does not own it."""
        return self.shards.get(shard_of(group_id, self.num_shards))

    def add_listener(self, listener: Any) -> None:
        """Group events of every shard, now and after reloads, go to `listener` (see coordinator.observability)."""
        self._listeners.append(listener)
        for shard in self.shards.values():
            shard.machine.add_listener(listener)

    def wrap_logs(self, wrapper: Callable[[Any], Any]) -> None:
        """Wrap every shard's log (now and after reloads), e.g. to time appends."""
        self._log_wrapper = wrapper
        for shard in self.shards.values():
            if shard.runtime.log is not None:
                shard.runtime.log = wrapper(shard.runtime.log)

    def status(self) -> dict[str, list[int]]:
        """Shard indexes by state (only states other than active are listed)."""
        out: dict[str, list[int]] = {}
        for index, shard in self.shards.items():
            if shard.state is not ShardState.ACTIVE:
                out.setdefault(shard.state.value, []).append(index)
        return out

    # -- part lifecycle ---------------------------------------------------------------------------

    def register(self, table: ApiTable) -> None:
        for api_key, lo, hi, _method in GROUP_APIS:
            table.register(api_key, lo, hi, self._handler(api_key))

    @property
    def ready(self) -> bool:
        # A stalled shard still answers (with retriable errors) and may recover by itself; a failed or loading
        # one does not answer at all.
        return self.loaded and all(s.serving for s in self.shards.values())

    async def start(self) -> None:
        if self.data_dir is not None:
            self._check_layout()
        self._load_task = asyncio.create_task(self._load())
        # A small log loads in well under a second: wait for it before the listener opens, so a fresh server is
        # ready when it says it is listening. A big one goes on loading while clients get LOAD_IN_PROGRESS.
        await asyncio.wait({self._load_task}, timeout=QUICK_LOAD_WAIT_S)
        if self._load_task.done() and self._load_task.exception() is not None:
            raise self._load_task.exception()  # type: ignore[misc]

    def _check_layout(self) -> None:
        directory = os.path.join(self.data_dir or ".", "groups")
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, LAYOUT_FILE)
        try:
            with open(path, encoding="utf-8") as f:
                layout = json.load(f)
        except FileNotFoundError:
            tmp = f"{path}.{os.getpid()}.tmp"  # workers of `serve --workers N` may write it at the same time
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump({"shards": self.num_shards}, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
            return
        if layout.get("shards") != self.num_shards:
            raise SystemExit(
                f"{directory} holds groups in {layout.get('shards')} shards, but offsets.topic.num.partitions is "
                f"{self.num_shards}; the shard count of a data directory cannot change (as in Kafka)")

    def stop_waiting(self) -> None:
        """Shutdown, as Kafka unloads its shards: parked JoinGroup and SyncGroup answers go out now
        (NOT_COORDINATOR) instead of holding the shutdown until their rebalance ends, and every request from now
        on is answered with a retriable error, so clients find the coordinator again once it is back. What was
        written stays written; the groups come back from the log at the next start."""
        self.stopping = True
        for shard in self.shards.values():
            if shard.serving:
                shard.runtime.apply(shard.machine.on_unloaded())

    def connection_closed(self, connection_id: int) -> None:
        if self.relay is not None:
            self.relay.connection_closed(connection_id)

    async def close(self) -> None:
        if self.relay is not None:
            self.relay.close()
        tasks = [t for t in (self._load_task, *self._reloads.values(), *self._tasks) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass
        await asyncio.gather(*(shard.close() for shard in self.shards.values() if shard.state is not
                               ShardState.FAILED), return_exceptions=True)

    # -- loading ----------------------------------------------------------------------------------

    async def _load(self) -> None:
        started = time.monotonic()
        # Listeners are attached by add_listener (to every shard's state machine, made in __init__): attaching them
        # here again would double them when add_listener ran before this task did.
        for shard in self.shards.values():
            await shard.load(self._log_wrapper)
        elapsed = time.monotonic() - started
        self.load_stats = {
            "shards": len(self.shards),
            "records": sum(s.load_stats.get("records", 0) for s in self.shards.values()),
            "bytes": sum(s.load_stats.get("bytes", 0) for s in self.shards.values()),
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

    # -- stalls and failures ----------------------------------------------------------------------

    async def _monitor(self) -> None:
        while True:
            await asyncio.sleep(MONITOR_INTERVAL_S)
            for index, shard in list(self.shards.items()):
                if not shard.loaded or shard.state is ShardState.FAILED:
                    continue
                stalled_for = shard.runtime.stalled_for()
                if stalled_for == 0.0:
                    if shard.state is ShardState.STALLED:
                        log.info("group shard %d: its log works again", index)
                        shard.state = ShardState.ACTIVE
                    continue
                if shard.state is ShardState.ACTIVE:
                    log.warning("group shard %d: its log fails or stalls; answering COORDINATOR_NOT_AVAILABLE",
                                index)
                    shard.state = ShardState.STALLED
                if stalled_for >= self.failure_timeout_s:
                    self._fail(index, f"its log failed or stalled for {stalled_for:.1f}s")

    def _fail(self, index: int, why: str) -> None:
        shard = self.shards[index]
        self.shard_failures += 1
        log.error("group shard %d failed (%s): reloading it from its log", index, why)
        shard.abandon()
        fresh = Shard(index, self.config, self.data_dir)
        fresh.state = ShardState.FAILED
        for listener in self._listeners:
            fresh.machine.add_listener(listener)
        self.shards[index] = fresh
        self._reloads[index] = asyncio.create_task(self._reload(fresh))

    async def _reload(self, shard: Shard) -> None:
        try:
            while True:
                shard.state = ShardState.LOADING
                try:
                    await asyncio.wait_for(shard.load(self._log_wrapper), max(self.failure_timeout_s, 1.0))
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    shard.state = ShardState.FAILED
                    log.error("group shard %d: reload failed (%r); retrying in %.1fs", shard.index, exc,
                              self.failure_timeout_s)
                    await asyncio.sleep(self.failure_timeout_s)
                    continue
                log.info("group shard %d reloaded in %.2fs: %s", shard.index, shard.load_stats["seconds"],
                         shard.load_stats)
                return
        finally:
            self._reloads.pop(shard.index, None)

    async def _compact_periodically(self) -> None:
        interval_s = self.config["offsets.topic.compaction.interval.ms"] / 1000
        retention = self.config["log.cleaner.delete.retention.ms"]
        budget_s = self.config["group.coordinator.compaction.timeout.ms"] / 1000
        while True:
            await asyncio.sleep(interval_s)
            for index, shard in list(self.shards.items()):
                if not shard.serving or shard.runtime.log is None:
                    continue
                if shard.compaction is not None and not shard.compaction.done():
                    log.warning("group shard %d: the last compaction is still running; skipped", index)
                    continue
                try:
                    shard.compaction = asyncio.wrap_future(shard.runtime.log.compact(shard.clock.wall_ms(),
                                                                                     retention))
                    result = await asyncio.wait_for(asyncio.shield(shard.compaction), budget_s)
                    log.info("group shard %d compacted: %s", index, result)
                except asyncio.TimeoutError:
                    log.warning("group shard %d: compaction went past its %.0fs budget; not waiting for it",
                                index, budget_s)
                except Exception:
                    log.exception("group shard %d: compaction failed; will retry", index)

    # -- requests ---------------------------------------------------------------------------------

    def _unavailable(self, shard: Shard | None) -> ErrorCode | None:
        """Why a shard cannot take a request now (None: it can)."""
        if shard is None or self.stopping:
            return ErrorCode.not_coordinator
        if shard.serving:
            return None
        if shard.state is ShardState.FAILED:
            return ErrorCode.coordinator_not_available
        return ErrorCode.coordinator_load_in_progress

    async def _call(self, shard: Shard, api_key: int, ctx: RequestContext, request: Any, **kwargs: Any) -> Any:
        method = getattr(shard.machine, METHODS[api_key])
        group = getattr(request, "group_id", None)
        if api_key in GATED_APIS:
            await shard.runtime.quiesce(group)
        if self.stopping:  # unloaded while this request waited for earlier writes
            raise ShardAborted("the coordinator is shutting down")
        return await shard.runtime.call(method, ctx.api_version, request, group=group, **kwargs)

    def _handler(self, api_key: int) -> Any:
        if api_key == ApiKey.LIST_GROUPS:
            return self._list_groups
        if api_key == ApiKey.DESCRIBE_GROUPS:
            return self._split("groups", "groups", lambda g: g, _describe_error)
        if api_key == ApiKey.DELETE_GROUPS:
            return self._split("groups_names", "results", lambda g: g,
                               lambda g, code, version: {"group_id": g, "error_code": code})
        extra_join = api_key == ApiKey.JOIN_GROUP

        async def handle(ctx: RequestContext, request: Any) -> Any:
            if api_key == ApiKey.OFFSET_FETCH and ctx.api_version >= 8:
                return await self._offset_fetch_groups(ctx, request)
            shard = self.shard_for(request.group_id)
            if shard is None and self.relay is not None:
                return await self._relay(self.shard_index(request.group_id), ctx, request)
            code = self._unavailable(shard)
            if code is not None:
                return error_response(api_key, ctx.api_version, request, code)
            assert shard is not None
            kwargs = {"client_id": ctx.client_id or "", "client_host": "/" + ctx.client_host} if extra_join else {}
            try:
                return await self._call(shard, api_key, ctx, request, **kwargs)
            except ShardAborted:
                return error_response(api_key, ctx.api_version, request, ErrorCode.coordinator_not_available)

        return handle

    def _split(self, field: str, answer_field: str, group_of: Callable[[Any], str],
               error_entry: Callable[[str, ErrorCode, int], dict[str, Any]]) -> Any:
        """A handler for a request naming several groups: one call per shard, answers merged in request order."""
        async def handle(ctx: RequestContext, request: Any) -> Any:
            items = list(getattr(request, field))
            by_shard: dict[int, list[Any]] = {}
            by_worker: dict[int, list[int]] = {}
            answers: dict[int, Any] = {}
            for position, item in enumerate(items):
                index = self.shard_index(group_of(item))
                if index not in self.shards and self.relay is not None:
                    by_worker.setdefault(self._owner(index), []).append(position)
                    continue
                code = self._unavailable(self.shards.get(index))
                if code is not None:
                    answers[position] = error_entry(group_of(item), code, ctx.api_version)
                else:
                    by_shard.setdefault(index, []).append(position)

            async def one(index: int, positions: list[int]) -> None:
                shard = self.shards[index]
                sub = dataclasses.replace(request, **{field: tuple(items[p] for p in positions)})
                try:
                    response = await self._call(shard, ctx.api_key, ctx, sub)
                    entries = list(getattr(response, answer_field))
                except ShardAborted:
                    entries = [error_entry(group_of(items[p]), ErrorCode.coordinator_not_available,
                                           ctx.api_version) for p in positions]
                for position, entry in zip(positions, entries, strict=True):
                    answers[position] = entry

            async def remote(worker: int, positions: list[int]) -> None:
                sub = dataclasses.replace(request, **{field: tuple(items[p] for p in positions)})
                response = await self.relay.call(worker, ctx, sub)
                for position, entry in zip(positions, getattr(response, answer_field), strict=True):
                    answers[position] = entry

            await asyncio.gather(*(one(i, ps) for i, ps in by_shard.items()),
                                 *(remote(w, ps) for w, ps in by_worker.items()))
            return {"throttle_time": 0, answer_field: [answers[p] for p in range(len(items))]}

        return handle

    def _owner(self, shard_index: int) -> int:
        assert self.owner_of_shard is not None
        return self.owner_of_shard(shard_index)

    async def _relay(self, shard_index: int, ctx: RequestContext, request: Any) -> Any:
        """A request for a group another worker owns: that worker's answer (see forward.PeerRelay)."""
        return await self.relay.call(self._owner(shard_index), ctx, request)

    async def _offset_fetch_groups(self, ctx: RequestContext, request: Any) -> Any:
        def error_entry(group_id: str, code: ErrorCode, version: int) -> dict[str, Any]:
            return {"group_id": group_id, "topics": [], "error_code": code}

        handle = self._split("groups", "groups", lambda g: g.group_id, error_entry)
        return await handle(ctx, request)

    async def _list_groups(self, ctx: RequestContext, request: Any) -> Any:
        groups: list[Any] = []
        error = ErrorCode.none
        for shard in list(self.shards.values()):
            code = self._unavailable(shard)
            if code is not None:
                error = code if error == ErrorCode.none else error
                continue
            try:
                response = await self._call(shard, ApiKey.LIST_GROUPS, ctx, request)
            except ShardAborted:
                error = ErrorCode.coordinator_not_available
                continue
            groups.extend(response.groups)
        return {"throttle_time": 0, "error_code": error, "groups": groups}


class ShardedView:
    """The shards' state machines seen as one, for observers (coordinator.observability's CoordinatorView):
    `.groups` maps every group id to its group, `.offsets.store` answers for every group's offsets."""

    def __init__(self, coordinator: GroupCoordinator) -> None:
        self._coordinator = coordinator
        self.groups = _MergedGroups(coordinator)
        self.offsets = self
        self.store = _MergedStore(coordinator)

    def add_listener(self, listener: Any) -> None:
        self._coordinator.add_listener(listener)

    def pause_state(self, group_id: str) -> Any:
        shard = self._coordinator.shard_for(group_id)
        return NOT_PAUSED if shard is None else shard.machine.pause_state(group_id)


class _MergedGroups(Mapping[str, Any]):
    def __init__(self, coordinator: GroupCoordinator) -> None:
        self._c = coordinator

    def __getitem__(self, group_id: str) -> Any:
        shard = self._c.shard_for(group_id)
        if shard is None:
            raise KeyError(group_id)
        return shard.machine.groups[group_id]

    def __iter__(self) -> Iterator[str]:
        for shard in list(self._c.shards.values()):
            yield from list(shard.machine.groups)

    def __len__(self) -> int:
        return sum(len(s.machine.groups) for s in self._c.shards.values())

    def values(self) -> Any:
        return [group for shard in list(self._c.shards.values()) for group in list(shard.machine.groups.values())]


class _MergedStore:
    def __init__(self, coordinator: GroupCoordinator) -> None:
        self._c = coordinator

    def _store(self, group_id: str) -> Any:
        shard = self._c.shard_for(group_id)
        return None if shard is None else shard.machine.offsets.store

    def group_offsets(self, group_id: str) -> Any:
        store = self._store(group_id)
        return {} if store is None else store.group_offsets(group_id)

    def topics(self, group_id: str) -> list[str]:
        store = self._store(group_id)
        return [] if store is None else store.topics(group_id)

    def get(self, group_id: str, topic: str, partition: int) -> Any:
        store = self._store(group_id)
        return None if store is None else store.get(group_id, topic, partition)

    def num_offsets(self) -> int:
        return sum(s.machine.offsets.store.num_offsets() for s in self._c.shards.values())


def error_response(api_key: int, version: int, request: Any, code: ErrorCode) -> dict[str, Any]:
    """The answer of a group API when the group's shard cannot take it: `code` wherever the response carries
    errors. While a shard loads (COORDINATOR_LOAD_IN_PROGRESS) Heartbeat answers NONE, as Kafka does, so members
    are not kicked out by a restart."""
    base: dict[str, Any] = {"throttle_time": 0}
    if api_key == ApiKey.HEARTBEAT:
        return base | {"error_code": ErrorCode.none if code == ErrorCode.coordinator_load_in_progress else code}
    if api_key == ApiKey.JOIN_GROUP:
        return base | {"error_code": code, "generation_id": -1, "protocol_type": None,
                       "protocol_name": None if version >= 7 else "", "leader": "",
                       "member_id": getattr(request, "member_id", ""), "members": ()}
    if api_key == ApiKey.SYNC_GROUP:
        return base | {"error_code": code, "protocol_type": None, "protocol_name": None, "assignment": b""}
    if api_key == ApiKey.LEAVE_GROUP:
        return base | {"error_code": code, "members": ()}
    if api_key == ApiKey.OFFSET_COMMIT:
        return base | {"topics": [{"name": t.name, "partitions": [
            {"partition_index": p.partition_index, "error_code": code} for p in t.partitions]}
            for t in request.topics]}
    if api_key == ApiKey.OFFSET_FETCH:
        def topics(ts: Any) -> list[dict[str, Any]]:
            return [{"name": t.name, "partitions": [
                {"partition_index": i, "committed_offset": -1, "committed_leader_epoch": -1, "metadata": "",
                 "error_code": code} for i in t.partition_indexes]} for t in (ts or ())]
        if version >= 8:
            return base | {"groups": [{"group_id": g.group_id, "topics": [], "error_code": code}
                                      for g in request.groups]}
        return base | {"error_code": code, "topics": topics(request.topics)}
    if api_key == ApiKey.DESCRIBE_GROUPS:
        return base | {"groups": [_describe_error(g, code, version) for g in request.groups]}
    if api_key == ApiKey.LIST_GROUPS:
        return base | {"error_code": code, "groups": ()}
    if api_key == ApiKey.DELETE_GROUPS:
        return base | {"results": [{"group_id": g, "error_code": code} for g in request.groups_names]}
    if api_key == ApiKey.OFFSET_DELETE:
        return base | {"error_code": code, "topics": ()}
    raise ValueError(f"no error answer for api {api_key}")


def loading_response(api_key: int, version: int, request: Any) -> dict[str, Any]:
    return error_response(api_key, version, request, ErrorCode.coordinator_load_in_progress)


def _describe_error(group_id: str, code: ErrorCode, version: int) -> dict[str, Any]:
    return {"error_code": code, "error_message": None, "group_id": group_id, "group_state": "",
            "protocol_type": "", "protocol_data": "", "members": (), "authorized_operations": -2147483648}
