"""OffsetCommit, OffsetFetch and OffsetDelete, and offset retention (Kafka's OffsetMetadataManager).

Handlers validate against the group (the classic groups of the shard, coordinator.group.manager, and its
consumer groups, coordinator.consumer.manager: this manager asks them, they never ask this one), emit OffsetCommit records and tombstones, and answer once those are durable;
the offsets themselves change only in `replay` (see store.py). Requests arrive as kio entities of any version,
read with the fields that version has.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from kio.schema.offset_commit.v9.response import (
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
)
from kio.schema.offset_delete.v0.response import OffsetDeleteResponse
from kio.schema.offset_fetch.v7.response import OffsetFetchResponse as OffsetFetchResponseV7
from kio.schema.offset_fetch.v9.response import OffsetFetchResponse as OffsetFetchResponseV9
from kio.schema.offset_fetch.v9.response import (
    OffsetFetchResponseGroup,
    OffsetFetchResponsePartitions,
    OffsetFetchResponseTopics,
)

from coordinator.clock import Clock
from coordinator.consumer.manager import ConsumerGroupManager
from coordinator.group.manager import GroupMetadataManager
from coordinator.group.state import ClassicGroupState
from coordinator.records import (
    CoordinatorRecord,
    OffsetCommitKey,
    OffsetCommitValue,
    new_offset_commit_record,
    new_offset_commit_tombstone,
)
from coordinator.result import CoordinatorResult
from protocol.api import CACHED_COMMIT_PARTITIONS
from protocol.build import build, ms
from protocol.errors import ErrorCode

from .store import OffsetStore

log = logging.getLogger(__name__)

NO_OFFSET = -1
NO_LEADER_EPOCH = -1
NO_METADATA = ""
DEFAULT_RETENTION_TIME_MS = -1  # OffsetCommit v2-v4 RetentionTimeMs: -1 = the broker's retention applies


def _metadata_length(metadata: str) -> int:
    """Kafka bounds metadata by Java's String.length(): UTF-16 code units."""
    return len(metadata.encode("utf-16-le")) // 2


class OffsetMetadataManager:
    def __init__(
        self,
        groups: GroupMetadataManager,
        clock: Clock,
        *,
        consumer: ConsumerGroupManager,
        offset_metadata_max_bytes: int = 4096,
        offsets_retention_ms: int = 7 * 24 * 3600 * 1000,
    ) -> None:
        self._groups = groups
        self._consumer = consumer
        self._clock = clock
        self.offset_metadata_max_bytes = offset_metadata_max_bytes
        self.offsets_retention_ms = offsets_retention_ms
        self.store = OffsetStore()
        self._answers: dict[Any, OffsetCommitResponse] = {}  # see _commit_answer

    # -- OffsetCommit ----------------------------------------------------------------------------------------

    def commit_offsets(self, token: object, api_version: int, request: Any) -> CoordinatorResult:
        group_id = request.group_id
        topics = request.topics
        error = self.validate_offset_commit(
            api_version,
            group_id,
            getattr(request, "member_id", ""),
            getattr(request, "group_instance_id", None),
            int(getattr(request, "generation_id_or_member_epoch", -1)),
            # (a generator: read only by a consumer group member committing at an older epoch)
            ((topic.name, int(p.partition_index)) for topic in topics for p in topic.partitions),
        )
        if error != ErrorCode.none:
            return CoordinatorResult(responses=[(token, _commit_error_response(topics, error))])

        now_ms = self._clock.wall_ms()
        retention_time = getattr(request, "retention_time", None)  # v2-v4
        retention_ms = DEFAULT_RETENTION_TIME_MS if retention_time is None else ms(retention_time)
        expire_timestamp_ms = -1 if retention_ms == DEFAULT_RETENTION_TIME_MS else now_ms + retention_ms
        records: list[CoordinatorRecord] = []
        committed: list[tuple[str, int]] = []
        layout = []  # (topic, ((partition, error), ...)) per topic: the answer's content, and its key in _answers
        partitions = 0
        for topic in topics:
            partitions += len(topic.partitions)
            outcomes = []
            for partition in topic.partitions:
                metadata = partition.committed_metadata
                if (
                    metadata  # at most 2 UTF-16 code units per character: only a long one needs counting
                    and 2 * len(metadata) > self.offset_metadata_max_bytes
                    and _metadata_length(metadata) > self.offset_metadata_max_bytes
                ):
                    partition_error = ErrorCode.offset_metadata_too_large
                else:
                    partition_error = ErrorCode.none
                    records.append(
                        new_offset_commit_record(
                            group_id,
                            topic.name,
                            partition.partition_index,
                            partition.committed_offset,
                            leader_epoch=int(getattr(partition, "committed_leader_epoch", NO_LEADER_EPOCH)),
                            metadata=NO_METADATA if metadata is None else metadata,
                            commit_timestamp_ms=now_ms,
                            expire_timestamp_ms=expire_timestamp_ms,
                        )
                    )
                    committed.append((topic.name, partition.partition_index))
                outcomes.append((partition.partition_index, partition_error))
            layout.append((topic.name, tuple(outcomes)))
        answer = self._commit_answer(tuple(layout), partitions)

        for topic_name, partition_index in committed:
            self.store.add_pending(group_id, topic_name, partition_index)

        def on_append_failure(error_code: int) -> CoordinatorResult:
            for topic_name, partition_index in committed:
                self.store.remove_pending(group_id, topic_name, partition_index)
            error = ErrorCode(error_code)
            return CoordinatorResult(responses=[(token, _commit_error_response(topics, error))])

        return CoordinatorResult(
            records=records,
            responses=[(token, answer)],
            on_append_failure=on_append_failure if records else None,
        )

    def _commit_answer(
        self, layout: tuple[tuple[Any, tuple[tuple[Any, ErrorCode], ...]], ...], partitions: int
    ) -> Any:
        """The OffsetCommit answer naming these (topic, ((partition, error), ...)). A consumer commits the same few
        partitions again and again: the answer to a commit of at most CACHED_COMMIT_PARTITIONS is made once and
        given again (three frozen entities less per commit, and the same object lets the codec and the request
        metrics reuse what they worked out from it; entities are immutable)."""
        cached = partitions <= CACHED_COMMIT_PARTITIONS
        answer = self._answers.get(layout) if cached else None
        if answer is None:
            # made directly, not with build(): this is every commit's answer
            answer = OffsetCommitResponse(
                throttle_time=_NO_THROTTLE,
                topics=tuple(
                    OffsetCommitResponseTopic(
                        name=name,
                        partitions=tuple(
                            OffsetCommitResponsePartition(partition_index=index, error_code=error)
                            for index, error in outcomes
                        ),
                    )
                    for name, outcomes in layout
                ),
            )
            if cached:
                if len(self._answers) >= _CACHED_ANSWERS:
                    self._answers.clear()  # a new set of partitions is committed from now on, most likely
                self._answers[layout] = answer
        return answer

    # -- OffsetFetch -----------------------------------------------------------------------------------------

    def fetch_offsets(self, token: object, api_version: int, request: Any) -> CoordinatorResult:
        require_stable = bool(getattr(request, "require_stable", False))
        if api_version >= 8 or hasattr(request, "groups"):
            groups = [
                self._fetch_group(
                    g.group_id,
                    _requested_topics(g.topics),
                    require_stable,
                    getattr(g, "member_id", None),
                    int(getattr(g, "member_epoch", -1)),
                )
                for g in request.groups
            ]
            if api_version >= 8:  # made directly, not with build(): every consumer's fetch at start-up
                answer_v9 = OffsetFetchResponseV9(throttle_time=_NO_THROTTLE, groups=tuple(groups))
                return CoordinatorResult(responses=[(token, answer_v9)])
            answer = groups[0] if groups else {"topics": [], "error_code": ErrorCode.none}
        else:
            answer = self._fetch_group(request.group_id, _requested_topics(request.topics), require_stable)
        return CoordinatorResult(responses=[(token, build(OffsetFetchResponseV7, answer))])

    def _fetch_group(
        self,
        group_id: str,
        topics: list[tuple[str, list[int]]] | None,
        require_stable: bool,
        member_id: str | None = None,
        member_epoch: int = -1,
    ) -> Any:
        """The group's entry of a v8+ answer, an OffsetFetchResponseGroup (converted, the whole of an older one)."""
        consumer_group = self._consumer.groups.get(group_id)
        if consumer_group is not None:
            error = self._consumer.validate_offset_fetch(consumer_group, member_id, member_epoch)
            if error != ErrorCode.none:
                return _FetchGroup(group_id=group_id, topics=(), error_code=error)
        allowed = self.is_offset_fetch_allowed(group_id)
        response_topics = []
        if topics is None:  # all committed offsets of the group
            if allowed:
                by_topic: dict[str, list[int]] = {
                    topic: list(offsets) for topic, offsets in self.store.group_offsets(group_id).items()
                }
                if require_stable:
                    for topic, partition in self.store.pending_partitions(group_id):
                        if partition not in by_topic.setdefault(topic, []):
                            by_topic[topic].append(partition)
                topics = list(by_topic.items())
            else:
                topics = []
        for topic, partitions in topics:
            response_partitions = []
            for partition in partitions:
                offset = self.store.get(group_id, topic, partition) if allowed else None
                if require_stable and allowed and self.store.has_pending(group_id, topic, partition):
                    # A commit of this partition is on its way to the log: the client retries.
                    response_partitions.append(
                        _unknown_partition(partition, ErrorCode.unstable_offset_commit)
                    )
                elif offset is None:
                    response_partitions.append(_unknown_partition(partition, ErrorCode.none))
                else:
                    response_partitions.append(
                        _FetchPartition(
                            partition_index=partition,
                            committed_offset=offset.committed_offset,
                            committed_leader_epoch=offset.leader_epoch,
                            metadata=offset.metadata,
                            error_code=ErrorCode.none,
                        )
                    )
            response_topics.append(_FetchTopic(name=topic, partitions=tuple(response_partitions)))
        return _FetchGroup(group_id=group_id, topics=tuple(response_topics), error_code=ErrorCode.none)

    # -- OffsetDelete ----------------------------------------------------------------------------------------

    def delete_offsets(self, token: object, api_version: int, request: Any) -> CoordinatorResult:
        group_id = request.group_id
        error = self.validate_offset_delete(group_id) if group_id else ErrorCode.invalid_group_id
        if error != ErrorCode.none:
            return CoordinatorResult(responses=[(token, build(OffsetDeleteResponse, {"error_code": error}))])
        records = []
        response_topics = []
        for topic in request.topics:
            subscribed = self._is_subscribed_to_topic(group_id, topic.name)
            response_partitions = []
            for partition in topic.partitions:
                index = partition.partition_index
                if subscribed:
                    response_partitions.append(
                        {"partition_index": index, "error_code": ErrorCode.group_subscribed_to_topic}
                    )
                    continue
                response_partitions.append({"partition_index": index, "error_code": ErrorCode.none})
                if self.store.get(group_id, topic.name, index) is not None or self.store.has_pending(
                    group_id, topic.name, index
                ):
                    records.append(new_offset_commit_tombstone(group_id, topic.name, index))
            response_topics.append({"name": topic.name, "partitions": response_partitions})

        def on_append_failure(error_code: int) -> CoordinatorResult:
            return CoordinatorResult(
                responses=[(token, build(OffsetDeleteResponse, {"error_code": error_code}))]
            )

        return CoordinatorResult(
            records=records,
            responses=[
                (
                    token,
                    build(OffsetDeleteResponse, {"error_code": ErrorCode.none, "topics": response_topics}),
                )
            ],
            on_append_failure=on_append_failure if records else None,
        )

    # -- for DeleteGroups and retention ----------------------------------------------------------------------

    def delete_all_offsets(self, group_id: str) -> list[CoordinatorRecord]:
        """Tombstones for every offset of the group, commits not yet durable included (written after them)."""
        seen = set()
        records = []
        for topic, partition in self.store.partition_keys(group_id):
            seen.add((topic, partition))
            records.append(new_offset_commit_tombstone(group_id, topic, partition))
        for topic, partition in self.store.pending_partitions(group_id):
            if (topic, partition) not in seen:
                records.append(new_offset_commit_tombstone(group_id, topic, partition))
        return records

    def has_offsets(self, group_id: str) -> bool:
        return self.store.has_offsets(group_id) or bool(self.store.pending_partitions(group_id))

    def cleanup_expired_offsets(self, group_id: str, now_ms: int) -> tuple[list[CoordinatorRecord], bool]:
        """Tombstones for the group's expired offsets (KIP-211), and whether all of its offsets expired."""
        if not self.has_offsets(group_id):
            return [], True
        base = self._offset_expiration_base(group_id)
        if base is None:
            return [], False
        records = []
        all_expired = not self.store.pending_partitions(group_id)
        for topic, partition, offset in self.store.partitions(group_id):
            if (
                not self._is_subscribed_to_topic(group_id, topic)
                and not self.store.has_pending(group_id, topic, partition)
                and offset.is_expired(now_ms, self.offsets_retention_ms, base(offset.commit_timestamp_ms))
            ):
                records.append(new_offset_commit_tombstone(group_id, topic, partition))
            else:
                all_expired = False
        return records, all_expired

    # -- replay ----------------------------------------------------------------------------------------------

    def replay(self, key: OffsetCommitKey, value: OffsetCommitValue | None) -> None:
        if value is None:
            self.store.replay(key, None)
        else:
            if key.group not in self._groups.groups and key.group not in self._consumer.groups:
                self._groups.create_group(key.group)  # offsets of a group the log holds no record of: simple
            self.store.replay_commit(key, value)  # = remove_pending, then replay

    # -- validation against the group ------------------------------------------------------------------------

    def validate_offset_commit(
        self,
        api_version: int,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        partitions: Iterable[tuple[str, int]] = (),
    ) -> ErrorCode:
        """Validate a commit of `partitions` (topic, partition; a consumer group's member may commit those it
        held at an older epoch) (creating a simple group for a generation -1 commit to an unknown group) and
        refresh the committing member's session."""
        consumer_group = self._consumer.groups.get(group_id)
        if consumer_group is not None:
            return self._consumer.validate_offset_commit(
                consumer_group, member_id, generation_id, api_version, partitions=partitions
            )
        group = self._groups.groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                # v9 answers GROUP_ID_NOT_FOUND for both protocols; older versions keep ILLEGAL_GENERATION.
                return ErrorCode.group_id_not_found if api_version >= 9 else ErrorCode.illegal_generation
            # A commit from a consumer that does not use group management (or from an admin): a "simple" group
            # without a protocol type comes to exist for its offsets.
            log.info("creating simple group %s for a manual offset commit", group_id)
            group = self._groups.create_group(group_id)
        error = group.validate_offset_commit(member_id, group_instance_id, generation_id)
        if error == ErrorCode.fenced_instance_id:
            self._groups.emit_fenced(group, member_id, group_instance_id, "OffsetCommit")
        if error != ErrorCode.none:
            return error
        if group.state in (ClassicGroupState.STABLE, ClassicGroupState.PREPARING_REBALANCE):
            self._groups.member_committed(group, group.member(member_id))  # a commit keeps the session alive
        return ErrorCode.none

    def is_offset_fetch_allowed(self, group_id: str) -> bool:
        """False if the group does not exist (or is Dead): its offsets read as not committed."""
        if group_id in self._consumer.groups:
            return True
        group = self._groups.groups.get(group_id)
        return group is not None and not group.is_in_state(ClassicGroupState.DEAD)

    def validate_offset_delete(self, group_id: str) -> ErrorCode:
        if group_id in self._consumer.groups:
            return ErrorCode.none
        group = self._groups.groups.get(group_id)
        if group is None:
            return ErrorCode.group_id_not_found
        return group.validate_offset_delete()

    def _is_subscribed_to_topic(self, group_id: str, topic: str) -> bool:
        if group_id in self._consumer.groups:
            return self._consumer.is_subscribed_to_topic(group_id, topic)
        group = self._groups.groups.get(group_id)
        return group is not None and group.is_subscribed_to_topic(topic)

    def _offset_expiration_base(self, group_id: str) -> Callable[[int], int] | None:
        """KIP-211: commit timestamp -> the timestamp retention counts from; None: nothing expires now."""
        if group_id in self._consumer.groups:
            return lambda commit_timestamp_ms: commit_timestamp_ms
        group = self._groups.groups.get(group_id)
        if group is None:
            return lambda commit_timestamp_ms: commit_timestamp_ms
        return group.offset_expiration_base()


def _requested_topics(topics: Iterable[Any] | None) -> list[tuple[str, list[int]]] | None:
    if topics is None:
        return None
    return [(t.name, [int(p) for p in t.partition_indexes]) for t in topics]


def _unknown_partition(partition: int, error: ErrorCode) -> Any:
    return _FetchPartition(
        partition_index=partition,
        committed_offset=NO_OFFSET,
        committed_leader_epoch=NO_LEADER_EPOCH,
        metadata=NO_METADATA,
        error_code=error,
    )


_NO_THROTTLE = build(OffsetCommitResponse, {"topics": ()}).throttle_time
_CACHED_ANSWERS = 1024

# The entries of an OffsetFetch v8+ answer, made directly: kio types their fields as phantoms (i32, i64, GroupId),
# and the values here come from the request and the store, already in range.
_FetchGroup: Any = OffsetFetchResponseGroup
_FetchTopic: Any = OffsetFetchResponseTopics
_FetchPartition: Any = OffsetFetchResponsePartitions


def _commit_error_response(topics: Iterable[Any], error: ErrorCode) -> OffsetCommitResponse:
    return build(
        OffsetCommitResponse,
        {
            "topics": [
                {
                    "name": t.name,
                    "partitions": [
                        {"partition_index": p.partition_index, "error_code": error} for p in t.partitions
                    ],
                }
                for t in topics
            ]
        },
    )
