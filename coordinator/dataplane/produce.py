"""Produce of the embedded data plane (see embedded.py's module doc): validation and queueing on the event loop in
request order; on disk the writer thread assigns offsets, writes, and for acks=-1 fsyncs before the answer; in
memory a request's batches are appended without awaiting, so they are atomic."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Callable, Mapping
from typing import Any

from coordinator.config import Config
from protocol.api import RequestContext
from protocol.build import ms
from protocol.errors import ErrorCode

from .batches import InvalidBatch, validate_batches
from .disk import DiskLog, LogClosed, StorageFailure, Writer
from .fetch import Waiters
from .memory import PartitionLog

logger = logging.getLogger(__name__)

# Produce acks values: 0 = no response, 1 = leader, -1 = all in-sync replicas (here the leader alone).
_VALID_ACKS = frozenset({0, 1, -1})

# Produce's timeout when a request gives none (0 or less): Kafka clients' request.timeout.ms default.
DEFAULT_PRODUCE_TIMEOUT_MS = 30000


class Writes:
    """Produce over the plane's topics; `writer()` is the disk writer thread once the plane started (durable)."""

    def __init__(
        self,
        config: Config,
        topics: Mapping[str, Any],
        topics_by_id: Mapping[Any, Any],
        writer: Callable[[], Writer | None],
        waiters: Waiters,
    ) -> None:
        self._config = config
        self._topics = topics
        self._topics_by_id = topics_by_id
        self._writer = writer
        self._waiters = waiters

    async def produce(self, ctx: RequestContext, request: Any) -> dict[str, Any] | None:
        """Produce v3-v13. v5 adds log_start_offset, v8 record errors and error messages, v13 topic ids.
        v12 is v11 plus transaction semantics (KIP-890) that do not apply without transactions. Each
        partition's data may hold several batches; they are validated and appended together, or not at all."""
        version = ctx.api_version
        acks = request.acks
        max_batch_bytes = self._config["message.max.bytes"]
        appended: list[PartitionLog] = []
        writes: list[tuple[dict[str, Any], DiskLog, concurrent.futures.Future[int]]] = []
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
                    partitions.append(
                        _produce_error(
                            index, ErrorCode.invalid_required_acks, f"acks={acks} is not one of 0, 1, -1"
                        )
                    )
                    continue
                try:
                    batches = validate_batches(
                        data.records, max_batch_bytes=max_batch_bytes, allow_zstd=version >= 7
                    )
                except InvalidBatch as exc:
                    partitions.append(_produce_error(index, exc.error_code, exc.message))
                    continue
                if any(b.header.is_transactional for b in batches):
                    partitions.append(
                        _produce_error(
                            index,
                            ErrorCode.invalid_txn_state,
                            "transactions are not supported by this server",
                        )
                    )
                    continue
                partition = topic.partitions[index]
                if isinstance(partition, DiskLog):
                    writer = self._writer()
                    if writer is None:
                        partitions.append(
                            _produce_error(
                                index, ErrorCode.kafka_storage_error, "the data plane is not started"
                            )
                        )
                        continue
                    # Answered below, once the writer thread has written (and for acks=-1 fsynced) it.
                    answer = _produce_error(index, ErrorCode.none, None)
                    future = writer.append(partition, [b.data for b in batches], sync=acks == -1)
                    writes.append((answer, partition, future))
                    partitions.append(answer)
                    continue
                base_offset = -1
                for batch in batches:
                    offset = partition.append(batch.data, batch.max_timestamp)
                    if base_offset < 0:
                        base_offset = offset
                appended.append(partition)
                partitions.append(
                    {
                        "index": index,
                        "error_code": ErrorCode.none,
                        "base_offset": base_offset,
                        "log_append_time": None,  # -1: CreateTime
                        "log_start_offset": partition.log_start_offset,
                        "record_errors": (),
                        "error_message": None,
                    }
                )
            responses.append(
                {
                    "name": getattr(topic_data, "name", None),
                    "topic_id": getattr(topic_data, "topic_id", None),
                    "partition_responses": partitions,
                }
            )
        for partition in appended:
            self._waiters.wake(partition)
        if writes:
            # acks=0 waits too, without answering: it keeps a connection's produce requests from piling up.
            await self._await_writes(writes, ms(request.timeout))
        if acks == 0:
            return None
        return {"responses": responses, "throttle_time": 0}

    @staticmethod
    async def _await_writes(
        writes: list[tuple[dict[str, Any], DiskLog, concurrent.futures.Future[int]]], timeout_ms: int
    ) -> None:
        """Fill in each partition's answer once its append is settled, or REQUEST_TIMED_OUT after the
        request's timeout (appends still queued then are withdrawn)."""
        if timeout_ms <= 0:
            timeout_ms = DEFAULT_PRODUCE_TIMEOUT_MS
        waiting = [asyncio.wrap_future(future) for _, _, future in writes]
        try:
            _, late = await asyncio.wait(waiting, timeout=timeout_ms / 1000)
        finally:
            for future in waiting:
                if not future.done():
                    future.cancel()
        for (answer, partition, _), future in zip(writes, waiting, strict=True):
            if future in late or future.cancelled():
                answer["error_code"] = ErrorCode.request_timed_out
                answer["error_message"] = f"the write was not acknowledged within {timeout_ms} ms"
                continue
            exc = future.exception()
            if exc is None:
                answer["error_code"] = ErrorCode.none
                answer["base_offset"] = future.result()
                answer["log_start_offset"] = partition.log_start_offset
            elif isinstance(exc, LogClosed):
                answer["error_code"] = ErrorCode.unknown_topic_or_partition
                answer["error_message"] = str(exc)
            else:
                if not isinstance(exc, StorageFailure):
                    logger.error("append failed", exc_info=exc)
                answer["error_code"] = ErrorCode.kafka_storage_error
                answer["error_message"] = str(exc)


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
