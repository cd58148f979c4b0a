"""The data plane of a server in front of an upstream cluster: every request that is not group coordination goes to
an upstream broker over the client's own connection, and every broker address a client can learn is one of ours.

Addresses. Each upstream broker N gets a listener of this server (port `upstream.node.port.base` + N; by default
the --listen port + 1 + N; worker w of W: BASE + N * W + w), a copy of the primary listener (same host, TLS and
SASL). Metadata, DescribeCluster and FindCoordinator answers keep the cluster's node ids and name, for node N, that
listener: the same address in every answer, so librdkafka never re-points a node. The primary listener is the
bootstrap address; what a client sends there goes to the first live broker. A broker that joins the cluster later
gets its listener when an answer first names it.

Forwarding. A client connection on node N's listener has one upstream connection to broker N, opened with its
first forwarded request and closed with it; requests are written in the order the client sent them (handlers
start in request order, coordinator.server.connection), so per-connection ordering holds end to end. Requests are
forwarded as raw frames, only their correlation id replaced, and answers come back as the broker's bytes
(coordinator.cluster.upstream): Produce, Fetch, ListOffsets, CreateTopics, the transaction APIs, configs, the
cluster's ACL and SCRAM APIs, and any API the cluster serves that this server does not (an API added later too).
Decoded and rewritten: Metadata and DescribeCluster (broker addresses), FindCoordinator for transactional ids
(coordinator.front.groups). Produce with acks=0 has no answer upstream, and none here.

Produce (v10+) and Fetch (v16+) answers can name a moved leader's address (KIP-951 NodeEndpoints): those are
rewritten too (coordinator.front.endpoints), so Produce and Fetch are served up to the versions whose layout that
knows (13 and 18).

ApiVersions says what the path serves: the group APIs at this server's versions (the classic ones and KIP-848's,
coordinated here); every forwarded API at the cluster's versions (Produce and Fetch capped as above); none of the
share or streams group APIs, which this server does not coordinate yet and the cluster must not coordinate behind
it.

Faults. A forwarded request unanswered within `upstream.request.timeout.ms`, or an upstream connection that breaks
with requests in flight, closes the client's connection, as a broker that goes away would; clients reconnect and
retry (a retriable disconnect, never a hang).

Lag needs log-end offsets: partitions of the topics asked about are looked up with Metadata and ListOffsets to their
leaders every second (`log_end_offset` starts watching a topic the first time it is asked).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import socket
import struct
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from coordinator.brokers import Broker, ListenError, bind_listener, client_address, local_address
from coordinator.cluster.upstream import UpstreamError
from coordinator.config import Config
from coordinator.dataplane import SharedRefresh
from coordinator.server.connection import CLOSE
from coordinator.server.listener import KafkaListener
from coordinator.tasks import cancel_and_wait
from protocol.api import (
    ApiTable,
    RequestContext,
    RequestDecodeError,
    decode_request_body,
    decode_response,
    encode_body,
)
from protocol.api_keys import ApiKey

from .cluster import UpstreamCluster, UpstreamTimeout
from .connect import unused_settings
from .endpoints import NEWEST as ENDPOINTS_NEWEST
from .endpoints import has_endpoints, produce_acks
from .security import security_topic_name

log = logging.getLogger(__name__)

_CID = struct.Struct(">i")
REFRESH_INTERVAL_S = 1.0
SWEEP_INTERVAL_S = 0.25
LATEST_TIMESTAMP = -1

# Served by this server itself in front of a cluster (coordinator.front.groups and the parts it wraps).
LOCAL = frozenset(
    {
        ApiKey.API_VERSIONS,
        ApiKey.SASL_HANDSHAKE,
        ApiKey.SASL_AUTHENTICATE,
        ApiKey.FIND_COORDINATOR,
        ApiKey.JOIN_GROUP,
        ApiKey.HEARTBEAT,
        ApiKey.LEAVE_GROUP,
        ApiKey.SYNC_GROUP,
        ApiKey.DESCRIBE_GROUPS,
        ApiKey.LIST_GROUPS,
        ApiKey.DELETE_GROUPS,
        ApiKey.OFFSET_COMMIT,
        ApiKey.OFFSET_FETCH,
        ApiKey.OFFSET_DELETE,
        ApiKey.METADATA,
        ApiKey.DESCRIBE_CLUSTER,
        ApiKey.TXN_OFFSET_COMMIT,
        # group configs answered here, the configs of everything else passed on (coordinator.front.groups)
        ApiKey.DESCRIBE_CONFIGS,
        ApiKey.INCREMENTAL_ALTER_CONFIGS,
        ApiKey.LIST_CONFIG_RESOURCES,
    }
)
# Never forwarded: the group APIs coordinated here (KIP-848's, served by the group service) or by nobody (share
# and streams groups, which must not be left to the cluster), and the inter-broker Envelope.
WITHHELD = frozenset(
    {ApiKey.ENVELOPE, ApiKey.CONSUMER_GROUP_HEARTBEAT, ApiKey.CONSUMER_GROUP_DESCRIBE}
    | set(range(ApiKey.SHARE_GROUP_HEARTBEAT, ApiKey.DELETE_SHARE_GROUP_OFFSETS + 1))
)
# Produce and Fetch: up to the versions whose NodeEndpoints this server can rewrite (coordinator.front.endpoints)
CAPS: dict[int, int] = dict(ENDPOINTS_NEWEST)
ENDPOINTS = frozenset(ENDPOINTS_NEWEST)
# A restarted worker retries its predecessor's broker port this long (the dead one's socket may linger).
PREDECESSOR_BIND_S = 1.0
# Passed on decoded (coordinator.front.groups: the configs of what is not a group), refused for this server's own
# topics
ALTERING_CONFIGS = frozenset({ApiKey.ALTER_CONFIGS, ApiKey.INCREMENTAL_ALTER_CONFIGS})
# Rewritten answers (decoded), at this server's versions narrowed to the cluster's.
REWRITTEN = {ApiKey.METADATA: (0, 13), ApiKey.DESCRIBE_CLUSTER: (0, 2)}


class FrontDataPlane:
    def __init__(
        self,
        config: Config,
        cluster: UpstreamCluster,
        primary: Callable[[], KafkaListener],
        add_listener: Callable[[KafkaListener], Awaitable[None]],
        abort_connection: Callable[[int], None],
        worker: tuple[int, int] = (0, 1),
        remembered: dict[int, int] | None = None,
        on_bound: Callable[[int, int], None] | None = None,
    ) -> None:
        """`worker`: (index, count) of this process among the workers of `serve --workers N` (each an instance;
        their broker listeners interleave: `_port_for`). `remembered`: a restarted worker's predecessor's broker
        ports, taken again where they were free ones; `on_bound(node, port)`: told each broker listener's port."""
        self._config = config
        self._worker = worker
        self._remembered = dict(remembered or {})
        self._on_bound = on_bound
        self.cluster = cluster
        self._primary = primary
        self._add_listener = add_listener
        self._abort_connection = abort_connection
        self._table: ApiTable | None = None
        self.listeners: dict[int, KafkaListener] = {}  # upstream node id -> its listener here
        self._node_of_port: dict[int, int] = {}
        self.instances: Any = None  # coordinator.front.instances.InstanceGroup, with a state topic
        self._upstreams: dict[int, Any] = {}  # client connection id -> its upstream connection
        self._route_of: dict[int, int] = {}  # client connection id -> the node its upstream goes to
        self._tasks: list[asyncio.Task[None]] = []
        self._listening = asyncio.Lock()
        # lag: the topics watched, their partition counts and log-end offsets
        self._watched: set[str] = set()
        self._partitions: dict[str, int] = {}
        self._log_end: dict[tuple[str, int], int] = {}
        self._shared_refresh = SharedRefresh(self.refresh)
        # consumer groups (KIP-848): topic ids of the watched topics, and every topic's name once a regular
        # expression asks for them (FrontTopics)
        self._topic_ids: dict[str, uuid.UUID] = {}
        self._topic_names: dict[uuid.UUID, str] = {}
        self._all_names: list[str] = []
        self._want_all_names = False
        self.topics_version = 0
        self.consumer_topics = FrontTopics(self)
        self.started = False
        self.groups: Any = None  # coordinator.front.groups.FrontGroups, for upstream_status
        # APIs of the cluster served here instead (the ACL APIs when this server has an authorizer of its own, the
        # SCRAM APIs when it has SASL users of its own: coordinator.front.security); set before start
        self.served_here: frozenset[int] = frozenset()
        # this server's own topics on the cluster: never a consumer group's by a regular expression, never read or
        # written by a client through this server (`_touches_own`); `own_topic_sources` give their topic ids
        state = str(config["coordinator.state.topic"])
        self._own_topics = frozenset({state, security_topic_name(state)} if state else ())
        self._own_name = state.encode()  # (the security topic's name begins with it)
        self.own_topic_sources: list[Any] = []  # coordinator.front.state.StateTopic, each with its topic_id

    # -- DataPlane -----------------------------------------------------------------------------------------------

    def register(self, table: ApiTable) -> None:
        self._table = table
        table.register(ApiKey.METADATA, *REWRITTEN[ApiKey.METADATA], self._metadata)
        table.register(ApiKey.DESCRIBE_CLUSTER, *REWRITTEN[ApiKey.DESCRIBE_CLUSTER], self._describe_cluster)

    async def start(self) -> None:
        unused = unused_settings(self._config)
        if unused:
            log.warning("settings not used by the upstream connection: %s", ", ".join(unused))
        await self.cluster.connect()
        log.info(
            "in front of upstream cluster %s: brokers %s",
            self.cluster.cluster_id,
            ", ".join(f"{n}={h}:{p}" for n, (h, p) in sorted(self.cluster.nodes.items())),
        )
        self._serve_versions()
        for node in sorted(self.cluster.nodes):
            await self._ensure_listener(node)
        # every broker asked once: /readyz and the metrics know each one's health from the start
        await asyncio.gather(*(self.cluster.probe(n) for n in self.cluster.nodes), return_exceptions=True)
        self._tasks = [
            asyncio.create_task(self._sweep_periodically()),
            asyncio.create_task(self._refresh_periodically()),
        ]
        self.started = True

    @property
    def ready(self) -> bool:
        """Started, and some upstream broker answered the front's last request to it (/readyz)."""
        stats = self.cluster.stats
        return self.started and any(n in stats and stats[n].reachable for n in self.cluster.nodes)

    def upstream_status(self) -> dict[str, Any]:
        from .metrics import upstream_status

        return upstream_status(self, self.groups)

    async def close(self) -> None:
        await cancel_and_wait(self._tasks, "closing the front's periodic tasks")
        for upstream in self._upstreams.values():
            upstream.close()
        self._upstreams.clear()
        self.cluster.close()

    def log_end_offset(self, topic: str, partition: int) -> int | None:
        if topic not in self._watched:
            self._watched.add(topic)
        return self._log_end.get((topic, partition))

    def partition_count(self, topic: str) -> int | None:
        if topic not in self._watched:
            self._watched.add(topic)
        return self._partitions.get(topic)

    def topic_name(self, topic_id: Any) -> str | None:
        return None  # requests by topic id are forwarded undecoded: the cluster authorizes them

    def watch(self, topics: Iterable[str]) -> None:
        """Keep the log-end offsets of these topics (the topics groups commit offsets for)."""
        self._watched.update(topics)

    async def catch_up(self) -> None:
        if self.groups is not None:
            self.watch(self.groups.committed_topics())  # every topic a group has offsets for has a lag
        await self._shared_refresh()

    def connection_closed(self, connection_id: int) -> None:
        upstream = self._upstreams.pop(connection_id, None)
        self._route_of.pop(connection_id, None)
        if upstream is not None:
            upstream.close()

    # -- what is served -------------------------------------------------------------------------------------------

    def _serve_versions(self) -> None:
        """The API table as the module doc says: local APIs as they are, the rewritten ones narrowed to the
        cluster's versions, everything else the cluster serves forwarded raw."""
        table = self._table
        assert table is not None
        versions = self.cluster.versions
        for api_key, (low, high) in REWRITTEN.items():
            theirs = versions.get(api_key)
            spec = table.spec(api_key)
            if theirs is None or spec is None or max(low, theirs[0]) > min(high, theirs[1]):
                table.unregister(api_key)
            else:
                table.narrow(api_key, max(low, theirs[0]), min(high, theirs[1]))
        for key, (first, last) in sorted(versions.items()):
            if key in LOCAL or key in WITHHELD or key in self.served_here:
                continue
            last = min(last, CAPS.get(key, last))
            if first <= last:
                table.register_raw(key, first, last, self._forward)

    # -- node listeners -----------------------------------------------------------------------------------------

    def _port_for(self, node: int) -> int:
        """BASE + node; with W workers, worker w's is BASE + node * W + w: one port per worker and broker, the
        same across restarts (0: a free one)."""
        base = int(self._config["upstream.node.port.base"])
        if base < 0:
            port = self._primary().port
            if not port:
                return 0
            base = port + 1
        index, count = self._worker
        return base + node * count + index

    async def _ensure_listener(self, node: int) -> KafkaListener:
        listener = self.listeners.get(node)
        if listener is not None:
            return listener
        async with self._listening:
            listener = self.listeners.get(node)
            if listener is not None:
                return listener
            primary = self._primary()
            advertised = (primary.advertised[0], 0) if primary.advertised is not None else None
            port = self._port_for(node)
            listener = KafkaListener(
                primary.name,
                primary.host,
                port,
                advertised=advertised,
                ssl=primary.ssl,
                spec=primary.spec,
                sock=await self._predecessors(node) if not port else None,
            )
            await self._add_listener(listener)
            self.listeners[node] = listener
            log.info("upstream broker %d is reached through port %d here", node, listener.bound_port)
            if self._on_bound is not None:
                self._on_bound(node, listener.bound_port)
        return listener

    async def _predecessors(self, node: int) -> socket.socket | None:
        """A restarted worker's listener for `node` on its predecessor's free port, so a client that kept that
        broker's address (librdkafka keeps its group coordinator's while the node id stays) finds it again;
        None (a new free port) when there is none or it is taken."""
        port = self._remembered.get(node)
        if port is None:
            return None
        try:
            return await asyncio.to_thread(bind_listener, self._primary().host, port, PREDECESSOR_BIND_S)
        except ListenError as exc:
            log.warning("upstream broker %d: the port it had here before the restart is taken: %s", node, exc)
            return None

    def announced(self) -> tuple[str, dict[int, int]]:
        """This server's host as clients reach it, and its port for each upstream node: what it tells the other
        instances (coordinator.front.instances)."""
        ports: dict[int, int] = {}
        host = ""
        for node, listener in sorted(self.listeners.items()):
            if listener.bound_port:
                host, ports[node] = client_address(listener.host, listener.bound_port, listener.advertised)
        return host, ports

    def node_of_request(self) -> int | None:
        """The upstream node whose listener the current request came in on (None: the bootstrap listener)."""
        local = local_address.get(None)
        if local is None:
            return None
        node = self._node_of_port.get(local[1])
        if node is None and len(self._node_of_port) != len(self.listeners):
            self._node_of_port = {lst.bound_port: n for n, lst in self.listeners.items() if lst.bound_port}
            node = self._node_of_port.get(local[1])
        return node

    def broker(self, node: int) -> Broker:
        """Node `node` as the current client reaches it: here, or at the instance that holds its address when
        several instances divide the work (coordinator.front.instances)."""
        if self.instances is not None:
            elsewhere = self.instances.address_of(node)
            if elsewhere is not None:
                return Broker(node, *elsewhere)
        listener = self.listeners[node]
        host, port = client_address(listener.host, listener.bound_port, listener.advertised)
        return Broker(node, host, port)

    async def readdress(self, entries: Iterable[Any], id_field: str = "node_id") -> tuple[Any, ...]:
        """The entries of an answer that name a broker (Metadata's and DescribeCluster's brokers, FindCoordinator's
        coordinators, NodeEndpoints) with this server's address of that node, the node id kept; an entry naming
        no node (-1, an error) stays as it is. A node first seen gets its listener."""
        out = []
        for entry in entries:
            node = getattr(entry, id_field)
            if node >= 0:
                await self._ensure_listener(node)
                here = self.broker(node)
                entry = dataclasses.replace(entry, host=here.host, port=here.port)
            out.append(entry)
        return tuple(out)

    # -- forwarding -----------------------------------------------------------------------------------------------

    def route(self, ctx: RequestContext) -> Any:
        """The upstream connection of the client connection of `ctx` (opened on its first use)."""
        upstream = self._upstreams.get(ctx.connection_id)
        node = self.node_of_request()
        if upstream is not None:
            if (
                node is None
                or node == self._route_of.get(ctx.connection_id)
                or node not in self.cluster.nodes
                or not upstream.idle
            ):
                return upstream
            # The connection's own broker is back after its requests went to a stand-in: without this its
            # partitions' leaders, once they move back there, would answer NOT_LEADER through the stand-in for
            # as long as the client keeps the connection. Switched only while nothing is in flight, so answers
            # keep their order.
            log.info(
                "connection %d: upstream broker %d is back; its requests go there again",
                ctx.connection_id,
                node,
            )
            del self._upstreams[ctx.connection_id]
            self._route_of.pop(ctx.connection_id, None)
            upstream.close()
        if node is None or node not in self.cluster.nodes:
            live = self.cluster.live_nodes()
            if not live:
                raise UpstreamTimeout("no upstream broker is known")
            node = live[0]
        upstream = self.cluster.connection(node, functools.partial(self._broken, ctx.connection_id))
        self._upstreams[ctx.connection_id] = upstream
        self._route_of[ctx.connection_id] = node
        return upstream

    def _broken(self, connection_id: int, upstream: Any, lost: bool) -> None:
        if self._upstreams.get(connection_id) is upstream:
            del self._upstreams[connection_id]
            node = self._route_of.pop(connection_id, None)
            if node is not None:
                self.cluster._note_error(node, "connection broke")
        if lost:
            log.info("closing connection %d: its upstream broker connection failed", connection_id)
            self._abort_connection(connection_id)

    async def _forward(self, ctx: RequestContext, frame: bytes) -> Any:
        if self._own_topics and self._touches_own(frame):
            return self._refuse_own(ctx)
        no_answer = ctx.api_key == ApiKey.PRODUCE and produce_acks(frame, ctx.api_version) == 0
        try:
            future = self.route(ctx).send_frame(frame, expect_answer=not no_answer)
            if future is None:
                return None
            rest = await future
        except (UpstreamError, UpstreamTimeout):
            # The broker went away (its connection is closed, `_broken`): so does the client's connection, as
            # with a broker that goes away; the client reconnects and retries.
            self._abort_connection(ctx.connection_id)
            return CLOSE
        if ctx.api_key in ENDPOINTS and has_endpoints(ctx.api_key, ctx.api_version, rest):
            return await self._rewrite_endpoints(ctx, rest)
        return _CID.pack(ctx.correlation_id) + rest

    async def forward_decoded(self, ctx: RequestContext, request: Any) -> Any:
        """`request` (an entity at the client's version, part of what the client asked) sent on the client's
        own route, as `_forward` sends a whole frame; the decoded answer, or CLOSE if the broker went away (or the
        request would change this server's own topics' configs)."""
        if ctx.api_key in ALTERING_CONFIGS and self._names_own(request):
            return self._refuse_own(ctx)
        try:
            future = self.route(ctx).send(ctx.api_key, ctx.api_version, ctx.client_id, request)
            assert future is not None
            rest = await future
        except (UpstreamError, UpstreamTimeout):
            self._abort_connection(ctx.connection_id)
            return CLOSE
        return decode_response(ctx.api_key, ctx.api_version, rest)

    # -- this server's own topics ------------------------------------------------------------------------------

    def _touches_own(self, frame: bytes | memoryview) -> bool:
        """Whether a request names the state topic or the security topic (`_names_own`): a quick scan of its
        bytes for their name and topic ids, and only when that finds one, a decode that tells a topic field from
        record data or a client id that holds the same bytes. A request that cannot be decoded then counts."""
        data = frame if isinstance(frame, bytes) else bytes(frame)
        markers = [self._own_name]
        markers += [s.topic_id.bytes for s in self.own_topic_sources if s.topic_id is not None]
        if not any(marker in data for marker in markers):
            return False
        try:
            return self._names_own(decode_request_body(data))
        except RequestDecodeError:
            return True

    def _names_own(self, request: Any) -> bool:
        """Whether a request names the own topics, by name or id, or one of the shards' transactional ids
        (`<state topic>-<partition>`, whose epoch a client's InitProducerId would bump: the shard's owner fenced)."""
        ids = {s.topic_id for s in self.own_topic_sources if s.topic_id is not None}
        prefix = self._own_name.decode() + "-"
        return any(
            v in self._own_topics
            or v in ids
            or (isinstance(v, str) and v.startswith(prefix) and v[len(prefix) :].isdigit())
            for v in _scalars(request)
        )

    def _refuse_own(self, ctx: RequestContext) -> Any:
        """Clients never read, write or reconfigure the topics that hold this server's state and its users'
        credentials through it (it would pass them on as its own principal, which may): the connection is closed,
        as Kafka closes one whose request it will not answer."""
        log.warning(
            "closed the connection of client %r at %s: api %d names this server's own topic (%s)",
            ctx.client_id,
            ctx.client_host,
            ctx.api_key,
            ", ".join(sorted(self._own_topics)),
        )
        self._abort_connection(ctx.connection_id)
        return CLOSE

    async def _rewrite_endpoints(self, ctx: RequestContext, rest: bytes) -> bytes:
        """A Produce or Fetch answer naming new leaders' addresses (KIP-951), with this server's instead."""
        answer = decode_response(ctx.api_key, ctx.api_version, rest)
        log.info(
            "api %d answer names moved leaders' addresses (nodes %s): given this server's",
            ctx.api_key,
            sorted(e.node_id for e in answer.node_endpoints),
        )
        endpoints = await self.readdress(answer.node_endpoints)
        body = encode_body(
            ctx.api_key, ctx.api_version, dataclasses.replace(answer, node_endpoints=endpoints)
        )
        return _CID.pack(ctx.correlation_id) + b"\x00" + body.body  # response header v1: no tags

    async def forward_any(self, ctx: RequestContext, request: Any) -> Any:
        """A decoded request any broker can answer (Metadata, DescribeCluster, FindCoordinator for a
        transactional id), passed on as it is to the first live broker on this server's own connections: a
        client whose broker is down still learns where the partitions went. Raises UpstreamTimeout when no
        broker answers within upstream.request.timeout.ms."""
        deadline = time.monotonic() + self.cluster.timeout_s
        return await self.cluster.ask_any(
            ctx.api_key, ctx.api_version, request, deadline, exact=True, client_id=ctx.client_id
        )

    async def _metadata(self, ctx: RequestContext, request: Any) -> Any:
        return await self._with_brokers_here(ctx, request, "node_id")

    async def _describe_cluster(self, ctx: RequestContext, request: Any) -> Any:
        return await self._with_brokers_here(ctx, request, "broker_id")

    def unanswerable(self, ctx: RequestContext, exc: Exception) -> Any:
        """No upstream broker answered: the client's connection is closed (what a client does itself when a
        request times out; it reconnects and asks again)."""
        log.info("closing connection %d: %s", ctx.connection_id, exc)
        return CLOSE

    async def _with_brokers_here(self, ctx: RequestContext, request: Any, id_field: str) -> Any:
        """Metadata or DescribeCluster from the cluster, its brokers at this server's addresses."""
        try:
            response = await self.forward_any(ctx, request)
        except UpstreamTimeout as exc:
            return self.unanswerable(ctx, exc)
        return dataclasses.replace(response, brokers=await self.readdress(response.brokers, id_field))

    # -- timeouts, nodes, log-end offsets ---------------------------------------------------------------------

    async def _sweep_periodically(self) -> None:
        loop = asyncio.get_running_loop()
        timeout_s = self.cluster.timeout_s
        while True:
            await asyncio.sleep(SWEEP_INTERVAL_S)
            now = loop.time()
            for connection_id, upstream in list(self._upstreams.items()):
                if upstream.overdue(now, timeout_s):
                    log.warning(
                        "closing connection %d: upstream broker %s did not answer within %.0f s",
                        connection_id,
                        self._route_of.get(connection_id),
                        timeout_s,
                    )
                    upstream.fail("upstream.request.timeout.ms passed")
            self.cluster.sweep(now)

    async def _refresh_periodically(self) -> None:
        turn = 0
        while True:
            await asyncio.sleep(REFRESH_INTERVAL_S)
            try:
                # every second one broker in turn is asked for the brokers: each one's health is known (/readyz,
                # /metrics), and a new broker gets its listener
                nodes = sorted(self.cluster.nodes)
                if nodes:
                    turn += 1
                    with contextlib.suppress(UpstreamError, OSError, TimeoutError):
                        await self.cluster.probe(nodes[turn % len(nodes)])
                for node in self.cluster.nodes:
                    await self._ensure_listener(node)
                if self._watched or self._want_all_names:
                    await self._shared_refresh()  # not catch_up: no scan of every group's topics each second
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the cluster is down: keep the last known figures
                log.debug("refreshing from the upstream cluster failed: %r", exc)

    async def refresh(self) -> None:
        """Partition counts, topic ids and log-end offsets of the watched topics, from the partitions' leaders;
        every topic's name too once consumer groups' regular expressions want them."""
        if not self._watched and not self._want_all_names:
            return
        deadline = time.monotonic() + self.cluster.timeout_s
        want_all = self._want_all_names
        watched = set(self._watched)
        metadata = await self.cluster.metadata(None if want_all else sorted(watched), deadline)
        partitions: dict[str, int] = {}
        topic_ids: dict[str, uuid.UUID] = {}
        names: list[str] = []
        by_leader: dict[int, dict[str, list[int]]] = {}
        for topic in metadata.topics:
            if topic.error_code or not topic.name:
                continue
            if not topic.is_internal and topic.name not in self._own_topics:
                names.append(topic.name)
            if topic.name not in watched:
                continue
            partitions[topic.name] = len(topic.partitions)
            if topic.topic_id is not None and topic.topic_id.int:
                topic_ids[topic.name] = topic.topic_id
            for p in topic.partitions:
                if p.leader_id >= 0:
                    by_leader.setdefault(p.leader_id, {}).setdefault(topic.name, []).append(p.partition_index)
        log_end: dict[tuple[str, int], int] = {}
        version = self.cluster.version(ApiKey.LIST_OFFSETS, 7)
        for leader, topics in by_leader.items():
            body = {
                "replica_id": -1,
                "isolation_level": 0,
                "topics": [
                    {
                        "name": name,
                        "partitions": [
                            {"partition_index": p, "current_leader_epoch": -1, "timestamp": LATEST_TIMESTAMP}
                            for p in indexes
                        ],
                    }
                    for name, indexes in topics.items()
                ],
            }
            try:
                answer = await self.cluster.ask_node(leader, ApiKey.LIST_OFFSETS, version, body)
            except Exception as exc:  # noqa: BLE001 - a leader down: its partitions keep their last figures
                log.debug("ListOffsets to upstream broker %d failed: %r", leader, exc)
                log_end.update({(t, p): o for (t, p), o in self._log_end.items() if t in topics})
                continue
            for t in answer.topics:
                for p in t.partitions:
                    if p.error_code == 0:
                        log_end[(t.name, p.partition_index)] = int(p.offset)
        if (
            partitions != self._partitions
            or topic_ids != self._topic_ids
            or (want_all and names != self._all_names)
        ):
            self.topics_version += 1
        self._topic_ids = topic_ids
        self._topic_names = {topic_id: name for name, topic_id in topic_ids.items()}
        if want_all:
            self._all_names = sorted(names)
        self._partitions = partitions
        self._log_end = log_end


class FrontTopics:
    """The cluster's topics as consumer groups see them (coordinator.consumer.manager.TopicImage), from the
    front's cache: a topic asked for is watched from then on and known after the next refresh (each second);
    asking for every name (a regular expression) makes each refresh fetch them all."""

    def __init__(self, front: FrontDataPlane) -> None:
        self._front = front

    @property
    def topics_version(self) -> int:
        return self._front.topics_version

    def topic_id(self, topic: str) -> uuid.UUID | None:
        self._front.watch((topic,))
        return self._front._topic_ids.get(topic)

    def partition_count(self, topic: str) -> int | None:
        return self._front.partition_count(topic)

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        return self._front._topic_names.get(topic_id)

    def topic_names(self) -> list[str]:
        front = self._front
        if not front._want_all_names:
            front._want_all_names = True
        return front._all_names


def _scalars(entity: Any) -> Iterable[Any]:
    """Every string and UUID field of a request entity, at any depth (topic names and ids among them; record data
    is bytes, not walked)."""
    if isinstance(entity, (str, uuid.UUID)):
        yield entity
    elif isinstance(entity, tuple):
        for item in entity:
            yield from _scalars(item)
    elif dataclasses.is_dataclass(entity) and not isinstance(entity, type):
        for field in dataclasses.fields(entity):
            yield from _scalars(getattr(entity, field.name))
