"""The coordinator's own state in a compacted topic of the upstream cluster (`coordinator.state.topic`, by default
`__group_coordinator_state`), so that a server in front of a cluster keeps nothing of its groups on its disk: kill
it, give it an empty disk, start it, and it goes on from the topic (static members keep their assignments).

Shard N of the group coordinator (the same records as a standalone server's DATA_DIR/groups/shard-N log: group
metadata with static member maps and assignments, offsets, pause and window settings) is partition N of the
topic, so the topic has offsets.topic.num.partitions partitions. It is created when missing with the cluster's
default replication and min.insync.replicas and cleanup.policy=compact; an existing topic with another partition
count is refused at start (groups would land in other shards), as Kafka never repartitions __consumer_offsets.

A `TopicLog` stands in for a shard's storage.Log: at start it reads its partition from the log start to the end,
and the shard replays that; an append is acknowledged when the cluster acknowledged it with acks=all. One
Produce per partition is in flight at a time; appends that come meanwhile go out together in the next one (a
group commit), so a shard's records reach the topic in the order they were made. An append the cluster did not
acknowledge within upstream.request.timeout.ms fails (the group runtime answers a retriable error). The cluster
compacts the topic itself.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any

from coordinator.cluster.upstream import UpstreamError
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from storage.log import CompactionResult, LogStats, Recovery

from .cluster import UpstreamCluster, UpstreamTimeout
from .records import decode_batches, encode_batch

log = logging.getLogger(__name__)

EARLIEST, LATEST = -2, -1
FETCH_MAX_BYTES = 16 << 20
RETRY_PAUSE_S = 0.1
RETRIABLE = frozenset(
    {
        ErrorCode.not_leader_or_follower,
        ErrorCode.leader_not_available,
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.not_enough_replicas,
        ErrorCode.not_enough_replicas_after_append,
        ErrorCode.request_timed_out,
        ErrorCode.fenced_leader_epoch,
        ErrorCode.unknown_leader_epoch,
        ErrorCode.kafka_storage_error,
        ErrorCode.network_exception,
    }
)


class StateTopicError(RuntimeError):
    """The state topic cannot be used (another partition count, no permission to create it)."""


class StateTopic:
    def __init__(self, cluster: UpstreamCluster, name: str, partitions: int) -> None:
        self.cluster = cluster
        self.name = name
        self.partitions = partitions
        self._leaders: dict[int, int] = {}

    async def ensure(self) -> None:
        """Create the topic when it is missing; refuse one with another partition count."""
        deadline = time.monotonic() + self.cluster.timeout_s
        count = await self._refresh_leaders(deadline)
        if count is None:
            version = self.cluster.version(ApiKey.CREATE_TOPICS, 5)
            answer = await self.cluster.ask_any(
                ApiKey.CREATE_TOPICS,
                version,
                {
                    "topics": [
                        {
                            "name": self.name,
                            "num_partitions": self.partitions,
                            "replication_factor": -1,
                            "assignments": [],
                            "configs": [{"name": "cleanup.policy", "value": "compact"}],
                        }
                    ],
                    "timeout": int(self.cluster.timeout_s * 1000),
                    "validate_only": False,
                },
                deadline,
                exact=True,
            )
            code = answer.topics[0].error_code
            if code not in (ErrorCode.none, ErrorCode.topic_already_exists):
                raise StateTopicError(
                    f"cannot create the state topic {self.name!r} on the upstream cluster: error {code} "
                    f"({answer.topics[0].error_message})"
                )
            log.info("created the state topic %s (%d partitions, compacted)", self.name, self.partitions)
            while (count := await self._refresh_leaders(deadline)) is None or len(self._leaders) < count:
                if time.monotonic() > deadline:
                    raise UpstreamTimeout(f"the state topic {self.name!r} has no leaders yet")
                await asyncio.sleep(RETRY_PAUSE_S)
        if count != self.partitions:
            raise StateTopicError(
                f"the state topic {self.name!r} has {count} partitions, and offsets.topic.num.partitions is "
                f"{self.partitions}: groups would move to other shards. Set offsets.topic.num.partitions={count}."
            )

    async def _refresh_leaders(self, deadline: float) -> int | None:
        """The topic's partition count (None: it does not exist), and its partitions' leaders."""
        answer = await self.cluster.metadata([self.name], deadline)
        for topic in answer.topics:
            if topic.name != self.name:
                continue
            if topic.error_code == ErrorCode.unknown_topic_or_partition:
                return None
            if topic.error_code not in (ErrorCode.none, ErrorCode.leader_not_available):
                raise StateTopicError(f"the state topic {self.name!r}: metadata error {topic.error_code}")
            self._leaders = {p.partition_index: p.leader_id for p in topic.partitions if p.leader_id >= 0}
            return len(topic.partitions)
        return None

    async def _leader(self, partition: int, deadline: float) -> int:
        while True:
            node = self._leaders.get(partition)
            if node is not None and node in self.cluster.nodes:
                return node
            await self._refresh_leaders(deadline)
            if partition in self._leaders:
                continue
            if time.monotonic() > deadline:
                raise UpstreamTimeout(f"partition {partition} of {self.name!r} has no leader")
            await asyncio.sleep(RETRY_PAUSE_S)

    async def _to_leader(self, partition: int, api_key: int, newest: int, body: dict[str, Any]) -> Any:
        """A request to the partition's leader, asked again while leadership moves, until the timeout; returns
        (answer, the partition's entry in it)."""
        deadline = time.monotonic() + self.cluster.timeout_s
        version = self.cluster.version(api_key, newest)
        while True:
            node = await self._leader(partition, deadline)
            try:
                answer = await self.cluster.ask_node(node, api_key, version, body)
                entry = _partition_entry(answer, partition)
                if entry.error_code == ErrorCode.none:
                    return entry
                if entry.error_code not in RETRIABLE:
                    raise StateTopicError(
                        f"{self.name}-{partition}: the cluster answered error {entry.error_code} to api {api_key}"
                    )
                problem: Any = entry.error_code
            except (UpstreamError, OSError, TimeoutError) as exc:
                problem = exc
            self._leaders.pop(partition, None)
            if time.monotonic() > deadline:
                raise UpstreamTimeout(f"{self.name}-{partition}: no answer within the timeout ({problem!r})")
            await asyncio.sleep(RETRY_PAUSE_S)

    async def offset(self, partition: int, timestamp: int) -> int:
        entry = await self._to_leader(
            partition,
            ApiKey.LIST_OFFSETS,
            7,
            {
                "replica_id": -1,
                "isolation_level": 0,
                "topics": [
                    {
                        "name": self.name,
                        "partitions": [
                            {"partition_index": partition, "current_leader_epoch": -1, "timestamp": timestamp}
                        ],
                    }
                ],
            },
        )
        return int(entry.offset)

    async def read(self, partition: int) -> list[tuple[int, bytes, bytes | None, int]]:
        """Every record of the partition now, from its log start to its end."""
        start, end = await self.offset(partition, EARLIEST), await self.offset(partition, LATEST)
        out: list[tuple[int, bytes, bytes | None, int]] = []
        position = start
        while position < end:
            entry = await self._to_leader(
                partition,
                ApiKey.FETCH,
                12,
                {
                    "replica_id": -1,
                    "max_wait": 0,
                    "min_bytes": 0,
                    "max_bytes": FETCH_MAX_BYTES,
                    "isolation_level": 0,
                    "session_id": 0,
                    "session_epoch": -1,
                    "topics": [
                        {
                            "topic": self.name,
                            "partitions": [
                                {
                                    "partition": partition,
                                    "current_leader_epoch": -1,
                                    "fetch_offset": position,
                                    "last_fetched_epoch": -1,
                                    "log_start_offset": -1,
                                    "partition_max_bytes": FETCH_MAX_BYTES,
                                }
                            ],
                        }
                    ],
                    "forgotten_topics_data": [],
                    "rack_id": "",
                },
            )
            moved = False
            for record in decode_batches(entry.records or b""):
                if record[0] < position:
                    continue  # a batch read from its start for a position inside it
                out.append(record)
                position = record[0] + 1
                moved = True
            if not moved:
                if entry.records:
                    raise StateTopicError(f"{self.name}-{partition}: no progress at offset {position}")
                break  # the end moved back (should not happen): take what there is
        return out

    async def append(self, partition: int, entries: Sequence[tuple[bytes, bytes | None]]) -> int:
        """Write entries with acks=all; the offset of the last one."""
        batch = encode_batch(entries, int(time.time() * 1000))
        entry = await self._to_leader(
            partition,
            ApiKey.PRODUCE,
            9,
            {
                "transactional_id": None,
                "acks": -1,
                "timeout": int(self.cluster.timeout_s * 1000),
                "topic_data": [
                    {"name": self.name, "partition_data": [{"index": partition, "records": batch}]}
                ],
            },
        )
        return int(entry.base_offset) + len(entries) - 1

    def opener(self) -> Callable[[int], Awaitable[TopicLog]]:
        """`opener(partition)` for coordinator.server.shards: the topic is made sure of before the first log."""
        ensured = asyncio.Lock()
        done = [False]

        async def open_log(partition: int) -> TopicLog:
            async with ensured:
                if not done[0]:
                    await self.ensure()
                    done[0] = True
            return await self.open_log(partition)

        return open_log

    async def open_log(self, partition: int) -> TopicLog:
        started = time.monotonic()
        records = await self.read(partition)
        log.debug(
            "state partition %d: %d records in %.2fs", partition, len(records), time.monotonic() - started
        )
        return TopicLog(self, partition, records)


def _partition_entry(answer: Any, partition: int) -> Any:
    """The entry of `partition` in a Produce, ListOffsets or Fetch answer."""
    topics: Any = getattr(answer, "responses", None)
    if topics is None:
        topics = answer.topics
    for topic in topics:
        entries: Any = getattr(topic, "partition_responses", None) or getattr(topic, "partitions", ())
        for entry in entries:
            index = getattr(entry, "index", None)
            if index is None:
                index = entry.partition_index
            if index == partition:
                return entry
    raise StateTopicError(f"partition {partition} is missing from the answer to api {answer.__api_key__}")


class TopicLog:
    """One shard's log in its partition of the state topic (see the module doc); the part of storage.Log's
    interface the group coordinator uses."""

    compacts_itself = True

    def __init__(
        self, topic: StateTopic, partition: int, records: list[tuple[int, bytes, bytes | None, int]]
    ):
        self._topic = topic
        self._partition = partition
        self._records: list[tuple[int, bytes, bytes | None, int]] | None = records
        size = sum(len(k) + len(v or b"") for _, k, v, _ in records)
        self.recovery = Recovery(segments=0, entries=len(records), bytes=size)
        self._queue: list[tuple[list[tuple[bytes, bytes | None]], asyncio.Future[int]]] = []
        self._wake = asyncio.Event()
        self._closed = False
        self._entries = len(records)
        self._appended = 0
        self._appends = 0
        self._flushes = 0
        self._failed = 0
        self._next = records[-1][0] + 1 if records else 0
        self._loop = asyncio.get_running_loop()
        self._writer = self._loop.create_task(self._write())

    def replay(
        self, progress: Callable[[int, int, int], None] | None = None
    ) -> Iterator[tuple[int, bytes, bytes | None, int]]:
        records, self._records = self._records or [], None  # read once: the memory goes with it
        total = self.recovery.bytes
        done = 0
        for count, record in enumerate(records, 1):
            done += len(record[1]) + len(record[2] or b"")
            yield record
            if progress is not None and count % 10000 == 0:
                progress(done, total, count)

    def append(
        self, entries: Sequence[tuple[bytes, bytes | None]], timestamp_ms: int | None = None
    ) -> asyncio.Future[int]:
        if self._closed:
            raise UpstreamError(f"the log of state partition {self._partition} is closed")
        if not entries:
            raise ValueError("append needs at least one entry")
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._queue.append(([(bytes(k), None if v is None else bytes(v)) for k, v in entries], future))
        self._wake.set()
        return future

    async def _write(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if not self._queue:
                continue
            queued, self._queue = self._queue, []
            live = [(entries, future) for entries, future in queued if not future.done()]
            if not live:
                continue
            batch = [entry for entries, _ in live for entry in entries]
            try:
                last = await self._topic.append(self._partition, batch)
            except asyncio.CancelledError:
                for _, future in live:
                    if not future.done():
                        future.set_exception(UpstreamError("the state log is closing"))
                raise
            except Exception as exc:  # noqa: BLE001 - the appends fail; the runtime answers a retriable error
                self._failed += 1
                for _, future in live:
                    if not future.done():
                        future.set_exception(exc)
                continue
            self._flushes += 1
            self._next = last + 1
            first = last - len(batch) + 1
            for entries, future in live:
                first += len(entries)
                self._appends += 1
                self._appended += len(entries)
                self._entries += len(entries)
                if not future.done():
                    future.set_result(first - 1)

    def compact(self, now_ms: int, delete_retention_ms: int) -> concurrent.futures.Future[CompactionResult]:
        future: concurrent.futures.Future[CompactionResult] = concurrent.futures.Future()
        future.set_result(CompactionResult(0, 0, 0, 0, self._entries, self._entries, 0, 0))
        return future

    def stats(self) -> LogStats:
        return LogStats(
            segments=0,
            total_bytes=self.recovery.bytes,
            entries=self._entries,
            entries_appended=self._appended,
            appends=self._appends,
            flushes=self._flushes,
            failed_flushes=self._failed,
            next_seq=self._next,
            compactions=0,
        )

    def close(self, timeout: float | None = None) -> None:
        """Stop writing (any thread: a shard closes its log in a worker thread)."""
        self._closed = True
        self._loop.call_soon_threadsafe(self._writer.cancel)

    def abandon(self, compaction_wait_s: float = 1.0) -> None:
        self.close()
