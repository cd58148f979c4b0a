"""Authorization in front of the API handlers: Kafka's per-API checks, order and error codes.

With an authorizer configured, `Enforcer.install(table)` wraps each registered handler (ApiTable.wrap): the
wrapper checks the caller's principal and host (RequestContext) and either answers an authorization error itself,
or passes the request on, trimmed to what the caller may touch, and merges the answer with the errors for the
rest, as Kafka's KafkaApis does. The group state machine and the data plane never see a request they must refuse.

    JoinGroup, SyncGroup, Heartbeat, LeaveGroup   GROUP READ, else GROUP_AUTHORIZATION_FAILED
    OffsetCommit       GROUP READ (else every partition GROUP_AUTHORIZATION_FAILED), then TOPIC READ per topic
                       (else its partitions TOPIC_AUTHORIZATION_FAILED)
    OffsetFetch        GROUP DESCRIBE per group (else GROUP_AUTHORIZATION_FAILED: v1 on each partition, v2-v7 at
                       the top, v8+ on the group), then TOPIC DESCRIBE per topic; fetching all offsets drops the
                       topics the caller may not describe
    DescribeGroups     GROUP DESCRIBE per group; authorized_operations from the ACLs when asked for
    ConsumerGroupHeartbeat  GROUP READ (else GROUP_AUTHORIZATION_FAILED), then TOPIC DESCRIBE per subscribed
                       topic name (else TOPIC_AUTHORIZATION_FAILED)
    ConsumerGroupDescribe   GROUP DESCRIBE per group (else GROUP_AUTHORIZATION_FAILED), and a group holding a
                       topic the caller may not describe is answered TOPIC_AUTHORIZATION_FAILED as a whole
    ListGroups         every group with CLUSTER DESCRIBE, else only the groups the caller may DESCRIBE (KIP-231)
    DeleteGroups       GROUP DELETE per group
    OffsetDelete       GROUP DELETE (top-level error), then TOPIC READ per topic
    FindCoordinator    GROUP DESCRIBE per group key (TRANSACTIONAL_ID DESCRIBE per transaction key)
    Produce            TOPIC WRITE per topic (TRANSACTIONAL_ID WRITE first for transactional producers)
    Fetch              TOPIC READ per topic (CLUSTER CLUSTER_ACTION for a replica fetch)
    ListOffsets        TOPIC DESCRIBE per topic
    Metadata           TOPIC DESCRIBE per topic (all-topics answers are filtered; named topics the caller may
                       not describe answer TOPIC_AUTHORIZATION_FAILED, whether they exist or not); creating a
                       missing topic needs CLUSTER CREATE or TOPIC CREATE
    CreateTopics       CLUSTER CREATE or TOPIC CREATE per topic
    DeleteTopics       TOPIC DELETE per topic
    InitProducerId     TRANSACTIONAL_ID WRITE, or without one CLUSTER IDEMPOTENT_WRITE or WRITE on some topic

The ACL and SCRAM APIs check CLUSTER ALTER / DESCRIBE themselves (coordinator.security.apis). ApiVersions and the
SASL APIs need nothing. Any other API registered later is refused with CLUSTER ALTER unless the caller is allowed
it (closed by default, so a new API is never silently open).
"""

from __future__ import annotations

import dataclasses
import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

from coordinator.consumer.responses import described_group_error, heartbeat_response
from coordinator.group.configs import GROUP_RESOURCE, alter_result, error_result
from protocol.api import ApiTable, Encoded, Handler, RequestContext, response_class
from protocol.api_keys import ApiKey
from protocol.build import build
from protocol.errors import ErrorCode

from .acl import CLUSTER_NAME, Authorizer, Operation, ResourceType

log = logging.getLogger(__name__)

INT32_MIN = -(2**31)
GAF, TAF = ErrorCode.group_authorization_failed, ErrorCode.topic_authorization_failed
CAF, TXN_AF = ErrorCode.cluster_authorization_failed, ErrorCode.transactional_id_authorization_failed

# Authenticated by the connection or checked by their own handlers.
SELF_CHECKED = frozenset(
    {
        ApiKey.SASL_HANDSHAKE,
        ApiKey.API_VERSIONS,
        ApiKey.DESCRIBE_ACLS,
        ApiKey.CREATE_ACLS,
        ApiKey.DELETE_ACLS,
        ApiKey.SASL_AUTHENTICATE,
        ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS,
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
    }
)

Wrapped = Callable[[Handler, RequestContext, Any], Awaitable[Any]]


def _resp(ctx: RequestContext, data: Any) -> Any:
    """Any answer (mapping, entity of any version, Encoded body) as the entity of the request's exact version."""
    if isinstance(data, Encoded):
        return data.decode(ctx.api_key, ctx.api_version)
    return build(response_class(ctx.api_key, ctx.api_version), data)


class Enforcer:
    def __init__(
        self,
        authorizer: Authorizer,
        dataplane: Any = None,
        on_denied: Callable[[int, str], None] | None = None,
        auto_create: Callable[[], bool] | None = None,
    ) -> None:
        self.authorizer = authorizer
        self.dataplane = dataplane
        self._on_denied = on_denied
        self._auto_create = auto_create or (lambda: False)

    # -- decisions ----------------------------------------------------------------------------------

    def ok(
        self, ctx: RequestContext, op: Operation, rtype: ResourceType, name: str, count: bool = True
    ) -> bool:
        allowed = self.authorizer.authorize(ctx.principal, ctx.client_host, op, rtype, name)
        if not allowed and count and self._on_denied is not None:
            self._on_denied(ctx.api_key, op.name)
        return allowed

    def cluster(self, ctx: RequestContext, op: Operation, count: bool = True) -> bool:
        return self.ok(ctx, op, ResourceType.CLUSTER, CLUSTER_NAME, count)

    def topic_name(self, entry: Any) -> str | None:
        name = getattr(entry, "name", None) or getattr(entry, "topic", None)
        if name:
            return str(name)
        topic_id = getattr(entry, "topic_id", None)
        if topic_id is not None and self.dataplane is not None:
            return self.dataplane.topic_name(topic_id)
        return None

    # -- installation -------------------------------------------------------------------------------

    def install(self, table: ApiTable, elsewhere: frozenset[int] = frozenset()) -> None:
        """Wrap every registered API but the self-checked ones and `elsewhere`: APIs this process forwards to
        another that authorizes them with the caller's principal (a worker's data plane, worker 0's)."""
        wrappers: dict[int, Wrapped] = {
            ApiKey.JOIN_GROUP: self.join_group,
            ApiKey.SYNC_GROUP: self.sync_group,
            ApiKey.HEARTBEAT: self.heartbeat,
            ApiKey.LEAVE_GROUP: self.leave_group,
            ApiKey.OFFSET_COMMIT: self.offset_commit,
            ApiKey.OFFSET_FETCH: self.offset_fetch,
            ApiKey.DESCRIBE_GROUPS: self.describe_groups,
            ApiKey.CONSUMER_GROUP_HEARTBEAT: self.consumer_group_heartbeat,
            ApiKey.CONSUMER_GROUP_DESCRIBE: self.consumer_group_describe,
            ApiKey.LIST_GROUPS: self.list_groups,
            ApiKey.DELETE_GROUPS: self.delete_groups,
            ApiKey.OFFSET_DELETE: self.offset_delete,
            ApiKey.DESCRIBE_CONFIGS: self.describe_configs,
            ApiKey.INCREMENTAL_ALTER_CONFIGS: self.incremental_alter_configs,
            ApiKey.LIST_CONFIG_RESOURCES: self.list_config_resources,
            ApiKey.FIND_COORDINATOR: self.find_coordinator,
            ApiKey.PRODUCE: self.produce,
            ApiKey.FETCH: self.fetch,
            ApiKey.LIST_OFFSETS: self.list_offsets,
            ApiKey.METADATA: self.metadata,
            ApiKey.CREATE_TOPICS: self.create_topics,
            ApiKey.DELETE_TOPICS: self.delete_topics,
            ApiKey.INIT_PRODUCER_ID: self.init_producer_id,
        }
        for spec in table.specs():
            if spec.api_key in SELF_CHECKED or spec.api_key in elsewhere or spec.raw:
                continue  # raw: passed on to an upstream cluster, which authorizes it (coordinator.front)
            wrapper = wrappers.get(spec.api_key)
            if wrapper is None:
                log.warning("api %d has no authorization rule; it needs CLUSTER ALTER", spec.api_key)
                wrapper = self.cluster_alter
            table.wrap(spec.api_key, _bind(wrapper))

    # -- groups -------------------------------------------------------------------------------------

    async def join_group(self, inner: Handler, ctx: RequestContext, req: Any) -> Any:
        if not self.ok(ctx, Operation.READ, ResourceType.GROUP, req.group_id):
            return {
                "throttle_time": 0,
                "error_code": GAF,
                "generation_id": -1,
                "protocol_type": None,
                "protocol_name": None if ctx.api_version >= 7 else "",
                "leader": "",
                "member_id": req.member_id,
                "members": (),
            }
        return await inner(ctx, req)

    async def sync_group(self, inner: Handler, ctx: RequestContext, req: Any) -> Any:
        if not self.ok(ctx, Operation.READ, ResourceType.GROUP, req.group_id):
            return {
                "throttle_time": 0,
                "error_code": GAF,
                "protocol_type": None,
                "protocol_name": None,
                "assignment": b"",
            }
        return await inner(ctx, req)

    async def heartbeat(self, inner: Handler, ctx: RequestContext, req: Any) -> Any:
        if not self.ok(ctx, Operation.READ, ResourceType.GROUP, req.group_id):
            return {"throttle_time": 0, "error_code": GAF}
        return await inner(ctx, req)

    async def leave_group(self, inner: Handler, ctx: RequestContext, req: Any) -> Any:
        if not self.ok(ctx, Operation.READ, ResourceType.GROUP, req.group_id):
            return {"throttle_time": 0, "error_code": GAF, "members": ()}
        return await inner(ctx, req)

    async def offset_commit(self, inner: Handler, ctx: RequestContext, req: Any) -> Any:
        if not self.ok(ctx, Operation.READ, ResourceType.GROUP, req.group_id):
            return {
                "throttle_time": 0,
                "topics": [_partition_errors(t.name, t.partitions, GAF) for t in req.topics],
            }
        allowed: list[Any] = []
        denied: list[Any] = []
        for topic in req.topics:
            (allowed if self.ok(ctx, Operation.READ, ResourceType.TOPIC, topic.name) else denied).append(
                topic
            )
        errors = [_partition_errors(t.name, t.partitions, TAF) for t in denied]
        if not denied:
            return await inner(ctx, req)
        if not allowed:
            return {"throttle_time": 0, "topics": errors}
        answer = _resp(ctx, await inner(ctx, dataclasses.replace(req, topics=tuple(allowed))))
        return dataclasses.replace(
            answer, topics=tuple(answer.topics) + tuple(_resp_topics(ctx, answer, errors))
        )

    def _fetch_topics(self, ctx: RequestContext, topics: Any) -> tuple[Any, list[dict[str, Any]]]:
        """OffsetFetch: the requested topics the caller may DESCRIBE, and error entries for the others."""
        if topics is None:
            return None, []
        allowed, errors = [], []
        for topic in topics:
            if self.ok(ctx, Operation.DESCRIBE, ResourceType.TOPIC, topic.name):
                allowed.append(topic)
            else:
                errors.append(
                    {
                        "name": topic.name,
                        "partitions": [
                            {
                                "partition_index": i,
                                "committed_offset": -1,
                                "committed_leader_epoch": -1,
                                "metadata": "",
                                "error_code": TAF,
                            }
                            for i in topic.partition_indexes
                        ],
                    }
                )
        return tuple(allowed), errors

    def _visible(self, ctx: RequestContext, topics: Any) -> tuple[Any, ...]:
        return tuple(t for t in topics if self.ok(ctx, Operation.DESCRIBE, ResourceType.TOPIC, t.name, False))

    async def offset_fetch(self, inner: Handler, ctx: RequestContext, req: Any) -> Any:
        if ctx.api_version >= 8:
            return await self._offset_fetch_groups(inner, ctx, req)
        if not self.ok(ctx, Operation.DESCRIBE, ResourceType.GROUP, req.group_id):
            if ctx.api_version < 2:
                return {
                    "throttle_time": 0,
                    "error_code": GAF,
                    "topics": [
                        {
                            "name": t.name,
                            "partitions": [
                                {
                                    "partition_index": i,
                                    "committed_offset": -1,
                                    "committed_leader_epoch": -1,
                                    "metadata": "",
                                    "error_code": GAF,
                                }
                                for i in t.partition_indexes
                            ],
                        }
                        for t in req.topics or ()
                    ],
                }
            return {"throttle_time": 0, "error_code": GAF, "topics": ()}
        allowed, errors = self._fetch_topics(ctx, req.topics)
        if allowed is None:
            answer = _resp(ctx, await inner(ctx, req))
            return dataclasses.replace(answer, topics=self._visible(ctx, answer.topics))
        if not errors:
            return await inner(ctx, req)
        if not allowed:
            return {"throttle_time": 0, "error_code": ErrorCode.none, "topics": errors}
        answer = _resp(ctx, await inner(ctx, dataclasses.replace(req, topics=allowed)))
        return dataclasses.replace(
            answer, topics=tuple(answer.topics) + tuple(_resp_topics(ctx, answer, errors))
        )

    async def _offset_fetch_groups(self, inner: Handler, ctx: RequestContext, req: Any) -> Any:
        passed: list[Any] = []
        own: dict[str, dict[str, Any]] = {}  # group id -> answer made here
        extra: dict[str, list[dict[str, Any]]] = {}
        fetch_all: set[str] = set()
        for group in req.groups:
            if not self.ok(ctx, Operation.DESCRIBE, ResourceType.GROUP, group.group_id):
                own[group.group_id] = {"group_id": group.group_id, "topics": (), "error_code": GAF}
                continue
            allowed, errors = self._fetch_topics(ctx, group.topics)
            if allowed is None:
                fetch_all.add(group.group_id)
            elif errors and not allowed:
                own[group.group_id] = {
                    "group_id": group.group_id,
                    "topics": errors,
                    "error_code": ErrorCode.none,
                }
                continue
            extra[group.group_id] = errors
            passed.append(group if allowed is None else dataclasses.replace(group, topics=allowed))
        answered: dict[str, Any] = {}
        if passed:
            answer = _resp(ctx, await inner(ctx, dataclasses.replace(req, groups=tuple(passed))))
            for g in answer.groups:
                answered[g.group_id] = g
        groups: list[Any] = []
        for group in req.groups:
            gid = group.group_id
            if gid in own:
                groups.append(own[gid])
                continue
            g = answered.get(gid)
            if g is None:
                continue
            if gid in fetch_all:
                g = dataclasses.replace(g, topics=self._visible(ctx, g.topics))
            elif extra.get(gid):
                g = {
                    "group_id": g.group_id,
                    "error_code": g.error_code,
                    "topics": list(g.topics) + extra[gid],
                }
            groups.append(g)
        return {"throttle_time": 0, "groups": groups}

    def _with_group_operations(self, ctx: RequestContext, described: Any) -> Any:
        """A described group (DescribeGroups or ConsumerGroupDescribe) with the operations the caller may do on it."""
        return dataclasses.replace(
            described,
            authorized_operations=self.authorizer.authorized_operations(
                ctx.principal, ctx.client_host, ResourceType.GROUP, described.group_id
            ),
        )

    async def describe_groups(self, inner: Handler, ctx: RequestContext, req: Any) -> Any:
        with_ops = bool(getattr(req, "include_authorized_operations", False))
        allowed = [g for g in req.groups if self.ok(ctx, Operation.DESCRIBE, ResourceType.GROUP, g)]
        answered: dict[str, Any] = {}
        if allowed:
            answer = _resp(ctx, await inner(ctx, dataclasses.replace(req, groups=tuple(allowed))))
            for g in answer.groups:
                answered[g.group_id] = self._with_group_operations(ctx, g) if with_ops else g
        groups: list[Any] = []
        for gid in req.groups:
            if gid in answered:
                groups.append(answered[gid])
            else:
                groups.append(
                    {
                        "error_code": GAF,
                        "error_message": None,
                        "group_id": gid,
                        "group_state": "",
                        "protocol_type": "",
                        "protocol_data": "",
                        "members": (),
                        "authorized_operations": INT32_MIN,
                    }
                )
        return {"throttle_time": 0, "groups": groups}

    async def consumer_group_heartbeat(self, inner: Handler, ctx: RequestContext, req: Any) -> Any:
        code = None
        if not self.ok(ctx, Operation.READ, ResourceType.GROUP, req.group_id):
            code = GAF
        elif any(
            not self.ok(ctx, Operation.DESCRIBE, ResourceType.TOPIC, t)
            for t in req.subscribed_topic_names or ()
        ):
            code = TAF
        if code is None:
            return await inner(ctx, req)
        return heartbeat_response(code)

    async def consumer_group_describe(self, inner: Handler, ctx: RequestContext, req: Any) -> Any:
        with_ops = bool(getattr(req, "include_authorized_operations", False))
        allowed = [g for g in req.group_ids if self.ok(ctx, Operation.DESCRIBE, ResourceType.GROUP, g)]
        answered: dict[str, Any] = {}
        if allowed:
            answer = _resp(ctx, await inner(ctx, dataclasses.replace(req, group_ids=tuple(allowed))))
            for g in answer.groups:
                topics = {
                    tp.topic_name
                    for m in g.members
                    for a in (m.assignment, m.target_assignment)
                    for tp in a.topic_partitions
                    if tp.topic_name
                }
                if any(not self.ok(ctx, Operation.DESCRIBE, ResourceType.TOPIC, t) for t in sorted(topics)):
                    answered[g.group_id] = described_group_error(g.group_id, TAF)
                    continue
                answered[g.group_id] = self._with_group_operations(ctx, g) if with_ops else g
        return {
            "throttle_time": 0,
            "groups": [answered.get(gid) or described_group_error(gid, GAF) for gid in req.group_ids],
        }

    async def list_groups(self, inner: Handler, ctx: RequestContext, req: Any) -> Any:
        answer = await inner(ctx, req)
        if self.cluster(ctx, Operation.DESCRIBE, count=False):
            return answer
        answer = _resp(ctx, answer)
        return dataclasses.replace(
            answer,
            groups=tuple(
                g
                for g in answer.groups
                if self.ok(ctx, Operation.DESCRIBE, ResourceType.GROUP, g.group_id, False)
            ),
        )

    async def delete_groups(self, inner: Handler, ctx: RequestContext, req: Any) -> Any:
        allowed = [g for g in req.groups_names if self.ok(ctx, Operation.DELETE, ResourceType.GROUP, g)]
        results: dict[str, Any] = {}
        if allowed:
            answer = _resp(ctx, await inner(ctx, dataclasses.replace(req, groups_names=tuple(allowed))))
            results = {r.group_id: r for r in answer.results}
        return {
            "throttle_time": 0,
            "results": [
                results.get(g) or {"group_id": g, "error_code": GAF} for g in dict.fromkeys(req.groups_names)
            ],
        }

    async def offset_delete(self, inner: Handler, ctx: RequestContext, req: Any) -> Any:
        if not self.ok(ctx, Operation.DELETE, ResourceType.GROUP, req.group_id):
            return {"throttle_time": 0, "error_code": GAF, "topics": ()}
        allowed: list[Any] = []
        denied: list[Any] = []
        for topic in req.topics:
            (allowed if self.ok(ctx, Operation.READ, ResourceType.TOPIC, topic.name) else denied).append(
                topic
            )
        if not denied:
            return await inner(ctx, req)
        answer = _resp(ctx, await inner(ctx, dataclasses.replace(req, topics=tuple(allowed))))
        errors = [_partition_errors(t.name, t.partitions, TAF) for t in denied]
        return dataclasses.replace(
            answer, topics=tuple(answer.topics) + tuple(_resp_topics(ctx, answer, errors))
        )

    async def describe_configs(self, inner: Handler, ctx: RequestContext, req: Any) -> Any:
        """A group's configs need GROUP DESCRIBE_CONFIGS (other resources are not served here, or are passed on
        to a cluster that authorizes them)."""
        return await self._group_configs(inner, ctx, req, Operation.DESCRIBE_CONFIGS, "results")

    async def incremental_alter_configs(self, inner: Handler, ctx: RequestContext, req: Any) -> Any:
        """Changing a group's configs needs GROUP ALTER_CONFIGS."""
        return await self._group_configs(inner, ctx, req, Operation.ALTER_CONFIGS, "responses")

    async def list_config_resources(self, inner: Handler, ctx: RequestContext, req: Any) -> Any:
        """CLUSTER DESCRIBE_CONFIGS, as Kafka asks."""
        if not self.cluster(ctx, Operation.DESCRIBE_CONFIGS):
            return {"throttle_time": 0, "error_code": CAF, "config_resources": ()}
        return await inner(ctx, req)

    async def _group_configs(
        self, inner: Handler, ctx: RequestContext, req: Any, op: Operation, answer_field: str
    ) -> Any:
        resources = list(req.resources)
        denied = {
            i
            for i, r in enumerate(resources)
            if r.resource_type == GROUP_RESOURCE and not self.ok(ctx, op, ResourceType.GROUP, r.resource_name)
        }
        if not denied:
            return await inner(ctx, req)
        allowed = [r for i, r in enumerate(resources) if i not in denied]
        answered: list[Any] = []
        if allowed:
            answer = _resp(ctx, await inner(ctx, dataclasses.replace(req, resources=tuple(allowed))))
            answered = list(getattr(answer, answer_field))
        entries = iter(answered)
        merged = []
        for i, r in enumerate(resources):
            if i not in denied:
                merged.append(next(entries))
                continue
            refuse = error_result if answer_field == "results" else alter_result
            merged.append(refuse(r.resource_type, r.resource_name, GAF, None))
        return {"throttle_time": 0, answer_field: merged}

    async def find_coordinator(self, inner: Handler, ctx: RequestContext, req: Any) -> Any:
        key_type = int(getattr(req, "key_type", 0))
        if key_type == 0:
            check = (Operation.DESCRIBE, ResourceType.GROUP, GAF, "Group authorization failed.")
        elif key_type == 1:
            check = (
                Operation.DESCRIBE,
                ResourceType.TRANSACTIONAL_ID,
                TXN_AF,
                "Transactional Id authorization failed.",
            )
        else:
            return await inner(ctx, req)
        op, rtype, code, message = check

        def denied(key: str) -> dict[str, Any]:
            return {
                "key": key,
                "node_id": -1,
                "host": "",
                "port": -1,
                "error_code": code,
                "error_message": message,
            }

        if ctx.api_version < 4:
            if not self.ok(ctx, op, rtype, req.key):
                return denied(req.key) | {"throttle_time": 0}
            return await inner(ctx, req)
        allowed = [k for k in req.coordinator_keys if self.ok(ctx, op, rtype, k)]
        found: dict[str, Any] = {}
        if allowed:
            answer = _resp(ctx, await inner(ctx, dataclasses.replace(req, coordinator_keys=tuple(allowed))))
            found = {c.key: c for c in answer.coordinators}
        return {"throttle_time": 0, "coordinators": [found.get(k) or denied(k) for k in req.coordinator_keys]}

    # -- topics -------------------------------------------------------------------------------------

    def _split(self, ctx: RequestContext, topics: Any, op: Operation) -> tuple[list[Any], list[Any]]:
        allowed: list[Any] = []
        denied: list[Any] = []
        for topic in topics:
            name = self.topic_name(topic)
            if name is None:  # an unknown topic id: the handler answers UNKNOWN_TOPIC_ID
                allowed.append(topic)
            elif self.ok(ctx, op, ResourceType.TOPIC, name):
                allowed.append(topic)
            else:
                denied.append(topic)
        return allowed, denied

    async def produce(self, inner: Handler, ctx: RequestContext, req: Any) -> Any:
        if req.transactional_id is not None and not self.ok(
            ctx, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, req.transactional_id
        ):
            errors = [
                _topic_key(t)
                | {
                    "partition_responses": [
                        {"index": p.index, "error_code": TXN_AF, "base_offset": -1, "log_start_offset": -1}
                        for p in t.partition_data
                    ]
                }
                for t in req.topic_data
            ]
            return None if req.acks == 0 else {"throttle_time": 0, "responses": errors}
        allowed, denied = self._split(ctx, req.topic_data, Operation.WRITE)
        if not denied:
            return await inner(ctx, req)
        errors = [
            _topic_key(t)
            | {
                "partition_responses": [
                    {"index": p.index, "error_code": TAF, "base_offset": -1, "log_start_offset": -1}
                    for p in t.partition_data
                ]
            }
            for t in denied
        ]
        if not allowed:
            return None if req.acks == 0 else {"throttle_time": 0, "responses": errors}
        answer = await inner(ctx, dataclasses.replace(req, topic_data=tuple(allowed)))
        if answer is None:
            return None
        answer = _resp(ctx, answer)
        return dataclasses.replace(
            answer, responses=tuple(answer.responses) + tuple(_resp_list(ctx, answer, "responses", errors))
        )

    async def fetch(self, inner: Handler, ctx: RequestContext, req: Any) -> Any:
        replica = getattr(req, "replica_id", None)
        if replica is None and getattr(req, "replica_state", None) is not None:
            replica = req.replica_state.replica_id
        if replica is not None and replica >= 0 and not self.cluster(ctx, Operation.CLUSTER_ACTION):
            return {"throttle_time": 0, "error_code": CAF, "session_id": 0, "responses": ()}
        allowed, denied = self._split(ctx, req.topics, Operation.READ)
        errors = [
            _topic_key(t, "topic") | {"partitions": [_fetch_denied(p.partition) for p in t.partitions]}
            for t in denied
        ]
        in_session = req.session_id != 0 or req.session_epoch > 0
        if denied and not allowed and not in_session:
            return {"throttle_time": 0, "error_code": ErrorCode.none, "session_id": 0, "responses": errors}
        answer = _resp(
            ctx, await inner(ctx, dataclasses.replace(req, topics=tuple(allowed)) if denied else req)
        )
        # A fetch session also answers for partitions the request does not list: check every topic answered
        # (an ACL removed since the partition joined the session must stop its data, as Kafka checks the whole
        # session's partitions).
        responses = []
        changed = False
        for topic in answer.responses:
            name = self.topic_name(topic)
            if name is not None and not self.ok(ctx, Operation.READ, ResourceType.TOPIC, name, False):
                changed = True
                topic = build(
                    type(topic),
                    {
                        "topic": getattr(topic, "topic", None),
                        "topic_id": getattr(topic, "topic_id", None),
                        "partitions": [_fetch_denied(p.partition_index) for p in topic.partitions],
                    },
                )
            responses.append(topic)
        if not denied and not changed:
            return answer
        return dataclasses.replace(
            answer, responses=tuple(responses) + tuple(_resp_list(ctx, answer, "responses", errors))
        )

    async def list_offsets(self, inner: Handler, ctx: RequestContext, req: Any) -> Any:
        allowed, denied = self._split(ctx, req.topics, Operation.DESCRIBE)
        if not denied:
            return await inner(ctx, req)
        errors = [
            {
                "name": t.name,
                "partitions": [
                    {
                        "partition_index": p.partition_index,
                        "error_code": TAF,
                        "timestamp": -1,
                        "offset": -1,
                        "leader_epoch": -1,
                        "old_style_offsets": (),
                    }
                    for p in t.partitions
                ],
            }
            for t in denied
        ]
        if not allowed:
            return {"throttle_time": 0, "topics": errors}
        answer = _resp(ctx, await inner(ctx, dataclasses.replace(req, topics=tuple(allowed))))
        return dataclasses.replace(
            answer, topics=tuple(answer.topics) + tuple(_resp_topics(ctx, answer, errors))
        )

    def _may_create(self, ctx: RequestContext, name: str) -> bool:
        return self.cluster(ctx, Operation.CREATE, count=False) or self.ok(
            ctx, Operation.CREATE, ResourceType.TOPIC, name
        )

    async def metadata(self, inner: Handler, ctx: RequestContext, req: Any) -> Any:
        version = ctx.api_version
        with_topic_ops = bool(getattr(req, "include_topic_authorized_operations", False))
        all_topics = req.topics is None or (version == 0 and not req.topics)
        errors: list[dict[str, Any]] = []
        if all_topics:
            answer = _resp(ctx, await inner(ctx, req))
            topics = self._visible_metadata(ctx, answer.topics)
        else:
            auto_create = self._auto_create() and bool(getattr(req, "allow_auto_topic_creation", True))
            passed = []
            for entry in req.topics:
                name = entry.name
                if name is None:  # by topic id: checked on the answer below
                    passed.append(entry)
                    continue
                if not self.ok(ctx, Operation.DESCRIBE, ResourceType.TOPIC, name):
                    errors.append(_metadata_denied(name, getattr(entry, "topic_id", None)))
                elif (
                    auto_create
                    and self.dataplane is not None
                    and self.dataplane.partition_count(name) is None
                    and not self._may_create(ctx, name)
                ):
                    errors.append(_metadata_denied(name, getattr(entry, "topic_id", None)))
                else:
                    passed.append(entry)
            if not passed and version == 0:
                answer = _resp(ctx, await inner(ctx, dataclasses.replace(req, topics=())))
                topics = []
            else:
                answer = _resp(ctx, await inner(ctx, dataclasses.replace(req, topics=tuple(passed))))
                topics = []
                for t in answer.topics:
                    if (
                        t.name
                        and t.error_code == ErrorCode.none
                        and not self.ok(ctx, Operation.DESCRIBE, ResourceType.TOPIC, t.name)
                    ):
                        errors.append(_metadata_denied(None, t.topic_id))  # looked up by id
                    else:
                        topics.append(t)
        if with_topic_ops:
            topics = [
                dataclasses.replace(
                    t,
                    topic_authorized_operations=self.authorizer.authorized_operations(
                        ctx.principal, ctx.client_host, ResourceType.TOPIC, t.name
                    ),
                )
                if t.error_code == 0
                else t
                for t in topics
            ]
        if getattr(req, "include_cluster_authorized_operations", False):
            answer = dataclasses.replace(
                answer,
                cluster_authorized_operations=self.authorizer.authorized_operations(
                    ctx.principal, ctx.client_host, ResourceType.CLUSTER, CLUSTER_NAME
                ),
            )
        return dataclasses.replace(answer, topics=tuple(topics) + tuple(_resp_topics(ctx, answer, errors)))

    def _visible_metadata(self, ctx: RequestContext, topics: Any) -> list[Any]:
        return [t for t in topics if self.ok(ctx, Operation.DESCRIBE, ResourceType.TOPIC, t.name, False)]

    async def create_topics(self, inner: Handler, ctx: RequestContext, req: Any) -> Any:
        counts = Counter(t.name for t in req.topics)
        allowed: list[Any] = []
        denied: list[Any] = []
        for topic in req.topics:
            ok = counts[topic.name] > 1 or self._may_create(ctx, topic.name)
            if not ok and self._on_denied is not None:
                self._on_denied(ctx.api_key, Operation.CREATE.name)
            (allowed if ok else denied).append(topic)
        if not denied:
            return await inner(ctx, req)
        errors = [
            {
                "name": t.name,
                "topic_id": None,
                "error_code": TAF,
                "error_message": "Authorization failed.",
                "num_partitions": -1,
                "replication_factor": -1,
                "configs": (),
            }
            for t in denied
        ]
        if not allowed:
            return {"throttle_time": 0, "topics": errors}
        answer = _resp(ctx, await inner(ctx, dataclasses.replace(req, topics=tuple(allowed))))
        return dataclasses.replace(
            answer, topics=tuple(answer.topics) + tuple(_resp_topics(ctx, answer, errors))
        )

    async def delete_topics(self, inner: Handler, ctx: RequestContext, req: Any) -> Any:
        errors: list[dict[str, Any]] = []
        if ctx.api_version >= 6:
            allowed, denied = self._split(ctx, req.topics, Operation.DELETE)
            errors = [
                {
                    "name": self.topic_name(t),
                    "topic_id": t.topic_id,
                    "error_code": TAF,
                    "error_message": "Authorization failed.",
                }
                for t in denied
            ]
            passed = dataclasses.replace(req, topics=tuple(allowed))
            some = bool(allowed)
        else:
            names = [n for n in req.topic_names if self.ok(ctx, Operation.DELETE, ResourceType.TOPIC, n)]
            errors = [
                {"name": n, "topic_id": None, "error_code": TAF, "error_message": "Authorization failed."}
                for n in req.topic_names
                if n not in names
            ]
            passed = dataclasses.replace(req, topic_names=tuple(names))
            some = bool(names)
        if not errors:
            return await inner(ctx, req)
        if not some:
            return {"throttle_time": 0, "responses": errors}
        answer = _resp(ctx, await inner(ctx, passed))
        return dataclasses.replace(
            answer, responses=tuple(answer.responses) + tuple(_resp_list(ctx, answer, "responses", errors))
        )

    async def init_producer_id(self, inner: Handler, ctx: RequestContext, req: Any) -> Any:
        if req.transactional_id is not None:
            if not self.ok(ctx, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, req.transactional_id):
                return {"throttle_time": 0, "error_code": TXN_AF, "producer_id": -1, "producer_epoch": -1}
        elif not (
            self.cluster(ctx, Operation.IDEMPOTENT_WRITE, count=False)
            or self.authorizer.authorize_any(
                ctx.principal, ctx.client_host, Operation.WRITE, ResourceType.TOPIC
            )
        ):
            if self._on_denied is not None:
                self._on_denied(ctx.api_key, Operation.IDEMPOTENT_WRITE.name)
            return {"throttle_time": 0, "error_code": CAF, "producer_id": -1, "producer_epoch": -1}
        return await inner(ctx, req)

    async def cluster_alter(self, inner: Handler, ctx: RequestContext, req: Any) -> Any:
        if self.cluster(ctx, Operation.ALTER):
            return await inner(ctx, req)
        return {"throttle_time": 0, "error_code": CAF, "error_message": "Cluster authorization failed."}


def _bind(wrapper: Wrapped) -> Callable[[Handler], Handler]:
    def wrap(inner: Handler) -> Handler:
        async def handler(ctx: RequestContext, req: Any) -> Any:
            return await wrapper(inner, ctx, req)

        return handler

    return wrap


def _fetch_denied(partition: int) -> dict[str, Any]:
    return {
        "partition_index": partition,
        "error_code": TAF,
        "high_watermark": -1,
        "last_stable_offset": -1,
        "log_start_offset": -1,
        "aborted_transactions": None,
        "preferred_read_replica": -1,
        "records": b"",
    }


def _partition_errors(name: str, partitions: Any, code: ErrorCode) -> dict[str, Any]:
    return {
        "name": name,
        "partitions": [{"partition_index": p.partition_index, "error_code": code} for p in partitions],
    }


def _topic_key(topic: Any, name_field: str = "name") -> dict[str, Any]:
    """The identifying fields of a request topic, for the response entry (name, or topic id from v13)."""
    name = getattr(topic, "name", None) or getattr(topic, "topic", None)
    return {name_field: name, "name": name, "topic_id": getattr(topic, "topic_id", None)}


def _metadata_denied(name: str | None, topic_id: Any) -> dict[str, Any]:
    return {
        "error_code": TAF,
        "name": name,
        "topic_id": topic_id,
        "is_internal": False,
        "partitions": (),
        "topic_authorized_operations": INT32_MIN,
    }


def _resp_list(ctx: RequestContext, answer: Any, field: str, items: list[dict[str, Any]]) -> list[Any]:
    """Error entries built as the nested class of `answer.<field>` (via the response class's own build)."""
    if not items:
        return []
    built = build(type(answer), {field: items})
    return list(getattr(built, field))


def _resp_topics(ctx: RequestContext, answer: Any, items: list[dict[str, Any]]) -> list[Any]:
    return _resp_list(ctx, answer, "topics", items)
