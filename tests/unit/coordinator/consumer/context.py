"""A test context for consumer groups (KIP-848), in the manner of Kafka's GroupMetadataManagerTestContext.

It plays the runtime: a result's records are appended to an in-memory log and replayed (the shard skips those
its handler applied in memory), and answers are filed by token. Time moves only through `ctx.advance(ms)`.
Topics come from `FakeTopics`, a TopicImage the test changes.
"""

from __future__ import annotations

import datetime
import itertools
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from kio.schema.consumer_group_heartbeat.v1.request import ConsumerGroupHeartbeatRequest, TopicPartitions
from kio.static.primitive import i32, i32Timedelta

from coordinator.clock import ManualClock, ManualTimer
from coordinator.consumer import records as rec
from coordinator.consumer.manager import ConsumerGroupSettings
from coordinator.records import CoordinatorRecord
from coordinator.result import CoordinatorResult
from coordinator.shard import GroupCoordinatorShard
from protocol.errors import ErrorCode


class FakeTopics:
    def __init__(self, **topics: int) -> None:
        self.topics_version = 0
        self._topics: dict[str, tuple[uuid.UUID, int]] = {}
        for name, count in topics.items():
            self.create(name, count)

    def create(self, name: str, partitions: int) -> uuid.UUID:
        topic_id = uuid.uuid5(uuid.NAMESPACE_DNS, name)
        self._topics[name] = (topic_id, partitions)
        self.topics_version += 1
        return topic_id

    def delete(self, name: str) -> None:
        del self._topics[name]
        self.topics_version += 1

    def topic_id(self, topic: str) -> uuid.UUID | None:
        found = self._topics.get(topic)
        return None if found is None else found[0]

    def partition_count(self, topic: str) -> int | None:
        found = self._topics.get(topic)
        return None if found is None else found[1]

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        for name, (tid, _) in self._topics.items():
            if tid == topic_id:
                return name
        return None

    def topic_names(self) -> list[str]:
        return list(self._topics)


def tid(name: str) -> uuid.UUID:
    return uuid.uuid5(uuid.NAMESPACE_DNS, name)


def parts(**topics: Iterable[int]) -> dict[uuid.UUID, frozenset[int]]:
    """An assignment by topic name: parts(foo=[0, 1])."""
    return {tid(name): frozenset(ps) for name, ps in topics.items() if ps}


UNCHANGED: Any = object()


class ConsumerContext:
    def __init__(self, topics: FakeTopics | None = None, **settings: Any) -> None:
        self.clock = ManualClock()
        self.timer = ManualTimer(self.clock)
        self.topics = topics if topics is not None else FakeTopics(foo=6, bar=3)
        settings.setdefault("assignment_interval_ms", 0)  # Kafka 4.1: a target at every group epoch
        settings.setdefault("join_window_ms", 0)  # Kafka: a target at every join
        settings.setdefault("heartbeat_hold_ms", 0)  # Kafka: every answer at once
        self.settings = ConsumerGroupSettings(**settings)
        self.shard = GroupCoordinatorShard(
            self.clock, self.timer, topics=self.topics, consumer_settings=self.settings
        )
        self.log: list[CoordinatorRecord] = []
        self.answers: dict[object, Any] = {}
        self._tokens = itertools.count()

    @property
    def consumer(self) -> Any:
        return self.shard.consumer

    def group(self, group_id: str = "grp") -> Any:
        return self.shard.consumer.groups[group_id]

    def apply(self, result: CoordinatorResult) -> CoordinatorResult:
        self.log.extend(result.records)
        for record in result.records:
            self.shard.replay(record)
        for token, answer in result.responses:
            assert token not in self.answers, f"token {token} answered twice"
            self.answers[token] = answer
        return result

    def heartbeat(
        self,
        member_id: str = "m1",
        member_epoch: int = 0,
        *,
        version: int = 1,
        **fields: Any,
    ) -> tuple[Any, CoordinatorResult]:
        """One ConsumerGroupHeartbeat (heartbeat_request's fields)."""
        token, result = self.send(member_id, member_epoch, version=version, **fields)
        return self.answers[token], result

    def send(
        self, member_id: str = "m1", member_epoch: int = 0, *, version: int = 1, **fields: Any
    ) -> tuple[object, CoordinatorResult]:
        """A ConsumerGroupHeartbeat whose answer may be held: its token (the answer is `answers[token]` once
        given) and the result."""
        request = heartbeat_request(member_id, member_epoch, **fields)
        token = next(self._tokens)
        result = self.apply(
            self.shard.consumer_group_heartbeat(
                token, version, request, client_id="client", client_host="/127.0.0.1"
            )
        )
        return token, result

    def advance(self, ms: int) -> list[CoordinatorResult]:
        return [self.apply(r) for r in self.timer.advance(ms)]

    def reload(self) -> GroupCoordinatorShard:
        """A fresh shard that loads this context's log."""
        shard = GroupCoordinatorShard(
            self.clock, ManualTimer(self.clock), topics=self.topics, consumer_settings=self.settings
        )
        for record in self.log:
            shard.replay(record)
        shard.on_loaded()
        return shard


def heartbeat_request(
    member_id: str = "m1",
    member_epoch: int = 0,
    *,
    group_id: str = "grp",
    instance_id: str | None = None,
    rack_id: str | None = None,
    rebalance_timeout_ms: int = UNCHANGED,
    topics: Iterable[str] | None = UNCHANGED,
    regex: str | None = None,
    assignor: str | None = None,
    owned: Mapping[uuid.UUID, Iterable[int]] | None = UNCHANGED,
) -> ConsumerGroupHeartbeatRequest:
    """A ConsumerGroupHeartbeat; a join (epoch 0) defaults to a full request subscribing to foo, owning nothing."""
    joining = member_epoch == 0
    if rebalance_timeout_ms is UNCHANGED:
        rebalance_timeout_ms = 5000 if joining else -1
    if topics is UNCHANGED:
        topics = ("foo",) if joining and regex is None else None
    if owned is UNCHANGED:
        owned = {} if joining else None
    return ConsumerGroupHeartbeatRequest(
        group_id=group_id,
        member_id=member_id,
        member_epoch=i32(member_epoch),
        instance_id=instance_id,
        rack_id=rack_id,
        rebalance_timeout=i32Timedelta.parse(datetime.timedelta(milliseconds=rebalance_timeout_ms)),
        subscribed_topic_names=None if topics is None else tuple(topics),
        subscribed_topic_regex=regex,
        server_assignor=assignor,
        topic_partitions=None
        if owned is None
        else tuple(
            TopicPartitions(topic_id=t, partitions=tuple(i32(p) for p in sorted(ps)))
            for t, ps in owned.items()
        ),
    )


def assignment_of(answer: Any) -> dict[uuid.UUID, frozenset[int]] | None:
    if answer.assignment is None:
        return None
    return {
        tp.topic_id: frozenset(int(p) for p in tp.partitions) for tp in answer.assignment.topic_partitions
    }


def record_types(result: CoordinatorResult) -> list[tuple[int, bool]]:
    """(type, is tombstone) of a result's records, in order."""
    return [(rec.record_type(r.key), r.value is None) for r in result.records]


def ok(answer: Any) -> Any:
    """The answer (of a heartbeat's (answer, result) too), asserted to carry no error."""
    if isinstance(answer, tuple):
        answer = answer[0]
    assert answer.error_code == ErrorCode.none, (answer.error_code, answer.error_message)
    return answer
