"""The embedded (standalone) data plane: topics and partition logs kept by this server itself.

With no upstream Kafka cluster, the coordinator still has to be a complete single-node broker for the clients
that talk to it: they discover partitions with Metadata, create and delete topics, produce, look offsets up
and fetch. This module answers those APIs for one node that leads every partition (replicas = ISR = [this
node], leader epoch 0), so the facts it reports never change behind a client's back.

Design points:

* Batches are stored exactly as the producer sent them (see `batches` for the validation that makes that
  safe); only the baseOffset is rewritten. A Fetch therefore returns bytes a client can verify with the
  producer's own CRC, and there is no re-encoding on either path.
* Partition storage sits behind `PartitionLog` (append / read / offset lookups). It is in memory today; a
  durable segment-file log can replace it without touching the handlers.
* Everything runs on the event loop without awaiting between validation and append, so a produce request's
  batches for one partition are appended atomically and offsets are assigned without locks. The only awaiting
  is a Fetch long poll, which parks on a future registered with the partitions it reads; appends, topic
  deletion and `close()` wake it.
* One replica means the high watermark is the log end offset and, with no transactions, the last stable offset
  is the high watermark too. Fetch sessions (KIP-227) are not kept: every fetch is answered as a full,
  sessionless fetch with session id 0, which clients accept by staying in full-fetch mode.
* Transactions are not supported: InitProducerId with a transactional id answers COORDINATOR_NOT_AVAILABLE and
  transactional batches are refused. Idempotent producers get producer ids and their batches are stored with
  producer id, epoch and sequence as sent (no sequence-number deduplication yet).
"""

from __future__ import annotations

import asyncio
import bisect
import dataclasses
import itertools
import re
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from coordinator.config import Config
from protocol.api import ApiTable, RequestContext
from protocol.build import ms
from protocol.errors import ErrorCode

from . import Broker
from .batches import (
    NO_TIMESTAMP,
    InvalidBatch,
    read_header,
    record_timestamps,
    validate_batches,
    with_base_offset,
)

PRODUCE = 0
FETCH = 1
LIST_OFFSETS = 2
METADATA = 3
CREATE_TOPICS = 19
DELETE_TOPICS = 20
INIT_PRODUCER_ID = 22

# api key -> (min version, max version) served by this data plane; each handler's docstring says what the
# versions add and why a range stops where it does.
VERSIONS: dict[int, tuple[int, int]] = {
    PRODUCE: (3, 13),
    FETCH: (4, 17),
    LIST_OFFSETS: (1, 10),
    METADATA: (0, 13),
    CREATE_TOPICS: (2, 7),
    DELETE_TOPICS: (1, 6),
    INIT_PRODUCER_ID: (0, 5),
}

LEADER_EPOCH = 0
INT32_MIN = -(2**31)  # "authorized operations not requested"

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

# Authorized-operations bitfields (Metadata v8+) with no authorizer: every operation the resource type
# supports.
# AclOperation codes: CREATE 5, WRITE 4, READ 3, DELETE 6, ALTER 7, DESCRIBE 8, CLUSTER_ACTION 9,
# DESCRIBE_CONFIGS 10, ALTER_CONFIGS 11, IDEMPOTENT_WRITE 12.
TOPIC_OPERATIONS = sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))
CLUSTER_OPERATIONS = sum(1 << op for op in (5, 7, 8, 9, 10, 11, 12))

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
CLUSTER_METADATA_TOPIC = "__cluster_metadata"
MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")
# KRaft refuses a single operation that would write more than this many metadata records (one per partition).
MAX_PARTITIONS_PER_TOPIC = 10000

# Produce acks values: 0 = no response, 1 = leader, -1 = all in-sync replicas (here the leader alone).
_VALID_ACKS = frozenset({0, 1, -1})

# Fetch session epochs that mean "full fetch" (KIP-227): 0 opens a session, -1 asks for none.
_FULL_FETCH_EPOCHS = frozenset({0, -1})
READ_COMMITTED = 1


def topic_name_error(name: str) -> str | None:
    """Why `name` is not a legal Kafka topic name, or None when it is."""
    if not name:
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return f"Topic name cannot be \"{name}\""
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        return (f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} characters, "
                f"topic name: {name}")
    if not _LEGAL_TOPIC_NAME.fullmatch(name):
        return (f"Topic name \"{name}\" is illegal, it contains a character other than ASCII alphanumerics, "
                "'.', '_' and '-'")
    return None


def _collision_key(name: str) -> str:
    """'.' and '_' collide in metric names, so Kafka refuses topics that differ only by them."""
    return name.replace(".", "_")


class PartitionLog:
    """One partition's record batches, in memory.

    Offsets are contiguous: each appended batch starts at the current log end offset and advances it by the
    batch's record count. Batches are kept whole, so reads return whole batches starting at the one that holds
    the requested offset. A running maximum of batch max timestamps makes the timestamp lookup a binary
    search.
    """

    def __init__(self) -> None:
        self._batches: list[bytes] = []
        self._base_offsets: list[int] = []
        self._max_timestamps: list[int] = []  # per batch
        self._running_max: list[int] = []  # max of _max_timestamps[:i + 1], non-decreasing
        self.log_start_offset = 0
        self.high_watermark = 0  # == log end offset: a single replica commits on append

    @property
    def log_end_offset(self) -> int:
        return self.high_watermark

    @property
    def size_in_bytes(self) -> int:
        return sum(len(b) for b in self._batches)

    def append(self, batch: bytes, max_timestamp: int | None = None) -> int:
        """Append one validated batch, assigning its base offset; returns that offset.

        `max_timestamp` is the largest record timestamp when the caller has read the records; otherwise the
        header's maxTimestamp is used.
        """
        header = read_header(batch)
        base_offset = self.high_watermark
        if max_timestamp is None:
            max_timestamp = header.max_timestamp
        self._batches.append(with_base_offset(batch, base_offset))
        self._base_offsets.append(base_offset)
        self._max_timestamps.append(max_timestamp)
        previous = self._running_max[-1] if self._running_max else NO_TIMESTAMP
        self._running_max.append(max(previous, max_timestamp))
        self.high_watermark = base_offset + header.last_offset_delta + 1
        return base_offset

    def read(self, offset: int, max_bytes: int, min_one: bool = False) -> bytes:
        """Whole batches from the one holding `offset`, at most `max_bytes` in total; with `min_one`, the
        first batch is returned even when it alone is larger (KIP-74), so a consumer always makes progress."""
        if not self.log_start_offset <= offset < self.high_watermark:
            return b""
        index = bisect.bisect_right(self._base_offsets, offset) - 1
        chunks: list[bytes] = []
        size = 0
        for batch in itertools.islice(self._batches, index, None):
            if size + len(batch) > max_bytes and not (min_one and not chunks):
                break
            chunks.append(batch)
            size += len(batch)
        return b"".join(chunks)

    def offset_for_timestamp(self, target: int) -> tuple[int, int] | None:
        """(timestamp, offset) of the first record whose timestamp is at least `target`, or None.

        For batches whose records cannot be decoded here (snappy, lz4, zstd) the answer is the batch's first
        offset with its max timestamp: batch granularity.
        """
        index = bisect.bisect_left(self._running_max, target)
        if index == len(self._batches):
            return None
        return self._first_record_at_least(index, target)

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        """(timestamp, offset) of the first record with the largest timestamp, or None for an empty log."""
        if not self._batches:
            return None
        largest = self._running_max[-1]
        index = bisect.bisect_left(self._running_max, largest)
        return self._first_record_at_least(index, largest)

    def _first_record_at_least(self, index: int, target: int) -> tuple[int, int]:
        records = record_timestamps(self._batches[index])
        if records is not None:
            for offset, timestamp in records:
                if timestamp >= target:
                    return timestamp, offset
        return self._max_timestamps[index], self._base_offsets[index]


@dataclasses.dataclass(eq=False)
class _Topic:
    name: str
    topic_id: uuid.UUID
    partitions: list[PartitionLog]
    configs: dict[str, str]

    @property
    def is_internal(self) -> bool:
        return self.name in INTERNAL_TOPICS


class TopicError(Exception):
    """A topic that cannot be created, with the Kafka error code to answer."""

    def __init__(self, error_code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message


@dataclasses.dataclass(frozen=True, slots=True)
class _TopicPlan:
    name: str
    num_partitions: int
    replication_factor: int
    configs: dict[str, str]


class EmbeddedDataPlane:
    """Single-node topics and partitions; see the module docstring."""

    def __init__(self, config: Config, advertised: Callable[[], Broker]) -> None:
        self._config = config
        self._advertised = advertised
        self._topics: dict[str, _Topic] = {}
        self._topics_by_id: dict[uuid.UUID, _Topic] = {}
        self._collision_keys: dict[str, str] = {}  # collision key -> topic name
        self._producer_ids = itertools.count()
        self._waiters: dict[PartitionLog, set[asyncio.Future[None]]] = {}
        self._closed = False

    # -- DataPlane --------------------------------------------------------------------------------

    def register(self, table: ApiTable) -> None:
        handlers = {
            PRODUCE: self._produce,
            FETCH: self._fetch,
            LIST_OFFSETS: self._list_offsets,
            METADATA: self._metadata,
            CREATE_TOPICS: self._create_topics,
            DELETE_TOPICS: self._delete_topics,
            INIT_PRODUCER_ID: self._init_producer_id,
        }
        for api_key, handler in handlers.items():
            low, high = VERSIONS[api_key]
            table.register(api_key, low, high, handler)

    async def start(self) -> None:
        self._closed = False

    async def close(self) -> None:
        """Stop serving long polls: parked fetches answer at once with what they have."""
        self._closed = True
        for futures in self._waiters.values():
            _wake(futures)

    def log_end_offset(self, topic: str, partition: int) -> int | None:
        log = self._log(topic, partition)
        return None if log is None else log.high_watermark

    def partition_count(self, topic: str) -> int | None:
        found = self._topics.get(topic)
        return None if found is None else len(found.partitions)

    # -- topics -----------------------------------------------------------------------------------

    def topic_id(self, topic: str) -> uuid.UUID | None:
        found = self._topics.get(topic)
        return None if found is None else found.topic_id

    def create_topic(self, name: str, num_partitions: int = -1,
                     configs: dict[str, str] | None = None) -> uuid.UUID:
        """Create a topic as CreateTopics would (-1 partitions = `num.partitions`); raises TopicError."""
        plan = self._plan_topic(name, num_partitions, -1, (), dict(configs or {}))
        return self._create(plan).topic_id

    def _log(self, topic: str, partition: int) -> PartitionLog | None:
        found = self._topics.get(topic)
        if found is None or not 0 <= partition < len(found.partitions):
            return None
        return found.partitions[partition]

    def _plan_topic(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        assignments: Iterable[Any],
        configs: dict[str, str | None],
    ) -> _TopicPlan:
        """Check a topic creation the way Kafka's controller does, without creating anything."""
        problem = topic_name_error(name)
        if problem is not None:
            raise TopicError(ErrorCode.invalid_topic_exception, problem)
        if name == CLUSTER_METADATA_TOPIC:
            raise TopicError(ErrorCode.invalid_request, f"Creation of internal topic {name} is prohibited.")
        if name in self._topics:
            raise TopicError(ErrorCode.topic_already_exists, f"Topic '{name}' already exists.")
        colliding = self._collision_keys.get(_collision_key(name))
        if colliding is not None:
            raise TopicError(ErrorCode.invalid_topic_exception,
                             f"Topic '{name}' collides with existing topic: {colliding}")
        null_configs = sorted(k for k, v in configs.items() if v is None)
        if null_configs:
            raise TopicError(ErrorCode.invalid_config,
                             f"Null value not supported for topic configs: {','.join(null_configs)}")
        node_id = self._advertised().node_id
        assignments = list(assignments)
        if assignments:
            if replication_factor != -1:
                raise TopicError(ErrorCode.invalid_request, "A manual partition assignment was specified, "
                                 "but replication factor was not set to -1.")
            if num_partitions != -1:
                raise TopicError(ErrorCode.invalid_request, "A manual partition assignment was specified, "
                                 "but numPartitions was not set to -1.")
            indexes: set[int] = set()
            for assignment in assignments:
                index = assignment.partition_index
                if index in indexes:
                    raise TopicError(ErrorCode.invalid_replica_assignment,
                                     f"Found multiple manual partition assignments for partition {index}")
                indexes.add(index)
                brokers = list(assignment.broker_ids)
                if not brokers:
                    raise TopicError(ErrorCode.invalid_replica_assignment,
                                     "The manual partition assignment includes an empty replica list.")
                for broker in brokers:
                    if broker != node_id:
                        raise TopicError(ErrorCode.invalid_replica_assignment,
                                         f"The manual partition assignment includes broker {broker}, but "
                                         "no such broker is registered.")
                if len(brokers) > 1:
                    raise TopicError(ErrorCode.invalid_replica_assignment,
                                     f"The manual partition assignment includes the broker {node_id} "
                                     "more than once.")
            if indexes != set(range(len(indexes))):
                raise TopicError(ErrorCode.invalid_replica_assignment,
                                 "partitions should be a consecutive 0-based integer sequence")
            num_partitions = len(indexes)
            replication_factor = 1
        else:
            if replication_factor < -1 or replication_factor == 0:
                raise TopicError(ErrorCode.invalid_replication_factor,
                                 "Replication factor must be larger than 0, or -1 to use the default value.")
            if num_partitions < -1 or num_partitions == 0:
                raise TopicError(ErrorCode.invalid_partitions,
                                 "Number of partitions was set to an invalid non-positive value.")
            if num_partitions == -1:
                num_partitions = self._config["num.partitions"]
            if replication_factor == -1:
                replication_factor = self._config["default.replication.factor"]
            if replication_factor > 1:
                raise TopicError(ErrorCode.invalid_replication_factor,
                                 f"Unable to replicate the partition {replication_factor} time(s): The "
                                 f"target replication factor of {replication_factor} cannot be reached "
                                 "because only 1 broker(s) are registered.")
        if num_partitions > MAX_PARTITIONS_PER_TOPIC:
            raise TopicError(ErrorCode.policy_violation,
                             "Unable to perform excessively large batch operation.")
        return _TopicPlan(name, num_partitions, replication_factor,
                          {k: v for k, v in configs.items() if v is not None})

    def _create(self, plan: _TopicPlan) -> _Topic:
        topic_id = uuid.uuid4()
        while topic_id in self._topics_by_id or topic_id.int == 0:  # pragma: no cover - astronomically rare
            topic_id = uuid.uuid4()
        logs = [PartitionLog() for _ in range(plan.num_partitions)]
        topic = _Topic(plan.name, topic_id, logs, plan.configs)
        self._topics[plan.name] = topic
        self._topics_by_id[topic_id] = topic
        self._collision_keys[_collision_key(plan.name)] = plan.name
        return topic

    def _delete(self, topic: _Topic) -> None:
        del self._topics[topic.name]
        del self._topics_by_id[topic.topic_id]
        self._collision_keys.pop(_collision_key(topic.name), None)
        for log in topic.partitions:
            _wake(self._waiters.pop(log, set()))

    # -- Metadata ---------------------------------------------------------------------------------

    async def _metadata(self, ctx: RequestContext, request: Any) -> dict[str, Any]:
        """Metadata v0-v13. v1 adds null = all topics, v4 allow_auto_topic_creation, v8-v10 authorized
        operations, v10 topic ids, v12 lookups by topic id, v13 a top-level error code (always NONE here)."""
        version = ctx.api_version
        node = self._advertised()
        requested = request.topics
        all_topics = requested is None or (version == 0 and not requested)
        with_topic_ops = bool(getattr(request, "include_topic_authorized_operations", False))
        with_cluster_ops = bool(getattr(request, "include_cluster_authorized_operations", False))
        auto_create = (self._config["auto.create.topics.enable"]
                       and bool(getattr(request, "allow_auto_topic_creation", True)) and not all_topics)

        topics: list[dict[str, Any]] = []
        if all_topics:
            topics = [self._topic_metadata(t, node.node_id, with_topic_ops) for t in self._topics.values()]
        else:
            seen: set[Any] = set()
            for entry in requested:
                name = entry.name
                topic_id = getattr(entry, "topic_id", None)
                key = topic_id if topic_id is not None else name
                if key in seen:
                    continue
                seen.add(key)
                if topic_id is not None:
                    if version < 12:
                        topics.append(_metadata_error(ErrorCode.invalid_request, name, topic_id))
                        continue
                    found = self._topics_by_id.get(topic_id)
                    if found is None:
                        topics.append(_metadata_error(ErrorCode.unknown_topic_id, None, topic_id))
                    else:
                        topics.append(self._topic_metadata(found, node.node_id, with_topic_ops))
                    continue
                if name is None:
                    topics.append(_metadata_error(ErrorCode.invalid_request, None, None))
                    continue
                found = self._topics.get(name)
                if found is None:
                    if topic_name_error(name) is not None:
                        topics.append(_metadata_error(ErrorCode.invalid_topic_exception, name, None))
                        continue
                    if not auto_create:
                        topics.append(_metadata_error(ErrorCode.unknown_topic_or_partition, name, None))
                        continue
                    try:
                        found = self._create(self._plan_topic(name, -1, -1, (), {}))
                    except TopicError as exc:
                        topics.append(_metadata_error(exc.error_code, name, None))
                        continue
                topics.append(self._topic_metadata(found, node.node_id, with_topic_ops))

        return {
            "throttle_time": 0,
            "error_code": ErrorCode.none,
            "brokers": [{"node_id": node.node_id, "host": node.host, "port": node.port, "rack": None}],
            "cluster_id": self._config["cluster.id"],
            "controller_id": node.node_id,
            "topics": topics,
            "cluster_authorized_operations": CLUSTER_OPERATIONS if with_cluster_ops else INT32_MIN,
        }

    @staticmethod
    def _topic_metadata(topic: _Topic, node_id: int, with_ops: bool) -> dict[str, Any]:
        return {
            "error_code": ErrorCode.none,
            "name": topic.name,
            "topic_id": topic.topic_id,
            "is_internal": topic.is_internal,
            "partitions": [
                {
                    "error_code": ErrorCode.none,
                    "partition_index": index,
                    "leader_id": node_id,
                    "leader_epoch": LEADER_EPOCH,
                    "replica_nodes": (node_id,),
                    "isr_nodes": (node_id,),
                    "offline_replicas": (),
                }
                for index in range(len(topic.partitions))
            ],
            "topic_authorized_operations": TOPIC_OPERATIONS if with_ops else INT32_MIN,
        }

    # -- CreateTopics -----------------------------------------------------------------------------

    async def _create_topics(self, ctx: RequestContext, request: Any) -> dict[str, Any]:
        """CreateTopics v2-v7. v5 adds the topic's partitions, replication factor and configs to each result,
        v7 the topic id. Configs are stored and echoed (as dynamic topic configs) but have no effect."""
        counts = Counter(t.name for t in request.topics)
        results: list[dict[str, Any]] = []
        for topic in request.topics:
            if counts[topic.name] > 1:
                continue
            configs = {c.name: c.value for c in topic.configs}
            try:
                plan = self._plan_topic(topic.name, topic.num_partitions, topic.replication_factor,
                                        topic.assignments, configs)
            except TopicError as exc:
                results.append({"name": topic.name, "topic_id": None, "error_code": exc.error_code,
                                "error_message": exc.message, "num_partitions": -1, "replication_factor": -1,
                                "configs": ()})
                continue
            topic_id = None if request.validate_only else self._create(plan).topic_id
            results.append({
                "name": plan.name,
                "topic_id": topic_id,
                "error_code": ErrorCode.none,
                "error_message": None,
                "num_partitions": plan.num_partitions,
                "replication_factor": plan.replication_factor,
                "configs": [
                    {"name": k, "value": v, "read_only": False, "config_source": 1, "is_sensitive": False}
                    for k, v in sorted(plan.configs.items())
                ],
            })
        for name, count in counts.items():
            if count > 1:
                results.append({"name": name, "topic_id": None, "error_code": ErrorCode.invalid_request,
                                "error_message": "Duplicate topic name.", "num_partitions": -1,
                                "replication_factor": -1, "configs": ()})
        return {"throttle_time": 0, "topics": results}

    # -- DeleteTopics -----------------------------------------------------------------------------

    async def _delete_topics(self, ctx: RequestContext, request: Any) -> dict[str, Any]:
        """DeleteTopics v1-v6. v5 adds error messages, v6 deletion by topic id."""
        results: list[dict[str, Any]] = []
        names: list[str] = list(getattr(request, "topic_names", ()))
        ids: list[uuid.UUID] = []
        for state in getattr(request, "topics", ()):
            if state.name is None and state.topic_id is None:
                results.append(_delete_result(None, None, ErrorCode.invalid_request,
                                              "Neither topic name nor id were specified."))
            elif state.name is not None and state.topic_id is not None:
                results.append(_delete_result(state.name, state.topic_id, ErrorCode.invalid_request,
                                              "You may not specify both topic name and topic id."))
            elif state.name is not None:
                names.append(state.name)
            else:
                ids.append(state.topic_id)
        name_counts = Counter(names)
        id_counts = Counter(ids)
        targets: list[_Topic] = []
        for topic_id, count in id_counts.items():
            if count > 1:
                results.append(_delete_result(None, topic_id, ErrorCode.invalid_request,
                                              "Duplicate topic id."))
                continue
            found = self._topics_by_id.get(topic_id)
            if found is None:
                results.append(_delete_result(None, topic_id, ErrorCode.unknown_topic_id, None))
            elif found not in targets:
                targets.append(found)
        for name, count in name_counts.items():
            if count > 1:
                results.append(_delete_result(name, None, ErrorCode.invalid_request, "Duplicate topic name."))
                continue
            found = self._topics.get(name)
            if found is None:
                results.append(_delete_result(name, None, ErrorCode.unknown_topic_or_partition,
                                              "This server does not host this topic-partition."))
            elif found not in targets:
                targets.append(found)
        for found in targets:
            self._delete(found)
            results.append(_delete_result(found.name, found.topic_id, ErrorCode.none, None))
        return {"throttle_time": 0, "responses": results}

    # -- InitProducerId ---------------------------------------------------------------------------

    async def _init_producer_id(self, ctx: RequestContext, request: Any) -> dict[str, Any]:
        """InitProducerId v0-v5 for idempotent (non-transactional) producers: a new producer id with epoch 0
        on every call, as Kafka does when there is no transactional id. v6 (two-phase commit) is not
        served."""
        producer_id = getattr(request, "producer_id", -1)
        producer_epoch = getattr(request, "producer_epoch", -1)
        if (producer_id == -1) != (producer_epoch == -1):
            return _init_producer_id_error(ErrorCode.invalid_request)
        if request.transactional_id is not None:
            if request.transactional_id == "":
                return _init_producer_id_error(ErrorCode.invalid_request)
            return _init_producer_id_error(ErrorCode.coordinator_not_available)
        return {"throttle_time": 0, "error_code": ErrorCode.none, "producer_id": next(self._producer_ids),
                "producer_epoch": 0}

    # -- Produce ----------------------------------------------------------------------------------

    async def _produce(self, ctx: RequestContext, request: Any) -> dict[str, Any] | None:
        """Produce v3-v13. v5 adds log_start_offset, v8 record errors and error messages, v13 topic ids.
        v12 is v11 plus transaction semantics (KIP-890) that do not apply without transactions. Each
        partition's data may hold several batches; they are validated and appended together, or not at all."""
        version = ctx.api_version
        acks = request.acks
        max_batch_bytes = self._config["message.max.bytes"]
        appended: list[PartitionLog] = []
        responses: list[dict[str, Any]] = []
        for topic_data in request.topic_data:
            if version >= 13:
                topic = self._topics_by_id.get(topic_data.topic_id)
                missing = ErrorCode.unknown_topic_id
            else:
                topic = self._topics.get(topic_data.name)
                missing = ErrorCode.unknown_topic_or_partition
            partitions: list[dict[str, Any]] = []
            for data in topic_data.partition_data:
                index = data.index
                if topic is None:
                    partitions.append(_produce_error(index, missing, None))
                    continue
                if not 0 <= index < len(topic.partitions):
                    partitions.append(_produce_error(index, ErrorCode.unknown_topic_or_partition, None))
                    continue
                if acks not in _VALID_ACKS:
                    partitions.append(_produce_error(index, ErrorCode.invalid_required_acks,
                                                     f"acks={acks} is not one of 0, 1, -1"))
                    continue
                try:
                    batches = validate_batches(data.records, max_batch_bytes=max_batch_bytes,
                                               allow_zstd=version >= 7)
                except InvalidBatch as exc:
                    partitions.append(_produce_error(index, exc.error_code, exc.message))
                    continue
                if any(b.header.is_transactional for b in batches):
                    partitions.append(_produce_error(index, ErrorCode.invalid_txn_state,
                                                     "transactions are not supported by this server"))
                    continue
                log = topic.partitions[index]
                base_offset = -1
                for batch in batches:
                    offset = log.append(batch.data, batch.max_timestamp)
                    if base_offset < 0:
                        base_offset = offset
                appended.append(log)
                partitions.append({
                    "index": index,
                    "error_code": ErrorCode.none,
                    "base_offset": base_offset,
                    "log_append_time": None,  # -1: CreateTime
                    "log_start_offset": log.log_start_offset,
                    "record_errors": (),
                    "error_message": None,
                })
            responses.append({
                "name": getattr(topic_data, "name", None),
                "topic_id": getattr(topic_data, "topic_id", None),
                "partition_responses": partitions,
            })
        for log in appended:
            _wake(self._waiters.get(log, ()))
        if acks == 0:
            return None
        return {"responses": responses, "throttle_time": 0}

    # -- ListOffsets ------------------------------------------------------------------------------

    async def _list_offsets(self, ctx: RequestContext, request: Any) -> dict[str, Any]:
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
                elif (error := _leader_epoch_error(getattr(p, "current_leader_epoch", -1))) is not None:
                    partitions.append(_list_offsets_error(index, error))
                else:
                    partitions.append(self._offset_for(index, topic.partitions[index], timestamp))
            topics.append({"name": topic_request.name, "partitions": partitions})
        return {"throttle_time": 0, "topics": topics}

    @staticmethod
    def _offset_for(index: int, log: PartitionLog, timestamp: int) -> dict[str, Any]:
        found: tuple[int, int] | None
        epoch = LEADER_EPOCH
        if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            found = (NO_TIMESTAMP, log.log_start_offset)
        elif timestamp == LATEST_TIMESTAMP:
            found = (NO_TIMESTAMP, log.high_watermark)
        elif timestamp == LATEST_TIERED_TIMESTAMP:
            found, epoch = (NO_TIMESTAMP, -1), -1  # nothing is tiered
        elif timestamp == MAX_TIMESTAMP:
            found = log.max_timestamp_offset()
        else:
            found = log.offset_for_timestamp(timestamp)
        if found is None:
            return {"partition_index": index, "error_code": ErrorCode.none, "timestamp": -1, "offset": -1,
                    "leader_epoch": -1}
        return {"partition_index": index, "error_code": ErrorCode.none, "timestamp": found[0],
                "offset": found[1], "leader_epoch": epoch}

    # -- Fetch ------------------------------------------------------------------------------------

    async def _fetch(self, ctx: RequestContext, request: Any) -> dict[str, Any]:
        """Fetch v4-v17. v5 adds log_start_offset, v7 sessions (not kept: always a full sessionless answer),
        v9 current leader epochs, v11 rack / preferred read replica (-1), v12 flexible with tagged diverging
        epoch (default), v13 topic ids, v15 replica state. v18 only adds a follower's high watermark and is
        not advertised, matching Kafka 4.1."""
        version = ctx.api_version
        session_epoch = getattr(request, "session_epoch", -1)
        if session_epoch not in _FULL_FETCH_EPOCHS:
            # An incremental fetch names a session; this server never creates one.
            return {"throttle_time": 0, "error_code": ErrorCode.fetch_session_id_not_found, "session_id": 0,
                    "responses": ()}
        loop = asyncio.get_running_loop()
        max_wait = ms(request.max_wait) / 1000
        deadline = loop.time() + max_wait
        while True:
            responses, total, failed, logs = self._fetch_once(request, version)
            if self._closed or failed or total >= request.min_bytes or max_wait <= 0 or not logs:
                break
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            await self._wait_for_data(logs, remaining)
        return {"throttle_time": 0, "error_code": ErrorCode.none, "session_id": 0, "responses": responses}

    def _fetch_once(
        self, request: Any, version: int
    ) -> tuple[list[dict[str, Any]], int, bool, list[PartitionLog]]:
        """One pass over the requested partitions: (topic responses, record bytes, any error, logs read)."""
        remaining = request.max_bytes
        min_one = True
        total = 0
        failed = False
        logs: list[PartitionLog] = []
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
                log: PartitionLog | None = None
                if topic is None:
                    error: ErrorCode | None = missing
                elif not 0 <= index < len(topic.partitions):
                    error = ErrorCode.unknown_topic_or_partition
                else:
                    error = _leader_epoch_error(getattr(p, "current_leader_epoch", -1))
                    log = topic.partitions[index]
                if error is not None or log is None:
                    failed = True
                    partitions.append(_fetch_error(index, error or ErrorCode.unknown_topic_or_partition))
                    continue
                logs.append(log)
                answer = {
                    "partition_index": index,
                    "error_code": ErrorCode.none,
                    "high_watermark": log.high_watermark,
                    "last_stable_offset": log.high_watermark,
                    "log_start_offset": log.log_start_offset,
                    "aborted_transactions": () if read_committed else None,
                    "preferred_read_replica": -1,
                    "records": b"",
                }
                if not log.log_start_offset <= p.fetch_offset <= log.high_watermark:
                    failed = True
                    answer["error_code"] = ErrorCode.offset_out_of_range
                else:
                    data = log.read(p.fetch_offset, min(p.partition_max_bytes, remaining), min_one)
                    if data:
                        min_one = False
                        total += len(data)
                        remaining = max(0, remaining - len(data))
                        answer["records"] = data
                partitions.append(answer)
            responses.append({
                "topic": getattr(fetch_topic, "topic", None),
                "topic_id": getattr(fetch_topic, "topic_id", None),
                "partitions": partitions,
            })
        return responses, total, failed, logs

    async def _wait_for_data(self, logs: list[PartitionLog], timeout: float) -> None:
        """Park until one of `logs` is appended to, its topic is deleted, the plane closes, or `timeout`."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        for log in logs:
            self._waiters.setdefault(log, set()).add(future)
        timer = loop.call_later(timeout, _resolve, future)
        try:
            await future
        finally:
            timer.cancel()
            for log in logs:
                waiters = self._waiters.get(log)
                if waiters is not None:
                    waiters.discard(future)
                    if not waiters:
                        del self._waiters[log]


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _wake(futures: Iterable[asyncio.Future[None]]) -> None:
    for future in list(futures):
        _resolve(future)


def _leader_epoch_error(requested: int) -> ErrorCode | None:
    """Kafka's fencing check on a client's current leader epoch (-1 = unknown, not checked)."""
    if requested == -1 or requested == LEADER_EPOCH:
        return None
    if requested < LEADER_EPOCH:
        return ErrorCode.fenced_leader_epoch
    return ErrorCode.unknown_leader_epoch


def _metadata_error(code: ErrorCode, name: str | None, topic_id: uuid.UUID | None) -> dict[str, Any]:
    return {"error_code": code, "name": name, "topic_id": topic_id, "is_internal": False, "partitions": (),
            "topic_authorized_operations": INT32_MIN}


def _delete_result(name: str | None, topic_id: uuid.UUID | None, code: ErrorCode,
                   message: str | None) -> dict[str, Any]:
    return {"name": name, "topic_id": topic_id, "error_code": code, "error_message": message}


def _init_producer_id_error(code: ErrorCode) -> dict[str, Any]:
    return {"throttle_time": 0, "error_code": code, "producer_id": -1, "producer_epoch": -1}


def _produce_error(index: int, code: ErrorCode, message: str | None) -> dict[str, Any]:
    return {"index": index, "error_code": code, "base_offset": -1, "log_append_time": None,
            "log_start_offset": -1, "record_errors": (), "error_message": message}


def _list_offsets_error(index: int, code: ErrorCode) -> dict[str, Any]:
    return {"partition_index": index, "error_code": code, "timestamp": -1, "offset": -1, "leader_epoch": -1}


def _fetch_error(index: int, code: ErrorCode) -> dict[str, Any]:
    return {"partition_index": index, "error_code": code, "high_watermark": -1, "last_stable_offset": -1,
            "log_start_offset": -1, "aborted_transactions": None, "preferred_read_replica": -1,
            "records": b""}
