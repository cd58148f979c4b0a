"""format("kgc"): a PySpark streaming source whose driver is a group member and whose progress is the group's.

    spark.dataSource.register(KgcDataSource)
    df = (spark.readStream.format("kgc")
          .option("kafka.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "orders,refunds")
          .option("kafka.group.id", "billing")
          .option("queryName", "billing-v1")    # -> group.instance.id kgc-spark-billing-v1
          .load())

Rows: topic string, partition int, offset long, timestamp timestamp, key binary, value binary, timestampType int
(the columns of Spark's Kafka source), and headers array<struct<key: string, value: binary>> with
includeHeaders=true. Spark's Kafka-source options are taken with their names and meanings (kgc_spark.offsets;
docs/spark.md lists each one).

How a micro-batch is made (pyspark.sql.datasource.DataSourceStreamReader, Spark 4.0+):

- The driver's reader holds a GroupMember (kgc_spark.member): a confluent-kafka consumer subscribed to the
  topics with the group's id (and, given `queryName`, a group.instance.id derived from it, so a restarted
  query takes its old place without a rebalance). Its assignment is what this query reads; another query or
  any other consumer with the same group id gets the rest.
- initialOffset: for each assigned partition, the group's committed offset, else `startingOffsets` (earliest |
  latest | JSON per partition, or the timestamp forms, default earliest).
- latestOffset: the log-end offsets (ListOffsets) of the partitions assigned now, cut to `maxOffsetsPerTrigger`
  from where the last batch ended (Spark's proration). While a rebalance is under way (nothing assigned) it
  answers the previous value, so Spark plans no batch from a half-made assignment.
  Spark asks for it only once the previous batch is complete, so it first commits that batch's end offsets.
- partitions(start, end): one InputPartition per assigned partition with data in [start, end) (split further
  to reach `minPartitions`). A partition no longer assigned is left out (its new owner reads it, from the
  group's committed offset); a partition new to this member starts at the group's committed offset, or
  `startingOffsets`. A start past the log's end is data loss (`failOnDataLoss`).
- read (on the executors): a plain confluent-kafka consumer, assign()ed to one partition at `start`, no
  subscribe and no commits, returns exactly the records with start <= offset < end, as Arrow record batches.
  Offsets that are gone (out of range, truncated) fail the task, or with failOnDataLoss=false are skipped.
- Commits: each completed batch's end offsets go to the group (OffsetCommit, with this member's generation)
  for the partitions the driver still owns, so lag tools and the coordinator's metrics show the query's real
  progress. Spark's own commit(end) for batch N arrives only after it planned batch N+1, and never for the
  last batch before the data stops; so latestOffset, which Spark calls only after the previous batch
  completed, commits that batch first, and commit(end) commits whatever is still behind.
- A driver fenced by a newer one with the same group.instance.id (FENCED_INSTANCE_ID) fails its query.

A batch read (`spark.read.format("kgc")`, KgcBatchReader) joins no group and commits nothing: every partition of
the topics from startingOffsets to endingOffsets (or endingOffsetsByTimestamp / endingTimestamp).

Offsets are JSON {topic: {partition: offset}} (partition as a string key: JSON has no integer keys).

Spark constructs the reader twice (the planner process and the read-function planner) and pickles it to the
executors, so the consumer is created on first use and is never pickled. Spark does not call stop() when a
query stops; it ends the planner process with SIGTERM, on which the member is closed
(GroupMember.close_on_sigterm): a static member of the classic protocol keeps its place as before, one of the
consumer protocol (`kafka.group.protocol=consumer`) leaves with epoch -2, which keeps its partitions for the
query's next start.
"""

from __future__ import annotations

import datetime as _dt
import logging
import os
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import pyarrow as pa
from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, Consumer, KafkaError, KafkaException, TopicPartition
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from kgc_spark.member import TP, GroupMember, offsets_for_times, topic_partitions
from kgc_spark.offsets import (
    EARLIEST,
    LATEST,
    DataLoss,
    OffsetSpec,
    Range,
    parse_bool,
    parse_positive,
    parse_spec,
    rate_limit,
    resolve,
    split_ranges,
)

log = logging.getLogger("kgc_spark.source")
LOG_FILE_ENV = "KGC_SPARK_LOG_FILE"


def _log_to_file_if_asked() -> None:
    """KGC_SPARK_LOG_FILE=PATH: the Python processes Spark starts log kgc_spark's decisions there."""
    path = os.environ.get(LOG_FILE_ENV)
    root = logging.getLogger("kgc_spark")
    if not path or any(getattr(h, "_kgc_spark", False) for h in root.handlers):
        return
    handler = logging.FileHandler(path)
    handler._kgc_spark = True  # type: ignore[attr-defined]
    handler.setFormatter(logging.Formatter("%(asctime)s %(process)d %(name)s %(levelname)s %(message)s"))
    root.addHandler(handler)
    root.setLevel(logging.INFO)


FORMAT = "kgc"
SCHEMA = "topic string, partition int, offset long, timestamp timestamp, key binary, value binary, timestampType int"
HEADERS_SCHEMA = SCHEMA + ", headers array<struct<key: string, value: binary>>"  # includeHeaders=true
ARROW_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("timestampType", pa.int32()),  # 0 CreateTime, 1 LogAppendTime (Spark's Kafka source's column)
    ]
)
ARROW_HEADERS_SCHEMA = ARROW_SCHEMA.append(
    pa.field("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])))
)
INSTANCE_ID_PREFIX = "kgc-spark-"

# Consumer settings that belong to the driver's membership only; the executors' readers never join.
_GROUP_ONLY = {
    "group.instance.id",
    "session.timeout.ms",
    "heartbeat.interval.ms",
    "max.poll.interval.ms",
    "partition.assignment.strategy",
    "group.protocol",
    "group.remote.assignor",
    "enable.auto.commit",
    "auto.commit.interval.ms",
    "enable.auto.offset.store",
    "auto.offset.reset",
}

Offsets = dict[str, dict[str, int]]


def instance_id_for(query_name: str) -> str:
    """The group.instance.id a query of this name holds (the same name -> the same static member)."""
    return INSTANCE_ID_PREFIX + query_name


def offsets_to_json(offsets: Mapping[TP, int]) -> Offsets:
    out: Offsets = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def offsets_from_json(doc: Mapping[str, Mapping[str, int]] | None) -> dict[TP, int]:
    return {(topic, int(p)): int(off) for topic, parts in (doc or {}).items() for p, off in parts.items()}


class KafkaRange(InputPartition):
    """Records start <= offset < end of one topic partition: one Spark task."""

    def __init__(self, topic: str, partition: int, start: int, end: int) -> None:
        super().__init__((topic, partition, start, end))
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end

    def __repr__(self) -> str:
        return f"KafkaRange({self.topic}:{self.partition} [{self.start}, {self.end}))"


@dataclass(frozen=True)
class SourceOptions:
    kafka: dict[str, str]  # librdkafka settings: the `kafka.`-prefixed options, prefix removed
    topics: tuple[str, ...]
    group_id: str  # for a batch read without kafka.group.id: a generated id no group is formed with
    instance_id: str | None
    starting: OffsetSpec
    ending: OffsetSpec | None  # batch reads only
    max_offsets_per_trigger: int | None
    min_partitions: int | None
    fail_on_data_loss: bool
    include_headers: bool
    assignment_timeout_s: float
    request_timeout_s: float
    read_timeout_s: float
    read_batch_size: int

    @classmethod
    def parse(cls, options: Mapping[str, str], *, batch: bool = False) -> SourceOptions:
        kafka = {k[len("kafka.") :]: str(v) for k, v in options.items() if k.lower().startswith("kafka.")}
        if "bootstrap.servers" not in kafka:
            raise ValueError("the kgc source needs option kafka.bootstrap.servers")
        topics = tuple(t.strip() for t in str(options.get("subscribe", "")).split(",") if t.strip())
        if not topics:
            raise ValueError("the kgc source needs option subscribe (comma-separated topics)")
        group_id = kafka.pop("group.id", None) or options.get("groupId")
        if not group_id:
            if not batch:
                raise ValueError(
                    "the kgc source needs option kafka.group.id: the group this query is a member of"
                )
            group_id = f"kgc-spark-batch-{uuid.uuid4().hex[:12]}"
        instance_id = kafka.pop("group.instance.id", None)
        query_name = options.get("queryName")
        if instance_id is None and query_name:
            instance_id = instance_id_for(str(query_name))
        starting = parse_spec(options, "starting", "earliest")
        ending: OffsetSpec | None = None
        if batch:
            ending = parse_spec(options, "ending", "latest")
            if starting.kind == "latest" or LATEST in starting.offsets.values():
                raise ValueError("startingOffsets can't be latest (-1) for batch queries")
            if ending.kind == "earliest" or EARLIEST in ending.offsets.values():
                raise ValueError("endingOffsets can't be earliest (-2) for batch queries")
        else:
            named = [
                n for n in ("endingOffsets", "endingOffsetsByTimestamp", "endingTimestamp") if n in options
            ]
            if named:
                raise ValueError(f"{named[0]} is not valid in streaming queries (it is for spark.read)")
        return cls(
            kafka=kafka,
            topics=topics,
            group_id=str(group_id),
            instance_id=instance_id,
            starting=starting,
            ending=ending,
            max_offsets_per_trigger=parse_positive(options, "maxOffsetsPerTrigger"),
            min_partitions=parse_positive(options, "minPartitions"),
            fail_on_data_loss=parse_bool(options, "failOnDataLoss", True),
            include_headers=parse_bool(options, "includeHeaders", False),
            assignment_timeout_s=float(options.get("assignmentTimeoutMs", "60000")) / 1000.0,
            request_timeout_s=float(options.get("requestTimeoutMs", "30000")) / 1000.0,
            read_timeout_s=float(options.get("readTimeoutMs", "120000")) / 1000.0,
            read_batch_size=int(options.get("readBatchSize", "10000")),
        )

    def member_config(self) -> dict[str, object]:
        conf: dict[str, object] = {"client.id": "kgc-spark-driver", **self.kafka, "group.id": self.group_id}
        if self.instance_id:
            conf["group.instance.id"] = self.instance_id
        return conf

    def reader_config(self) -> dict[str, object]:
        conf: dict[str, object] = {"client.id": "kgc-spark-reader"}
        conf.update({k: v for k, v in self.kafka.items() if k not in _GROUP_ONLY})
        # librdkafka wants a group.id even for assign(); with no subscribe and no commits it sends no group
        # request other than FindCoordinator.
        conf.update(
            {
                "group.id": self.group_id,
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "enable.partition.eof": True,
                # An offset that is gone is reported (failOnDataLoss decides), never silently skipped.
                "auto.offset.reset": "error",
            }
        )
        return conf


class KgcStreamReader(DataSourceStreamReader):
    def __init__(self, options: Mapping[str, str]) -> None:
        _log_to_file_if_asked()
        self.opts = SourceOptions.parse(options)
        self._member: GroupMember | None = None
        self._latest: dict[TP, int] = {}  # the last latestOffset answer: where the next batch starts
        self._planned: dict[TP, int] = {}  # end offsets of the ranges planned last, not yet committed
        self._committed: dict[TP, int] = {}  # what this reader committed to the group

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_member"] = None  # a consumer (and its thread) stays in the process that made it
        return state

    # -- driver side -----------------------------------------------------------------------------------------

    @property
    def member(self) -> GroupMember:
        if self._member is None:
            self._member = GroupMember(
                self.opts.member_config(), self.opts.topics, unreleased_wait_s=self.opts.assignment_timeout_s
            )
            self._member.close_on_sigterm()
        return self._member

    def _starting_positions(self, partitions: frozenset[TP] | set[TP]) -> dict[TP, int]:
        """Where a partition new to this member starts: the group's committed offset, else startingOffsets (or
        its timestamp forms)."""
        if not partitions:
            return {}
        timeout = self.opts.request_timeout_s
        positions = self.member.committed(partitions, timeout)
        missing = [tp for tp in partitions if tp not in positions]
        if missing:
            member = self.member
            positions.update(
                resolve(
                    self.opts.starting,
                    missing,
                    lambda tps: member.low_watermarks(tps, timeout),
                    lambda tps: member.high_watermarks(tps, timeout),
                    lambda stamps: member.offsets_for_times(stamps, timeout),
                )
            )
        return positions

    def _assignment(self) -> frozenset[TP]:
        member = self.member
        if not member.assigned_once:
            # Spark asks for the latest offset before the initial one: wait for the first assignment in both.
            member.wait_for_assignment(self.opts.assignment_timeout_s)
        if member.fatal_error is not None:
            # Typically FENCED_INSTANCE_ID: a newer query with this query's name holds its place in the group.
            raise KafkaException(member.fatal_error)
        return member.assignment()

    def initialOffset(self) -> dict:
        start = self._starting_positions(self._assignment())
        log.info("initial offsets %s", start)
        return offsets_to_json(start)

    def latestOffset(self) -> dict:
        # Spark plans batch N+1 only once batch N is done (its output and Spark's commit log are written), so
        # the batch planned last is complete now: commit it here rather than wait for commit(end), which comes
        # only after batch N+1 is planned, so never for the last batch before the data stops.
        self._commit_planned()
        assigned = self._assignment()
        if not assigned:
            # Mid-rebalance (or more members than partitions): plan nothing new.
            return offsets_to_json(self._latest)
        ends = self.member.high_watermarks(sorted(assigned), self.opts.request_timeout_s)
        if self.opts.max_offsets_per_trigger is not None:
            # Where this batch starts: where the last one ended, else (first batch, a partition new to this
            # member, a restarted query) the group's committed offset or startingOffsets.
            start = {tp: self._latest[tp] for tp in ends if tp in self._latest}
            start.update(self._starting_positions({tp for tp in ends if tp not in start}))
            ends = rate_limit(start, ends, self.opts.max_offsets_per_trigger)
        self._latest = ends
        log.info("latest offsets %s", self._latest)
        return offsets_to_json(self._latest)

    def partitions(self, start: dict, end: dict) -> list[KafkaRange]:
        start_at = offsets_from_json(start)
        end_at = offsets_from_json(end)
        assigned = self.member.assignment()
        new = {tp for tp in end_at if tp in assigned and tp not in start_at}
        start_at.update(self._starting_positions(new))
        loss = DataLoss(self.opts.fail_on_data_loss)
        ranges = []
        for tp, stop in sorted(end_at.items()):
            if tp not in assigned:
                continue  # moved to another member, which reads it from the group's committed offset
            begin = start_at[tp]
            if begin > stop:
                loss.report(f"{tp[0]}-{tp[1]}: the log ends at {stop}, before the batch's start {begin}")
                continue
            if begin < stop:
                ranges.append(Range(tp[0], tp[1], begin, stop))
                self._planned[tp] = stop
        for warning in loss.warnings:
            log.warning("data loss: %s", warning)
        parts = [
            KafkaRange(r.topic, r.partition, r.start, r.end)
            for r in split_ranges(ranges, self.opts.min_partitions)
        ]
        log.info("planned %s", parts)
        return parts

    def commit(self, end: dict) -> None:
        self._commit(offsets_from_json(end))

    def _commit_planned(self) -> None:
        if self._planned:
            planned, self._planned = self._planned, {}
            self._commit(planned)

    def _commit(self, offsets: Mapping[TP, int]) -> None:
        todo = {tp: off for tp, off in offsets.items() if self._committed.get(tp, -1) < off}
        if not todo:
            return
        done = self.member.commit(todo)
        self._committed.update(done)
        if done:
            log.info("committed %s", done)

    def stop(self) -> None:
        if self._member is not None:
            self._member.close()
            self._member = None

    # -- executor side ---------------------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(self.opts, partition)


def read_partition(opts: SourceOptions, partition: InputPartition | None) -> Iterator[pa.RecordBatch]:
    """The executor side of both readers: one planned KafkaRange."""
    if partition is None:  # Spark runs one task with no partition when partitions() planned none
        return iter(())
    assert isinstance(partition, KafkaRange), partition
    return read_range(opts, partition)


def read_range(opts: SourceOptions, part: KafkaRange) -> Iterator[pa.RecordBatch]:
    """Records part.start <= offset < part.end of one partition, in Arrow record batches (with a headers column
    when includeHeaders is on). Offsets that are gone (deleted, truncated) fail the read or, with
    failOnDataLoss=false, are skipped with a warning."""
    if part.start >= part.end:
        return
    conf = opts.reader_config()
    conf["client.id"] = f"{conf['client.id']}-{uuid.uuid4().hex[:8]}"
    schema = ARROW_HEADERS_SCHEMA if opts.include_headers else ARROW_SCHEMA
    loss = DataLoss(opts.fail_on_data_loss)
    consumer = Consumer(conf)
    try:
        tp = TopicPartition(part.topic, part.partition, part.start)
        consumer.assign([tp])
        position = part.start
        deadline = time.monotonic() + opts.read_timeout_s
        columns: dict[str, list] = {name: [] for name in schema.names}
        while position < part.end:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"kgc: read {part.topic}:{part.partition} [{part.start}, {part.end}) stalled at offset "
                    f"{position} for {opts.read_timeout_s:.0f}s"
                )
            messages = consumer.consume(
                num_messages=min(opts.read_batch_size, part.end - position), timeout=1.0
            )
            for msg in messages:
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        # The end of the log; it is short of `end` only if the log was truncated under us.
                        position = max(position, msg.offset())
                        if position < part.end:
                            loss.report(
                                f"{part.topic}-{part.partition} ends at {msg.offset()}, before the planned end "
                                f"{part.end}"
                            )
                            position = part.end
                        break
                    if err.code() == KafkaError._AUTO_OFFSET_RESET:
                        # Offset out of range: the records from `position` were deleted (or the log truncated).
                        low, high = consumer.get_watermark_offsets(
                            TopicPartition(part.topic, part.partition), timeout=opts.request_timeout_s
                        )
                        loss.report(
                            f"{part.topic}-{part.partition}: offset {position} is out of range [{low}, {high})"
                        )
                        position = max(position, low) if low > position else part.end
                        if position < part.end:  # a seek is refused in this state: assign afresh
                            consumer.assign([TopicPartition(part.topic, part.partition, position)])
                        break
                    raise KafkaException(err)
                offset = msg.offset()
                if offset < position:
                    continue
                if offset >= part.end:
                    position = part.end
                    break
                ts_type, ts_ms = msg.timestamp()
                columns["topic"].append(part.topic)
                columns["partition"].append(part.partition)
                columns["offset"].append(offset)
                columns["timestamp"].append(
                    _dt.datetime.fromtimestamp(ts_ms / 1000.0, tz=_dt.UTC)
                    if ts_ms is not None and ts_ms >= 0
                    else None
                )
                columns["key"].append(msg.key())
                columns["value"].append(msg.value())
                columns["timestampType"].append(1 if ts_type == TIMESTAMP_LOG_APPEND_TIME else 0)
                if opts.include_headers:
                    columns["headers"].append([{"key": k, "value": v} for k, v in (msg.headers() or [])])
                position = offset + 1
            if len(columns["offset"]) >= opts.read_batch_size or (position >= part.end and columns["offset"]):
                yield pa.RecordBatch.from_pydict(columns, schema=schema)
                columns = {name: [] for name in schema.names}
        for warning in loss.warnings:
            log.warning("data loss: %s", warning)
    finally:
        consumer.close()


class KgcBatchReader(DataSourceReader):
    """spark.read.format("kgc"): every partition of the subscribed topics from startingOffsets to endingOffsets
    (or their timestamp forms). No group is joined and nothing is committed, as with Spark's Kafka source."""

    def __init__(self, options: Mapping[str, str]) -> None:
        _log_to_file_if_asked()
        self.opts = SourceOptions.parse(options, batch=True)

    def partitions(self) -> list[KafkaRange]:
        opts = self.opts
        timeout = opts.request_timeout_s
        conf = opts.reader_config()
        conf["client.id"] = "kgc-spark-batch-planner"
        consumer = Consumer(conf)
        try:
            tps = topic_partitions(consumer, opts.topics, timeout)
            marks = {
                tp: consumer.get_watermark_offsets(TopicPartition(*tp), timeout=timeout, cached=False)
                for tp in tps
            }

            def low(wanted: list[TP]) -> dict[TP, int]:
                return {tp: marks[tp][0] for tp in wanted}

            def high(wanted: list[TP]) -> dict[TP, int]:
                return {tp: marks[tp][1] for tp in wanted}

            def by_time(stamps: dict[TP, int]) -> dict[TP, int]:
                return offsets_for_times(consumer, stamps, timeout)

            start = resolve(opts.starting, tps, low, high, by_time, unnamed=EARLIEST)
            assert opts.ending is not None
            end = resolve(opts.ending, tps, low, high, by_time, unnamed=LATEST)
        finally:
            consumer.close()
        loss = DataLoss(opts.fail_on_data_loss)
        ranges = []
        for tp in tps:
            begin, stop = start[tp], end[tp]
            if begin < marks[tp][0]:
                loss.report(
                    f"{tp[0]}-{tp[1]}: starting offset {begin} is before the log start {marks[tp][0]}"
                )
                begin = marks[tp][0]
            if stop < begin:
                loss.report(f"{tp[0]}-{tp[1]}: ending offset {stop} is before the starting offset {begin}")
                continue
            ranges.append(Range(tp[0], tp[1], begin, stop))
        for warning in loss.warnings:
            log.warning("data loss: %s", warning)
        parts = [
            KafkaRange(r.topic, r.partition, r.start, r.end)
            for r in split_ranges(ranges, opts.min_partitions)
        ]
        log.info("batch read planned %s", parts)
        return parts

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(self.opts, partition)


class KgcDataSource(DataSource):
    """format("kgc"): see the module docstring."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        return HEADERS_SCHEMA if parse_bool(self.options, "includeHeaders", False) else SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KgcStreamReader(self.options)

    def reader(self, schema: StructType) -> DataSourceReader:
        return KgcBatchReader(self.options)
