"""The embedded (standalone) data plane: topics and partition logs kept by this server itself.

With no upstream Kafka cluster, the coordinator still has to be a complete single-node broker for the clients
that talk to it: they discover partitions with Metadata, create and delete topics, produce, look offsets up
and fetch. This module answers those APIs for one node that leads every partition (replicas = ISR = [this
node], leader epoch 0), so the facts it reports never change behind a client's back.

Design points:

* Batches are stored exactly as the producer sent them (see `batches` for the validation that makes that
  safe); only the baseOffset is rewritten. A Fetch therefore returns bytes a client can verify with the
  producer's own CRC, and there is no re-encoding on either path.
* Partitions are durable when the plane has a data directory (`data_dir`): segment files under
  DATA_DIR/topics, written by one writer thread per data plane (`disk`: layout, group commit, failure
  handling; `segments`: index, recovery, reads). `start()` reopens every topic and recovers every partition (a
  torn or corrupt tail is cut at the first bad batch). Without a data directory, partitions are
  `PartitionLog`s in memory and nothing survives a restart.
* Produce on disk: validation and queueing run on the event loop in request order (so a producer's pipelined
  requests keep their order); the writer assigns offsets, writes, and for acks=-1 fsyncs (one fsync per flush
  for all waiting appends of a partition) before the answer; acks=0/1 are answered once written (page cache).
  A failed write or fsync answers KAFKA_STORAGE_ERROR with nothing of it left in the log; an answer that does
  not come within the request's timeout is REQUEST_TIMED_OUT. In memory, a produce request's batches are
  appended without awaiting, so they are atomic and offsets need no locks.
* Fetch on disk reads the segment files through the sparse index: reads near the end of the log (just written,
  in the page cache) run on the event loop, older ones in a worker thread. A Fetch long poll parks on a future
  registered with the partitions it reads; appends, topic deletion and `close()` wake it.
* Retention (durable partitions only): topic configs segment.bytes, retention.ms and retention.bytes,
  defaulting to the broker settings log.segment.bytes, log.retention.ms and log.retention.bytes, are applied
  every log.retention.check.interval.ms by deleting whole closed segments; the log start offset moves up and
  Fetch / ListOffsets below it answer OFFSET_OUT_OF_RANGE / the new start.
* One replica means the high watermark is the log end offset and, with no transactions, the last stable offset
  is the high watermark too. Fetch sessions (KIP-227) are not kept: every fetch is answered as a full,
  sessionless fetch with session id 0, which clients accept by staying in full-fetch mode.
* Transactions are not supported: InitProducerId with a transactional id answers COORDINATOR_NOT_AVAILABLE and
  transactional batches are refused. Idempotent producers get producer ids and their batches are stored with
  producer id, epoch and sequence as sent (no sequence-number deduplication yet). Producer ids are handed out
  in blocks whose end is persisted (DATA_DIR/topics/producer-ids.state), so ids never repeat after a restart.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import itertools
import logging
import re
import time
import typing
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from coordinator.brokers import Broker
from coordinator.config import Config
from coordinator.tasks import cancel_and_wait
from protocol.api import ApiTable, Encoded, RequestContext, encode_body, response_class
from protocol.api_keys import ApiKey
from protocol.build import build
from protocol.errors import ErrorCode
from storage.fs import FS, OsFS

from .disk import DiskLog, LogClosed, LogConfig, StorageFailure, TopicMeta, TopicStore, Writer
from .fetch import LEADER_EPOCH, Reads, Waiters, resolve
from .memory import PartitionLog
from .produce import Writes

logger = logging.getLogger(__name__)

# api key -> (min version, max version) served by this data plane; each handler's docstring says what the
# versions add and why a range stops where it does.
VERSIONS: dict[ApiKey, tuple[int, int]] = {
    ApiKey.PRODUCE: (3, 13),
    ApiKey.FETCH: (4, 17),
    ApiKey.LIST_OFFSETS: (1, 10),
    ApiKey.METADATA: (0, 13),
    ApiKey.CREATE_TOPICS: (2, 7),
    ApiKey.DELETE_TOPICS: (1, 6),
    ApiKey.INIT_PRODUCER_ID: (0, 5),
}

INT32_MIN = -(2**31)  # "authorized operations not requested"

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

# InitProducerId hands out ids in blocks; only the end of the current block is written to disk.
PRODUCER_ID_BLOCK = 1000

# Topic configs that change how partitions are stored: (lowest, highest, Kafka type), checked at creation.
_LOG_CONFIGS: dict[str, tuple[int, int, str]] = {
    "segment.bytes": (14, 2**31 - 1, "INT"),
    "retention.ms": (-1, 2**63 - 1, "LONG"),
    "retention.bytes": (-(2**63), 2**63 - 1, "LONG"),
}


def topic_name_error(name: str) -> str | None:
    """Why `name` is not a legal Kafka topic name, or None when it is."""
    if not name:
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return f'Topic name cannot be "{name}"'
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        return (
            f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} characters, "
            f"topic name: {name}"
        )
    if not _LEGAL_TOPIC_NAME.fullmatch(name):
        return (
            f'Topic name "{name}" is illegal, it contains a character other than ASCII alphanumerics, '
            "'.', '_' and '-'"
        )
    return None


def _collision_key(name: str) -> str:
    """'.' and '_' collide in metric names, so Kafka refuses topics that differ only by them."""
    return name.replace(".", "_")


@dataclasses.dataclass(eq=False)
class _Topic:
    name: str
    topic_id: uuid.UUID
    partitions: list[Any]  # PartitionLog (in memory) or DiskLog
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

    def __init__(
        self,
        config: Config,
        advertised: Callable[[], Broker],
        *,
        data_dir: str | None = None,
        fs: FS | None = None,
        brokers: Callable[[], list[Broker]] | None = None,
    ) -> None:
        """`data_dir` None keeps partitions in memory; otherwise they live in DATA_DIR/topics, reopened by
        `start()`. `fs` (default: the real filesystem) is for tests that inject faults. `brokers` lists every
        node Metadata announces (several coordinator workers; default: this node only); partitions are led by
        this node either way."""
        self._config = config
        self._advertised = advertised
        self._brokers = brokers
        self._data_dir = data_dir
        self._fs: FS = fs if fs is not None else OsFS()
        self._topics: dict[str, _Topic] = {}
        self._metadata_entries: dict[tuple[Any, ...], Any] = {}  # see _topic_entry
        self._metadata_answers: dict[tuple[Any, ...], Encoded] = {}  # see _metadata
        self._metadata_bytes = 0
        self._topics_by_id: dict[uuid.UUID, _Topic] = {}
        self.topics_version = 0  # moves on every topic created or deleted (consumer groups re-check them)
        self._collision_keys: dict[str, str] = {}  # collision key -> topic name
        # Topics being created or deleted on disk: the name is taken until the disk work ends.
        self._pending: dict[str, asyncio.Future[None]] = {}
        self._producer_ids = itertools.count()
        self._waiters = Waiters()
        # Durable mode, set by start().
        self._store: TopicStore | None = None
        self._writer: Writer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._retention_task: asyncio.Task[None] | None = None
        self._stopped = False
        self._next_producer_id = 0
        self._producer_id_limit = 0  # ids below this are covered by the persisted block end
        self._producer_id_lock = asyncio.Lock()
        self._reads = Reads(self._topics, self._topics_by_id, self._waiters)
        self._writes = Writes(config, self._topics, self._topics_by_id, lambda: self._writer, self._waiters)

    # -- DataPlane --------------------------------------------------------------------------------

    def register(self, table: ApiTable) -> None:
        handlers = {
            ApiKey.PRODUCE: self._writes.produce,
            ApiKey.FETCH: self._reads.fetch,
            ApiKey.LIST_OFFSETS: self._reads.list_offsets,
            ApiKey.METADATA: self._metadata,
            ApiKey.CREATE_TOPICS: self._create_topics,
            ApiKey.DELETE_TOPICS: self._delete_topics,
            ApiKey.INIT_PRODUCER_ID: self._init_producer_id,
        }
        for api_key, handler in handlers.items():
            low, high = VERSIONS[api_key]
            table.register(api_key, low, high, handler)

    @property
    def durable(self) -> bool:
        return self._data_dir is not None

    async def start(self) -> None:
        """In durable mode: open DATA_DIR/topics, recover every partition (in a worker thread), start the
        writer thread and the retention task."""
        if self._stopped:
            raise RuntimeError("a closed durable data plane cannot be started again; make a new one")
        self._waiters.closed = False
        if self._data_dir is None or self._store is not None:
            return
        loop = asyncio.get_running_loop()
        store = TopicStore(self._fs, self._data_dir)
        started = time.monotonic()
        await asyncio.to_thread(store.open)
        try:
            loaded = await asyncio.to_thread(store.load, self._log_config)
            next_producer_id = await asyncio.to_thread(store.read_next_producer_id)
        except BaseException:
            store.close()
            raise
        for topic in loaded:
            meta = topic.meta
            self._install(_Topic(meta.name, meta.topic_id, topic.logs, dict(meta.configs)))
        self._next_producer_id = self._producer_id_limit = next_producer_id
        self._store = store
        self._loop = loop
        self._writer = Writer(self._fs, self._post, self._on_applied)
        self._writer.start()
        self._retention_task = loop.create_task(self._retention_loop())
        partitions = sum(len(t.partitions) for t in self._topics.values())
        logger.info(
            "data plane opened %s: %d topics, %d partitions in %.2fs",
            store.directory,
            len(self._topics),
            partitions,
            time.monotonic() - started,
        )

    def stop_waiting(self) -> None:
        """Shutdown has begun: parked fetches answer at once with what they have, and no new one parks."""
        self._waiters.close()

    async def close(self) -> None:
        """Stop serving long polls (see stop_waiting). In durable mode, also finish queued writes, fsync what
        acks=0/1 left unsynced, and close every file."""
        self.stop_waiting()
        if self._retention_task is not None:
            await cancel_and_wait([self._retention_task], "closing the retention task")
            self._retention_task = None
        if self._writer is None or self._store is None:
            return
        self._stopped = True
        logs = [p for t in self._topics.values() for p in t.partitions]
        self._writer.stop(logs)
        timeout = self._config["shutdown.timeout.ms"] / 1000
        if not await asyncio.to_thread(self._writer.join, timeout):
            logger.error("the data plane writer did not stop within %.1fs (is a fsync hanging?)", timeout)
        for partition in logs:
            partition.retire()
        self._store.close()

    def _post(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run `fn(*args)` on the event loop (from the writer thread)."""
        loop = self._loop
        if loop is None:
            return
        try:
            loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:
            pass  # the loop is closed: nobody is waiting any more

    def _on_applied(self, partition: DiskLog, events: list[tuple[str, Any]]) -> None:
        partition.apply(events)
        self._waiters.wake(partition)

    def _log_config(self, configs: dict[str, str]) -> LogConfig:
        def value(topic_key: str, broker_key: str) -> int:
            text = configs.get(topic_key)
            return self._config[broker_key] if text is None else int(text.strip())

        return LogConfig(
            segment_bytes=value("segment.bytes", "log.segment.bytes"),
            retention_ms=value("retention.ms", "log.retention.ms"),
            retention_bytes=value("retention.bytes", "log.retention.bytes"),
        )

    # -- retention --------------------------------------------------------------------------------

    async def _retention_loop(self) -> None:
        interval = self._config["log.retention.check.interval.ms"] / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                await self.enforce_retention()
            except Exception:
                logger.exception("retention check failed")

    async def enforce_retention(self, now_ms: int | None = None) -> int:
        """Delete the closed segments retention no longer keeps (durable partitions only); returns how many.
        The log start offset moves at once; the files are removed by the writer thread."""
        if self._writer is None or self._store is None:
            return 0
        now = int(time.time() * 1000) if now_ms is None else now_ms
        removed = 0
        for topic in list(self._topics.values()):
            for index, partition in enumerate(topic.partitions):
                if partition.retired:  # its topic was deleted while an earlier removal was awaited
                    continue
                count = partition.retention_victims(now)
                if not count:
                    continue
                victims = partition.drop_oldest(count)
                removed += count
                logger.info(
                    "retention: %s-%d deletes %d segment(s), log start offset now %d",
                    topic.name,
                    index,
                    count,
                    partition.log_start_offset,
                )
                try:
                    await asyncio.wrap_future(
                        self._writer.call(self._store.remove_segments, partition, [v.path for v in victims])
                    )
                except Exception as exc:
                    logger.warning(
                        "retention: removing segments of %s-%d failed (done after a restart): %s",
                        topic.name,
                        index,
                        exc,
                    )
        return removed

    def log_end_offset(self, topic: str, partition: int) -> int | None:
        log = self._log(topic, partition)
        return None if log is None else log.high_watermark

    def partition_count(self, topic: str) -> int | None:
        found = self._topics.get(topic)
        return None if found is None else len(found.partitions)

    async def catch_up(self) -> None:
        return  # the topics live here: every acknowledged change is already visible

    # -- topics -----------------------------------------------------------------------------------

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        """The name of the topic with this id (authorization checks topics by name)."""
        found = self._topics_by_id.get(topic_id)
        return None if found is None else found.name

    def topic_id(self, topic: str) -> uuid.UUID | None:
        found = self._topics.get(topic)
        return None if found is None else found.topic_id

    def topic_names(self) -> list[str]:
        return list(self._topics)

    def create_topic(
        self, name: str, num_partitions: int = -1, configs: dict[str, str] | None = None
    ) -> uuid.UUID:
        """Create a topic as CreateTopics would (-1 partitions = `num.partitions`); raises TopicError.

        In durable mode this blocks until the topic's files are written (for tests and tools; the handlers
        never block)."""
        plan = self._plan_topic(name, num_partitions, -1, (), dict(configs or {}))
        if self._data_dir is None:
            return self._create(plan).topic_id
        writer, store = self._durable_parts()
        meta, config = self._new_meta(plan)
        try:
            logs = writer.call(store.create_topic, meta, config).result()
        except Exception as exc:
            raise TopicError(ErrorCode.kafka_storage_error, f"cannot create topic {name}: {exc}") from exc
        return self._install(_Topic(meta.name, meta.topic_id, logs, meta.configs)).topic_id

    def _log(self, topic: str, partition: int) -> Any:
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
        if name in self._topics or name in self._pending:
            raise TopicError(ErrorCode.topic_already_exists, f"Topic '{name}' already exists.")
        colliding = self._collision_keys.get(_collision_key(name))
        if colliding is not None:
            raise TopicError(
                ErrorCode.invalid_topic_exception, f"Topic '{name}' collides with existing topic: {colliding}"
            )
        null_configs = sorted(k for k, v in configs.items() if v is None)
        if null_configs:
            raise TopicError(
                ErrorCode.invalid_config,
                f"Null value not supported for topic configs: {','.join(null_configs)}",
            )
        for key, (lowest, highest, kind) in _LOG_CONFIGS.items():
            text = configs.get(key)
            if text is None:
                continue
            try:
                number = int(text.strip())
            except ValueError:
                raise TopicError(
                    ErrorCode.invalid_config,
                    f"Invalid value {text} for configuration {key}: Not a number of type {kind}",
                ) from None
            if number < lowest:
                raise TopicError(
                    ErrorCode.invalid_config,
                    f"Invalid value {text} for configuration {key}: Value must be at least {lowest}",
                )
            if number > highest:
                raise TopicError(
                    ErrorCode.invalid_config,
                    f"Invalid value {text} for configuration {key}: Value must be no more than {highest}",
                )
        node_id = self._advertised().node_id
        assignments = list(assignments)
        if assignments:
            if replication_factor != -1:
                raise TopicError(
                    ErrorCode.invalid_request,
                    "A manual partition assignment was specified, but replication factor was not set to -1.",
                )
            if num_partitions != -1:
                raise TopicError(
                    ErrorCode.invalid_request,
                    "A manual partition assignment was specified, but numPartitions was not set to -1.",
                )
            indexes: set[int] = set()
            for assignment in assignments:
                index = assignment.partition_index
                if index in indexes:
                    raise TopicError(
                        ErrorCode.invalid_replica_assignment,
                        f"Found multiple manual partition assignments for partition {index}",
                    )
                indexes.add(index)
                brokers = list(assignment.broker_ids)
                if not brokers:
                    raise TopicError(
                        ErrorCode.invalid_replica_assignment,
                        "The manual partition assignment includes an empty replica list.",
                    )
                for broker in brokers:
                    if broker != node_id:
                        raise TopicError(
                            ErrorCode.invalid_replica_assignment,
                            f"The manual partition assignment includes broker {broker}, but "
                            "no such broker is registered.",
                        )
                if len(brokers) > 1:
                    raise TopicError(
                        ErrorCode.invalid_replica_assignment,
                        f"The manual partition assignment includes the broker {node_id} more than once.",
                    )
            if indexes != set(range(len(indexes))):
                raise TopicError(
                    ErrorCode.invalid_replica_assignment,
                    "partitions should be a consecutive 0-based integer sequence",
                )
            num_partitions = len(indexes)
            replication_factor = 1
        else:
            if replication_factor < -1 or replication_factor == 0:
                raise TopicError(
                    ErrorCode.invalid_replication_factor,
                    "Replication factor must be larger than 0, or -1 to use the default value.",
                )
            if num_partitions < -1 or num_partitions == 0:
                raise TopicError(
                    ErrorCode.invalid_partitions,
                    "Number of partitions was set to an invalid non-positive value.",
                )
            if num_partitions == -1:
                num_partitions = self._config["num.partitions"]
            if replication_factor == -1:
                replication_factor = self._config["default.replication.factor"]
            if replication_factor > 1:
                raise TopicError(
                    ErrorCode.invalid_replication_factor,
                    f"Unable to replicate the partition {replication_factor} time(s): The "
                    f"target replication factor of {replication_factor} cannot be reached "
                    "because only 1 broker(s) are registered.",
                )
        if num_partitions > MAX_PARTITIONS_PER_TOPIC:
            raise TopicError(
                ErrorCode.policy_violation, "Unable to perform excessively large batch operation."
            )
        return _TopicPlan(
            name, num_partitions, replication_factor, {k: v for k, v in configs.items() if v is not None}
        )

    def _new_topic_id(self) -> uuid.UUID:
        topic_id = uuid.uuid4()
        while topic_id in self._topics_by_id or topic_id.int == 0:  # pragma: no cover - astronomically rare
            topic_id = uuid.uuid4()
        return topic_id

    def _create(self, plan: _TopicPlan) -> _Topic:
        """An in-memory topic."""
        logs = [PartitionLog() for _ in range(plan.num_partitions)]
        return self._install(_Topic(plan.name, self._new_topic_id(), logs, plan.configs))

    def _install(self, topic: _Topic) -> _Topic:
        self.topics_version += 1
        self._topics[topic.name] = topic
        self._topics_by_id[topic.topic_id] = topic
        self._collision_keys[_collision_key(topic.name)] = topic.name
        return topic

    def _delete(self, topic: _Topic) -> None:
        self.topics_version += 1
        del self._topics[topic.name]
        del self._topics_by_id[topic.topic_id]
        if self._collision_keys.get(_collision_key(topic.name)) == topic.name:
            del self._collision_keys[_collision_key(topic.name)]
        for partition in topic.partitions:
            self._waiters.forget(partition)

    def _durable_parts(self) -> tuple[Writer, TopicStore]:
        if self._writer is None or self._store is None:
            raise RuntimeError("the durable data plane is not started")
        return self._writer, self._store

    def _new_meta(self, plan: _TopicPlan) -> tuple[TopicMeta, LogConfig]:
        meta = TopicMeta(plan.name, self._new_topic_id(), plan.num_partitions, dict(plan.configs))
        return meta, self._log_config(meta.configs)

    def _reserve(self, name: str) -> asyncio.Future[None]:
        """Take `name` while its topic is created or deleted on disk (other creations see it as existing)."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending[name] = future
        self._collision_keys.setdefault(_collision_key(name), name)
        return future

    def _unreserve(self, name: str, future: asyncio.Future[None]) -> None:
        if self._pending.get(name) is future:
            del self._pending[name]
        key = _collision_key(name)
        if name not in self._topics and self._collision_keys.get(key) == name:
            del self._collision_keys[key]
        resolve(future)

    async def _settled(self, name: str) -> None:
        """Wait until no creation or deletion of `name` is under way."""
        while (future := self._pending.get(name)) is not None:
            await asyncio.shield(future)

    async def _create_topic(self, plan: _TopicPlan) -> _Topic:
        """Create a planned topic: in memory at once, on disk through the writer thread."""
        if self._data_dir is None:
            return self._create(plan)
        writer, store = self._durable_parts()
        meta, config = self._new_meta(plan)
        reservation = self._reserve(plan.name)
        try:
            logs = await asyncio.wrap_future(writer.call(store.create_topic, meta, config))
        except (OSError, StorageFailure, LogClosed) as exc:
            logger.error("cannot create topic %s: %s", plan.name, exc)
            raise TopicError(
                ErrorCode.kafka_storage_error, f"cannot create topic {plan.name}: {exc}"
            ) from exc
        else:
            return self._install(_Topic(meta.name, meta.topic_id, logs, meta.configs))
        finally:
            self._unreserve(plan.name, reservation)

    async def _delete_topic(self, topic: _Topic) -> tuple[ErrorCode, str | None]:
        """Delete a topic: in memory at once; on disk the metadata file goes first (the commit point), and if
        that fails the topic stays."""
        self._delete(topic)
        if self._data_dir is None:
            return ErrorCode.none, None
        writer, store = self._durable_parts()
        meta = TopicMeta(topic.name, topic.topic_id, len(topic.partitions), topic.configs)
        reservation = self._reserve(topic.name)
        try:
            await asyncio.wrap_future(writer.call(store.delete_topic, meta, list(topic.partitions)))
        except (OSError, StorageFailure, LogClosed) as exc:
            logger.error("cannot delete topic %s: %s", topic.name, exc)
            self._install(topic)
            return ErrorCode.kafka_storage_error, f"cannot delete topic {topic.name}: {exc}"
        finally:
            self._unreserve(topic.name, reservation)
        for partition in topic.partitions:
            partition.retire()
        return ErrorCode.none, None

    # -- Metadata ---------------------------------------------------------------------------------

    async def _metadata(self, ctx: RequestContext, request: Any) -> dict[str, Any] | Encoded:
        """Metadata v0-v13. v1 adds null = all topics, v4 allow_auto_topic_creation, v8-v10 authorized
        operations, v10 topic ids, v12 lookups by topic id, v13 a top-level error code (always NONE here)."""
        version = ctx.api_version
        node = self._advertised()
        requested = request.topics
        all_topics = requested is None or (version == 0 and not requested)
        with_topic_ops = bool(getattr(request, "include_topic_authorized_operations", False))
        with_cluster_ops = bool(getattr(request, "include_cluster_authorized_operations", False))
        auto_create = (
            self._config["auto.create.topics.enable"]
            and bool(getattr(request, "allow_auto_topic_creation", True))
            and not all_topics
        )

        topics: list[Any] = []
        if all_topics:
            topics = [
                self._topic_entry(t, node.node_id, with_topic_ops, version) for t in self._topics.values()
            ]
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
                        topics.append(self._topic_entry(found, node.node_id, with_topic_ops, version))
                    continue
                if name is None:
                    topics.append(_metadata_error(ErrorCode.invalid_request, None, None))
                    continue
                found = self._topics.get(name)
                if found is None and name in self._pending:
                    await self._settled(name)
                    found = self._topics.get(name)
                if found is None:
                    if topic_name_error(name) is not None:
                        topics.append(_metadata_error(ErrorCode.invalid_topic_exception, name, None))
                        continue
                    if not auto_create:
                        topics.append(_metadata_error(ErrorCode.unknown_topic_or_partition, name, None))
                        continue
                    try:
                        found = await self._create_topic(self._plan_topic(name, -1, -1, (), {}))
                    except TopicError as exc:
                        topics.append(_metadata_error(exc.error_code, name, None))
                        continue
                topics.append(self._topic_entry(found, node.node_id, with_topic_ops, version))

        brokers = tuple(
            (b.node_id, b.host, b.port) for b in (self._brokers() if self._brokers is not None else (node,))
        )
        response = {
            "throttle_time": 0,
            "error_code": ErrorCode.none,
            "brokers": [{"node_id": n, "host": h, "port": p, "rack": None} for n, h, p in brokers],
            "cluster_id": self._config["cluster.id"],
            "controller_id": node.node_id,
            "topics": topics,
            "cluster_authorized_operations": CLUSTER_OPERATIONS if with_cluster_ops else INT32_MIN,
        }
        if any(isinstance(t, dict) for t in topics):  # an error entry: not kept
            return response
        # The same question gets the same answer until a topic changes: keep the encoded body. Each entry is
        # _topic_entry's kept entity, so its key says everything the entry says.
        key = (
            version,
            node.node_id,
            with_topic_ops,
            with_cluster_ops,
            brokers,
            tuple((t.name, getattr(t, "topic_id", None), len(t.partitions)) for t in topics),
        )
        encoded = self._metadata_answers.get(key)
        if encoded is None:
            encoded = encode_body(ApiKey.METADATA, version, response)
            self._metadata_bytes += len(encoded.body)
            if (
                len(self._metadata_answers) >= METADATA_ENTRIES_KEPT
                or self._metadata_bytes > METADATA_BYTES_KEPT
            ):
                self._metadata_answers.clear()
                self._metadata_bytes = len(encoded.body)
            self._metadata_answers[key] = encoded
        return encoded

    def _topic_entry(self, topic: _Topic, node_id: int, with_ops: bool, version: int) -> Any:
        """A topic's Metadata entry as the response version's entity, built once and kept: every client asks
        for Metadata again and again (librdkafka at start-up and on every refresh), and building a topic of
        500 partitions field by field took most of a busy server's time (profiled with 500 members joining).
        The key changes whenever the answer would (a new partition count, a re-created topic)."""
        key = (
            topic.name,
            topic.topic_id,
            len(topic.partitions),
            topic.is_internal,
            node_id,
            with_ops,
            version,
        )
        entry = self._metadata_entries.get(key)
        if entry is None:
            if len(self._metadata_entries) >= METADATA_ENTRIES_KEPT:
                self._metadata_entries.clear()
            topic_class = _metadata_topic_class(version)
            entry = self._metadata_entries[key] = build(
                topic_class, self._topic_metadata(topic, node_id, with_ops)
            )
        return entry

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
                plan = self._plan_topic(
                    topic.name, topic.num_partitions, topic.replication_factor, topic.assignments, configs
                )
            except TopicError as exc:
                results.append(
                    {
                        "name": topic.name,
                        "topic_id": None,
                        "error_code": exc.error_code,
                        "error_message": exc.message,
                        "num_partitions": -1,
                        "replication_factor": -1,
                        "configs": (),
                    }
                )
                continue
            if request.validate_only:
                topic_id = None
            else:
                try:
                    topic_id = (await self._create_topic(plan)).topic_id
                except TopicError as exc:
                    results.append(
                        {
                            "name": topic.name,
                            "topic_id": None,
                            "error_code": exc.error_code,
                            "error_message": exc.message,
                            "num_partitions": -1,
                            "replication_factor": -1,
                            "configs": (),
                        }
                    )
                    continue
            results.append(
                {
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
                }
            )
        for name, count in counts.items():
            if count > 1:
                results.append(
                    {
                        "name": name,
                        "topic_id": None,
                        "error_code": ErrorCode.invalid_request,
                        "error_message": "Duplicate topic name.",
                        "num_partitions": -1,
                        "replication_factor": -1,
                        "configs": (),
                    }
                )
        return {"throttle_time": 0, "topics": results}

    # -- DeleteTopics -----------------------------------------------------------------------------

    async def _delete_topics(self, ctx: RequestContext, request: Any) -> dict[str, Any]:
        """DeleteTopics v1-v6. v5 adds error messages, v6 deletion by topic id."""
        results: list[dict[str, Any]] = []
        names: list[str] = list(getattr(request, "topic_names", ()))
        ids: list[uuid.UUID] = []
        for state in getattr(request, "topics", ()):
            if state.name is None and state.topic_id is None:
                results.append(
                    _delete_result(
                        None, None, ErrorCode.invalid_request, "Neither topic name nor id were specified."
                    )
                )
            elif state.name is not None and state.topic_id is not None:
                results.append(
                    _delete_result(
                        state.name,
                        state.topic_id,
                        ErrorCode.invalid_request,
                        "You may not specify both topic name and topic id.",
                    )
                )
            elif state.name is not None:
                names.append(state.name)
            else:
                ids.append(state.topic_id)
        name_counts = Counter(names)
        id_counts = Counter(ids)
        targets: list[_Topic] = []
        for topic_id, count in id_counts.items():
            if count > 1:
                results.append(
                    _delete_result(None, topic_id, ErrorCode.invalid_request, "Duplicate topic id.")
                )
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
                results.append(
                    _delete_result(
                        name,
                        None,
                        ErrorCode.unknown_topic_or_partition,
                        "This server does not host this topic-partition.",
                    )
                )
            elif found not in targets:
                targets.append(found)
        for found in targets:
            if self._topics.get(found.name) is not found:  # deleted by another request meanwhile
                results.append(
                    _delete_result(
                        found.name,
                        found.topic_id,
                        ErrorCode.unknown_topic_or_partition,
                        "This server does not host this topic-partition.",
                    )
                )
                continue
            code, message = await self._delete_topic(found)
            results.append(_delete_result(found.name, found.topic_id, code, message))
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
        if self._data_dir is None:
            producer_id = next(self._producer_ids)
        else:
            try:
                producer_id = await self._allocate_producer_id()
            except (OSError, StorageFailure, LogClosed, RuntimeError) as exc:
                logger.error("cannot persist the next producer id block: %s", exc)
                return _init_producer_id_error(ErrorCode.coordinator_not_available)
        return {
            "throttle_time": 0,
            "error_code": ErrorCode.none,
            "producer_id": producer_id,
            "producer_epoch": 0,
        }

    async def _allocate_producer_id(self) -> int:
        """The next producer id; a new block's end is made durable before any id of it is handed out."""
        async with self._producer_id_lock:
            if self._next_producer_id >= self._producer_id_limit:
                writer, store = self._durable_parts()
                limit = self._next_producer_id + PRODUCER_ID_BLOCK
                await asyncio.wrap_future(writer.call(store.write_next_producer_id, limit))
                self._producer_id_limit = limit
            producer_id = self._next_producer_id
            self._next_producer_id += 1
            return producer_id


METADATA_ENTRIES_KEPT = 4096
METADATA_BYTES_KEPT = 32 << 20  # encoded Metadata answers kept, at most


@functools.cache
def _metadata_topic_class(version: int) -> type:
    """The entity class of one topic in a Metadata response of `version`."""
    return typing.get_args(typing.get_type_hints(response_class(ApiKey.METADATA, version))["topics"])[0]


def _metadata_error(code: ErrorCode, name: str | None, topic_id: uuid.UUID | None) -> dict[str, Any]:
    return {
        "error_code": code,
        "name": name,
        "topic_id": topic_id,
        "is_internal": False,
        "partitions": (),
        "topic_authorized_operations": INT32_MIN,
    }


def _delete_result(
    name: str | None, topic_id: uuid.UUID | None, code: ErrorCode, message: str | None
) -> dict[str, Any]:
    return {"name": name, "topic_id": topic_id, "error_code": code, "error_message": message}


def _init_producer_id_error(code: ErrorCode) -> dict[str, Any]:
    return {"throttle_time": 0, "error_code": code, "producer_id": -1, "producer_epoch": -1}
