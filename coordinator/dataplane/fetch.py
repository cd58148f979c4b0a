"""ListOffsets and Fetch of the embedded data plane, and the long polls of Fetch (see embedded.py's module doc).

A Fetch long poll parks on a future registered with the partitions it reads (`Waiters`); appends, topic
deletion and shutdown wake it.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from protocol.api import RequestContext
from protocol.build import ms
from protocol.errors import ErrorCode

from . import segments as _segments
from .batches import NO_TIMESTAMP
from .disk import DiskLog

logger = logging.getLogger(__name__)

LEADER_EPOCH = 0

# ListOffsets special timestamps and the first version that may use each.
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5
_TIMESTAMP_MIN_VERSION = {
    LATEST_TIMESTAMP: 1,
    EARLIEST_TIMESTAMP: 1,
    MAX_TIMESTAMP: 7,
    EARLIEST_LOCAL_TIMESTAMP: 8,
    LATEST_TIERED_TIMESTAMP: 9,
}

# Fetch session epochs that mean "full fetch" (KIP-227): 0 opens a session, -1 asks for none.
_FULL_FETCH_EPOCHS = frozenset({0, -1})
READ_COMMITTED = 1


def resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def wake(futures: Iterable[asyncio.Future[None]]) -> None:
    for future in list(futures):
        resolve(future)


class Waiters:
    """The parked Fetch long polls, by partition log; `closed` once shutdown began (no new one parks)."""

    def __init__(self) -> None:
        self.closed = False
        self._by_log: dict[Any, set[asyncio.Future[None]]] = {}

    def __len__(self) -> int:
        """How many partition logs have a long poll parked on them."""
        return len(self._by_log)

    def wake(self, log: Any) -> None:
        wake(self._by_log.get(log, ()))

    def forget(self, log: Any) -> None:
        """The log is gone (its topic was deleted): its waiters answer now."""
        wake(self._by_log.pop(log, set()))

    def close(self) -> None:
        self.closed = True
        for futures in self._by_log.values():
            wake(futures)

    async def wait(self, logs: list[Any], timeout: float) -> None:
        """Park until one of `logs` is appended to, its topic is deleted, the plane closes, or `timeout`."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        for log in logs:
            self._by_log.setdefault(log, set()).add(future)
        timer = loop.call_later(timeout, resolve, future)
        try:
            await future
        finally:
            timer.cancel()
            for log in logs:
                waiters = self._by_log.get(log)
                if waiters is not None:
                    waiters.discard(future)
                    if not waiters:
                        del self._by_log[log]


def leader_epoch_error(requested: int) -> ErrorCode | None:
    """Kafka's fencing check on a client's current leader epoch (-1 = unknown, not checked)."""
    if requested == -1 or requested == LEADER_EPOCH:
        return None
    if requested < LEADER_EPOCH:
        return ErrorCode.fenced_leader_epoch
    return ErrorCode.unknown_leader_epoch


class Reads:
    """ListOffsets and Fetch over the plane's topics (by name and by id: the plane's own mappings)."""

    def __init__(self, topics: Mapping[str, Any], topics_by_id: Mapping[Any, Any], waiters: Waiters) -> None:
        self._topics = topics
        self._topics_by_id = topics_by_id
        self._waiters = waiters

    async def list_offsets(self, ctx: RequestContext, request: Any) -> dict[str, Any]:
        """ListOffsets v1-v10. v4 adds leader epochs, v7 max timestamp (-3), v8 earliest local (-4), v9 latest
        tiered (-5: none here), v10 a timeout for tiered storage (nothing to wait for). v11's earliest pending
        upload is tiered-storage only and not advertised."""
        version = ctx.api_version
        occurrences = Counter((t.name, p.partition_index) for t in request.topics for p in t.partitions)
        topics: list[dict[str, Any]] = []
        for topic_request in request.topics:
            topic = self._topics.get(topic_request.name)
            partitions: list[dict[str, Any]] = []
            for p in topic_request.partitions:
                index = p.partition_index
                timestamp = p.timestamp
                if occurrences[(topic_request.name, index)] > 1:
                    partitions.append(_list_offsets_error(index, ErrorCode.invalid_request))
                elif timestamp < 0 and version < _TIMESTAMP_MIN_VERSION.get(timestamp, 1 << 15):
                    partitions.append(_list_offsets_error(index, ErrorCode.unsupported_version))
                elif topic is None or not 0 <= index < len(topic.partitions):
                    partitions.append(_list_offsets_error(index, ErrorCode.unknown_topic_or_partition))
                elif (error := leader_epoch_error(getattr(p, "current_leader_epoch", -1))) is not None:
                    partitions.append(_list_offsets_error(index, error))
                else:
                    partitions.append(await self._offset_for(index, topic.partitions[index], timestamp))
            topics.append({"name": topic_request.name, "partitions": partitions})
        return {"throttle_time": 0, "topics": topics}

    @staticmethod
    async def _offset_for(index: int, partition: Any, timestamp: int) -> dict[str, Any]:
        found: tuple[int, int] | None
        epoch = LEADER_EPOCH
        if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            found = (NO_TIMESTAMP, partition.log_start_offset)
        elif timestamp == LATEST_TIMESTAMP:
            found = (NO_TIMESTAMP, partition.high_watermark)
        elif timestamp == LATEST_TIERED_TIMESTAMP:
            found, epoch = (NO_TIMESTAMP, -1), -1  # nothing is tiered
        elif isinstance(partition, DiskLog):
            views = partition.views()
            try:
                if timestamp == MAX_TIMESTAMP:
                    found = await asyncio.to_thread(_segments.max_timestamp_offset, views)
                else:
                    found = await asyncio.to_thread(_segments.offset_for_timestamp, views, timestamp)
            except (OSError, ValueError) as exc:
                logger.error("ListOffsets read failed: %s", exc)
                return _list_offsets_error(index, ErrorCode.kafka_storage_error)
            finally:
                DiskLog.release(views)
        elif timestamp == MAX_TIMESTAMP:
            found = partition.max_timestamp_offset()
        else:
            found = partition.offset_for_timestamp(timestamp)
        if found is None:
            return {
                "partition_index": index,
                "error_code": ErrorCode.none,
                "timestamp": -1,
                "offset": -1,
                "leader_epoch": -1,
            }
        return {
            "partition_index": index,
            "error_code": ErrorCode.none,
            "timestamp": found[0],
            "offset": found[1],
            "leader_epoch": epoch,
        }

    async def fetch(self, ctx: RequestContext, request: Any) -> dict[str, Any]:
        """Fetch v4-v17. v5 adds log_start_offset, v7 sessions (not kept: always a full sessionless answer),
        v9 current leader epochs, v11 rack / preferred read replica (-1), v12 flexible with tagged diverging
        epoch (default), v13 topic ids, v15 replica state. v18 only adds a follower's high watermark and is
        not advertised, matching Kafka 4.1."""
        version = ctx.api_version
        session_epoch = getattr(request, "session_epoch", -1)
        if session_epoch not in _FULL_FETCH_EPOCHS:
            # An incremental fetch names a session; this server never creates one.
            return {
                "throttle_time": 0,
                "error_code": ErrorCode.fetch_session_id_not_found,
                "session_id": 0,
                "responses": (),
            }
        loop = asyncio.get_running_loop()
        max_wait = ms(request.max_wait) / 1000
        deadline = loop.time() + max_wait
        while True:
            responses, total, failed, logs = await self._fetch_once(request, version)
            if self._waiters.closed or failed or total >= request.min_bytes or max_wait <= 0 or not logs:
                break
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            if any(partition.version != seen for partition, seen in logs):
                continue  # appended to while a read was in a worker thread: read again before parking
            await self._waiters.wait([partition for partition, _ in logs], remaining)
        return {"throttle_time": 0, "error_code": ErrorCode.none, "session_id": 0, "responses": responses}

    async def _fetch_once(
        self, request: Any, version: int
    ) -> tuple[list[dict[str, Any]], int, bool, list[tuple[Any, int]]]:
        """One pass over the requested partitions: (topic responses, record bytes, any error, and for each log
        read: (log, its version before the read))."""
        remaining = request.max_bytes
        min_one = True
        total = 0
        failed = False
        logs: list[tuple[Any, int]] = []
        read_committed = getattr(request, "isolation_level", 0) == READ_COMMITTED
        responses: list[dict[str, Any]] = []
        for fetch_topic in request.topics:
            if version >= 13:
                topic = self._topics_by_id.get(fetch_topic.topic_id)
                missing = ErrorCode.unknown_topic_id
            else:
                topic = self._topics.get(fetch_topic.topic)
                missing = ErrorCode.unknown_topic_or_partition
            partitions: list[dict[str, Any]] = []
            for p in fetch_topic.partitions:
                index = p.partition
                partition: Any = None
                if topic is None:
                    error: ErrorCode | None = missing
                elif not 0 <= index < len(topic.partitions):
                    error = ErrorCode.unknown_topic_or_partition
                else:
                    error = leader_epoch_error(getattr(p, "current_leader_epoch", -1))
                    partition = topic.partitions[index]
                if error is not None or partition is None:
                    failed = True
                    partitions.append(_fetch_error(index, error or ErrorCode.unknown_topic_or_partition))
                    continue
                logs.append((partition, partition.version))
                answer = {
                    "partition_index": index,
                    "error_code": ErrorCode.none,
                    "high_watermark": partition.high_watermark,
                    "last_stable_offset": partition.high_watermark,
                    "log_start_offset": partition.log_start_offset,
                    "aborted_transactions": () if read_committed else None,
                    "preferred_read_replica": -1,
                    "records": b"",
                }
                if not partition.log_start_offset <= p.fetch_offset <= partition.high_watermark:
                    failed = True
                    answer["error_code"] = ErrorCode.offset_out_of_range
                else:
                    try:
                        data = await self._read(
                            partition, p.fetch_offset, min(p.partition_max_bytes, remaining), min_one
                        )
                    except (OSError, ValueError) as exc:
                        logger.error(
                            "Fetch read of %s-%d failed: %s", getattr(fetch_topic, "topic", None), index, exc
                        )
                        failed = True
                        partitions.append(_fetch_error(index, ErrorCode.kafka_storage_error))
                        continue
                    if data:
                        min_one = False
                        total += len(data)
                        remaining = max(0, remaining - len(data))
                        answer["records"] = data
                partitions.append(answer)
            responses.append(
                {
                    "topic": getattr(fetch_topic, "topic", None),
                    "topic_id": getattr(fetch_topic, "topic_id", None),
                    "partitions": partitions,
                }
            )
        return responses, total, failed, logs

    @staticmethod
    async def _read(partition: Any, offset: int, max_bytes: int, min_one: bool) -> bytes:
        """Read a partition: in memory directly; on disk on the event loop when the bytes were just written
        (page cache), else in a worker thread, holding the segments open meanwhile."""
        if not isinstance(partition, DiskLog) or partition.is_hot(offset):
            return partition.read(offset, max_bytes, min_one)
        if not partition.log_start_offset <= offset < partition.high_watermark:
            return b""
        views = partition.views(offset)
        try:
            return await asyncio.to_thread(_segments.read_views, views, offset, max_bytes, min_one)
        finally:
            DiskLog.release(views)


def _produce_error(index: int, code: ErrorCode, message: str | None) -> dict[str, Any]:
    return {
        "index": index,
        "error_code": code,
        "base_offset": -1,
        "log_append_time": None,
        "log_start_offset": -1,
        "record_errors": (),
        "error_message": message,
    }


def _list_offsets_error(index: int, code: ErrorCode) -> dict[str, Any]:
    return {"partition_index": index, "error_code": code, "timestamp": -1, "offset": -1, "leader_epoch": -1}


def _fetch_error(index: int, code: ErrorCode) -> dict[str, Any]:
    return {
        "partition_index": index,
        "error_code": code,
        "high_watermark": -1,
        "last_stable_offset": -1,
        "log_start_offset": -1,
        "aborted_transactions": None,
        "preferred_read_replica": -1,
        "records": b"",
    }
