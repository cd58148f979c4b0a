"""The coordinator's own state in a compacted topic of the upstream cluster (`coordinator.state.topic`, by default
`__group_coordinator_state`), so that a server in front of a cluster keeps nothing of its groups on its disk: kill
it, give it an empty disk, start it, and it goes on from the topic (static members keep their assignments).

Shard N of the group coordinator (the same records as a standalone server's DATA_DIR/groups/shard-N log: group
metadata with static member maps and assignments, offsets, pause and window settings) is partition N of the
topic, so the topic has offsets.topic.num.partitions partitions. It is created when missing with the cluster's
default replication and min.insync.replicas and cleanup.policy=compact; an existing topic with another partition
count is refused at start (groups would land in other shards), as Kafka never repartitions __consumer_offsets.

A `TopicLog` stands in for a shard's storage.Log: at start it reads its partition (committed records, from the log
start to the last stable offset), and the shard replays that; an append is acknowledged when its transaction is
committed (acks=all; below). One transaction per partition is in flight at a time; appends that come meanwhile
go out together in the next one (a group commit), so a shard's records reach the topic in the order they were
made. An append the cluster did not acknowledge within upstream.request.timeout.ms fails (the group runtime
answers a retriable error). The cluster compacts the topic itself.

Each shard's writer is fenced by the cluster, so that two servers on one state topic (a new one started while the
old one still runs, or one cut off from the cluster) never both write or answer for a shard. The partition is
written only in transactions of its own transactional id, `<state topic>-<partition>`, as Kafka Streams' tasks
(EOS v1) and Kafka Connect's leader write theirs:
- Claiming a shard is InitProducerId for that id: the cluster bumps its epoch, which fences the previous writer
  (its next transaction gets PRODUCER_FENCED) and ends its open transaction. The shard is then read
  read_committed, so an aborted write is never replayed.
- Each group commit of appends is one transaction (AddPartitionsToTxn, Produce, EndTxn), acknowledged when the
  commit is: acknowledged means in the cluster, and in the next owner's replay.
- After a failed transaction the writer bumps its own epoch (InitProducerId with its producer id and epoch, which
  the cluster refuses if another server claimed the id meanwhile) and goes on; a server never claims anew a shard
  it once held, so it cannot take a shard back from its successor.
- Reads are fenced by a lease (`coordinator.state.lease.ms`): a shard answers only while the cluster confirmed
  its writer less than a lease ago (by a transaction's AddPartitionsToTxn and EndTxn, or else by a
  DescribeTransactions every few hundred ms),
  and a new owner answers only a lease after its claim. The old owner's last confirmation was asked before the
  claim, so its lease ends before the new owner's first answer.
A fenced shard answers NOT_COORDINATOR and is not reloaded; a shard whose lease lapsed (the cluster is slow or out
of reach) answers COORDINATOR_NOT_AVAILABLE until it is confirmed again (a request waits up to
offsets.commit.timeout.ms for that first: coordinator.server.group_service).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import logging
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from coordinator.cluster.upstream import UpstreamError
from coordinator.server.shards import ShardOwnedElsewhere
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from storage.log import CompactionResult, LogStats, Recovery

from .cluster import TRANSACTION, UpstreamCluster, UpstreamTimeout
from .endpoints import transaction_states
from .records import Aborted, Producer, batches_end, decode_batches, encode_batch

log = logging.getLogger(__name__)

EARLIEST, LATEST = -2, -1
READ_COMMITTED = 1
FETCH_MAX_BYTES = 16 << 20
RETRY_PAUSE_S = 0.1
# Last stable offsets asked for within this long go out together, one ListOffsets per leader: a server's hot
# standbys read every shard they follow in the same turn (coordinator.server.shards, FOLLOW_INTERVAL_S).
END_BATCH_S = 0.005
# A transaction left open by a server that died is aborted by the cluster after this (a new owner's claim ends it
# at once).
TRANSACTION_TIMEOUT_MS = 60000
# After a commit the cluster writes its markers before the id may begin another transaction: it answers
# CONCURRENT_TRANSACTIONS meanwhile (a few ms), asked again after these pauses.
CONCURRENT_PAUSES_S = (0.002, 0.005, 0.01, 0.02, 0.05)
MAX_SEQUENCE = (1 << 31) - 1
WARN_INTERVAL_S = 10.0
RENEW_S = 3600.0  # a shard's transactional id is renewed after this long without a write
FENCED = frozenset({ErrorCode.producer_fenced, ErrorCode.invalid_producer_epoch})
TRANSACTION_RETRIABLE = frozenset(
    {
        ErrorCode.concurrent_transactions,
        ErrorCode.coordinator_load_in_progress,
        ErrorCode.not_coordinator,
        ErrorCode.coordinator_not_available,
    }
)
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
    """The state topic cannot be used (another partition count, no permission to create it), or the cluster
    refused a request about it with `code`."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


class ShardFenced(ShardOwnedElsewhere, UpstreamError):
    """Another server claimed the shard's transactional id: this one no longer writes or answers for it."""


@dataclasses.dataclass(eq=False)
class Writer:
    """This server's hold on one shard: the transactional producer of its partition, and its lease (the module
    doc). Times are time.monotonic()."""

    transactional_id: str
    producer_id: int
    epoch: int
    lease_s: float
    sequence: int = 0  # of the next record
    # a transaction may be open, or its sequence is unsure: bump the epoch before the next one
    dirty: bool = False
    # Held by a transaction or a bump in flight (which confirms the lease itself): one at a time on the id.
    lock: asyncio.Lock = dataclasses.field(default_factory=asyncio.Lock)
    fenced: bool = False
    closed: bool = False
    owned_until: float = 0.0
    serve_from: float = 0.0
    # the id's last claim, bump or commit
    renewed_at: float = dataclasses.field(default_factory=time.monotonic)

    @property
    def busy(self) -> bool:
        return self.lock.locked()

    def confirm(self, asked_at: float) -> None:
        """The cluster took a request of ours at our epoch that was sent at `asked_at`."""
        if not self.fenced:
            self.owned_until = max(self.owned_until, asked_at + self.lease_s)

    def refusal(self, now: float) -> ErrorCode | None:
        """Why the shard may not answer now (None: it may)."""
        if self.fenced:
            return ErrorCode.not_coordinator
        if now < self.serve_from:
            return ErrorCode.coordinator_load_in_progress
        if now >= self.owned_until:
            return ErrorCode.coordinator_not_available
        return None


class StateTopic:
    def __init__(
        self,
        cluster: UpstreamCluster,
        name: str,
        partitions: int,
        lease_ms: int = 2000,
        role: str = "state topic",
    ) -> None:
        self.cluster = cluster
        self.name = name
        self.role = role  # what the topic is, in messages (coordinator.front.security's is one too)
        self.partitions = partitions
        self.lease_s = lease_ms / 1000
        self._leaders: dict[int, int] = {}
        self.topic_id: uuid.UUID | None = None  # known once the topic's metadata was read
        self._writers: dict[int, Writer] = {}  # the latest writer of each partition this server claimed
        self._keeper: asyncio.Task[None] | None = None
        self._warned = -WARN_INTERVAL_S
        self._ensured = asyncio.Lock()
        self._ensured_done = False
        # Partitions whose last stable offset is asked for in the next batch (last_stable), and the batches
        # under way.
        self._ends: dict[int, asyncio.Future[int]] = {}
        self._asking_ends: set[asyncio.Task[None]] = set()

    async def ensure(self) -> None:
        """Create the topic when it is missing; refuse one with another partition count, or a cluster without
        the transactions the writers need."""
        for api_key, low, name in (
            (ApiKey.INIT_PRODUCER_ID, 3, "InitProducerId v3"),
            (ApiKey.DESCRIBE_TRANSACTIONS, 0, "DescribeTransactions"),
        ):
            if self.cluster.versions.get(api_key, (0, -1))[1] < low:
                raise StateTopicError(
                    f"the upstream cluster does not serve {name} (Apache Kafka 3.0 or later does), which the "
                    f"state topic's fenced writers need; set coordinator.state.topic= to keep the state on disk"
                )
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
                    f"cannot create the {self.role} {self.name!r} on the upstream cluster: error {code} "
                    f"({answer.topics[0].error_message})"
                )
            log.info("created the %s %s (%d partitions, compacted)", self.role, self.name, self.partitions)
            while (count := await self._refresh_leaders(deadline)) is None or len(self._leaders) < count:
                if time.monotonic() > deadline:
                    raise UpstreamTimeout(f"the {self.role} {self.name!r} has no leaders yet")
                await asyncio.sleep(RETRY_PAUSE_S)
        if count != self.partitions and self.role != "state topic":
            raise StateTopicError(
                f"the {self.role} {self.name!r} has {count} partitions, and must have {self.partitions}"
            )
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
                raise StateTopicError(f"the {self.role} {self.name!r}: metadata error {topic.error_code}")
            self._leaders = {p.partition_index: p.leader_id for p in topic.partitions if p.leader_id >= 0}
            if topic.topic_id is not None and topic.topic_id.int:
                self.topic_id = topic.topic_id
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
                        f"{self.name}-{partition}: the cluster answered error {entry.error_code} to api {api_key}",
                        entry.error_code,
                    )
                problem: Any = entry.error_code
            except (UpstreamError, OSError, TimeoutError) as exc:
                problem = exc
            self._leaders.pop(partition, None)
            if time.monotonic() > deadline:
                raise UpstreamTimeout(f"{self.name}-{partition}: no answer within the timeout ({problem!r})")
            await asyncio.sleep(RETRY_PAUSE_S)

    async def offset(self, partition: int, timestamp: int) -> int:
        """The partition's log start (EARLIEST) or last stable offset (LATEST: its end for a read_committed
        reader)."""
        entry = await self._to_leader(
            partition, ApiKey.LIST_OFFSETS, 7, self._list_offsets([partition], timestamp)
        )
        return int(entry.offset)

    def _list_offsets(self, partitions: list[int], timestamp: int) -> dict[str, Any]:
        """A ListOffsets (read_committed) for `timestamp` in each of `partitions` of the topic."""
        return {
            "replica_id": -1,
            "isolation_level": READ_COMMITTED,
            "topics": [
                {
                    "name": self.name,
                    "partitions": [
                        {"partition_index": p, "current_leader_epoch": -1, "timestamp": timestamp}
                        for p in partitions
                    ],
                }
            ],
        }

    async def last_stable(self, partition: int) -> int:
        """offset(partition, LATEST), asked together with the other partitions asked for within END_BATCH_S: one
        ListOffsets per leader for all of them. A partition the batch did not answer for (no leader known, an
        error, no answer) is asked alone, as offset() asks, with its retries and its errors."""
        loop = asyncio.get_running_loop()
        if not self._ends:
            loop.call_later(END_BATCH_S, self._ask_ends)
        future = self._ends.get(partition)
        if future is None:
            future = self._ends[partition] = loop.create_future()
            future.add_done_callback(_retrieved)
        # Shielded: a reader cancelled meanwhile (a standby being promoted) must not cancel the answer another
        # reader of the partition shares.
        return await asyncio.shield(future)

    def _ask_ends(self) -> None:
        batch, self._ends = self._ends, {}
        task = asyncio.get_running_loop().create_task(self._answer_ends(batch))
        self._asking_ends.add(task)
        task.add_done_callback(self._asking_ends.discard)

    async def _answer_ends(self, batch: dict[int, asyncio.Future[int]]) -> None:
        def settle(partition: int, outcome: int | BaseException) -> None:
            future = batch[partition]
            if future.done():
                return
            if isinstance(outcome, BaseException):
                future.set_exception(outcome)
            else:
                future.set_result(outcome)

        by_node: dict[int, list[int]] = {}
        alone: list[int] = []
        for partition in batch:
            node = self._leaders.get(partition)
            if node is not None and node in self.cluster.nodes:
                by_node.setdefault(node, []).append(partition)
            else:
                alone.append(partition)

        async def together(node: int, partitions: list[int]) -> None:
            body = self._list_offsets(partitions, LATEST)
            try:
                version = self.cluster.version(ApiKey.LIST_OFFSETS, 7)
                answer = await self.cluster.ask_node(node, ApiKey.LIST_OFFSETS, version, body)
            except (UpstreamError, OSError, TimeoutError, StateTopicError):
                alone.extend(partitions)
                return
            for partition in partitions:
                try:
                    entry = _partition_entry(answer, partition)
                except StateTopicError:
                    alone.append(partition)
                    continue
                if entry.error_code == ErrorCode.none:
                    settle(partition, int(entry.offset))
                else:
                    alone.append(partition)

        async def by_itself(partition: int) -> None:
            try:
                settle(partition, await self.offset(partition, LATEST))
            except Exception as exc:  # noqa: BLE001 - the reader's to handle, as offset()'s own
                settle(partition, exc)

        try:
            await asyncio.gather(*(together(node, ps) for node, ps in by_node.items()))
            await asyncio.gather(*(by_itself(p) for p in alone))
        finally:
            for partition in batch:  # cancelled (the server stops): no reader is left waiting
                settle(partition, StateTopicError(f"{self.name}-{partition}: the read was given up"))

    async def read(self, partition: int) -> list[tuple[int, bytes, bytes | None, int]]:
        """Every committed record of the partition now, from its log start to its last stable offset."""
        return await self.read_on(Follower(partition))

    async def read_on(self, follower: Follower) -> list[tuple[int, bytes, bytes | None, int]]:
        """The committed records of the follower's partition from where it stands (its start: the log start) to
        the last stable offset now; the follower then stands there. Raises StateTopicError when its position is
        no longer in the log (the records it needs are gone: it must start over)."""
        await self.ensure_once()  # (a standby may read before any shard of this server is loaded)
        partition = follower.partition
        end = await self.last_stable(partition)
        if follower.position < 0:
            follower.position = await self.offset(partition, EARLIEST)
        out: list[tuple[int, bytes, bytes | None, int]] = []
        aborted = follower.aborted
        position = follower.position
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
                    "isolation_level": READ_COMMITTED,
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
            aborted.add((int(a.producer_id), int(a.first_offset)) for a in entry.aborted_transactions or ())
            data = entry.records or b""
            for record in decode_batches(data, aborted):
                if record[0] >= end:
                    break  # past the last stable offset when the read began: left for a later read
                if record[0] >= position:  # (a batch is read from its start for a position inside it)
                    out.append(record)
            after = batches_end(data)  # past markers and aborted batches too, which give no record
            if after is None or after <= position:
                if data:
                    raise StateTopicError(f"{self.name}-{partition}: no progress at offset {position}")
                break  # the end moved back (should not happen): take what there is
            # The owner may have committed more between the ListOffsets and this Fetch: what the Fetch gave past
            # `end` was left out above, so the next read starts at `end` (a batch boundary) and reads it then.
            position = min(after, end)
        follower.position = max(position, follower.position)
        return out

    # -- the shards' writers ---------------------------------------------------------------------------------

    def transactional_id(self, partition: int) -> str:
        return f"{self.name}-{partition}"

    async def claim(self, partition: int) -> Writer:
        """This server's writer of `partition`: claimed (which fences any other server's), or, when this server
        held it before (a shard reloaded after a failure), taken on from its last writer by a bump that the
        cluster refuses with ShardFenced if another server claimed it meanwhile."""
        previous = self._writers.get(partition)
        tid = self.transactional_id(partition)
        if previous is not None and previous.fenced:
            raise ShardFenced(f"state partition {partition}: another server claimed {tid!r}")
        deadline = time.monotonic() + self.cluster.timeout_s
        asked = time.monotonic()
        if previous is None:
            pid, epoch = await self._init(tid, -1, -1, deadline)
            # A previous holder's lease has ended a lease after the claim. Epoch 0 is an id the cluster did not
            # know: never claimed, or expired (transactional.id.expiration.ms) since its last holder died, as a
            # live holder renews its id (_keep).
            serve_from = time.monotonic() + self.lease_s if epoch > 0 else 0.0
        else:
            previous.closed = True
            try:
                pid, epoch = await self._init(tid, previous.producer_id, previous.epoch, deadline)
            except ShardFenced:
                self._fence(previous, partition)
                raise
            serve_from = 0.0  # this server held it all along
        writer = Writer(tid, pid, epoch, self.lease_s, serve_from=serve_from)
        writer.confirm(asked)
        self._writers[partition] = writer
        if self._keeper is None or self._keeper.done():
            self._keeper = asyncio.get_running_loop().create_task(self._keep())
        log.debug("state partition %d: writer %s at producer %d epoch %d", partition, tid, pid, epoch)
        return writer

    def release(self, partition: int) -> None:
        """This server no longer serves `partition` (given to another instance): its writer is forgotten, so
        its lease is no longer kept and a later claim of it is a claim anew."""
        writer = self._writers.pop(partition, None)
        if writer is not None:
            writer.closed = True

    async def _init(self, tid: str, producer_id: int, epoch: int, deadline: float) -> tuple[int, int]:
        """InitProducerId: a claim (producer_id -1) or a bump of our own epoch; (producer id, epoch)."""
        answer = await self._transaction_request(
            tid,
            ApiKey.INIT_PRODUCER_ID,
            4,
            {
                "transactional_id": tid,
                "transaction_timeout": TRANSACTION_TIMEOUT_MS,
                "producer_id": producer_id,
                "producer_epoch": epoch,
            },
            lambda answer: answer.error_code,
            deadline,
        )
        return int(answer.producer_id), int(answer.producer_epoch)

    async def _transaction_request(
        self,
        tid: str,
        api_key: int,
        newest: int,
        body: dict[str, Any],
        code_of: Callable[[Any], int],
        deadline: float,
    ) -> Any:
        """A request to `tid`'s transaction coordinator, asked again while it answers a retriable error (the
        markers of the last commit still being written, a coordinator moving); its answer. Raises ShardFenced,
        StateTopicError, UpstreamTimeout."""
        attempt = 0
        while True:
            answer = await self.cluster.ask_coordinator(
                tid, api_key, newest, body, key_type=TRANSACTION, deadline=deadline
            )
            code = code_of(answer)
            if code == ErrorCode.none:
                return answer
            if code in FENCED:
                raise ShardFenced(f"another server claimed {tid!r}")
            if code not in TRANSACTION_RETRIABLE:
                raise StateTopicError(f"{tid}: the cluster answered error {code} to api {api_key}", code)
            if time.monotonic() >= deadline:
                raise UpstreamTimeout(f"{tid}: api {api_key} still answered error {code} at the timeout")
            await asyncio.sleep(CONCURRENT_PAUSES_S[min(attempt, len(CONCURRENT_PAUSES_S) - 1)])
            attempt += 1

    def _fence(self, writer: Writer, partition: int) -> None:
        if not writer.fenced:
            log.error(
                "state partition %d: another server claimed %s; this server no longer answers for the shard",
                partition,
                writer.transactional_id,
            )
        writer.fenced = True
        writer.owned_until = 0.0

    async def append(
        self, partition: int, entries: Sequence[tuple[bytes, bytes | None]], writer: Writer
    ) -> int:
        """Write entries in one transaction of `writer`, committed with acks=all; the offset of the last one.
        Raises ShardFenced when another server claimed the shard."""
        if writer.fenced:
            raise ShardFenced(
                f"state partition {partition}: another server claimed {writer.transactional_id!r}"
            )
        deadline = time.monotonic() + self.cluster.timeout_s
        async with writer.lock:
            return await self._transaction(partition, entries, writer, deadline)

    async def produce(self, partition: int, entries: Sequence[tuple[bytes, bytes | None]]) -> int:
        """Write entries outside any transaction (acks=all): a topic every server writes (the security topic,
        coordinator.front.security), not a shard. The offset of the last one."""
        await self.ensure_once()
        entry = await self._to_leader(
            partition,
            ApiKey.PRODUCE,
            9,
            {
                "transactional_id": None,
                "acks": -1,
                "timeout": int(self.cluster.timeout_s * 1000),
                "topic_data": [
                    {
                        "name": self.name,
                        "partition_data": [
                            {"index": partition, "records": encode_batch(entries, int(time.time() * 1000))}
                        ],
                    }
                ],
            },
        )
        return int(entry.base_offset) + len(entries) - 1

    async def _transaction(
        self, partition: int, entries: Sequence[tuple[bytes, bytes | None]], writer: Writer, deadline: float
    ) -> int:
        try:
            if writer.dirty:
                await self._bump(writer, deadline)
            asked = time.monotonic()
            await self._add_partition(writer, partition, deadline)
            # The transaction coordinator took a request at our epoch: it confirms the lease as a
            # DescribeTransactions would (the keeper leaves a writer with a transaction in flight alone, so a slow
            # transaction would otherwise let the lease lapse before its commit confirms it).
            writer.confirm(asked)
            writer.dirty = True
            if writer.sequence + len(entries) > MAX_SEQUENCE:
                raise StateTopicError(f"state partition {partition}: the sequence wraps; bumping the epoch")
            batch = encode_batch(
                entries, int(time.time() * 1000), Producer(writer.producer_id, writer.epoch, writer.sequence)
            )
            entry = await self._to_leader(
                partition,
                ApiKey.PRODUCE,
                9,
                {
                    "transactional_id": writer.transactional_id,
                    "acks": -1,
                    "timeout": int(self.cluster.timeout_s * 1000),
                    "topic_data": [
                        {"name": self.name, "partition_data": [{"index": partition, "records": batch}]}
                    ],
                },
            )
            writer.sequence += len(entries)
            asked = time.monotonic()
            await self._end(writer, deadline)
            writer.dirty = False
            writer.confirm(asked)
            writer.renewed_at = asked
            return int(entry.base_offset) + len(entries) - 1
        except ShardFenced:
            self._fence(writer, partition)
            raise
        except StateTopicError as exc:
            if exc.code in FENCED:
                self._fence(writer, partition)
                raise ShardFenced(str(exc)) from exc
            raise

    async def _bump(self, writer: Writer, deadline: float) -> None:
        """Our own epoch bumped: an open transaction of ours aborted, the sequence back to 0."""
        asked = time.monotonic()
        writer.producer_id, writer.epoch = await self._init(
            writer.transactional_id, writer.producer_id, writer.epoch, deadline
        )
        writer.sequence, writer.dirty = 0, False
        writer.confirm(asked)
        writer.renewed_at = asked

    async def _renew(self, partition: int, writer: Writer) -> None:
        """Keep the id of a shard that writes nothing from expiring (the cluster forgets a transactional id
        unused for transactional.id.expiration.ms, 7 days by default)."""
        async with writer.lock:
            try:
                await self._bump(writer, time.monotonic() + self.cluster.timeout_s)
            except ShardFenced:
                self._fence(writer, partition)
            except Exception as exc:  # noqa: BLE001 - tried again at the next round
                self._warn(exc)

    async def _add_partition(self, writer: Writer, partition: int, deadline: float) -> None:
        def code_of(answer: Any) -> int:
            codes = [
                p.partition_error_code
                for t in answer.results_by_topic_v3_and_below
                for p in t.results_by_partition
            ]
            return next((c for c in codes if c != ErrorCode.none), ErrorCode.none if codes else -1)

        await self._transaction_request(
            writer.transactional_id,
            ApiKey.ADD_PARTITIONS_TO_TXN,
            3,
            {
                "v3_and_below_transactional_id": writer.transactional_id,
                "v3_and_below_producer_id": writer.producer_id,
                "v3_and_below_producer_epoch": writer.epoch,
                "v3_and_below_topics": [{"name": self.name, "partitions": [partition]}],
            },
            code_of,
            deadline,
        )

    async def _end(self, writer: Writer, deadline: float) -> None:
        """EndTxn: our transaction committed."""
        await self._transaction_request(
            writer.transactional_id,
            ApiKey.END_TXN,
            3,
            {
                "transactional_id": writer.transactional_id,
                "producer_id": writer.producer_id,
                "producer_epoch": writer.epoch,
                "committed": True,
            },
            lambda answer: answer.error_code,
            deadline,
        )

    async def _keep(self) -> None:
        """Confirm the leases of writers that wrote nothing lately, with one DescribeTransactions per
        transaction coordinator; a writer whose id has another epoch there was fenced."""
        while True:
            await asyncio.sleep(self.lease_s / 8)
            now = time.monotonic()
            for partition, writer in list(self._writers.items()):
                if not (writer.fenced or writer.closed or writer.busy) and now - writer.renewed_at > RENEW_S:
                    await self._renew(partition, writer)
            due = {
                partition: writer
                for partition, writer in self._writers.items()
                if not (writer.fenced or writer.closed or writer.busy)
                and writer.owned_until - now < self.lease_s * 0.7
            }
            if not due:
                continue
            try:
                async with asyncio.timeout(self.lease_s):  # an answer later than that confirms nothing
                    await self._confirm(due)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - unconfirmed leases lapse; the next round asks again
                self._warn(exc)

    async def _confirm(self, due: dict[int, Writer]) -> None:
        deadline = time.monotonic() + min(self.cluster.timeout_s, self.lease_s)
        by_node: dict[int, list[tuple[int, Writer]]] = {}
        for partition, writer in due.items():
            node = await self.cluster.coordinator_of(writer.transactional_id, deadline, TRANSACTION)
            by_node.setdefault(node, []).append((partition, writer))

        async def ask(node: int, writers: list[tuple[int, Writer]]) -> None:
            asked = time.monotonic()
            held = {w.transactional_id: (w.producer_id, w.epoch) for _, w in writers}
            try:
                states = await self.cluster.ask_node(
                    node,
                    ApiKey.DESCRIBE_TRANSACTIONS,
                    0,
                    {"transactional_ids": [w.transactional_id for _, w in writers]},
                    decode=transaction_states,
                )
            except BaseException:
                for _, writer in writers:  # the broker may be gone: look its ids' coordinators up again
                    self.cluster.forget_coordinator(writer.transactional_id, TRANSACTION)
                raise
            for partition, writer in writers:
                state = states.get(writer.transactional_id)
                ours = (writer.producer_id, writer.epoch)
                if state is None or writer.busy or writer.closed or ours != held[writer.transactional_id]:
                    continue  # a bump of our own began meanwhile: its answer decides
                code, producer_id, epoch = state
                if code != ErrorCode.none:
                    self.cluster.forget_coordinator(writer.transactional_id, TRANSACTION)
                    continue
                if (producer_id, epoch) == ours:
                    writer.confirm(asked)
                else:
                    self._fence(writer, partition)

        results = await asyncio.gather(*(ask(n, w) for n, w in by_node.items()), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                if not isinstance(result, Exception):
                    raise result
                self._warn(result)

    def _warn(self, exc: BaseException) -> None:
        """Confirming leases failed (at most one warning each WARN_INTERVAL_S: it is retried every round)."""
        now = time.monotonic()
        if now - self._warned >= WARN_INTERVAL_S:
            self._warned = now
            log.warning("confirming the state writers' leases failed (retrying): %r", exc)

    async def close(self) -> None:
        for task in [*self._asking_ends, *([self._keeper] if self._keeper is not None else [])]:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def __call__(self, partition: int, follower: Follower | None = None) -> TopicLog:
        """The log opener of coordinator.server.shards: the topic is made sure of before the first log."""
        await self.ensure_once()
        return await self.open_log(partition, follower)

    async def ensure_once(self) -> None:
        """`ensure`, until it has succeeded once."""
        async with self._ensured:
            if not self._ensured_done:
                await self.ensure()
                self._ensured_done = True

    async def open_log(self, partition: int, follower: Follower | None = None) -> TopicLog:
        """Claim the shard (its writer), then read what is committed in it (after the claim: nothing the
        previous writer committed is missed, and what it left open is aborted): all of it, or, for a shard whose
        state was followed (a hot standby, coordinator.server.shards), what `follower` has not read yet."""
        started = time.monotonic()
        writer = await self.claim(partition)
        reader = follower if follower is not None else Follower(partition)
        records = await self.read_on(reader)
        log.debug(
            "state partition %d: %d records in %.2fs", partition, len(records), time.monotonic() - started
        )
        return TopicLog(self, partition, records, writer, end=reader.position)

    def follower(self, partition: int) -> Follower:
        """A reader of `partition` from its start, for a hot standby (`read_on` its records as they come)."""
        return Follower(partition)


class Follower:
    """Where a reader of one partition stands, and the aborted transactions it has been told of."""

    def __init__(self, partition: int) -> None:
        self.partition = partition
        self.position = -1  # not read yet: from the log start
        self.aborted = Aborted()


def _retrieved(future: asyncio.Future[Any]) -> None:
    """Marks a shared answer's exception as seen: its readers may all have gone."""
    if not future.cancelled():
        future.exception()


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
        self,
        topic: StateTopic,
        partition: int,
        records: list[tuple[int, bytes, bytes | None, int]],
        writer: Writer,
        end: int | None = None,
    ):
        """`records`: what is to be replayed (a hot standby's: only those it had not); `end`: the offset the read
        reached (default: after the last record)."""
        self._topic = topic
        self._partition = partition
        self.lease = writer  # coordinator.server.shards asks it whether the shard may answer
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
        self._next = end if end is not None else records[-1][0] + 1 if records else 0
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
                last = await self._topic.append(self._partition, batch, self.lease)
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
        self.lease.closed = True
        self._loop.call_soon_threadsafe(self._writer.cancel)

    def abandon(self, compaction_wait_s: float = 1.0) -> None:
        self.close()
