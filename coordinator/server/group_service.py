"""The group coordinator service: the group and offset APIs, routed to the shard that owns each group (Kafka's
GroupCoordinatorService).

Every way into a shard goes through `call` — Kafka requests and the admin API alike: it finds the owning shard,
answers for it when it cannot take the request (not ours: NOT_COORDINATOR; loading: COORDINATOR_LOAD_IN_PROGRESS;
failed: COORDINATOR_NOT_AVAILABLE; shutting down: NOT_COORDINATOR), waits until the group's in-flight writes that
were applied in memory settle (the runtime's barriers), then runs the operation and waits for its answer, which
the runtime releases once the records it depends on are durable.

Requests naming several groups (DescribeGroups, DeleteGroups, OffsetFetch v8+) are split by shard and their answers
merged in request order; ListGroups asks every shard this server owns. A group owned by another coordinator
(another worker of this machine, coordinator.cluster, or another instance in front of the same cluster,
coordinator.front.instances) is relayed to its owner when a relay is given and the owner is known, else answered
NOT_COORDINATOR. A request that was itself relayed here is answered here, never relayed on.

OffsetCommit is checked against the data plane's topics first, as Kafka's request handler checks its metadata
cache before the coordinator sees the request: a partition of a topic that does not exist, or beyond the topic's
partition count, is answered UNKNOWN_TOPIC_OR_PARTITION and not committed; the rest of the request goes on. A
data plane that follows another process's topics through a cache (a worker's forwarder, the front) is asked to
catch up before a topic is called unknown, so a topic created a moment ago is known. A ConsumerGroupHeartbeat
whose subscription names a topic such a data plane does not know waits for that catching up too, so that the
group's target includes the topic from the first answer (members joining together share one; see
`_learn_topics`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Protocol

from coordinator.consumer.responses import described_group_error, heartbeat_response
from coordinator.group import configs as group_configs
from protocol.api import ApiTable, Encoded, RequestContext, response_class
from protocol.api_keys import ApiKey
from protocol.build import build
from protocol.errors import ErrorCode

from .runtime import ShardAborted
from .shards import Shard, Shards, ShardState

# (api key, min version, max version): Kafka 4.1's ranges for the classic protocol, floors kept low so older
# clients still work (Kafka 4.0 dropped some and broke them).
GROUP_API_VERSIONS = {
    ApiKey.OFFSET_COMMIT: (2, 9),
    ApiKey.OFFSET_FETCH: (1, 9),
    ApiKey.JOIN_GROUP: (0, 9),
    ApiKey.HEARTBEAT: (0, 4),
    ApiKey.LEAVE_GROUP: (0, 5),
    ApiKey.SYNC_GROUP: (0, 5),
    ApiKey.DESCRIBE_GROUPS: (0, 6),
    ApiKey.LIST_GROUPS: (0, 5),
    ApiKey.DELETE_GROUPS: (0, 2),
    ApiKey.OFFSET_DELETE: (0, 0),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: (0, 1),
    ApiKey.CONSUMER_GROUP_DESCRIBE: (0, 1),
    ApiKey.DESCRIBE_CONFIGS: (1, 4),  # Kafka 4 serves v1-v4
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),
    ApiKey.LIST_CONFIG_RESOURCES: (0, 1),
}


class Relay(Protocol):
    """Group requests for a group another coordinator owns (coordinator.cluster.relay.PeerRelay)."""

    async def call(self, owner: int, ctx: RequestContext, request: Any) -> Any:
        """The owner's answer; raises RelayUnavailable when the owner cannot be reached (the request is then
        answered NOT_COORDINATOR, so the client looks its coordinator up again)."""
        ...

    def connection_closed(self, connection_id: int) -> None: ...

    def close(self) -> None: ...


class Topics(Protocol):
    """What the group service asks of the data plane's topics (coordinator.dataplane.DataPlane)."""

    def partition_count(self, topic: str) -> int | None: ...

    async def catch_up(self) -> None: ...


log = logging.getLogger(__name__)
LEASE_POLL_S = 0.02  # how often a request waiting for its shard's lease looks again


class RelayUnavailable(Exception):
    """The owner of a group could not be asked (Relay.call)."""


class ShardUnavailable(Exception):
    """The group's shard cannot take the operation now; `code` is the retriable error Kafka answers."""

    def __init__(self, code: ErrorCode, group_id: str, shard: Shard | None) -> None:
        super().__init__(f"group {group_id}: {code.name}")
        self.code = code
        self.shard = shard


class GroupCoordinatorService:
    """A server part: registers the group APIs and serves them from `shards` (see the module doc)."""

    def __init__(
        self,
        shards: Shards,
        *,
        relay: Relay | None = None,
        owner_of_shard: Callable[[int], int | None] | None = None,
        topics: Topics | None = None,
    ) -> None:
        """`relay` and `owner_of_shard` (which coordinator owns a shard this server does not; None: none known):
        given together when groups this server does not own are relayed to their owner. `topics`: the data
        plane's, which OffsetCommit's partitions must exist in (None: not checked)."""
        self.shards = shards
        self.relay = relay
        self.owner_of_shard = owner_of_shard
        self.topics = topics
        self._offset_commit_to_shard = self._one_group(lambda s: s.machine.offset_commit)
        self._consumer_group_heartbeat_to_shard = self._one_group(
            lambda s: s.machine.consumer_group_heartbeat, with_client=True
        )
        # A refresh of the data plane's topics that joining members wait for (_learn_topics), and names it did
        # not find, with the loop time until which they are not asked for again.
        self._learning: asyncio.Task[None] | None = None
        self._still_unknown: dict[str, float] = {}

    # -- the door --------------------------------------------------------------------------------------------

    def unavailable(self, shard: Shard | None) -> ErrorCode | None:
        """Why a shard cannot take a request now (None: it can)."""
        if shard is None and not self.shards.assigned and not self.shards.unloaded:
            return ErrorCode.coordinator_load_in_progress  # which shards are this server's is not known yet
        if shard is None or self.shards.unloaded:
            return ErrorCode.not_coordinator
        if shard.serving:
            lease = shard.lease
            return None if lease is None else lease.refusal(time.monotonic())
        if shard.state is ShardState.FAILED:
            return ErrorCode.coordinator_not_available
        if shard.state is ShardState.FENCED:
            return ErrorCode.not_coordinator
        return ErrorCode.coordinator_load_in_progress

    async def call(
        self,
        group_id: str,
        operation: Callable[[Shard], Callable[..., Any]],
        *args: Any,
        gated: bool = True,
        **kwargs: Any,
    ) -> Any:
        """Run `operation(shard)(token, *args, **kwargs)` in the shard owning `group_id` and return its answer.
        `gated`: it reads or changes membership, so it waits for the group's writes applied in memory first.
        Raises ShardUnavailable, or ShardAborted if the shard is given up while the answer is pending."""
        shard = self.shards.for_group(group_id)
        code = self.unavailable(shard)
        if self._lapsed(shard, code):
            code = await self._lease_back(lambda: self.shards.for_group(group_id))
            shard = self.shards.for_group(group_id)
        if code is not None:
            raise ShardUnavailable(code, group_id, shard)
        assert shard is not None
        return await self._call_shard(shard, group_id, operation, *args, gated=gated, **kwargs)

    @staticmethod
    def _lapsed(shard: Shard | None, code: ErrorCode | None) -> bool:
        """The shard refuses only because its lease on the state topic lapsed (see _lease_back)."""
        return code == ErrorCode.coordinator_not_available and shard is not None and shard.lease is not None

    async def _lease_back(self, shard_now: Callable[[], Shard | None]) -> ErrorCode | None:
        """A shard whose lease lapsed (its cluster slow, or its transaction coordinator moving; not claimed by
        another server) waits for the lease to be confirmed again, up to offsets.commit.timeout.ms as a write
        waits for its log, instead of refusing at once: why it may not answer then (None: it may).
        `shard_now()`: the shard as the server holds it now."""
        deadline = time.monotonic() + self.shards.config["offsets.commit.timeout.ms"] / 1000
        while True:
            await asyncio.sleep(LEASE_POLL_S)
            code = self.unavailable(shard_now())
            if code != ErrorCode.coordinator_not_available or time.monotonic() >= deadline:
                return code

    async def _leases_back(self, lapsed: Iterable[int]) -> None:
        """Waits for the shards `lapsed` (indexes of shards of this server whose lease lapsed) together, each as
        _lease_back does, before a request naming several groups is answered: every part of the answer is made
        after the wait, so none is older than when it is sent."""
        by_index = self.shards.by_index
        await asyncio.gather(*(self._lease_back(functools.partial(by_index.get, i)) for i in set(lapsed)))

    async def _call_shard(
        self,
        shard: Shard,
        group_id: str | None,
        operation: Callable[[Shard], Callable[..., Any]],
        *args: Any,
        gated: bool,
        **kwargs: Any,
    ) -> Any:
        """`group_id` None: the operation is about several groups of the shard, so it waits for all of the
        shard's barriers (gated) and its answer for every write before it."""
        if gated:
            await shard.runtime.quiesce(group_id)
            if self.shards.unloaded:  # unloaded while this waited for earlier writes
                raise ShardUnavailable(ErrorCode.not_coordinator, group_id or "", shard)
        return await shard.runtime.call(operation(shard), *args, group=group_id, **kwargs)

    # -- the part --------------------------------------------------------------------------------------------

    def register(self, table: ApiTable) -> None:
        handlers: dict[int, Callable[[RequestContext, Any], Awaitable[Any]]] = {
            ApiKey.JOIN_GROUP: self._one_group(lambda s: s.machine.join_group, with_client=True),
            ApiKey.SYNC_GROUP: self._one_group(lambda s: s.machine.sync_group),
            ApiKey.HEARTBEAT: self._one_group(lambda s: s.machine.heartbeat),
            ApiKey.LEAVE_GROUP: self._one_group(lambda s: s.machine.leave_group),
            ApiKey.OFFSET_COMMIT: self._offset_commit,
            ApiKey.OFFSET_FETCH: self._offset_fetch,
            ApiKey.OFFSET_DELETE: self._one_group(lambda s: s.machine.offset_delete),
            ApiKey.DESCRIBE_GROUPS: self._split(
                "groups",
                "groups",
                lambda g: g,
                _describe_error,
                lambda s: s.machine.describe_groups,
                gated=False,
            ),
            ApiKey.DELETE_GROUPS: self._split(
                "groups_names",
                "results",
                lambda g: g,
                lambda g, code, version: {"group_id": g, "error_code": code},
                lambda s: s.machine.delete_groups,
                gated=True,
            ),
            ApiKey.LIST_GROUPS: self._list_groups,
            ApiKey.LIST_CONFIG_RESOURCES: self._list_config_resources,
            ApiKey.CONSUMER_GROUP_HEARTBEAT: self._consumer_group_heartbeat,
            ApiKey.CONSUMER_GROUP_DESCRIBE: self._split(
                "group_ids",
                "groups",
                lambda g: g,
                lambda g, code, version: described_group_error(g, code),
                lambda s: s.machine.consumer_group_describe,
                gated=False,
            ),
            # Kafka's group configs (kafka-configs --entity-type groups): each resource goes to the shard of its
            # name, which answers other resource types with an error
            ApiKey.DESCRIBE_CONFIGS: self._split(
                "resources",
                "results",
                lambda r: r.resource_name,
                lambda r, code, version: group_configs.error_result(
                    r.resource_type, r.resource_name, code, None
                ),
                lambda s: s.machine.describe_configs,
                gated=False,
            ),
            ApiKey.INCREMENTAL_ALTER_CONFIGS: self._split(
                "resources",
                "responses",
                lambda r: r.resource_name,
                lambda r, code, version: group_configs.alter_result(
                    r.resource_type, r.resource_name, code, None
                ),
                lambda s: s.machine.incremental_alter_configs,
                gated=True,
            ),
        }
        for api_key, (lo, hi) in GROUP_API_VERSIONS.items():
            table.register(api_key, lo, hi, handlers[api_key])

    @property
    def ready(self) -> bool:
        return self.shards.ready

    async def start(self) -> None:
        await self.shards.start()

    def stop_waiting(self) -> None:
        self.shards.unload()

    def connection_closed(self, connection_id: int) -> None:
        if self.relay is not None:
            self.relay.connection_closed(connection_id)

    async def close(self) -> None:
        if self.relay is not None:
            self.relay.close()
        if self._learning is not None:
            self._learning.cancel()
        await self.shards.close()

    # -- handlers --------------------------------------------------------------------------------------------

    def _one_group(
        self, operation: Callable[[Shard], Callable[..., Any]], *, with_client: bool = False
    ) -> Callable[[RequestContext, Any], Awaitable[Any]]:
        """A handler for a request about one group. `with_client`: the operation takes the member's client id
        and host (JoinGroup, ConsumerGroupHeartbeat), from the request header and the connection."""

        def handle(ctx: RequestContext, request: Any) -> Awaitable[Any]:
            if with_client:
                client = {"client_id": ctx.client_id or "", "client_host": "/" + ctx.client_host}
                return self._serve_now(ctx, request, operation, **client)
            return self._serve_now(ctx, request, operation)

        return handle

    def _serve_now(
        self,
        ctx: RequestContext,
        request: Any,
        operation: Callable[[Shard], Callable[..., Any]],
        **kwargs: Any,
    ) -> Awaitable[Any]:
        """`_serve(gated=True)` without a coroutine, a task or a future when nothing stands in the way: the
        group's shard is here, serving, and has no barrier write of the group in flight. Then the answer is
        Ready at once (a heartbeat) or the shard's future (a commit, once durable); else `_serve`'s coroutine."""
        group_id = request.group_id
        shard = self.shards.for_group(group_id)
        if shard is not None and self.unavailable(shard) is None:
            runtime = shard.runtime
            if not runtime.aborted and not runtime.must_wait(group_id):
                # (the answer if the shard is given up meanwhile, as a call: a tuple costs less than a partial)
                aborted = (
                    error_response,
                    ctx.api_key,
                    ctx.api_version,
                    request,
                    ErrorCode.coordinator_not_available,
                )
                return runtime.submit(
                    operation(shard), ctx.api_version, request, group=group_id, aborted=aborted, **kwargs
                )
        return self._serve(ctx, request, operation, gated=True, **kwargs)

    async def _consumer_group_heartbeat(self, ctx: RequestContext, request: Any) -> Any:
        names = request.subscribed_topic_names
        topics = self.topics
        if names and topics is not None and self.shards.for_group(request.group_id) is not None:
            unknown = [name for name in names if topics.partition_count(name) is None]
            if unknown:
                await self._learn_topics(topics, unknown)
        return await self._consumer_group_heartbeat_to_shard(ctx, request)

    async def _learn_topics(self, topics: Topics, unknown: list[str]) -> None:
        """A topic created a moment ago on the process whose topics this one follows through a cache (worker 0,
        the upstream cluster) is known before a member's subscription to it is served: else the group's target
        leaves it out until the next refresh and the members learn of it a heartbeat interval later. A refresh
        reads every topic (and its log ends), so the members joining together share one, and a name still
        unknown after one is not asked for again for a second (the periodic refresh finds it then)."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        if all(self._still_unknown.get(name, 0.0) > now for name in unknown):
            return
        if self._learning is None:
            self._learning = loop.create_task(topics.catch_up())
            self._learning.add_done_callback(self._learned)
        try:
            await asyncio.shield(self._learning)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - worker 0 restarting, say: serve with what is known
            log.debug("catching up with the data plane's topics failed: %r", exc)
        later = loop.time() + 1.0
        if len(self._still_unknown) > 1000:
            self._still_unknown = {n: t for n, t in self._still_unknown.items() if t > now}
        for name in unknown:
            if topics.partition_count(name) is None:
                self._still_unknown[name] = later

    def _learned(self, task: asyncio.Task[None]) -> None:
        self._learning = None
        if not task.cancelled():
            task.exception()  # retrieved here as well: every waiter may have gone

    def _offset_commit(self, ctx: RequestContext, request: Any) -> Awaitable[Any]:
        if self.topics is None or not self._unknown_partitions(request):
            return self._offset_commit_to_shard(ctx, request)
        return self._offset_commit_unknown(ctx, request)

    async def _offset_commit_unknown(self, ctx: RequestContext, request: Any) -> Any:
        """An OffsetCommit naming partitions not (yet) known: those answer UNKNOWN_TOPIC_OR_PARTITION."""
        assert self.topics is not None
        # (a topic created a moment ago on the process whose topics this one follows through a cache)
        await self.topics.catch_up()
        unknown = self._unknown_partitions(request)
        if not unknown:
            return await self._offset_commit_to_shard(ctx, request)
        known: list[Any] = []
        missing: list[Any] = []
        for topic in request.topics:
            gone = unknown.get(topic.name)
            if gone is None:
                known.append(topic)
                continue
            missing.append(
                dataclasses.replace(
                    topic, partitions=tuple(p for p in topic.partitions if p.partition_index in gone)
                )
            )
            rest = tuple(p for p in topic.partitions if p.partition_index not in gone)
            if rest:
                known.append(dataclasses.replace(topic, partitions=rest))
        errors = error_response(
            ctx.api_key,
            ctx.api_version,
            dataclasses.replace(request, topics=tuple(missing)),
            ErrorCode.unknown_topic_or_partition,
        )
        if not known:  # (as Kafka: the coordinator is not asked, so the group is not checked either)
            return errors
        answer = await self._offset_commit_to_shard(ctx, dataclasses.replace(request, topics=tuple(known)))
        if isinstance(answer, Encoded):  # a relayed answer
            answer = answer.decode(ctx.api_key, ctx.api_version)
        answer = build(response_class(ctx.api_key, ctx.api_version), answer)
        return dataclasses.replace(answer, topics=tuple(answer.topics) + build(type(answer), errors).topics)

    def _unknown_partitions(self, request: Any) -> dict[str, set[int]]:
        """The partitions of an OffsetCommit that do not exist, by topic name (empty: all do)."""
        assert self.topics is not None
        count = self.topics.partition_count
        unknown: dict[str, set[int]] = {}
        for topic in request.topics:
            partitions = count(topic.name)
            for p in topic.partitions:
                if partitions is None or not 0 <= p.partition_index < partitions:
                    unknown.setdefault(topic.name, set()).add(p.partition_index)
        return unknown

    async def _offset_fetch(self, ctx: RequestContext, request: Any) -> Any:
        if ctx.api_version >= 8:
            return await self._split(
                "groups",
                "groups",
                lambda g: g.group_id,
                lambda g, code, version: {"group_id": g.group_id, "topics": [], "error_code": code},
                lambda s: s.machine.offset_fetch,
                gated=False,
            )(ctx, request)
        return await self._serve(ctx, request, lambda s: s.machine.offset_fetch, gated=False)

    async def _serve(
        self,
        ctx: RequestContext,
        request: Any,
        operation: Callable[[Shard], Callable[..., Any]],
        gated: bool,
        **kwargs: Any,
    ) -> Any:
        """A request about one group: its shard's answer, the owner's (relayed), or the error for it."""
        group_id = request.group_id
        owner = self.relay_owner(ctx, group_id)
        if owner is not None:
            assert self.relay is not None
            try:
                return await self.relay.call(owner, ctx, request)
            except RelayUnavailable:
                return error_response(ctx.api_key, ctx.api_version, request, ErrorCode.not_coordinator)
        try:
            return await self.call(group_id, operation, ctx.api_version, request, gated=gated, **kwargs)
        except ShardUnavailable as exc:
            return error_response(ctx.api_key, ctx.api_version, request, exc.code)
        except ShardAborted:
            return error_response(ctx.api_key, ctx.api_version, request, ErrorCode.coordinator_not_available)

    def _split(
        self,
        field: str,
        answer_field: str,
        group_of: Callable[[Any], str],
        error_entry: Callable[[Any, ErrorCode, int], dict[str, Any]],
        operation: Callable[[Shard], Callable[..., Any]],
        gated: bool,
    ) -> Callable[[RequestContext, Any], Awaitable[Any]]:
        """A handler for a request naming several groups: one call per shard, answers merged in request order.
        `error_entry(item, code, version)`: the answer to one item of the request whose shard cannot take it."""

        async def handle(ctx: RequestContext, request: Any) -> Any:
            def failed(exc: ShardAborted | ShardUnavailable, chosen: list[Any]) -> list[Any]:
                code = exc.code if isinstance(exc, ShardUnavailable) else ErrorCode.coordinator_not_available
                return [error_entry(item, code, ctx.api_version) for item in chosen]

            items = list(getattr(request, field))
            by_shard: dict[int, list[int]] = {}
            by_owner: dict[int, list[int]] = {}
            answers: dict[int, Any] = {}
            lapsed: list[int] = []
            for position, item in enumerate(items):
                index = self.shards.index_of(group_of(item))
                owner = self._owner(ctx, index)
                if owner is not None:
                    by_owner.setdefault(owner, []).append(position)
                    continue
                shard = self.shards.by_index.get(index)
                code = self.unavailable(shard)
                if code is not None and not self._lapsed(shard, code):
                    answers[position] = error_entry(item, code, ctx.api_version)
                else:
                    by_shard.setdefault(index, []).append(position)
                    if code is not None:
                        lapsed.append(index)
            if lapsed:  # waited for as a request about one group waits for its shard's lease
                await self._leases_back(lapsed)

            if len(by_shard) == 1 and not by_owner and not answers:
                # Every item in one shard of this server (a consumer's OffsetFetch names its one group): the
                # request as it came, no task, and the shard's answer as it is.
                index = next(iter(by_shard))
                code = self.unavailable(self.shards.by_index.get(index)) if lapsed else None
                if code is not None:
                    return {
                        "throttle_time": 0,
                        answer_field: [error_entry(i, code, ctx.api_version) for i in items],
                    }
                shard = self.shards.by_index[index]
                try:
                    return await self._call_shard(
                        shard, None, operation, ctx.api_version, request, gated=gated
                    )
                except (ShardAborted, ShardUnavailable) as exc:
                    return {"throttle_time": 0, answer_field: failed(exc, items)}

            async def one(index: int, positions: list[int]) -> None:
                code = self.unavailable(self.shards.by_index.get(index))
                if code is not None:
                    for p in positions:
                        answers[p] = error_entry(items[p], code, ctx.api_version)
                    return
                sub = dataclasses.replace(request, **{field: tuple(items[p] for p in positions)})
                try:
                    response = await self._call_shard(
                        self.shards.by_index[index], None, operation, ctx.api_version, sub, gated=gated
                    )
                    entries = list(getattr(response, answer_field))
                except (ShardAborted, ShardUnavailable) as exc:
                    entries = failed(exc, [items[p] for p in positions])
                for position, entry in zip(positions, entries, strict=True):
                    answers[position] = entry

            async def remote(owner: int, positions: list[int]) -> None:
                assert self.relay is not None
                sub = dataclasses.replace(request, **{field: tuple(items[p] for p in positions)})
                try:
                    response = await self.relay.call(owner, ctx, sub)
                except RelayUnavailable:
                    for p in positions:
                        answers[p] = error_entry(items[p], ErrorCode.not_coordinator, ctx.api_version)
                    return
                for position, entry in zip(positions, getattr(response, answer_field), strict=True):
                    answers[position] = entry

            await asyncio.gather(
                *(one(i, ps) for i, ps in by_shard.items()), *(remote(w, ps) for w, ps in by_owner.items())
            )
            return {"throttle_time": 0, answer_field: [answers[p] for p in range(len(items))]}

        return handle

    def relay_owner(self, ctx: RequestContext, group_id: str) -> int | None:
        """The coordinator a request about `group_id` is relayed to (None: answered here)."""
        return self._owner(ctx, self.shards.index_of(group_id))

    def _owner(self, ctx: RequestContext, shard_index: int) -> int | None:
        """The owner to relay to for a shard this server does not hold (None: answered here)."""
        if self.relay is None or ctx.relayed or shard_index in self.shards.by_index:
            return None
        assert self.owner_of_shard is not None
        return self.owner_of_shard(shard_index)

    async def _list_config_resources(self, ctx: RequestContext, request: Any) -> Any:
        """ListConfigResources: every shard's groups with configs (kafka-configs asks before describing one)."""
        return await self._every_shard(
            ctx, request, lambda s: s.machine.list_config_resources, "config_resources"
        )

    async def _list_groups(self, ctx: RequestContext, request: Any) -> Any:
        return await self._every_shard(ctx, request, lambda s: s.machine.list_groups, "groups")

    async def _every_shard(
        self,
        ctx: RequestContext,
        request: Any,
        operation: Callable[[Shard], Callable[..., Any]],
        answer_field: str,
    ) -> dict[str, Any]:
        """A listing over every shard of this process: their entries together, the first shard error if any."""
        entries: list[Any] = []
        error = ErrorCode.none
        lapsed = [i for i, s in self.shards.by_index.items() if self._lapsed(s, self.unavailable(s))]
        if lapsed:
            await self._leases_back(lapsed)
        for shard in list(self.shards.by_index.values()):
            code = self.unavailable(shard)
            if code is not None:
                error = code if error == ErrorCode.none else error
                continue
            try:
                response = await shard.runtime.call(operation(shard), ctx.api_version, request)
            except ShardAborted:
                error = ErrorCode.coordinator_not_available
                continue
            entries.extend(getattr(response, answer_field))
        return {"throttle_time": 0, "error_code": error, answer_field: entries}


def error_response(api_key: int, version: int, request: Any, code: ErrorCode) -> Any:
    """The answer (a mapping or an entity) of a group API when the group's shard cannot take it: `code` wherever
    the response carries errors. While a shard loads (COORDINATOR_LOAD_IN_PROGRESS) Heartbeat answers NONE, as Kafka does, so members
    are not kicked out by a restart."""
    base: dict[str, Any] = {"throttle_time": 0}
    if api_key == ApiKey.HEARTBEAT:
        return base | {
            "error_code": ErrorCode.none if code == ErrorCode.coordinator_load_in_progress else code
        }
    if api_key == ApiKey.JOIN_GROUP:
        return base | {
            "error_code": code,
            "generation_id": -1,
            "protocol_type": None,
            "protocol_name": None if version >= 7 else "",
            "leader": "",
            "member_id": getattr(request, "member_id", ""),
            "members": (),
        }
    if api_key == ApiKey.SYNC_GROUP:
        return base | {"error_code": code, "protocol_type": None, "protocol_name": None, "assignment": b""}
    if api_key == ApiKey.LEAVE_GROUP:
        return base | {"error_code": code, "members": ()}
    if api_key == ApiKey.OFFSET_COMMIT:
        return base | {
            "topics": [
                {
                    "name": t.name,
                    "partitions": [
                        {"partition_index": p.partition_index, "error_code": code} for p in t.partitions
                    ],
                }
                for t in request.topics
            ]
        }
    if api_key == ApiKey.OFFSET_FETCH:
        if version >= 8:
            return base | {
                "groups": [{"group_id": g.group_id, "topics": [], "error_code": code} for g in request.groups]
            }
        return base | {
            "error_code": code,
            "topics": [
                {
                    "name": t.name,
                    "partitions": [
                        {
                            "partition_index": i,
                            "committed_offset": -1,
                            "committed_leader_epoch": -1,
                            "metadata": "",
                            "error_code": code,
                        }
                        for i in t.partition_indexes
                    ],
                }
                for t in (request.topics or ())
            ],
        }
    if api_key == ApiKey.DESCRIBE_GROUPS:
        return base | {"groups": [_describe_error(g, code, version) for g in request.groups]}
    if api_key == ApiKey.LIST_GROUPS:
        return base | {"error_code": code, "groups": ()}
    if api_key == ApiKey.DELETE_GROUPS:
        return base | {"results": [{"group_id": g, "error_code": code} for g in request.groups_names]}
    if api_key == ApiKey.OFFSET_DELETE:
        return base | {"error_code": code, "topics": ()}
    if api_key == ApiKey.CONSUMER_GROUP_HEARTBEAT:
        return heartbeat_response(code)
    if api_key == ApiKey.CONSUMER_GROUP_DESCRIBE:
        return base | {"groups": [described_group_error(g, code) for g in request.group_ids]}
    raise ValueError(f"no error answer for api {api_key}")


def _describe_error(group_id: str, code: ErrorCode, version: int) -> dict[str, Any]:
    return {
        "error_code": code,
        "error_message": None,
        "group_id": group_id,
        "group_state": "",
        "protocol_type": "",
        "protocol_data": "",
        "members": (),
        "authorized_operations": -2147483648,
    }
