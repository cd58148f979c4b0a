"""The upstream cluster as the front sees it: its brokers (node id -> address, from Metadata), the API versions
they serve, this server's own connection to each broker (for its own requests: Metadata, ListOffsets for lag, the
group coordinator lookups and offset commits of coordinator.front.groups), and the deadline every request to it
has (`upstream.request.timeout.ms`).

Requests of the front's own are retried across connection failures and coordinator moves until the deadline; a
request still unanswered then fails with UpstreamTimeout, which callers turn into Kafka's retriable errors.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import time
from collections.abc import Callable
from typing import Any

from coordinator.cluster.upstream import Upstream, UpstreamError
from coordinator.config import Config, parse_hostport
from protocol.api import decode_response, request_class
from protocol.api_keys import ApiKey
from protocol.build import build
from protocol.errors import ErrorCode

from .connect import Connector, UpstreamAuthError

log = logging.getLogger(__name__)

MAX_ANSWER_BYTES = 1 << 30  # an upstream answer (a Fetch of many partitions) may be far larger than a request
RETRY_PAUSE_S = 0.1
BOOTSTRAP = -1  # the key of the connection to a bootstrap address before any node id is known
# A broker answers the requests of one connection one at a time, in order (it reads the next only once it has
# answered the last), so the front's own requests to a broker (shard transactions, mirrored commits of many groups)
# are spread over up to this many connections to it: a new one is opened while every open one has a request
# waiting.
OWN_CONNECTIONS = 8
GROUP, TRANSACTION = 0, 1  # FindCoordinator's key types
# Errors that mean "ask again, perhaps elsewhere" for the front's own group requests.
COORDINATOR_MOVED = frozenset(
    {ErrorCode.not_coordinator, ErrorCode.coordinator_not_available, ErrorCode.coordinator_load_in_progress}
)


class UpstreamTimeout(TimeoutError):
    """The upstream cluster did not answer within upstream.request.timeout.ms."""


@dataclasses.dataclass
class NodeStats:
    """Per upstream broker, for /readyz and metrics: requests of the front's own, their failures, last latency."""

    requests: int = 0
    errors: int = 0
    last_latency_s: float = 0.0
    reachable: bool = False
    last_error: str = ""


class UpstreamCluster:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.timeout_s = config["upstream.request.timeout.ms"] / 1000
        self.connector = Connector(config)
        self.bootstrap = [parse_hostport(s, 9092) for s in config["upstream.bootstrap.servers"]]
        if not self.bootstrap:
            raise ValueError("upstream.bootstrap.servers is empty")
        self.nodes: dict[int, tuple[str, int]] = {}
        self.versions: dict[int, tuple[int, int]] = {}
        self.cluster_id: str | None = None
        self.stats: dict[int, NodeStats] = {}
        self._own: dict[int, list[Upstream]] = {}  # node -> this server's own connections to it
        # (GROUP, group id) or (TRANSACTION, transactional id) -> the cluster's coordinator node for it
        self._coordinators: dict[tuple[int, str], int] = {}

    # -- connections ------------------------------------------------------------------------------------------

    def connection(self, node: int, on_broken: Callable[[Upstream, bool], None]) -> Upstream:
        """A new connection to node `node` (BOOTSTRAP: the first bootstrap address)."""
        host, port = self.nodes[node] if node != BOOTSTRAP else self.bootstrap[0]
        return Upstream(
            (host, port),
            MAX_ANSWER_BYTES,
            on_broken,
            name=f"upstream broker {node} ({host}:{port})",
            opener=functools.partial(self.connector.open, host, port, self.timeout_s),
        )

    def _own_connection(self, node: int) -> Upstream:
        """The least busy of this server's own connections to `node`; a new one while all are busy (up to
        OWN_CONNECTIONS)."""
        pool = self._own.setdefault(node, [])
        upstream = min(pool, key=lambda u: u.pending, default=None)
        if upstream is None or (upstream.pending and len(pool) < OWN_CONNECTIONS):
            upstream = self.connection(node, functools.partial(self._own_broken, node))
            pool.append(upstream)
        return upstream

    def _own_broken(self, node: int, upstream: Upstream, lost: bool) -> None:
        pool = self._own.get(node)
        if pool is not None and upstream in pool:
            pool.remove(upstream)
            if not pool:
                del self._own[node]

    def sweep(self, now: float) -> None:
        """Fail the front's own connections with a request older than the timeout."""
        for node, pool in list(self._own.items()):
            for upstream in list(pool):
                if upstream.overdue(now, self.timeout_s):
                    log.warning("upstream broker %d did not answer within %.0f s", node, self.timeout_s)
                    self._note_error(node, "timed out")
                    upstream.fail("upstream.request.timeout.ms passed")

    def close(self) -> None:
        for pool in self._own.values():
            for upstream in pool:
                upstream.close()
        self._own.clear()

    # -- requests of the front's own -----------------------------------------------------------------------------

    def version(self, api_key: int, newest: int) -> int:
        """The newest version of `api_key` up to `newest` the cluster serves (ValueError when it serves none)."""
        low, high = self.versions.get(api_key, (0, -1))
        chosen = min(high, newest)
        if chosen < low:
            raise ValueError(f"the upstream cluster serves no usable version of api {api_key}")
        return chosen

    async def ask_node(
        self,
        node: int,
        api_key: int,
        version: int,
        body: Any,
        client_id: str | None = "kgc-front",
        decode: Callable[[bytes | memoryview], Any] | None = None,
    ) -> Any:
        """One request (a mapping, or a client's request entity passed on) on this server's own connection to
        `node`; raises UpstreamError, TimeoutError. `decode(payload)`: the answer read by the caller (from after
        the correlation id) instead of by kio."""
        upstream = self._own_connection(node)
        started = time.perf_counter()
        stats = self.stats.setdefault(node, NodeStats())
        stats.requests += 1
        if isinstance(body, dict):
            body = build(request_class(api_key, version), body)
        try:
            future = upstream.send(api_key, version, client_id, body)
            assert future is not None
            async with asyncio.timeout(self.timeout_s):
                payload = await future
        except (TimeoutError, UpstreamError, OSError, UpstreamAuthError) as exc:
            self._note_error(node, repr(exc))
            raise
        stats.last_latency_s = time.perf_counter() - started
        stats.reachable = True
        if decode is not None:
            return decode(payload)
        return decode_response(api_key, version, payload)

    def _note_error(self, node: int, error: str) -> None:
        stats = self.stats.setdefault(node, NodeStats())
        stats.errors += 1
        stats.reachable = False
        stats.last_error = error

    def live_nodes(self) -> list[int]:
        """Node ids in order, those that answered last first (the ones to ask)."""
        return sorted(
            self.nodes, key=lambda n: (not self.stats.get(n, NodeStats(reachable=True)).reachable, n)
        )

    async def ask_any(
        self,
        api_key: int,
        newest: int,
        body: Any,
        deadline: float,
        exact: bool = False,
        client_id: str | None = "kgc-front",
    ) -> Any:
        """Ask the first node that answers (the bootstrap addresses while no node is known), until `deadline`
        (time.monotonic); raises UpstreamTimeout. `exact`: at version `newest` itself (a client's request)."""
        last: BaseException | None = None
        while True:
            for node in self.live_nodes() or [BOOTSTRAP]:
                try:
                    version = self.version(api_key, newest) if self.versions and not exact else newest
                    return await self.ask_node(node, api_key, version, body, client_id)
                except (TimeoutError, UpstreamError, OSError) as exc:
                    last = exc
                if time.monotonic() >= deadline:
                    break
            if time.monotonic() >= deadline:
                raise UpstreamTimeout(f"no upstream broker answered: {last!r}")
            await asyncio.sleep(RETRY_PAUSE_S)

    # -- what the cluster is ------------------------------------------------------------------------------------

    async def connect(self) -> None:
        """Learn the cluster's API versions and brokers from a bootstrap address, retrying every second until one
        answers (the server does not listen before it knows what it fronts). An authentication refusal is fatal."""
        attempt = 0
        while True:
            for host, port in list(self.bootstrap):
                self.bootstrap.remove((host, port))
                self.bootstrap.insert(0, (host, port))  # connection(BOOTSTRAP) uses the first
                try:
                    answer = await self.ask_node(
                        BOOTSTRAP,
                        ApiKey.API_VERSIONS,
                        3,
                        {"client_software_name": "kafka-group-coordinator", "client_software_version": "1"},
                    )
                    if answer.error_code:
                        raise UpstreamError(f"ApiVersions failed with error {answer.error_code}")
                    self.versions = {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}
                    await self.refresh_nodes(time.monotonic() + self.timeout_s)
                    self._drop_own(BOOTSTRAP)
                    return
                except UpstreamAuthError:
                    raise
                except (TimeoutError, UpstreamError, OSError, UpstreamTimeout) as exc:
                    if isinstance(exc.__cause__, UpstreamAuthError):
                        raise exc.__cause__ from None  # refused credentials: retrying cannot help
                    self._drop_own(BOOTSTRAP)
                    if attempt % 10 == 0:
                        log.warning("upstream %s:%d not reachable yet: %r", host, port, exc)
            attempt += 1
            await asyncio.sleep(1.0)

    def _drop_own(self, node: int) -> None:
        for upstream in self._own.pop(node, []):
            upstream.close()

    async def metadata(self, topics: list[str] | None, deadline: float) -> Any:
        body: dict[str, Any] = {
            "topics": None if topics is None else [{"name": t, "topic_id": None} for t in topics],
            "allow_auto_topic_creation": False,
            "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False,
        }
        return await self.ask_any(ApiKey.METADATA, 12, body, deadline)

    async def probe(self, node: int) -> None:
        """Metadata without topics from one node: its health (NodeStats), and the cluster's brokers now."""
        answer = await self.ask_node(
            node,
            ApiKey.METADATA,
            self.version(ApiKey.METADATA, 12),
            {"topics": [], "allow_auto_topic_creation": False, "include_topic_authorized_operations": False},
        )
        self._take_nodes(answer)

    def _take_nodes(self, answer: Any) -> None:
        nodes = {b.node_id: (b.host, b.port) for b in answer.brokers}
        if nodes:
            for gone in set(self.nodes) - set(nodes):
                self._drop_own(gone)
            self.nodes = nodes
        self.cluster_id = answer.cluster_id

    async def refresh_nodes(self, deadline: float) -> Any:
        """The cluster's brokers now (Metadata without topics); returns the answer."""
        answer = await self.metadata([], deadline)
        self._take_nodes(answer)
        return answer

    # -- the cluster's group coordinators (where mirrored offsets live) ---------------------------------------

    async def coordinator_of(self, key: str, deadline: float, key_type: int = GROUP) -> int:
        """The cluster's coordinator node of group `key` (key_type GROUP) or transactional id `key`
        (TRANSACTION)."""
        node = self._coordinators.get((key_type, key))
        if node is not None and node in self.nodes:
            return node
        while True:
            answer = await self.ask_any(
                ApiKey.FIND_COORDINATOR, 3, {"key": key, "key_type": key_type}, deadline
            )
            if answer.error_code == 0 and answer.node_id in self.nodes:
                self._coordinators[(key_type, key)] = answer.node_id
                return int(answer.node_id)
            if answer.error_code == 0:  # a node we have not seen yet
                with contextlib.suppress(UpstreamTimeout):
                    await self.refresh_nodes(deadline)
            if time.monotonic() >= deadline:
                what = "group" if key_type == GROUP else "transactional id"
                raise UpstreamTimeout(
                    f"the upstream cluster has no coordinator for {what} {key!r} (error {answer.error_code})"
                )
            await asyncio.sleep(RETRY_PAUSE_S)

    def forget_coordinator(self, key: str, key_type: int = GROUP) -> None:
        """`key`'s coordinator moved: look it up again next time."""
        self._coordinators.pop((key_type, key), None)

    async def ask_coordinator(
        self,
        key: str,
        api_key: int,
        newest: int,
        body: Any,
        exact: bool = False,
        key_type: int = GROUP,
        deadline: float | None = None,
    ) -> Any:
        """A request to the cluster's coordinator of `key` (a group, or a transactional id), asked again (after a
        new lookup) while it has moved or is loading (`_moved`), until the deadline (by default the timeout from
        now). `exact`: at version `newest` itself (a client's request entity)."""
        if deadline is None:
            deadline = time.monotonic() + self.timeout_s
        version = newest if exact else self.version(api_key, newest)
        while True:
            node = await self.coordinator_of(key, deadline, key_type)
            try:
                answer = await self.ask_node(node, api_key, version, body)
            except (TimeoutError, UpstreamError, OSError):
                answer = None
            if answer is not None and not _moved(answer):
                return answer
            self.forget_coordinator(key, key_type)
            if time.monotonic() >= deadline:
                if answer is not None:
                    return answer  # its error (COORDINATOR_LOAD_IN_PROGRESS...) is retriable for the client
                raise UpstreamTimeout(f"the upstream coordinator of {key!r} did not answer")
            await asyncio.sleep(RETRY_PAUSE_S)


def _moved(answer: Any) -> bool:
    """The answer says the group's coordinator moved or is not ready (top level or in its single group)."""
    if getattr(answer, "error_code", 0) in COORDINATOR_MOVED:
        return True
    groups = getattr(answer, "groups", None)
    if groups and len(groups) == 1 and getattr(groups[0], "error_code", 0) in COORDINATOR_MOVED:
        return True
    results = getattr(answer, "results", None)
    if results and len(results) == 1 and getattr(results[0], "error_code", 0) in COORDINATOR_MOVED:
        return True
    # per partition only (TxnOffsetCommit, OffsetCommit): every partition says so
    codes = [
        getattr(p, "error_code", 0)
        for t in getattr(answer, "topics", ()) or ()
        for p in getattr(t, "partitions", ())
    ]
    return bool(codes) and all(code in COORDINATOR_MOVED for code in codes)
