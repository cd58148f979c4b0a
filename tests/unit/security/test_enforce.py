"""The authorization layer in front of real API table entries: what reaches the wrapped handler and what the
caller gets back. The wrapped handlers here are small recorders standing in for the data plane and the group
coordinator (the e2e tests in tests/security run the real ones)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from coordinator.security.acl import AclBinding, Authorizer, Operation, PatternType, Permission, ResourceType
from coordinator.security.enforce import Enforcer
from protocol.api import ApiTable, RequestContext, request_class, response_class
from protocol.build import build
from protocol.errors import ErrorCode

ALICE = "User:alice"
TOPIC_ID = {"open": uuid.UUID(int=1), "hidden": uuid.UUID(int=2)}


class Topics:
    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        return {v: k for k, v in TOPIC_ID.items()}.get(topic_id)

    def partition_count(self, name: str) -> int | None:
        return 1 if name in TOPIC_ID else None


def allow(rtype: ResourceType, name: str, op: Operation, principal: str = ALICE) -> AclBinding:
    return AclBinding(rtype, name, PatternType.LITERAL, principal, "*", op, Permission.ALLOW)


def setup(*acls: AclBinding) -> tuple[ApiTable, list[Any], list[tuple[int, str]]]:
    authorizer = Authorizer(super_users=("User:admin",))
    for binding in acls:
        authorizer.add(binding)
    seen: list[Any] = []
    denied: list[tuple[int, str]] = []
    table = ApiTable()

    async def fetch(ctx: RequestContext, req: Any) -> Any:
        seen.append(req)
        # As a fetch session would: answer for a partition the request does not list ("hidden").
        return {
            "throttle_time": 0,
            "error_code": ErrorCode.none,
            "session_id": 7,
            "responses": [
                {
                    "topic_id": TOPIC_ID[n],
                    "partitions": [
                        {
                            "partition_index": 0,
                            "error_code": ErrorCode.none,
                            "high_watermark": 5,
                            "records": b"data-" + n.encode(),
                        }
                    ],
                }
                for n in ("open", "hidden")
            ],
        }

    async def offset_fetch(ctx: RequestContext, req: Any) -> Any:
        seen.append(req)
        return {
            "throttle_time": 0,
            "topics": [
                {
                    "name": t.name,
                    "partitions": [
                        {
                            "partition_index": i,
                            "committed_offset": 3,
                            "metadata": "",
                            "error_code": ErrorCode.none,
                        }
                        for i in t.partition_indexes
                    ],
                }
                for t in req.topics
            ],
        }

    async def list_groups(ctx: RequestContext, req: Any) -> Any:
        return {
            "error_code": ErrorCode.none,
            "groups": [{"group_id": g, "protocol_type": "consumer"} for g in ("a", "b")],
        }

    async def init_pid(ctx: RequestContext, req: Any) -> Any:
        return {"error_code": ErrorCode.none, "producer_id": 42, "producer_epoch": 0}

    table.register(1, 12, 17, fetch)
    table.register(9, 1, 7, offset_fetch)
    table.register(16, 0, 5, list_groups)
    table.register(22, 0, 5, init_pid)
    Enforcer(authorizer, Topics(), on_denied=lambda api, op: denied.append((api, op))).install(table)
    return table, seen, denied


def call(table: ApiTable, api_key: int, version: int, body: dict[str, Any], principal: str = ALICE) -> Any:
    ctx = RequestContext(api_key, version, 1, "t", "10.0.0.1", 1, principal)
    request = build(request_class(api_key, version), body)
    spec = table.spec(api_key)
    assert spec is not None
    answer = asyncio.run(spec.handler(ctx, request))
    table.encode_response(ctx, answer)  # what the connection would write: it must encode
    return build(response_class(api_key, version), answer)


def test_fetch_filters_the_request_and_every_answered_topic() -> None:
    table, seen, _ = setup(allow(ResourceType.TOPIC, "open", Operation.READ))
    answer = call(
        table,
        1,
        13,
        {
            "session_id": 7,
            "session_epoch": 3,
            "max_wait": 0,
            "topics": [
                {"topic_id": TOPIC_ID["open"], "partitions": [{"partition": 0, "fetch_offset": 0}]},
                {"topic_id": TOPIC_ID["hidden"], "partitions": [{"partition": 0, "fetch_offset": 0}]},
            ],
        },
    )
    assert [t.topic_id for t in seen[0].topics] == [TOPIC_ID["open"]]
    parts = {}
    for t in answer.responses:
        for p in t.partitions:
            parts.setdefault(t.topic_id, []).append((p.error_code, bytes(p.records or b"")))
    assert parts[TOPIC_ID["open"]] == [(0, b"data-open")]
    # "hidden" is denied twice over (listed in the request, and answered by the session): never any data.
    assert all(code == 29 and data == b"" for code, data in parts[TOPIC_ID["hidden"]])


def test_offset_fetch_v1_reports_group_denial_on_each_partition() -> None:
    table, seen, denied = setup()
    answer = call(table, 9, 1, {"group_id": "g", "topics": [{"name": "open", "partition_indexes": [0, 1]}]})
    assert seen == [] and denied == [(9, "DESCRIBE")]
    assert [(p.partition_index, p.error_code, p.committed_offset) for p in answer.topics[0].partitions] == [
        (0, 30, -1),
        (1, 30, -1),
    ]
    v2 = call(table, 9, 2, {"group_id": "g", "topics": [{"name": "open", "partition_indexes": [0]}]})
    assert v2.error_code == 30 and v2.topics == ()


def test_list_groups_filtered_unless_cluster_describe() -> None:
    table, _, _ = setup(allow(ResourceType.GROUP, "a", Operation.READ))
    assert [g.group_id for g in call(table, 16, 4, {}).groups] == ["a"]
    table, _, _ = setup(allow(ResourceType.CLUSTER, "kafka-cluster", Operation.DESCRIBE))
    assert [g.group_id for g in call(table, 16, 4, {}).groups] == ["a", "b"]
    table, _, _ = setup()
    assert [g.group_id for g in call(table, 16, 4, {}, principal="User:admin").groups] == ["a", "b"]


def test_idempotent_producer_needs_idempotent_write_or_write_on_some_topic() -> None:
    table, _, _ = setup()
    assert call(table, 22, 4, {"transactional_id": None, "transaction_timeout": 1000}).error_code == 31
    table, _, _ = setup(allow(ResourceType.TOPIC, "open", Operation.WRITE))
    assert call(table, 22, 4, {"transactional_id": None, "transaction_timeout": 1000}).producer_id == 42
    table, _, _ = setup(allow(ResourceType.TRANSACTIONAL_ID, "tx", Operation.WRITE))
    assert call(table, 22, 4, {"transactional_id": "tx", "transaction_timeout": 1000}).producer_id == 42
    assert call(table, 22, 4, {"transactional_id": "other", "transaction_timeout": 1000}).error_code == 53
