"""The data plane of a worker other than worker 0: every data-plane request relayed to worker 0.

With `serve --workers N` (coordinator.cluster.topology) the topics live in worker 0's embedded data plane only;
Metadata names worker 0 (node.id + 0) as every partition's leader, so clients produce and fetch there directly.
Workers w > 0 still get Metadata (clients ask any broker they know), CreateTopics, DeleteTopics, ListOffsets,
InitProducerId, and whatever a client sends before it has read Metadata. They answer them by relaying:

* The forwarder registers the same APIs and version ranges as the embedded data plane and the security part
  declare (their VERSIONS tables, so they cannot drift), so ApiVersions is identical on every worker. The
  durable security state (ACLs, SCRAM credentials, in DATA_DIR/security) is worker 0's: its APIs are relayed
  too, and worker 0 pushes every change to the other workers before it answers
  (coordinator.cluster.security_sync). SASL is not relayed: every worker authenticates its own connections.
* Every request goes to worker 0's internal listener in an Envelope with the client's principal, address and
  listener (coordinator.cluster.internal), so worker 0 authorizes the client itself; the forwarder's own requests
  (the cache below) are the worker's.
* Each client connection gets its own upstream connection to worker 0, opened on its first forwarded request
  and closed with it. A handler encodes the request (the decoded kio entity, re-encoded for the same version,
  with the client's client id and an upstream correlation id) and writes it synchronously, before its first
  await: connection handlers start in request order, so requests reach worker 0 in the order the client sent
  them, and a long-polling Fetch of one client never holds back another client's requests. The answer is
  decoded and returned to the client connection's ordered writer, which encodes it with the client's own
  correlation id. Produce with acks=0 gets no answer upstream, and none here. One exception: a Metadata request
  that creates no topic, from a connection that has relayed nothing yet, goes on an upstream such requests share
  (every member of a group owned here asks for Metadata the moment it is assigned). It changes nothing, so a
  later request of the same client that overtakes it sees what it would have seen. If that upstream breaks, the
  clients whose requests it lost are dropped, as with their own.
* Metadata is the one answer changed on the way: its broker list is this worker's view of every worker (for a
  wildcard listener, the address the client reached here, not the loopback address the relay used).
* When worker 0 cannot be reached or the upstream connection breaks with requests in flight, the client
  connection is closed, as a broker that goes away would be; clients reconnect and retry. An upstream that
  worker 0 closes while idle (connections.max.idle.ms) is just replaced on the next request.

Lag and admin resets of groups owned here need log-end offsets and partition counts, which the embedded plane
knows synchronously. Here they come from a cache refreshed every second with a Metadata and a ListOffsets
request to worker 0 on a connection of its own; `catch_up()` (the admin API calls it before it reads them)
returns once a refresh that began after the call has finished, so a topic whose creation worker 0 acknowledged
is known here too (concurrent callers share one refresh).

Re-encoding rather than relaying the client's bytes costs one decode and encode per request; it keeps framing,
version checks and per-connection ordering in the one place they already are (coordinator.server.connection).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import uuid
from collections.abc import Callable
from typing import Any

from coordinator.brokers import Broker
from coordinator.config import Config
from coordinator.dataplane import SharedRefresh
from coordinator.dataplane.embedded import VERSIONS as DATA_PLANE_VERSIONS
from coordinator.security.apis import VERSIONS as SECURITY_API_VERSIONS
from coordinator.tasks import cancel_and_wait
from protocol.api import ApiTable, RequestContext, decode_response, encode_body, request_class
from protocol.api_keys import ApiKey
from protocol.build import build

from .internal import InternalChannel, origin_of
from .upstream import Upstream, UpstreamError

log = logging.getLogger(__name__)

LATEST_TIMESTAMP = -1
REFRESH_INTERVAL_S = 1.0
METADATA_ANSWERS_BYTES = 32 << 20  # kept Metadata answers (and the answers they were made from), at most
CACHE_CONNECTION = -1  # the connection key of the forwarder's own requests (cache refresh, admin)
SHARED_CONNECTION = -2  # the connection key of the upstream that clients without their own share (Metadata)
# What worker 0 serves besides the group APIs, as the embedded data plane and the security part declare it: the
# same ranges here, so ApiVersions is identical on every worker.
API_VERSIONS: dict[ApiKey, tuple[int, int]] = {
    **DATA_PLANE_VERSIONS,
    **SECURITY_API_VERSIONS,
}


class ForwardingDataPlane:
    """The data plane of a worker w > 0 (see the module doc)."""

    def __init__(
        self,
        config: Config,
        upstream: tuple[str, int],
        *,
        brokers: Callable[[], list[Broker]],
        abort_connection: Callable[[int], None],
        channel: InternalChannel | None = None,
    ) -> None:
        """`upstream`: worker 0's internal listener; `brokers()`: every worker as the current client sees it;
        `abort_connection(id)`: drop a client connection whose relay broke with requests in flight."""
        self._config = config
        self._channel = channel
        self._abort_connection = abort_connection
        self._address = upstream
        self._brokers = brokers
        self._upstreams: dict[int, Upstream] = {}
        self._metadata_answers: dict[tuple[Any, ...], Any] = {}  # see _metadata_answer
        self._metadata_bytes = 0
        self._partitions: dict[str, int] = {}
        # Topic ids and names too, for consumer groups (coordinator.consumer.manager.TopicImage).
        self._topic_ids: dict[str, uuid.UUID] = {}
        self._topic_names: dict[uuid.UUID, str] = {}
        self.topics_version = 0
        self._log_end: dict[tuple[str, int], int] = {}
        self._refresh_task: asyncio.Task[None] | None = None
        self._shared_refresh = SharedRefresh(self.refresh)

    # -- DataPlane -------------------------------------------------------------------------------------------

    def register(self, table: ApiTable) -> None:
        for api_key, (low, high) in API_VERSIONS.items():
            table.register(api_key, low, high, self._handler(api_key))

    async def start(self) -> None:
        self._refresh_task = asyncio.create_task(self._refresh_periodically())

    async def close(self) -> None:
        if self._refresh_task is not None:
            await cancel_and_wait([self._refresh_task], "closing the forwarder's refresh")
        for upstream in self._upstreams.values():
            upstream.close()
        self._upstreams.clear()

    def log_end_offset(self, topic: str, partition: int) -> int | None:
        return self._log_end.get((topic, partition))

    def partition_count(self, topic: str) -> int | None:
        return self._partitions.get(topic)

    def topic_id(self, topic: str) -> uuid.UUID | None:
        return self._topic_ids.get(topic)

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        return self._topic_names.get(topic_id)

    def topic_names(self) -> list[str]:
        return list(self._partitions)

    async def catch_up(self) -> None:
        await self._shared_refresh()

    def connection_closed(self, connection_id: int) -> None:
        upstream = self._upstreams.pop(connection_id, None)
        if upstream is not None:
            upstream.close()

    # -- relaying ---------------------------------------------------------------------------------------------

    def _upstream(self, connection_id: int) -> Upstream:
        upstream = self._upstreams.get(connection_id)
        if upstream is None:
            upstream = Upstream(
                self._address,
                self._config["socket.request.max.bytes"],
                functools.partial(self._broken, connection_id),
                channel=self._channel,
            )
            self._upstreams[connection_id] = upstream
        return upstream

    def _broken(self, connection_id: int, upstream: Upstream, lost: bool) -> None:
        """The upstream of a client connection ended. With nothing in flight (worker 0 closed it as idle, say)
        the next request opens a new one; with answers lost, the client connection is closed too (the client
        reconnects and retries, as after losing a broker)."""
        if self._upstreams.get(connection_id) is upstream:
            del self._upstreams[connection_id]
        if lost and connection_id >= 0:  # (the shared upstream's clients are dropped by their requests)
            log.info("closing connection %d: its relay to worker 0 failed", connection_id)
            self._abort_connection(connection_id)

    def _handler(self, api_key: int) -> Any:
        async def forward(ctx: RequestContext, request: Any) -> Any:
            no_answer = api_key == ApiKey.PRODUCE and getattr(request, "acks", 1) == 0
            upstream = self._upstreams.get(ctx.connection_id)
            # (the shared upstream: see the module doc)
            shared = upstream is None and api_key == ApiKey.METADATA and not _may_create_topics(request)
            if upstream is None:
                upstream = self._upstream(SHARED_CONNECTION if shared else ctx.connection_id)
            future = upstream.send(
                api_key,
                ctx.api_version,
                ctx.client_id,
                request,
                expect_answer=not no_answer,
                origin=origin_of(ctx),
            )
            if future is None:
                return None
            try:
                payload = await future
            except UpstreamError:
                if shared:  # as when a client's own upstream breaks with its requests in flight
                    self._abort_connection(ctx.connection_id)
                raise
            if api_key == ApiKey.METADATA:
                return self._metadata_answer(ctx.api_version, payload)
            return decode_response(api_key, ctx.api_version, payload)

        return forward

    def _metadata_answer(self, version: int, payload: bytes) -> Any:
        """Worker 0's Metadata answer with this worker's broker list. Clients ask for Metadata again and again
        and worker 0 mostly answers the very same bytes: an answer without errors is kept, encoded, by those
        bytes (decoding and encoding a topic of 500 partitions costs milliseconds)."""
        brokers = tuple(self._brokers())
        key = (version, brokers, payload)
        kept = self._metadata_answers.get(key)
        if kept is not None:
            return kept
        response = self._rewrite_metadata(decode_response(ApiKey.METADATA, version, payload))
        if getattr(response, "error_code", 0) or any(t.error_code for t in response.topics):
            return response
        kept = encode_body(ApiKey.METADATA, version, response)
        self._metadata_bytes += len(payload) + len(kept.body)
        if self._metadata_bytes > METADATA_ANSWERS_BYTES:
            self._metadata_answers.clear()
            self._metadata_bytes = len(payload) + len(kept.body)
        self._metadata_answers[key] = kept
        return kept

    def _rewrite_metadata(self, response: Any) -> Any:
        fields = {f.name: getattr(response, f.name) for f in dataclasses.fields(response)}
        fields["brokers"] = [
            {"node_id": b.node_id, "host": b.host, "port": b.port, "rack": None} for b in self._brokers()
        ]
        return build(type(response), fields)

    # -- the log-end cache ------------------------------------------------------------------------------------

    async def _refresh_periodically(self) -> None:
        while True:
            try:
                await self.catch_up()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - worker 0 restarting: keep the last known figures
                log.debug("refreshing log-end offsets from worker 0 failed: %r", exc)
            await asyncio.sleep(REFRESH_INTERVAL_S)

    async def _ask(self, api_key: int, version: int, body: dict[str, Any]) -> Any:
        upstream = self._upstream(CACHE_CONNECTION)
        future = upstream.send(api_key, version, "kgc-worker", build(request_class(api_key, version), body))
        assert future is not None
        return decode_response(api_key, version, await future)

    async def refresh(self) -> None:
        metadata = await self._ask(
            ApiKey.METADATA,
            12,
            {
                "topics": None,
                "allow_auto_topic_creation": False,
                "include_topic_authorized_operations": False,
            },
        )
        partitions = {t.name: len(t.partitions) for t in metadata.topics if t.error_code == 0 and t.name}
        topic_ids = {
            t.name: t.topic_id for t in metadata.topics if t.error_code == 0 and t.name and t.topic_id
        }
        if partitions != self._partitions or topic_ids != self._topic_ids:
            self.topics_version += 1
            self._topic_ids = topic_ids
            self._topic_names = {topic_id: name for name, topic_id in topic_ids.items()}
        self._partitions = partitions
        if not partitions:
            self._log_end = {}
            return
        offsets = await self._ask(
            ApiKey.LIST_OFFSETS,
            7,
            {
                "replica_id": -1,
                "isolation_level": 0,
                "topics": [
                    {
                        "name": name,
                        "partitions": [
                            {"partition_index": p, "current_leader_epoch": -1, "timestamp": LATEST_TIMESTAMP}
                            for p in range(count)
                        ],
                    }
                    for name, count in partitions.items()
                ],
            },
        )
        self._log_end = {
            (t.name, p.partition_index): int(p.offset)
            for t in offsets.topics
            for p in t.partitions
            if p.error_code == 0
        }


def _may_create_topics(request: Any) -> bool:
    """Whether a Metadata request may create a topic: it names one, and allows it as the embedded data plane reads
    it (before v4 the field is absent, and naming a topic is enough)."""
    topics = request.topics
    if not topics or all(getattr(t, "name", None) is None for t in topics):
        return False
    return bool(getattr(request, "allow_auto_topic_creation", True))
