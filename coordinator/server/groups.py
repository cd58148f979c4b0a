"""The group coordinator part: the group and offset APIs, served by one shard on the event loop.

The shard's state machine (coordinator.group.GroupMetadataManager) is pure; this part gives it a clock and a timer
on the event loop, its log (storage.Log under DATA_DIR/groups/shard-0), and the ShardRuntime that persists what it
emits before answering. At start the log is replayed into a fresh state machine in a worker thread while the
listener already answers: group APIs say COORDINATOR_LOAD_IN_PROGRESS (Heartbeat says NONE) until it is done, never
an empty result, and /readyz is not ready.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import time
from typing import Any

from coordinator.clock import OFFSETS_EXPIRATION_KEY
from coordinator.config import Config
from coordinator.group.manager import GROUP_METADATA_KEY_PREFIX, GroupMetadataManager
from coordinator.records import CoordinatorRecord
from protocol.api import ApiTable, RequestContext
from protocol.errors import ErrorCode
from storage import Log

from .runtime import AsyncioTimer, LoopClock, ShardRuntime

log = logging.getLogger(__name__)

OFFSET_COMMIT, OFFSET_FETCH, JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 8, 9, 11, 12, 13, 14
DESCRIBE_GROUPS, LIST_GROUPS, DELETE_GROUPS, OFFSET_DELETE = 15, 16, 42, 47

# (api key, min version, max version, manager method): Kafka 4.1's ranges for the classic protocol, floors
# kept low so older clients still work (Kafka 4.0 dropped some and broke them).
GROUP_APIS = (
    (OFFSET_COMMIT, 2, 9, "offset_commit"),
    (OFFSET_FETCH, 1, 9, "offset_fetch"),
    (JOIN_GROUP, 0, 9, "join_group"),
    (HEARTBEAT, 0, 4, "heartbeat"),
    (LEAVE_GROUP, 0, 5, "leave_group"),
    (SYNC_GROUP, 0, 5, "sync_group"),
    (DESCRIBE_GROUPS, 0, 6, "describe_groups"),
    (LIST_GROUPS, 0, 5, "list_groups"),
    (DELETE_GROUPS, 0, 2, "delete_groups"),
    (OFFSET_DELETE, 0, 0, "offset_delete"),
)

# Requests that read or change membership wait for in-flight group-metadata writes (see ShardRuntime).
GATED_APIS = frozenset({JOIN_GROUP, SYNC_GROUP, HEARTBEAT, LEAVE_GROUP, OFFSET_COMMIT, DELETE_GROUPS, OFFSET_DELETE})

LOAD_PROGRESS_INTERVAL_S = 2.0


class GroupCoordinator:
    def __init__(self, config: Config, data_dir: str | None) -> None:
        self.config = config
        self.data_dir = os.path.join(data_dir, "groups", "shard-0") if data_dir else None
        self.runtime = ShardRuntime(timeout_ms=config["offsets.commit.timeout.ms"], barrier=_is_group_metadata)
        self.clock = LoopClock()
        self.timer = AsyncioTimer(self.runtime)
        self.manager = GroupMetadataManager(self.clock, self.timer, config)
        self.runtime.machine = self.manager
        self.loaded = False
        self.load_stats: dict[str, Any] = {}
        self._load_task: asyncio.Task[None] | None = None
        self._compaction_task: asyncio.Task[None] | None = None

    def shard_for(self, group_id: str) -> Any:
        """The shard that owns `group_id`: an object with `.manager` and `.runtime`."""
        return self

    # -- part lifecycle ---------------------------------------------------------------------------

    def register(self, table: ApiTable) -> None:
        for api_key, lo, hi, method in GROUP_APIS:
            table.register(api_key, lo, hi, self._handler(api_key, method))

    @property
    def ready(self) -> bool:
        return self.loaded

    async def start(self) -> None:
        self._load_task = asyncio.create_task(self._load())

    async def close(self) -> None:
        if self._load_task is not None and not self._load_task.done():
            self._load_task.cancel()
            try:
                await self._load_task
            except (asyncio.CancelledError, Exception):
                pass
        if self._compaction_task is not None:
            self._compaction_task.cancel()
        self.timer.cancel_all()
        await self.runtime.drain()
        if self.runtime.log is not None:
            await asyncio.to_thread(self.runtime.log.close)

    # -- loading ----------------------------------------------------------------------------------

    async def _load(self) -> None:
        started = time.monotonic()
        if self.data_dir is not None:
            os.makedirs(self.data_dir, exist_ok=True)
            the_log = await asyncio.to_thread(
                Log.open, self.data_dir, segment_bytes=self.config["offsets.topic.segment.bytes"],
                linger_ms=self.config["group.coordinator.append.linger.ms"],
            )
            recovery = the_log.recovery
            if recovery.truncation is not None or recovery.lost_segments:
                log.warning("group log recovery: %s", recovery)
            count = await asyncio.to_thread(self._replay_all, the_log)
            self.runtime.log = the_log
            self.load_stats = {"records": count, "bytes": recovery.bytes}
        elapsed = time.monotonic() - started
        self.load_stats["seconds"] = elapsed
        self.runtime.apply(self.manager.on_loaded())
        self._schedule_offset_expiration()
        # What was loaded lives long: keep it out of the cyclic collector's full passes, which otherwise walk
        # every loaded offset and set the commit p99 (measured: 60-250 ms pauses, gone after freezing).
        gc.collect()
        gc.freeze()
        self.loaded = True
        log.info("group coordinator loaded in %.2fs: %s", elapsed, self.load_stats)
        if self.runtime.log is not None:
            self._compaction_task = asyncio.create_task(self._compact_periodically())

    def _replay_all(self, the_log: Log) -> int:
        """Runs in a worker thread; nothing else touches the state machine until loading ends."""
        started = time.monotonic()
        last = [started]

        def progress(bytes_done: int, bytes_total: int, entries: int) -> None:
            now = time.monotonic()
            if now - last[0] >= LOAD_PROGRESS_INTERVAL_S:
                last[0] = now
                log.info("loading group log: %d records, %d of %d bytes (%.0f%%), %.0f records/s", entries,
                         bytes_done, bytes_total, 100 * bytes_done / max(bytes_total, 1),
                         entries / (now - started))

        count = 0
        replay = self.manager.replay
        for entry in the_log.replay(progress=progress):
            replay(CoordinatorRecord(entry.key, entry.value))
            count += 1
        return count

    def _schedule_offset_expiration(self) -> None:
        interval = self.config["offsets.retention.check.interval.ms"]

        def expire() -> Any:
            result = self.manager.expire_offsets()
            self.timer.schedule(OFFSETS_EXPIRATION_KEY, interval, expire)
            return result

        self.timer.schedule(OFFSETS_EXPIRATION_KEY, interval, expire)

    async def _compact_periodically(self) -> None:
        interval_s = self.config["offsets.topic.compaction.interval.ms"] / 1000
        retention = self.config["log.cleaner.delete.retention.ms"]
        while True:
            await asyncio.sleep(interval_s)
            try:
                result = await asyncio.wrap_future(self.runtime.log.compact(self.clock.wall_ms(), retention))
                log.info("group log compacted: %s", result)
            except Exception:
                log.exception("group log compaction failed; will retry")

    # -- requests ---------------------------------------------------------------------------------

    def _handler(self, api_key: int, method_name: str) -> Any:
        method = getattr(self.manager, method_name)
        runtime = self.runtime

        gated = api_key in GATED_APIS

        if api_key == JOIN_GROUP:
            async def join(ctx: RequestContext, request: Any) -> Any:
                if not self.loaded:
                    return loading_response(api_key, ctx.api_version, request)
                await runtime.quiesce()
                return await runtime.call(method, ctx.api_version, request, client_id=ctx.client_id or "",
                                          client_host="/" + ctx.client_host)
            return join

        async def handle(ctx: RequestContext, request: Any) -> Any:
            if not self.loaded:
                return loading_response(api_key, ctx.api_version, request)
            if gated:
                await runtime.quiesce()
            return await runtime.call(method, ctx.api_version, request)

        return handle


def _is_group_metadata(record: CoordinatorRecord) -> bool:
    return record.key[:2] == GROUP_METADATA_KEY_PREFIX


def loading_response(api_key: int, version: int, request: Any) -> dict[str, Any]:
    """The answer while the shard loads: COORDINATOR_LOAD_IN_PROGRESS wherever the response carries errors
    (Heartbeat answers NONE, as Kafka does, so members are not kicked out by a restart)."""
    code = ErrorCode.coordinator_load_in_progress
    base: dict[str, Any] = {"throttle_time": 0}
    if api_key == HEARTBEAT:
        return base | {"error_code": ErrorCode.none}
    if api_key == JOIN_GROUP:
        return base | {"error_code": code, "generation_id": -1, "protocol_type": None,
                       "protocol_name": None if version >= 7 else "", "leader": "",
                       "member_id": getattr(request, "member_id", ""), "members": ()}
    if api_key == SYNC_GROUP:
        return base | {"error_code": code, "protocol_type": None, "protocol_name": None, "assignment": b""}
    if api_key == LEAVE_GROUP:
        return base | {"error_code": code, "members": ()}
    if api_key == OFFSET_COMMIT:
        return base | {"topics": [{"name": t.name, "partitions": [
            {"partition_index": p.partition_index, "error_code": code} for p in t.partitions]}
            for t in request.topics]}
    if api_key == OFFSET_FETCH:
        def topics(ts: Any) -> list[dict[str, Any]]:
            return [{"name": t.name, "partitions": [
                {"partition_index": i, "committed_offset": -1, "committed_leader_epoch": -1, "metadata": "",
                 "error_code": code} for i in t.partition_indexes]} for t in (ts or ())]
        if version >= 8:
            return base | {"groups": [{"group_id": g.group_id, "topics": [], "error_code": code}
                                      for g in request.groups]}
        return base | {"error_code": code, "topics": topics(request.topics)}
    if api_key == DESCRIBE_GROUPS:
        return base | {"groups": [{"error_code": code, "error_message": None, "group_id": g, "group_state": "",
                                   "protocol_type": "", "protocol_data": "", "members": (),
                                   "authorized_operations": -2147483648} for g in request.groups]}
    if api_key == LIST_GROUPS:
        return base | {"error_code": code, "groups": ()}
    if api_key == DELETE_GROUPS:
        return base | {"results": [{"group_id": g, "error_code": code} for g in request.groups_names]}
    if api_key == OFFSET_DELETE:
        return base | {"error_code": code, "topics": ()}
    raise ValueError(f"no loading answer for api {api_key}")
