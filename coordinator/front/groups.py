"""Group coordination in front of an upstream cluster: the groups are coordinated here (the group service, as
standalone), and the cluster stays the record of their offsets.

* FindCoordinator for a group names one of the cluster's node ids (a hash of the group id over them), at its
  address here; every listener of this server serves every group, so which one does not matter to the answer's
  correctness, only to its stability. For a transactional id the cluster's answer is passed on, its address
  rewritten (coordinator.front.dataplane).
* OffsetCommit is checked and stored here first (member, generation, our additions), then committed to the
  cluster's coordinator of the group as a commit of an Empty, simple group (generation -1, no member): tools that
  read the cluster (`kafka-consumer-groups`, Burrow, lag exporters) see every offset. The client's answer waits
  for the cluster's, and carries the cluster's error for a partition it refused, or REQUEST_TIMED_OUT (retriable)
  when the cluster did not answer within upstream.request.timeout.ms.
* OffsetFetch is answered from the cluster: a group new to this server starts from what it committed directly
  on the cluster, and offsets committed in a transaction are there, not here. `require_stable` is passed on. A
  consumer group's member fetching (v9, with its member id and epoch) is checked here first, as standalone.
* OffsetDelete and DeleteGroups act here, then on the cluster (where a group that never existed is not an error).
* With several instances (coordinator.front.instances), a request about a group another instance owns is relayed
  to it by the group service; the owner mirrors or deletes on the cluster, not the instance that relayed it.
* ListGroups on node N's listener lists the groups whose FindCoordinator answer is node N, as each Kafka broker
  lists the groups it coordinates (Admin clients ask every broker and merge); on the bootstrap listener, all.

These wrap the group service's handlers inside the authorizer (the part is added before the security part), so a
client's request is authorized here before anything reaches the cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import zlib
from collections.abc import AsyncIterator, Callable
from typing import Any

from coordinator.brokers import Broker
from coordinator.cluster.upstream import UpstreamError
from coordinator.group.configs import GROUP_RESOURCE
from coordinator.server.connection import CLOSE
from coordinator.server.group_service import GroupCoordinatorService
from coordinator.tasks import cancel_and_wait
from protocol.api import ApiTable, Encoded, Handler, RequestContext, response_class
from protocol.api_keys import ApiKey
from protocol.build import build
from protocol.errors import ErrorCode

from .cluster import UpstreamTimeout
from .dataplane import FrontDataPlane

log = logging.getLogger(__name__)

TRANSACTION = 1
TXN_OFFSET_COMMIT_VERSIONS = (0, 5)
_FAILED = (UpstreamTimeout, UpstreamError, OSError, asyncio.TimeoutError)
# Errors of the cluster on a mirrored commit that mean the cluster knows this group with members of its own: a
# client that talks to the cluster directly with the same group id (split brain).
SPLIT_BRAIN = frozenset(
    {ErrorCode.unknown_member_id, ErrorCode.illegal_generation, ErrorCode.rebalance_in_progress}
)


def _entity(api_key: int, version: int, answer: Any) -> Any:
    if isinstance(answer, Encoded):
        return answer.decode(api_key, version)
    return build(response_class(api_key, version), answer)


class FrontGroups:
    def __init__(self, dataplane: FrontDataPlane, groups: GroupCoordinatorService) -> None:
        self.dataplane = dataplane
        self.groups = groups
        self.cluster = dataplane.cluster
        self.split_brain: dict[str, int] = {}  # group id -> commits the cluster refused for its own members
        # One mirrored write per group at a time, in the order they were made: a commit retried after the
        # cluster's coordinator moved must not land after a newer one.
        self._mirroring: dict[str, asyncio.Lock] = {}
        self._recommitted: dict[str, float] = {}  # group id -> loop time its offsets were last re-committed
        self._recommit_task: asyncio.Task[None] | None = None

    def register(self, table: ApiTable) -> None:
        wrappers: dict[int, Callable[[Handler], Handler]] = {
            ApiKey.FIND_COORDINATOR: self._find_coordinator,
            ApiKey.OFFSET_COMMIT: self._offset_commit,
            ApiKey.OFFSET_FETCH: self._offset_fetch,
            ApiKey.OFFSET_DELETE: self._offset_delete,
            ApiKey.DELETE_GROUPS: self._delete_groups,
            ApiKey.LIST_GROUPS: self._list_groups,
            ApiKey.DESCRIBE_CONFIGS: self._configs("results"),
            ApiKey.INCREMENTAL_ALTER_CONFIGS: self._configs("responses"),
            ApiKey.LIST_CONFIG_RESOURCES: self._list_config_resources,
        }
        for api_key, wrapper in wrappers.items():
            table.wrap(api_key, wrapper)
        table.register(ApiKey.TXN_OFFSET_COMMIT, *TXN_OFFSET_COMMIT_VERSIONS, self._txn_offset_commit)
        self._table = table

    async def start(self) -> None:
        """(After the data plane's start: the cluster's versions are known.) Transactional offset commits and the
        config APIs at the versions the cluster serves too, or not at all."""
        self._recommit_task = asyncio.create_task(self._recommit_periodically())
        # Served at the versions the cluster serves too (a request may be partly passed on), or not at all.
        for api_key in (
            ApiKey.TXN_OFFSET_COMMIT,
            ApiKey.DESCRIBE_CONFIGS,
            ApiKey.INCREMENTAL_ALTER_CONFIGS,
            ApiKey.LIST_CONFIG_RESOURCES,
        ):
            spec = self._table.spec(api_key)
            theirs = self.cluster.versions.get(api_key)
            if spec is None:
                continue
            low, high = spec.min_version, spec.max_version
            if theirs is None or max(low, theirs[0]) > min(high, theirs[1]):
                self._table.unregister(api_key)
            else:
                self._table.narrow(api_key, max(low, theirs[0]), min(high, theirs[1]))

    async def close(self) -> None:
        if self._recommit_task is not None:
            await cancel_and_wait([self._recommit_task], "closing the front's re-commits")

    def committed_topics(self) -> set[str]:
        """The topics any group of this server has committed offsets for (their lag needs log-end offsets)."""
        topics: set[str] = set()
        for shard in list(self.groups.shards.by_index.values()):
            if shard.serving:
                store = shard.machine.offsets.store
                for group_id in list(shard.machine.groups):
                    topics.update(store.topics(group_id))
        return topics

    # -- which node coordinates a group -------------------------------------------------------------------------

    def node_of_group(self, group_id: str) -> int | None:
        instances = self.dataplane.instances
        if instances is not None:  # a node whose address is the owner's
            shard = self.groups.shards.index_of(group_id)
            node = instances.node_of_shard(shard)
            if node is not None and node in self.dataplane.listeners:
                return int(node)
        nodes = sorted(self.dataplane.listeners)
        if not nodes:
            return None
        return nodes[zlib.crc32(group_id.encode()) % len(nodes)]

    def group_broker(self, group_id: str) -> Broker:
        node = self.node_of_group(group_id)
        if node is None:
            raise UpstreamTimeout("no upstream broker is known yet")
        return self.dataplane.broker(node)

    def _find_coordinator(self, inner: Handler) -> Handler:
        async def find(ctx: RequestContext, request: Any) -> Any:
            if int(getattr(request, "key_type", 0)) != TRANSACTION:
                return await inner(ctx, request)
            try:
                response = await self.dataplane.forward_any(ctx, request)
            except UpstreamTimeout as exc:
                return self.dataplane.unanswerable(ctx, exc)
            if ctx.api_version < 4:  # the answer is the one coordinator
                (response,) = await self.dataplane.readdress((response,))
                return response
            return _replace(response, coordinators=await self.dataplane.readdress(response.coordinators))

        return find

    # -- offsets -----------------------------------------------------------------------------------------------

    def _offset_commit(self, inner: Handler) -> Handler:
        async def commit(ctx: RequestContext, request: Any) -> Any:
            if self.groups.relay_owner(ctx, request.group_id) is not None:
                return await inner(ctx, request)  # the owner stores and mirrors it
            answer = _entity(ctx.api_key, ctx.api_version, await inner(ctx, request))
            stored = {
                (t.name, p.partition_index)
                for t in answer.topics
                for p in t.partitions
                if p.error_code == ErrorCode.none
            }
            if not stored:
                return answer
            topics = [
                {
                    "name": t.name,
                    "partitions": [
                        {
                            "partition_index": p.partition_index,
                            "committed_offset": p.committed_offset,
                            "committed_leader_epoch": getattr(p, "committed_leader_epoch", -1),
                            "commit_timestamp": -1,
                            "committed_metadata": p.committed_metadata,
                        }
                        for p in t.partitions
                        if (t.name, p.partition_index) in stored
                    ],
                }
                for t in request.topics
            ]
            self.dataplane.watch(t["name"] for t in topics if t["partitions"])
            errors = await self.mirror_commit(request.group_id, [t for t in topics if t["partitions"]])
            if not any(errors.values()):
                return answer
            return _replace(
                answer,
                topics=tuple(
                    _replace(
                        t,
                        partitions=tuple(
                            _replace(p, error_code=errors.get((t.name, p.partition_index), p.error_code))
                            for p in t.partitions
                        ),
                    )
                    for t in answer.topics
                ),
            )

        return commit

    @contextlib.asynccontextmanager
    async def _mirror_lock(self, group_id: str) -> AsyncIterator[None]:
        lock = self._mirroring.get(group_id)
        if lock is None:
            lock = self._mirroring[group_id] = asyncio.Lock()
        try:
            async with lock:
                yield
        finally:
            if not lock.locked() and self._mirroring.get(group_id) is lock:
                del self._mirroring[group_id]

    async def mirror_commit(
        self, group_id: str, topics: list[dict[str, Any]]
    ) -> dict[tuple[str, int], ErrorCode]:
        """Commit offsets to the cluster as a simple group's; the error of each partition (0: committed)."""
        async with self._mirror_lock(group_id):
            return await self._mirror_commit(group_id, topics)

    async def _mirror_commit(
        self, group_id: str, topics: list[dict[str, Any]]
    ) -> dict[tuple[str, int], ErrorCode]:
        body = {
            "group_id": group_id,
            "generation_id_or_member_epoch": -1,
            "member_id": "",
            "group_instance_id": None,
            "retention_time": -1,
            "topics": topics,
        }
        try:
            answer = await self.cluster.ask_coordinator(group_id, ApiKey.OFFSET_COMMIT, 9, body)
        except _FAILED as exc:
            log.warning("committing offsets of group %r to the upstream cluster failed: %r", group_id, exc)
            return {
                (t["name"], p["partition_index"]): ErrorCode.request_timed_out
                for t in topics
                for p in t["partitions"]
            }
        errors = {
            (t.name, p.partition_index): ErrorCode(p.error_code) for t in answer.topics for p in t.partitions
        }
        refused = {e for e in errors.values() if e in SPLIT_BRAIN}
        if refused:
            self.split_brain[group_id] = self.split_brain.get(group_id, 0) + 1
            log.error(
                "group %r has members of its own on the upstream cluster (clients that bypass this server with "
                "the same group id): the cluster refused its offsets (error %s)",
                group_id,
                sorted(refused),
            )
        return errors

    def _offset_fetch(self, inner: Handler) -> Handler:
        async def fetch(ctx: RequestContext, request: Any) -> Any:
            require_stable = bool(getattr(request, "require_stable", False))
            if ctx.api_version >= 8:
                refused = await self._fetch_refused(inner, ctx, request)

                async def offsets(group: Any) -> tuple[ErrorCode, Any]:
                    if group.group_id in refused:
                        return refused[group.group_id], ()
                    return await self.cluster_offsets(group.group_id, group.topics, require_stable)

                found = await asyncio.gather(*(offsets(g) for g in request.groups))
                return {
                    "throttle_time": 0,
                    "groups": [
                        {"group_id": g.group_id, "topics": topics, "error_code": code}
                        for g, (code, topics) in zip(request.groups, found, strict=True)
                    ],
                }
            topics = request.topics
            code, found_topics = await self.cluster_offsets(
                request.group_id,
                None
                if topics is None
                else [{"name": t.name, "partition_indexes": t.partition_indexes} for t in topics],
                require_stable,
            )
            return {"throttle_time": 0, "error_code": code, "topics": found_topics}

        return fetch

    async def _fetch_refused(self, inner: Handler, ctx: RequestContext, request: Any) -> dict[str, ErrorCode]:
        """The groups of an OffsetFetch (v9) sent by a member (a member id or epoch given) that this server refuses
        (a consumer group's member unknown or at another epoch, as Kafka checks it; the group's shard not
        available), each with its error: those are answered so, not from the cluster."""
        if not any(
            getattr(g, "member_id", None) is not None or getattr(g, "member_epoch", -1) >= 0
            for g in request.groups
        ):
            return {}
        answer = _entity(ctx.api_key, ctx.api_version, await inner(ctx, request))
        return {g.group_id: ErrorCode(g.error_code) for g in answer.groups if g.error_code != ErrorCode.none}

    async def cluster_offsets(
        self, group_id: str, topics: Any, require_stable: bool
    ) -> tuple[ErrorCode, Any]:
        """(error code, topics with committed offsets) of a group as the cluster holds them."""
        if topics is not None:
            topics = [
                {
                    "name": t["name"] if isinstance(t, dict) else t.name,
                    "partition_indexes": t["partition_indexes"]
                    if isinstance(t, dict)
                    else t.partition_indexes,
                }
                for t in topics
            ]
        try:
            if self.cluster.version(ApiKey.OFFSET_FETCH, 8) >= 8:
                answer = await self.cluster.ask_coordinator(
                    group_id,
                    ApiKey.OFFSET_FETCH,
                    8,
                    {"groups": [{"group_id": group_id, "topics": topics}], "require_stable": require_stable},
                )
                group = answer.groups[0]
                return ErrorCode(group.error_code), group.topics
            answer = await self.cluster.ask_coordinator(
                group_id,
                ApiKey.OFFSET_FETCH,
                7,
                {"group_id": group_id, "topics": topics, "require_stable": require_stable},
            )
            return ErrorCode(answer.error_code), answer.topics
        except _FAILED as exc:
            log.warning("fetching offsets of group %r from the upstream cluster failed: %r", group_id, exc)
            return ErrorCode.coordinator_not_available, ()

    def _offset_delete(self, inner: Handler) -> Handler:
        async def delete(ctx: RequestContext, request: Any) -> Any:
            if self.groups.relay_owner(ctx, request.group_id) is not None:
                return await inner(ctx, request)  # the owner deletes them here and on the cluster
            answer = _entity(ctx.api_key, ctx.api_version, await inner(ctx, request))
            if answer.error_code:
                return answer
            body = {
                "group_id": request.group_id,
                "topics": [
                    {
                        "name": t.name,
                        "partitions": [{"partition_index": p.partition_index} for p in t.partitions],
                    }
                    for t in request.topics
                ],
            }
            try:
                theirs = await self.cluster.ask_coordinator(request.group_id, ApiKey.OFFSET_DELETE, 0, body)
            except _FAILED:
                return _replace(answer, error_code=ErrorCode.coordinator_not_available)
            if theirs.error_code not in (ErrorCode.none, ErrorCode.group_id_not_found):
                return _replace(answer, error_code=theirs.error_code)
            return answer

        return delete

    def _delete_groups(self, inner: Handler) -> Handler:
        async def delete(ctx: RequestContext, request: Any) -> Any:
            answer = _entity(ctx.api_key, ctx.api_version, await inner(ctx, request))
            results = []
            for result in answer.results:
                # (a group another instance owns was relayed there, which deleted it on the cluster too)
                if (
                    result.error_code == ErrorCode.none
                    and self.groups.relay_owner(ctx, result.group_id) is None
                ):
                    code = await self._delete_upstream(result.group_id)
                    if code not in (ErrorCode.none, ErrorCode.group_id_not_found):
                        result = _replace(result, error_code=code)
                results.append(result)
            return _replace(answer, results=tuple(results))

        return delete

    async def _delete_upstream(self, group_id: str) -> ErrorCode:
        try:
            answer = await self.cluster.ask_coordinator(
                group_id, ApiKey.DELETE_GROUPS, 2, {"groups_names": [group_id]}
            )
        except _FAILED:
            return ErrorCode.coordinator_not_available
        return ErrorCode(answer.results[0].error_code) if answer.results else ErrorCode.none

    async def _recommit_periodically(self) -> None:
        """Live groups' offsets written to the cluster again every upstream.offsets.recommit.interval.ms, so the
        cluster's offsets.retention.minutes cannot expire the offsets of a group that is alive but has nothing
        new to commit."""
        interval_s = self.cluster.config["upstream.offsets.recommit.interval.ms"] / 1000
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(min(interval_s, 60.0))
            known: set[str] = set()
            for shard in list(self.groups.shards.by_index.values()):
                if not shard.serving:
                    continue
                for group_id, group in list(shard.machine.groups.items()):
                    known.add(group_id)
                    now = loop.time()
                    if group.is_empty() or now - self._recommitted.setdefault(group_id, now) < interval_s:
                        continue
                    self._recommitted[group_id] = now
                    try:
                        await self.recommit(shard, group_id)
                    except Exception:  # noqa: BLE001 - the next round tries again
                        log.exception("re-committing the offsets of group %r to the cluster failed", group_id)
            for group_id in self._recommitted.keys() - known:
                del self._recommitted[group_id]

    async def recommit(self, shard: Any, group_id: str) -> None:
        async with self._mirror_lock(group_id):
            by_topic: dict[str, list[dict[str, Any]]] = {}
            for topic, partition, offset in shard.machine.offsets.store.partitions(group_id):
                by_topic.setdefault(topic, []).append(
                    {
                        "partition_index": partition,
                        "committed_offset": offset.committed_offset,
                        "committed_leader_epoch": offset.leader_epoch,
                        "commit_timestamp": -1,
                        "committed_metadata": offset.metadata,
                    }
                )
            if by_topic:
                await self._mirror_commit(
                    group_id, [{"name": t, "partitions": ps} for t, ps in by_topic.items()]
                )

    # -- transactional offset commits (KIP-447) ------------------------------------------------------------------

    async def _txn_offset_commit(self, ctx: RequestContext, request: Any) -> Any:
        """Checked here against the group (member, generation), then carried into the cluster's transaction as
        a commit of a simple group: the cluster's transaction coordinator writes the markers that make it
        visible or drop it, which only the cluster's group coordinator sees."""
        generation = int(getattr(request, "generation_id", -1))
        member_id = str(getattr(request, "member_id", "") or "")
        instance_id = getattr(request, "group_instance_id", None)
        code = await self.validate_txn_commit(request.group_id, member_id, instance_id, generation)
        if code == ErrorCode.none:
            anonymous = _replace_known(request, generation_id=-1, member_id="", group_instance_id=None)
            try:
                answer = await self.cluster.ask_coordinator(
                    request.group_id, ctx.api_key, ctx.api_version, anonymous, exact=True
                )
            except _FAILED as exc:
                log.warning(
                    "transactional commit of group %r to the upstream cluster failed: %r",
                    request.group_id,
                    exc,
                )
                code = ErrorCode.coordinator_not_available
            else:
                return answer
        return {
            "throttle_time": 0,
            "topics": [
                {
                    "name": t.name,
                    "partitions": [
                        {"partition_index": p.partition_index, "error_code": code} for p in t.partitions
                    ],
                }
                for t in request.topics
            ],
        }

    async def validate_txn_commit(
        self, group_id: str, member_id: str, instance_id: str | None, generation: int
    ) -> ErrorCode:
        """Kafka's check of a transactional commit of a classic group: an OffsetCommit's, except that a group
        completing a rebalance accepts it."""
        shard = self.groups.shards.for_group(group_id)
        code = self.groups.unavailable(shard)
        if code is not None:
            return code
        assert shard is not None
        await shard.runtime.quiesce(group_id)
        group = shard.machine.groups.get(group_id)
        if group is None:
            return ErrorCode.none if generation < 0 else ErrorCode.illegal_generation
        error = group.validate_offset_commit(member_id, instance_id, generation)
        return ErrorCode.none if error == ErrorCode.rebalance_in_progress else ErrorCode(error)

    # -- configs -----------------------------------------------------------------------------------------------

    def _configs(self, answer_field: str) -> Callable[[Handler], Handler]:
        """DescribeConfigs / IncrementalAlterConfigs: the resources that are groups answered here (their configs
        are this server's per-group settings), every other one passed on to the cluster on the client's route (a
        broker's configs go to that broker), the answers merged in request order."""

        def wrap(inner: Handler) -> Handler:
            async def configs(ctx: RequestContext, request: Any) -> Any:
                resources = list(request.resources)
                ours = [r.resource_type == GROUP_RESOURCE for r in resources]
                if all(ours):
                    return await inner(ctx, request)
                theirs = dataclasses.replace(
                    request, resources=tuple(r for r, o in zip(resources, ours, strict=True) if not o)
                )
                forwarded = await self.dataplane.forward_decoded(ctx, theirs)
                if forwarded is CLOSE or not any(ours):
                    return forwarded
                mine = dataclasses.replace(
                    request, resources=tuple(r for r, o in zip(resources, ours, strict=True) if o)
                )
                answered = _entity(ctx.api_key, ctx.api_version, await inner(ctx, mine))
                local, upstream = (
                    iter(getattr(answered, answer_field)),
                    iter(getattr(forwarded, answer_field)),
                )
                merged = [next(local) if o else next(upstream) for o in ours]
                return _replace(forwarded, **{answer_field: tuple(merged)})

            return configs

        return wrap

    def _list_config_resources(self, inner: Handler) -> Handler:
        """ListConfigResources: the cluster's resources but its groups, and the groups with configs here."""

        async def listed(ctx: RequestContext, request: Any) -> Any:
            forwarded = await self.dataplane.forward_decoded(ctx, request)
            if forwarded is CLOSE or ctx.api_version < 1:
                return forwarded
            ours = _entity(ctx.api_key, ctx.api_version, await inner(ctx, request))
            theirs = tuple(r for r in forwarded.config_resources if r.resource_type != GROUP_RESOURCE)
            return _replace(forwarded, config_resources=theirs + tuple(ours.config_resources))

        return listed

    # -- listing -----------------------------------------------------------------------------------------------

    def _list_groups(self, inner: Handler) -> Handler:
        async def list_groups(ctx: RequestContext, request: Any) -> Any:
            answer = _entity(ctx.api_key, ctx.api_version, await inner(ctx, request))
            node = self.dataplane.node_of_request()
            if node is None:
                return answer
            return _replace(
                answer, groups=tuple(g for g in answer.groups if self.node_of_group(g.group_id) == node)
            )

        return list_groups


def _replace(entity: Any, **changes: Any) -> Any:
    return dataclasses.replace(entity, **changes)


def _replace_known(entity: Any, **changes: Any) -> Any:
    """`_replace` with only the fields this version of the entity has."""
    names = {f.name for f in dataclasses.fields(entity)}
    return dataclasses.replace(entity, **{k: v for k, v in changes.items() if k in names})
