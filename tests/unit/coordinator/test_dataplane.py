"""The embedded data plane, driven through its API handlers.

`call` hands a handler a kio request entity of an exact version (built from a plain dict) and rebuilds the
answer as that version's response class, which is what the API table does. `call_wire` goes through bytes both
ways: the request frame is written with kio's writer and decoded by `ApiTable.decode`, the answer is encoded
by `ApiTable.encode_response` and read back with kio's reader. Version-sweeping tests use `call_wire`.
"""

from __future__ import annotations

import asyncio
import datetime
import gzip
import io
import struct
import uuid
from typing import Any

import pytest
from crc32c import crc32c
from kio.records.schema import NewRecordBatch, Record, RecordHeader
from kio.records.writers import write_new_batch
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i8, i16, i32, i64

from coordinator.brokers import Broker
from coordinator.config import Config
from coordinator.dataplane.batches import read_header, with_base_offset
from coordinator.dataplane.embedded import (
    CLUSTER_OPERATIONS,
    INT32_MIN,
    TOPIC_OPERATIONS,
    VERSIONS,
    EmbeddedDataPlane,
    TopicError,
    topic_name_error,
)
from coordinator.dataplane.memory import PartitionLog
from protocol.api import ApiTable, Encoded, RequestContext, request_class, response_class
from protocol.api_keys import ApiKey
from protocol.build import build
from protocol.errors import ErrorCode
from tests.support.waits import until

NODE = Broker(7, "broker.example", 19092)
BASE_TS = 1_700_000_000_000


def versions(api_key: int) -> list[int]:
    low, high = VERSIONS[api_key]
    return list(range(low, high + 1))


class Harness:
    def __init__(self, **settings: Any) -> None:
        self.config = Config(settings)
        self.plane = EmbeddedDataPlane(self.config, lambda: NODE)
        self.table = ApiTable()
        self.plane.register(self.table)
        self._correlation = 0

    async def call(self, api_key: int, version: int, data: dict[str, Any]) -> Any:
        request = build(request_class(api_key, version), data)
        ctx = RequestContext(api_key, version, 1, "test")
        spec = self.table.spec(api_key)
        assert spec is not None
        result = await spec.handler(ctx, request)
        if result is None:
            return None
        if isinstance(result, Encoded):  # a kept answer (Metadata): decoded as the wire would
            return result.decode(api_key, version)
        return build(response_class(api_key, version), result)

    async def call_wire(self, api_key: int, version: int, data: dict[str, Any]) -> Any:
        self._correlation += 1
        cls = request_class(api_key, version)
        frame = io.BytesIO()
        client_id = b"wire-test"
        frame.write(struct.pack(">hhih", api_key, version, self._correlation, len(client_id)) + client_id)
        if cls.__flexible__:
            frame.write(b"\x00")
        entity_writer(cls)(frame, build(cls, data))
        decoded = self.table.decode(frame.getvalue())
        assert decoded.context.client_id == "wire-test"
        result = await decoded.spec.handler(decoded.context, decoded.body)
        if result is None:
            return None
        encoded = self.table.encode_response(decoded.context, result)
        (correlation,) = struct.unpack_from(">i", encoded, 0)
        assert correlation == self._correlation
        response_cls = response_class(api_key, version)
        offset = 5 if response_cls.__flexible__ else 4
        body, size = entity_reader(response_cls)(encoded, offset)
        assert offset + size == len(encoded)
        return body

    # -- shortcuts ---------------------------------------------------------------------------------

    async def create(self, name: str, partitions: int = 1, version: int = 7, **extra: Any) -> Any:
        topic = {
            "name": name,
            "num_partitions": partitions,
            "replication_factor": -1,
            "assignments": (),
            "configs": (),
        }
        topic.update(extra)
        response = await self.call(ApiKey.CREATE_TOPICS, version, {"topics": [topic], "timeout": 1000})
        return response.topics[0]

    async def produce(
        self, topic: str, partition: int, records: bytes | None, version: int = 9, acks: int = -1
    ) -> Any:
        response = await self.call(
            ApiKey.PRODUCE,
            version,
            {
                "acks": acks,
                "timeout": 1000,
                "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": records}]}],
            },
        )
        return None if response is None else response.responses[0].partition_responses[0]

    async def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        version: int = 12,
        max_wait: int = 0,
        min_bytes: int = 1,
        max_bytes: int = 2**31 - 1,
        partition_max_bytes: int = 1 << 20,
        **extra: Any,
    ) -> Any:
        partition_data = {
            "partition": partition,
            "fetch_offset": offset,
            "partition_max_bytes": partition_max_bytes,
        }
        partition_data.update(extra.pop("partition_extra", {}))
        topic_id = self.plane.topic_id(topic)
        request = {
            "max_wait": max_wait,
            "min_bytes": min_bytes,
            "max_bytes": max_bytes,
            "isolation_level": 0,
            "topics": [{"topic": topic, "topic_id": topic_id, "partitions": [partition_data]}],
            "forgotten_topics_data": (),
        }
        request.update(extra)
        response = await self.call(ApiKey.FETCH, version, request)
        return response.responses[0].partitions[0]

    async def list_offset(
        self, topic: str, partition: int, timestamp: int, version: int = 9, leader_epoch: int = -1
    ) -> Any:
        response = await self.call(
            ApiKey.LIST_OFFSETS,
            version,
            {
                "replica_id": -1,
                "isolation_level": 0,
                "timeout": 0,
                "topics": [
                    {
                        "name": topic,
                        "partitions": [
                            {
                                "partition_index": partition,
                                "timestamp": timestamp,
                                "current_leader_epoch": leader_epoch,
                            }
                        ],
                    }
                ],
            },
        )
        return response.topics[0].partitions[0]

    async def metadata(self, topics: list[str] | None, version: int = 12, **extra: Any) -> Any:
        request = {
            "topics": None if topics is None else [{"name": t} for t in topics],
            "allow_auto_topic_creation": True,
            "include_topic_authorized_operations": False,
            "include_cluster_authorized_operations": False,
        }
        request.update(extra)
        return await self.call(ApiKey.METADATA, version, request)


def ts(milliseconds: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(milliseconds / 1000, datetime.UTC)


def batch(
    *values: bytes,
    first_ts: int = BASE_TS,
    step_ms: int = 1000,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    attributes: int = 0,
) -> bytes:
    """A real RecordBatch v2 from kio's writer; whole-second timestamps survive its float arithmetic."""
    records = tuple(
        Record(
            attributes=i8(0),
            timestamp=ts(first_ts + n * step_ms),
            offset=i64(n),
            key=b"k%d" % n,
            value=v,
            headers=(RecordHeader(key=b"h", value=b"%d" % n),),
        )
        for n, v in enumerate(values)
    )
    buf = io.BytesIO()
    write_new_batch(
        buf,
        NewRecordBatch(
            producer_id=i64(producer_id),
            producer_epoch=i16(producer_epoch),
            base_sequence=i32(base_sequence),
            records=records,
            attributes=i16(attributes),
            partition_leader_epoch=i32(-1),
        ),
    )
    return buf.getvalue()


def split_batches(data: bytes) -> list[bytes]:
    out = []
    position = 0
    while position < len(data):
        size = read_header(data, position).size
        out.append(data[position : position + size])
        position += size
    return out


@pytest.fixture
def h() -> Harness:
    return Harness()


# -- registration --------------------------------------------------------------------------------------------


def test_register_advertises_the_implemented_ranges(h: Harness) -> None:
    registered = {s.api_key: (s.min_version, s.max_version) for s in h.table.specs()}
    assert registered[ApiKey.PRODUCE] == (3, 13)
    assert registered[ApiKey.FETCH] == (4, 17)
    assert registered[ApiKey.LIST_OFFSETS] == (1, 10)
    assert registered[ApiKey.METADATA] == (0, 13)
    assert registered[ApiKey.CREATE_TOPICS] == (2, 7)
    assert registered[ApiKey.DELETE_TOPICS] == (1, 6)
    assert registered[ApiKey.INIT_PRODUCER_ID] == (0, 5)


async def test_dataplane_facts(h: Harness) -> None:
    assert h.plane.partition_count("t") is None
    assert h.plane.log_end_offset("t", 0) is None
    await h.create("t", 3)
    assert h.plane.partition_count("t") == 3
    assert h.plane.log_end_offset("t", 2) == 0
    assert h.plane.log_end_offset("t", 3) is None
    await h.produce("t", 2, batch(b"a", b"b"))
    assert h.plane.log_end_offset("t", 2) == 2
    await h.plane.start()
    await h.plane.close()


def test_create_topic_method(h: Harness) -> None:
    topic_id = h.plane.create_topic("direct", 2)
    assert h.plane.topic_id("direct") == topic_id
    assert h.plane.partition_count("direct") == 2
    with pytest.raises(TopicError) as info:
        h.plane.create_topic("direct")
    assert info.value.error_code == ErrorCode.topic_already_exists


@pytest.mark.parametrize(
    "name, legal",
    [
        ("a", True),
        ("A-z_0.9", True),
        ("x" * 249, True),
        ("", False),
        (".", False),
        ("..", False),
        ("x" * 250, False),
        ("has space", False),
        ("slash/", False),
        ("ünï", False),
        ("...", True),
    ],
)
def test_topic_name_rules(name: str, legal: bool) -> None:
    assert (topic_name_error(name) is None) is legal


# -- Metadata ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", versions(ApiKey.METADATA))
async def test_metadata_every_version(h: Harness, version: int) -> None:
    created = await h.create("orders", 2)
    request: dict[str, Any] = {
        "topics": [{"name": "orders", "topic_id": None}],
        "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": False,
        "include_cluster_authorized_operations": False,
    }
    response = await h.call_wire(ApiKey.METADATA, version, request)
    (broker,) = response.brokers
    assert (broker.node_id, broker.host, broker.port) == (7, "broker.example", 19092)
    if version >= 1:
        assert response.controller_id == 7
    if version >= 2:
        assert response.cluster_id == "kgc-standalone-cluster"
    if version >= 13:
        assert response.error_code == ErrorCode.none
    (topic,) = response.topics
    assert topic.error_code == ErrorCode.none and topic.name == "orders"
    if version >= 10:
        assert topic.topic_id == created.topic_id and topic.topic_id is not None
    assert [p.partition_index for p in topic.partitions] == [0, 1]
    for p in topic.partitions:
        assert p.leader_id == 7 and p.error_code == ErrorCode.none
        assert p.replica_nodes == (7,) and p.isr_nodes == (7,)
        if version >= 5:
            assert p.offline_replicas == ()
        if version >= 7:
            assert p.leader_epoch == 0


async def test_metadata_all_topics(h: Harness) -> None:
    await h.create("a")
    await h.create("b")
    assert {t.name for t in (await h.metadata(None)).topics} == {"a", "b"}
    assert {t.name for t in (await h.metadata([], version=0)).topics} == {"a", "b"}
    assert (await h.metadata([], version=1)).topics == ()


@pytest.mark.parametrize("version", [0, 3, 4, 12])
async def test_metadata_auto_creates_unknown_topics(version: int) -> None:
    h = Harness(**{"num.partitions": 3})
    response = await h.metadata(["fresh"], version=version)
    (topic,) = response.topics
    assert topic.error_code == ErrorCode.none
    assert len(topic.partitions) == 3
    assert h.plane.partition_count("fresh") == 3


async def test_metadata_without_auto_creation(h: Harness) -> None:
    (topic,) = (await h.metadata(["nope"], allow_auto_topic_creation=False)).topics
    assert topic.error_code == ErrorCode.unknown_topic_or_partition and topic.partitions == ()
    assert h.plane.partition_count("nope") is None
    disabled = Harness(**{"auto.create.topics.enable": False})
    (topic,) = (await disabled.metadata(["nope"], version=0)).topics
    assert topic.error_code == ErrorCode.unknown_topic_or_partition


@pytest.mark.parametrize("auto", [True, False])
async def test_metadata_illegal_topic_name(h: Harness, auto: bool) -> None:
    (topic,) = (await h.metadata(["bad name!"], allow_auto_topic_creation=auto)).topics
    assert topic.error_code == ErrorCode.invalid_topic_exception
    assert h.plane.partition_count("bad name!") is None


async def test_metadata_auto_creation_failure_is_reported() -> None:
    h = Harness(**{"default.replication.factor": 3})
    (topic,) = (await h.metadata(["x"])).topics
    assert topic.error_code == ErrorCode.invalid_replication_factor


async def test_metadata_auto_creation_collision(h: Harness) -> None:
    await h.create("a.b")
    (topic,) = (await h.metadata(["a_b"])).topics
    assert topic.error_code == ErrorCode.invalid_topic_exception


async def test_metadata_by_topic_id(h: Harness) -> None:
    created = await h.create("by-id", 2)
    unknown = uuid.uuid4()
    response = await h.call_wire(
        ApiKey.METADATA,
        12,
        {
            "topics": [{"name": None, "topic_id": created.topic_id}, {"name": None, "topic_id": unknown}],
            "allow_auto_topic_creation": True,
            "include_topic_authorized_operations": False,
        },
    )
    found, missing = response.topics
    assert (found.error_code, found.name, found.topic_id) == (ErrorCode.none, "by-id", created.topic_id)
    assert (missing.error_code, missing.name, missing.topic_id) == (ErrorCode.unknown_topic_id, None, unknown)


async def test_metadata_topic_id_before_v12_is_invalid(h: Harness) -> None:
    created = await h.create("t")
    response = await h.call(
        ApiKey.METADATA,
        10,
        {
            "topics": [{"name": "t", "topic_id": created.topic_id}],
            "allow_auto_topic_creation": True,
            "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False,
        },
    )
    assert response.topics[0].error_code == ErrorCode.invalid_request


async def test_metadata_null_name_without_id_is_invalid(h: Harness) -> None:
    response = await h.call(
        ApiKey.METADATA,
        12,
        {
            "topics": [{"name": None, "topic_id": None}],
            "allow_auto_topic_creation": True,
            "include_topic_authorized_operations": False,
        },
    )
    assert response.topics[0].error_code == ErrorCode.invalid_request


async def test_metadata_duplicate_names_answer_once(h: Harness) -> None:
    assert len((await h.metadata(["d", "d"])).topics) == 1


async def test_metadata_authorized_operations(h: Harness) -> None:
    await h.create("ops")
    asked = await h.metadata(
        ["ops"],
        version=10,
        include_topic_authorized_operations=True,
        include_cluster_authorized_operations=True,
    )
    assert asked.topics[0].topic_authorized_operations == TOPIC_OPERATIONS
    assert asked.cluster_authorized_operations == CLUSTER_OPERATIONS
    not_asked = await h.metadata(["ops"], version=10)
    assert not_asked.topics[0].topic_authorized_operations == INT32_MIN
    assert not_asked.cluster_authorized_operations == INT32_MIN


async def test_metadata_reports_internal_topics(h: Harness) -> None:
    await h.create("__consumer_offsets")
    (topic,) = (await h.metadata(["__consumer_offsets"])).topics
    assert topic.is_internal


async def test_metadata_uses_the_advertised_address_per_request() -> None:
    ports = iter([1111, 2222])
    plane = EmbeddedDataPlane(Config(), lambda: Broker(1, "h", next(ports)))
    table = ApiTable()
    plane.register(table)
    spec = table.spec(ApiKey.METADATA)
    assert spec is not None
    request = build(
        request_class(ApiKey.METADATA, 12), {"topics": (), "include_topic_authorized_operations": False}
    )
    first = await spec.handler(RequestContext(ApiKey.METADATA, 12, 1, None), request)
    second = await spec.handler(RequestContext(ApiKey.METADATA, 12, 2, None), request)
    assert [a.decode(ApiKey.METADATA, 12).brokers[0].port for a in (first, second)] == [1111, 2222]


async def test_kept_metadata_answers_follow_topic_changes(h: Harness) -> None:
    await h.create("kept-a", 1)
    first = await h.metadata(None)
    assert first == await h.metadata(None)
    assert [(t.name, len(t.partitions)) for t in first.topics] == [("kept-a", 1)]
    await h.create("kept-b", 2)
    assert sorted((t.name, len(t.partitions)) for t in (await h.metadata(None)).topics) == [
        ("kept-a", 1),
        ("kept-b", 2),
    ]
    named = await h.metadata(["kept-b"], version=9)
    assert [(t.name, len(t.partitions)) for t in named.topics] == [("kept-b", 2)]
    await h.call(ApiKey.DELETE_TOPICS, 6, {"timeout": 1000, "topics": [{"name": "kept-b", "topic_id": None}]})
    assert [t.name for t in (await h.metadata(None)).topics] == ["kept-a"]
    missing = await h.metadata(["kept-b"], version=9, allow_auto_topic_creation=False)
    assert [(t.name, t.error_code) for t in missing.topics] == [
        ("kept-b", ErrorCode.unknown_topic_or_partition)
    ]


# -- CreateTopics --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", versions(ApiKey.CREATE_TOPICS))
async def test_create_topics_every_version(h: Harness, version: int) -> None:
    response = await h.call_wire(
        ApiKey.CREATE_TOPICS,
        version,
        {
            "timeout": 5000,
            "validate_only": False,
            "topics": [
                {
                    "name": "t1",
                    "num_partitions": 4,
                    "replication_factor": 1,
                    "assignments": (),
                    "configs": [{"name": "retention.ms", "value": "1000"}],
                },
            ],
        },
    )
    (result,) = response.topics
    assert (result.name, result.error_code, result.error_message) == ("t1", ErrorCode.none, None)
    assert h.plane.partition_count("t1") == 4
    if version >= 5:
        assert (result.num_partitions, result.replication_factor) == (4, 1)
        assert [(c.name, c.value) for c in result.configs] == [("retention.ms", "1000")]
    if version >= 7:
        assert result.topic_id == h.plane.topic_id("t1")


async def test_create_topics_defaults() -> None:
    h = Harness(**{"num.partitions": 5})
    result = await h.create("d", -1)
    assert result.error_code == ErrorCode.none
    assert (result.num_partitions, result.replication_factor) == (5, 1)
    assert h.plane.partition_count("d") == 5


async def test_create_topics_already_exists(h: Harness) -> None:
    await h.create("t")
    again = await h.create("t", 3)
    assert again.error_code == ErrorCode.topic_already_exists
    assert again.error_message == "Topic 't' already exists."
    assert h.plane.partition_count("t") == 1


@pytest.mark.parametrize("partitions", [0, -2, -100])
async def test_create_topics_invalid_partitions(h: Harness, partitions: int) -> None:
    result = await h.create("t", partitions)
    assert result.error_code == ErrorCode.invalid_partitions and result.error_message
    assert h.plane.partition_count("t") is None


@pytest.mark.parametrize("factor", [0, -2, 2, 3])
async def test_create_topics_invalid_replication_factor(h: Harness, factor: int) -> None:
    result = await h.create("t", 1, replication_factor=factor)
    assert result.error_code == ErrorCode.invalid_replication_factor and result.error_message
    assert h.plane.partition_count("t") is None


@pytest.mark.parametrize("name", ["", ".", "..", "x" * 250, "with space", "ta\tb", "ü"])
async def test_create_topics_invalid_name(h: Harness, name: str) -> None:
    result = await h.create(name)
    assert result.error_code == ErrorCode.invalid_topic_exception and result.error_message


async def test_create_topics_collision(h: Harness) -> None:
    await h.create("a_b")
    result = await h.create("a.b")
    assert result.error_code == ErrorCode.invalid_topic_exception
    assert "collides" in result.error_message


async def test_create_topics_cluster_metadata_is_prohibited(h: Harness) -> None:
    assert (await h.create("__cluster_metadata")).error_code == ErrorCode.invalid_request


async def test_create_topics_validate_only(h: Harness) -> None:
    response = await h.call(
        ApiKey.CREATE_TOPICS,
        7,
        {
            "validate_only": True,
            "topics": [
                {
                    "name": "v",
                    "num_partitions": 2,
                    "replication_factor": -1,
                    "assignments": (),
                    "configs": (),
                },
                {
                    "name": "bad",
                    "num_partitions": 0,
                    "replication_factor": -1,
                    "assignments": (),
                    "configs": (),
                },
            ],
        },
    )
    ok, bad = response.topics
    assert ok.error_code == ErrorCode.none and ok.num_partitions == 2
    assert bad.error_code == ErrorCode.invalid_partitions
    assert h.plane.partition_count("v") is None


async def test_create_topics_duplicate_names(h: Harness) -> None:
    topic = {"name": "dup", "num_partitions": 1, "replication_factor": -1, "assignments": (), "configs": ()}
    other = dict(topic, name="other")
    response = await h.call(ApiKey.CREATE_TOPICS, 4, {"topics": [topic, other, topic]})
    results = {r.name: r for r in response.topics}
    assert len(response.topics) == 2
    assert results["dup"].error_code == ErrorCode.invalid_request
    assert results["other"].error_code == ErrorCode.none
    assert h.plane.partition_count("dup") is None


async def test_create_topics_null_config_value(h: Harness) -> None:
    result = await h.create("c", configs=[{"name": "cleanup.policy", "value": None}])
    assert result.error_code == ErrorCode.invalid_config


async def test_create_topics_too_many_partitions(h: Harness) -> None:
    assert (await h.create("huge", 10001)).error_code == ErrorCode.policy_violation


async def test_create_topics_manual_assignment(h: Harness) -> None:
    result = await h.create(
        "m",
        -1,
        assignments=[{"partition_index": 1, "broker_ids": [7]}, {"partition_index": 0, "broker_ids": [7]}],
    )
    assert result.error_code == ErrorCode.none and result.num_partitions == 2
    assert h.plane.partition_count("m") == 2


@pytest.mark.parametrize(
    "assignments, partitions, factor, code",
    [
        ([{"partition_index": 0, "broker_ids": [7]}], 1, -1, ErrorCode.invalid_request),
        ([{"partition_index": 0, "broker_ids": [7]}], -1, 1, ErrorCode.invalid_request),
        ([{"partition_index": 0, "broker_ids": [8]}], -1, -1, ErrorCode.invalid_replica_assignment),
        ([{"partition_index": 0, "broker_ids": []}], -1, -1, ErrorCode.invalid_replica_assignment),
        ([{"partition_index": 0, "broker_ids": [7, 7]}], -1, -1, ErrorCode.invalid_replica_assignment),
        (
            [{"partition_index": 0, "broker_ids": [7]}, {"partition_index": 0, "broker_ids": [7]}],
            -1,
            -1,
            ErrorCode.invalid_replica_assignment,
        ),
        ([{"partition_index": 1, "broker_ids": [7]}], -1, -1, ErrorCode.invalid_replica_assignment),
    ],
)
async def test_create_topics_bad_manual_assignment(
    h: Harness, assignments: list, partitions: int, factor: int, code: ErrorCode
) -> None:
    result = await h.create("m", partitions, replication_factor=factor, assignments=assignments)
    assert result.error_code == code and result.error_message
    assert h.plane.partition_count("m") is None


# -- DeleteTopics --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", versions(ApiKey.DELETE_TOPICS))
async def test_delete_topics_by_name_every_version(h: Harness, version: int) -> None:
    await h.create("gone")
    request: dict[str, Any] = {"timeout": 1000}
    if version >= 6:
        request["topics"] = [{"name": "gone", "topic_id": None}, {"name": "never", "topic_id": None}]
    else:
        request["topic_names"] = ["gone", "never"]
    response = await h.call_wire(ApiKey.DELETE_TOPICS, version, request)
    results = {r.name: r.error_code for r in response.responses}
    assert results == {"gone": ErrorCode.none, "never": ErrorCode.unknown_topic_or_partition}
    assert h.plane.partition_count("gone") is None
    (topic,) = (await h.metadata(["gone"], allow_auto_topic_creation=False)).topics
    assert topic.error_code == ErrorCode.unknown_topic_or_partition


async def test_delete_topics_by_id(h: Harness) -> None:
    created = await h.create("gone")
    unknown = uuid.uuid4()
    response = await h.call_wire(
        ApiKey.DELETE_TOPICS,
        6,
        {
            "timeout": 1000,
            "topics": [{"name": None, "topic_id": created.topic_id}, {"name": None, "topic_id": unknown}],
        },
    )
    results = {r.topic_id: (r.name, r.error_code) for r in response.responses}
    assert results[created.topic_id] == ("gone", ErrorCode.none)
    assert results[unknown] == (None, ErrorCode.unknown_topic_id)
    assert h.plane.topic_id("gone") is None


async def test_delete_topics_invalid_requests(h: Harness) -> None:
    created = await h.create("t")
    response = await h.call(
        ApiKey.DELETE_TOPICS,
        6,
        {
            "topics": [
                {"name": "t", "topic_id": created.topic_id},
                {"name": None, "topic_id": None},
                {"name": "x", "topic_id": None},
                {"name": "x", "topic_id": None},
            ]
        },
    )
    assert [r.error_code for r in response.responses] == [ErrorCode.invalid_request] * 3
    assert h.plane.partition_count("t") == 1


async def test_delete_then_recreate_gets_a_new_id_and_empty_log(h: Harness) -> None:
    first = await h.create("r")
    await h.produce("r", 0, batch(b"a"))
    await h.call(ApiKey.DELETE_TOPICS, 5, {"topic_names": ["r"]})
    second = await h.create("r")
    assert second.topic_id != first.topic_id
    assert h.plane.log_end_offset("r", 0) == 0


# -- InitProducerId ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", versions(ApiKey.INIT_PRODUCER_ID))
async def test_init_producer_id_every_version(h: Harness, version: int) -> None:
    request = {
        "transactional_id": None,
        "transaction_timeout": 60000,
        "producer_id": -1,
        "producer_epoch": -1,
    }
    first = await h.call_wire(ApiKey.INIT_PRODUCER_ID, version, request)
    second = await h.call_wire(ApiKey.INIT_PRODUCER_ID, version, request)
    assert first.error_code == second.error_code == ErrorCode.none
    assert first.producer_id >= 0 and second.producer_id != first.producer_id
    assert first.producer_epoch == 0


async def test_init_producer_id_refuses_transactions(h: Harness) -> None:
    response = await h.call(
        ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": "tx", "transaction_timeout": 1000}
    )
    assert response.error_code == ErrorCode.coordinator_not_available
    assert (response.producer_id, response.producer_epoch) == (-1, -1)
    response = await h.call(ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": "", "transaction_timeout": 1000})
    assert response.error_code == ErrorCode.invalid_request


async def test_init_producer_id_with_existing_id(h: Harness) -> None:
    bumped = await h.call(
        ApiKey.INIT_PRODUCER_ID,
        4,
        {"transactional_id": None, "transaction_timeout": 1000, "producer_id": 5, "producer_epoch": 0},
    )
    assert bumped.error_code == ErrorCode.none and bumped.producer_epoch == 0
    half = await h.call(
        ApiKey.INIT_PRODUCER_ID,
        4,
        {"transactional_id": None, "transaction_timeout": 1000, "producer_id": 5, "producer_epoch": -1},
    )
    assert half.error_code == ErrorCode.invalid_request


# -- Produce -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", versions(ApiKey.PRODUCE))
async def test_produce_every_version(h: Harness, version: int) -> None:
    created = await h.create("p", 2)
    topic_key = {"topic_id": created.topic_id} if version >= 13 else {"name": "p"}
    offsets = []
    for values in ([b"a", b"b"], [b"c"]):
        response = await h.call_wire(
            ApiKey.PRODUCE,
            version,
            {
                "acks": -1,
                "timeout": 1000,
                "topic_data": [dict(topic_key, partition_data=[{"index": 1, "records": batch(*values)}])],
            },
        )
        (topic,) = response.responses
        if version >= 13:
            assert topic.topic_id == created.topic_id
        else:
            assert topic.name == "p"
        (partition,) = topic.partition_responses
        assert (partition.index, partition.error_code) == (1, ErrorCode.none)
        assert partition.log_append_time is None  # -1 on the wire: CreateTime
        if version >= 5:
            assert partition.log_start_offset == 0
        offsets.append(partition.base_offset)
    assert offsets == [0, 2]
    assert h.plane.log_end_offset("p", 1) == 3
    assert h.plane.log_end_offset("p", 0) == 0


async def test_produce_several_batches_in_one_partition(h: Harness) -> None:
    await h.create("m")
    first, second, third = batch(b"a", b"b"), batch(b"c"), batch(b"d", b"e", b"f")
    answer = await h.produce("m", 0, first + second + third)
    assert answer.error_code == ErrorCode.none and answer.base_offset == 0
    assert h.plane.log_end_offset("m", 0) == 6
    fetched = await h.fetch("m", 0, 0)
    assert split_batches(fetched.records) == [first, with_base_offset(second, 2), with_base_offset(third, 3)]


async def test_produce_acks_zero_sends_no_response(h: Harness) -> None:
    await h.create("z")
    assert await h.produce("z", 0, batch(b"a"), acks=0) is None
    assert h.plane.log_end_offset("z", 0) == 1
    assert (
        await h.call_wire(
            ApiKey.PRODUCE,
            3,
            {
                "acks": 0,
                "timeout": 1,
                "topic_data": [{"name": "z", "partition_data": [{"index": 0, "records": batch(b"b")}]}],
            },
        )
        is None
    )
    assert h.plane.log_end_offset("z", 0) == 2


async def test_produce_acks_one(h: Harness) -> None:
    await h.create("one")
    assert (await h.produce("one", 0, batch(b"a"), acks=1)).error_code == ErrorCode.none


@pytest.mark.parametrize("acks", [2, -2, 5])
async def test_produce_invalid_acks(h: Harness, acks: int) -> None:
    await h.create("a")
    answer = await h.produce("a", 0, batch(b"x"), acks=acks)
    assert answer.error_code == ErrorCode.invalid_required_acks and answer.base_offset == -1
    assert h.plane.log_end_offset("a", 0) == 0


async def test_produce_unknown_topic_or_partition(h: Harness) -> None:
    answer = await h.produce("missing", 0, batch(b"x"))
    assert answer.error_code == ErrorCode.unknown_topic_or_partition
    assert h.plane.partition_count("missing") is None  # produce never auto-creates
    await h.create("one-partition")
    for partition in (1, -1):
        answer = await h.produce("one-partition", partition, batch(b"x"))
        assert answer.error_code == ErrorCode.unknown_topic_or_partition


async def test_produce_unknown_topic_id(h: Harness) -> None:
    response = await h.call(
        ApiKey.PRODUCE,
        13,
        {
            "acks": -1,
            "timeout": 1000,
            "topic_data": [
                {"topic_id": uuid.uuid4(), "partition_data": [{"index": 0, "records": batch(b"x")}]}
            ],
        },
    )
    assert response.responses[0].partition_responses[0].error_code == ErrorCode.unknown_topic_id


def _flip(data: bytes, position: int) -> bytes:
    broken = bytearray(data)
    broken[position] ^= 0x40
    return bytes(broken)


@pytest.mark.parametrize(
    "records",
    [
        pytest.param(_flip(batch(b"hello"), -1), id="flipped-bit"),
        pytest.param(batch(b"hello")[:-3], id="truncated"),
        pytest.param(bytes(batch(b"a")[:16]) + b"\x01" + batch(b"a")[17:], id="magic-1"),
        pytest.param(batch(b"a") + _flip(batch(b"b"), 30), id="second-batch-bad"),
    ],
)
async def test_produce_corrupt_batches(h: Harness, records: bytes) -> None:
    await h.create("c")
    answer = await h.produce("c", 0, records, version=9)
    assert answer.error_code == ErrorCode.corrupt_message
    assert answer.error_message
    assert answer.base_offset == -1
    assert h.plane.log_end_offset("c", 0) == 0  # nothing appended, not even a good first batch


async def test_produce_empty_records(h: Harness) -> None:
    await h.create("e")
    assert (await h.produce("e", 0, None)).error_code == ErrorCode.invalid_record
    assert (await h.produce("e", 0, b"")).error_code == ErrorCode.invalid_record


async def test_produce_message_too_large() -> None:
    h = Harness(**{"message.max.bytes": 200})
    await h.create("big")
    assert (await h.produce("big", 0, batch(b"x" * 50))).error_code == ErrorCode.none
    answer = await h.produce("big", 0, batch(b"x" * 300))
    assert answer.error_code == ErrorCode.message_too_large
    assert h.plane.log_end_offset("big", 0) == 1


async def test_produce_one_partition_failing_does_not_affect_another(h: Harness) -> None:
    await h.create("two", 2)
    response = await h.call(
        ApiKey.PRODUCE,
        8,
        {
            "acks": 1,
            "timeout": 1000,
            "topic_data": [
                {
                    "name": "two",
                    "partition_data": [
                        {"index": 0, "records": b"garbage"},
                        {"index": 1, "records": batch(b"fine")},
                    ],
                },
                {"name": "unknown", "partition_data": [{"index": 0, "records": batch(b"x")}]},
            ],
        },
    )
    two, unknown = response.responses
    assert [p.error_code for p in two.partition_responses] == [ErrorCode.corrupt_message, ErrorCode.none]
    assert unknown.partition_responses[0].error_code == ErrorCode.unknown_topic_or_partition
    assert h.plane.log_end_offset("two", 1) == 1


async def test_produce_idempotent_batch_is_kept_as_sent(h: Harness) -> None:
    await h.create("i")
    init = await h.call(ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": None, "transaction_timeout": 1})
    pid = init.producer_id
    sent = batch(b"a", b"b", producer_id=pid, producer_epoch=0, base_sequence=0)
    assert (await h.produce("i", 0, sent)).error_code == ErrorCode.none
    stored = (await h.fetch("i", 0, 0)).records
    assert stored == sent
    header = read_header(stored)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (pid, 0, 0)


async def test_produce_transactional_batch_is_refused(h: Harness) -> None:
    await h.create("tx")
    answer = await h.produce(
        "tx", 0, batch(b"a", producer_id=1, producer_epoch=0, base_sequence=0, attributes=0x10)
    )
    assert answer.error_code == ErrorCode.invalid_txn_state
    assert h.plane.log_end_offset("tx", 0) == 0


async def test_produce_zstd_before_v7(h: Harness) -> None:
    await h.create("zs")
    zstd_header_only = bytearray(batch(b"a"))
    zstd_header_only[22] |= 0x04  # attributes low byte: codec 4; the CRC is then wrong, so fix it up
    struct.pack_into(">I", zstd_header_only, 17, crc32c(bytes(zstd_header_only[21:])))
    assert (
        await h.produce("zs", 0, bytes(zstd_header_only), version=6)
    ).error_code == ErrorCode.unsupported_compression_type
    assert (await h.produce("zs", 0, bytes(zstd_header_only), version=7)).error_code == ErrorCode.none


# -- ListOffsets ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", versions(ApiKey.LIST_OFFSETS))
async def test_list_offsets_every_version(h: Harness, version: int) -> None:
    await h.create("l")
    await h.produce("l", 0, batch(b"a", b"b", b"c"))

    async def lookup(timestamp: int) -> Any:
        response = await h.call_wire(
            ApiKey.LIST_OFFSETS,
            version,
            {
                "replica_id": -1,
                "isolation_level": 0,
                "timeout": 100,
                "topics": [
                    {
                        "name": "l",
                        "partitions": [
                            {"partition_index": 0, "timestamp": timestamp, "current_leader_epoch": -1}
                        ],
                    }
                ],
            },
        )
        (topic,) = response.topics
        assert topic.name == "l"
        return topic.partitions[0]

    earliest, latest, by_time = await lookup(-2), await lookup(-1), await lookup(BASE_TS + 500)
    assert (earliest.error_code, earliest.offset, earliest.timestamp) == (ErrorCode.none, 0, -1)
    assert (latest.error_code, latest.offset) == (ErrorCode.none, 3)
    assert (by_time.offset, by_time.timestamp) == (1, BASE_TS + 1000)
    if version >= 4:
        assert earliest.leader_epoch == latest.leader_epoch == 0
    newest = await lookup(-3)
    if version >= 7:
        assert (newest.error_code, newest.offset, newest.timestamp) == (ErrorCode.none, 2, BASE_TS + 2000)
    else:
        assert newest.error_code == ErrorCode.unsupported_version


async def test_list_offsets_empty_partition(h: Harness) -> None:
    await h.create("e")
    assert (await h.list_offset("e", 0, -2)).offset == 0
    assert (await h.list_offset("e", 0, -1)).offset == 0
    none = await h.list_offset("e", 0, -3)
    assert (none.error_code, none.offset, none.timestamp, none.leader_epoch) == (ErrorCode.none, -1, -1, -1)
    none = await h.list_offset("e", 0, BASE_TS)
    assert (none.error_code, none.offset, none.timestamp) == (ErrorCode.none, -1, -1)


async def test_list_offsets_timestamp_search_is_record_level(h: Harness) -> None:
    await h.create("t")
    # offsets 0-2 at +10s, +11s, +12s
    await h.produce("t", 0, batch(b"a", b"b", b"c", first_ts=BASE_TS + 10_000))
    await h.produce("t", 0, batch(b"d", b"e", first_ts=BASE_TS))  # offsets 3-4: older timestamps
    await h.produce("t", 0, batch(b"f", first_ts=BASE_TS + 20_000))  # offset 5
    expectations = {
        BASE_TS: (0, BASE_TS + 10_000),  # first batch already reaches it
        BASE_TS + 11_000: (1, BASE_TS + 11_000),
        BASE_TS + 11_500: (2, BASE_TS + 12_000),
        BASE_TS + 12_001: (5, BASE_TS + 20_000),
        0: (0, BASE_TS + 10_000),
    }
    for target, (offset, timestamp) in expectations.items():
        found = await h.list_offset("t", 0, target)
        assert (found.offset, found.timestamp, found.leader_epoch) == (offset, timestamp, 0), target
    past = await h.list_offset("t", 0, BASE_TS + 20_001)
    assert (past.offset, past.timestamp) == (-1, -1)
    newest = await h.list_offset("t", 0, -3)
    assert (newest.offset, newest.timestamp) == (5, BASE_TS + 20_000)


async def test_list_offsets_max_timestamp_picks_the_first_record_with_it(h: Harness) -> None:
    await h.create("m")
    await h.produce("m", 0, batch(b"a", b"b", first_ts=BASE_TS + 5000, step_ms=-5000))  # +5s then +0s
    await h.produce("m", 0, batch(b"c", first_ts=BASE_TS + 5000))
    newest = await h.list_offset("m", 0, -3)
    assert (newest.offset, newest.timestamp) == (0, BASE_TS + 5000)


async def test_list_offsets_special_timestamps(h: Harness) -> None:
    await h.create("s")
    await h.produce("s", 0, batch(b"a"))
    local = await h.list_offset("s", 0, -4, version=8)
    assert (local.error_code, local.offset) == (ErrorCode.none, 0)
    assert (await h.list_offset("s", 0, -4, version=7)).error_code == ErrorCode.unsupported_version
    tiered = await h.list_offset("s", 0, -5, version=9)
    assert (tiered.error_code, tiered.offset, tiered.leader_epoch) == (ErrorCode.none, -1, -1)
    assert (await h.list_offset("s", 0, -5, version=8)).error_code == ErrorCode.unsupported_version
    assert (await h.list_offset("s", 0, -6, version=10)).error_code == ErrorCode.unsupported_version
    assert (await h.list_offset("s", 0, -100, version=10)).error_code == ErrorCode.unsupported_version


async def test_list_offsets_errors(h: Harness) -> None:
    await h.create("x")
    assert (await h.list_offset("nope", 0, -1)).error_code == ErrorCode.unknown_topic_or_partition
    assert (await h.list_offset("x", 1, -1)).error_code == ErrorCode.unknown_topic_or_partition
    fenced = await h.list_offset("x", 0, -1, version=4, leader_epoch=-7)
    assert fenced.error_code == ErrorCode.fenced_leader_epoch
    assert (await h.list_offset("x", 0, -1, leader_epoch=3)).error_code == ErrorCode.unknown_leader_epoch
    assert (await h.list_offset("x", 0, -1, leader_epoch=0)).error_code == ErrorCode.none
    response = await h.call(
        ApiKey.LIST_OFFSETS,
        5,
        {
            "replica_id": -1,
            "isolation_level": 0,
            "topics": [
                {
                    "name": "x",
                    "partitions": [
                        {"partition_index": 0, "timestamp": -1},
                        {"partition_index": 0, "timestamp": -2},
                    ],
                }
            ],
        },
    )
    assert [p.error_code for p in response.topics[0].partitions] == [ErrorCode.invalid_request] * 2


async def test_list_offsets_gzip_batches_are_searched_by_record(h: Harness) -> None:
    plain = batch(b"a", b"b", b"c")
    payload = gzip.compress(plain[61:])
    body = bytearray(plain[21:61]) + payload
    body[1] |= 0x01  # gzip
    compressed = struct.pack(">qiibI", 0, 9 + len(body), -1, 2, crc32c(bytes(body))) + bytes(body)
    await h.create("g")
    assert (await h.produce("g", 0, compressed)).error_code == ErrorCode.none
    found = await h.list_offset("g", 0, BASE_TS + 1500)
    assert (found.offset, found.timestamp) == (2, BASE_TS + 2000)


# -- Fetch ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", versions(ApiKey.FETCH))
async def test_fetch_every_version_returns_the_produced_bytes(h: Harness, version: int) -> None:
    created = await h.create("f", 2)
    first, second = batch(b"one", b"two"), batch(b"three")
    await h.produce("f", 1, first)
    await h.produce("f", 1, second)
    topic_key = {"topic_id": created.topic_id} if version >= 13 else {"topic": "f"}
    response = await h.call_wire(
        ApiKey.FETCH,
        version,
        {
            "replica_id": -1,
            "max_wait": 0,
            "min_bytes": 1,
            "max_bytes": 1 << 20,
            "isolation_level": 0,
            "session_id": 0,
            "session_epoch": -1,
            "forgotten_topics_data": (),
            "rack_id": "",
            "topics": [
                dict(
                    topic_key,
                    partitions=[
                        {
                            "partition": 1,
                            "fetch_offset": 0,
                            "partition_max_bytes": 1 << 20,
                            "current_leader_epoch": -1,
                        },
                        {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20},
                    ],
                )
            ],
        },
    )
    if version >= 7:
        assert (response.error_code, response.session_id) == (ErrorCode.none, 0)
    (topic,) = response.responses
    if version >= 13:
        assert topic.topic_id == created.topic_id
    else:
        assert topic.topic == "f"
    with_data, empty = topic.partitions
    assert (with_data.partition_index, with_data.error_code) == (1, ErrorCode.none)
    assert with_data.high_watermark == 3
    assert with_data.last_stable_offset == 3
    if version >= 5:
        assert with_data.log_start_offset == 0
    assert with_data.aborted_transactions is None
    if version >= 11:
        assert with_data.preferred_read_replica == -1
    assert with_data.records == first + with_base_offset(second, 2)
    assert (empty.partition_index, empty.error_code, empty.high_watermark, empty.records) == (
        0,
        ErrorCode.none,
        0,
        b"",
    )


async def test_fetch_from_the_middle_of_a_batch_returns_the_whole_batch(h: Harness) -> None:
    await h.create("mid")
    first, second = batch(b"a", b"b", b"c"), batch(b"d", b"e")
    await h.produce("mid", 0, first)
    await h.produce("mid", 0, second)
    assert (await h.fetch("mid", 0, 1)).records == first + with_base_offset(second, 3)
    assert (await h.fetch("mid", 0, 4)).records == with_base_offset(second, 3)


async def test_fetch_at_the_high_watermark_is_empty(h: Harness) -> None:
    await h.create("hw")
    await h.produce("hw", 0, batch(b"a"))
    answer = await h.fetch("hw", 0, 1)
    assert (answer.error_code, answer.records, answer.high_watermark) == (ErrorCode.none, b"", 1)


@pytest.mark.parametrize("offset", [2, 100, -1])
async def test_fetch_offset_out_of_range(h: Harness, offset: int) -> None:
    await h.create("oor")
    await h.produce("oor", 0, batch(b"a"))
    answer = await h.fetch("oor", 0, offset, max_wait=5000)  # errors answer at once, without waiting
    assert answer.error_code == ErrorCode.offset_out_of_range
    assert answer.records == b""


async def test_fetch_unknown_topic_and_partition(h: Harness) -> None:
    assert (await h.fetch("nope", 0, 0)).error_code == ErrorCode.unknown_topic_or_partition
    await h.create("one")
    assert (await h.fetch("one", 3, 0)).error_code == ErrorCode.unknown_topic_or_partition
    partitions = [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 100}]
    response = await h.call(
        ApiKey.FETCH,
        13,
        {
            "max_wait": 0,
            "min_bytes": 1,
            "forgotten_topics_data": (),
            "topics": [{"topic_id": uuid.uuid4(), "partitions": partitions}],
        },
    )
    assert response.responses[0].partitions[0].error_code == ErrorCode.unknown_topic_id


async def test_fetch_leader_epoch_checks(h: Harness) -> None:
    await h.create("e")
    fenced = await h.fetch("e", 0, 0, partition_extra={"current_leader_epoch": -3})
    assert fenced.error_code == ErrorCode.fenced_leader_epoch
    unknown = await h.fetch("e", 0, 0, partition_extra={"current_leader_epoch": 1})
    assert unknown.error_code == ErrorCode.unknown_leader_epoch
    current = await h.fetch("e", 0, 0, partition_extra={"current_leader_epoch": 0})
    assert current.error_code == ErrorCode.none


async def test_fetch_partition_max_bytes_still_returns_one_whole_batch(h: Harness) -> None:
    await h.create("k")
    first, second = batch(b"x" * 100), batch(b"y" * 100)
    await h.produce("k", 0, first + second)
    answer = await h.fetch("k", 0, 0, partition_max_bytes=10)
    assert answer.records == first  # KIP-74: bigger than the limit, but whole and alone
    answer = await h.fetch("k", 0, 0, partition_max_bytes=len(first) + len(second) - 1)
    assert answer.records == first
    answer = await h.fetch("k", 0, 0, partition_max_bytes=len(first) + len(second))
    assert len(split_batches(answer.records)) == 2


async def test_fetch_max_bytes_spans_partitions(h: Harness) -> None:
    await h.create("s", 3)
    data = batch(b"z" * 200)
    for p in range(3):
        await h.produce("s", p, data)
    wanted = [{"partition": p, "fetch_offset": 0, "partition_max_bytes": 1 << 20} for p in range(3)]
    topics = [{"topic": "s", "partitions": wanted}]
    for max_bytes in (len(data) + 10, 5):  # room for one batch; room for none (KIP-74 still gives one)
        response = await h.call(
            ApiKey.FETCH,
            12,
            {
                "max_wait": 0,
                "min_bytes": 1,
                "max_bytes": max_bytes,
                "topics": topics,
                "forgotten_topics_data": (),
            },
        )
        partitions = response.responses[0].partitions
        assert [len(p.records) for p in partitions] == [len(data), 0, 0]
        assert all(p.high_watermark == 1 and p.error_code == ErrorCode.none for p in partitions)


async def test_fetch_read_committed_lists_no_aborted_transactions(h: Harness) -> None:
    await h.create("rc")
    answer = await h.fetch("rc", 0, 0, isolation_level=1)
    assert answer.aborted_transactions == ()
    assert answer.last_stable_offset == answer.high_watermark == 0


async def test_fetch_incremental_session_is_not_found(h: Harness) -> None:
    await h.create("s")
    response = await h.call_wire(
        ApiKey.FETCH,
        7,
        {
            "max_wait": 0,
            "min_bytes": 1,
            "session_id": 123,
            "session_epoch": 4,
            "topics": (),
            "forgotten_topics_data": (),
        },
    )
    assert response.error_code == ErrorCode.fetch_session_id_not_found
    full = await h.call_wire(
        ApiKey.FETCH,
        7,
        {
            "max_wait": 0,
            "min_bytes": 1,
            "session_id": 0,
            "session_epoch": 0,
            "topics": [
                {"topic": "s", "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 10}]}
            ],
            "forgotten_topics_data": (),
        },
    )
    assert (full.error_code, full.session_id) == (ErrorCode.none, 0)


async def test_fetch_long_poll_wakes_on_produce(h: Harness) -> None:
    await h.create("lp")
    loop = asyncio.get_running_loop()
    started = loop.time()
    waiting = asyncio.create_task(h.fetch("lp", 0, 0, max_wait=10_000))
    await until(lambda: len(h.plane._waiters) > 0, "the fetch parks")
    assert not waiting.done()
    sent = batch(b"wake up")
    await h.produce("lp", 0, sent)
    answer = await asyncio.wait_for(waiting, 2)
    assert answer.records == sent
    assert loop.time() - started < 2


async def test_fetch_long_poll_waits_for_min_bytes(h: Harness) -> None:
    await h.create("mb")
    small = batch(b"a")
    waiting = asyncio.create_task(h.fetch("mb", 0, 0, max_wait=10_000, min_bytes=len(small) * 2))
    await h.produce("mb", 0, small)
    await asyncio.sleep(0.05)
    assert not waiting.done()
    await h.produce("mb", 0, small)
    answer = await asyncio.wait_for(waiting, 2)
    assert len(split_batches(answer.records)) == 2


async def test_fetch_long_poll_times_out(h: Harness) -> None:
    await h.create("to")
    loop = asyncio.get_running_loop()
    started = loop.time()
    answer = await h.fetch("to", 0, 0, max_wait=100)
    elapsed = loop.time() - started
    assert answer.error_code == ErrorCode.none and answer.records == b""
    assert 0.09 <= elapsed < 2


async def test_fetch_immediate_when_data_is_there(h: Harness) -> None:
    await h.create("now")
    await h.produce("now", 0, batch(b"a"))
    answer = await asyncio.wait_for(h.fetch("now", 0, 0, max_wait=60_000), 1)
    assert answer.records


async def test_close_wakes_long_polls(h: Harness) -> None:
    await h.create("c")
    waiting = asyncio.create_task(h.fetch("c", 0, 0, max_wait=60_000))
    await until(lambda: len(h.plane._waiters) > 0, "the fetch parks")
    await h.plane.close()
    answer = await asyncio.wait_for(waiting, 1)
    assert answer.error_code == ErrorCode.none and answer.records == b""
    # after close, fetches do not park at all
    assert (await asyncio.wait_for(h.fetch("c", 0, 0, max_wait=60_000), 1)).records == b""


async def test_delete_wakes_long_polls(h: Harness) -> None:
    await h.create("d")
    waiting = asyncio.create_task(h.fetch("d", 0, 0, max_wait=60_000))
    await until(lambda: len(h.plane._waiters) > 0, "the fetch parks")
    await h.call(ApiKey.DELETE_TOPICS, 4, {"topic_names": ["d"]})
    answer = await asyncio.wait_for(waiting, 1)
    assert answer.error_code == ErrorCode.unknown_topic_or_partition


async def test_cancelled_long_poll_leaves_no_waiters(h: Harness) -> None:
    await h.create("w")
    waiting = asyncio.create_task(h.fetch("w", 0, 0, max_wait=60_000))
    await until(lambda: len(h.plane._waiters) > 0, "the fetch parks")
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert len(h.plane._waiters) == 0
    await h.produce("w", 0, batch(b"a"))


# -- PartitionLog --------------------------------------------------------------------------------------------


def test_partition_log_append_and_read() -> None:
    log = PartitionLog()
    first, second = batch(b"a", b"b"), batch(b"c")
    assert log.append(first) == 0
    assert log.append(second) == 2
    assert (log.log_start_offset, log.high_watermark, log.log_end_offset) == (0, 3, 3)
    assert log.size_in_bytes == len(first) + len(second)
    assert log.read(0, 1 << 20) == first + with_base_offset(second, 2)
    assert log.read(2, 1 << 20) == with_base_offset(second, 2)
    assert log.read(0, 1) == b""
    assert log.read(0, 1, min_one=True) == first
    assert log.read(3, 1 << 20, min_one=True) == b""
    assert log.offset_for_timestamp(BASE_TS + 1) == (BASE_TS + 1000, 1)
    assert log.max_timestamp_offset() == (BASE_TS + 1000, 1)
