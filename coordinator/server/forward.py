"""Relays between workers: the data plane of a worker other than worker 0 (every data-plane request relayed to
worker 0), and PeerRelay (a group request relayed to the worker that owns the group).

With `serve --workers N` (coordinator.server.workers) the topics live in worker 0's embedded data plane only;
Metadata names worker 0 (node.id + 0) as every partition's leader, so clients produce and fetch there directly.
Workers w > 0 still get Metadata (clients ask any broker they know), CreateTopics, DeleteTopics, ListOffsets,
InitProducerId, and whatever a client sends before it has read Metadata. They answer them by relaying:

* The forwarder registers the same APIs and version ranges as the embedded data plane and the security part
  (read from throwaway instances' registrations, so they cannot drift), so ApiVersions is identical on every
  worker. Security state (ACLs, SCRAM credentials, in DATA_DIR/security) is worker 0's alone: its APIs are
  relayed too. (SASL listeners and the authorizer are refused with several workers, see workers.py.)
* Each client connection gets its own upstream connection to worker 0, opened on its first forwarded request
  and closed with it. A handler encodes the request (the decoded kio entity, re-encoded for the same version,
  with the client's client id and an upstream correlation id) and writes it synchronously, before its first
  await: connection handlers start in request order, so requests reach worker 0 in the order the client sent
  them, and a long-polling Fetch of one client never holds back another client's requests. The answer is
  decoded and returned to the client connection's ordered writer, which encodes it with the client's own
  correlation id. Produce with acks=0 gets no answer upstream, and none here.
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
import contextlib
import dataclasses
import functools
import itertools
import logging
import struct
from collections.abc import Callable
from typing import Any

from coordinator.config import Config
from coordinator.dataplane import Broker
from protocol.api import (
    ApiTable,
    RequestContext,
    decode_response,
    encode_body,
    encode_request,
    request_class,
)
from protocol.api_keys import ApiKey
from protocol.build import build
from protocol.framing import frame_length

log = logging.getLogger(__name__)

LATEST_TIMESTAMP = -1
REFRESH_INTERVAL_S = 1.0
_CID = struct.Struct(">i")
METADATA_ANSWERS_BYTES = 32 << 20  # kept Metadata answers (and the answers they were made from), at most
CACHE_CONNECTION = -1  # the connection key of the forwarder's own requests (cache refresh, admin)


class UpstreamError(ConnectionError):
    pass


class Upstream:
    """One connection to another worker: requests written in call order, answers matched by correlation id."""

    def __init__(self, address: tuple[str, int], max_bytes: int, on_broken: Callable[[Upstream, bool], None],
                 name: str = "worker 0") -> None:
        """`on_broken(self, lost)` when the connection ends by itself; `lost`: requests had no answer yet."""
        self._address = address
        self._name = name
        self._max_bytes = max_bytes
        self._on_broken = on_broken
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[bytes]] = {}
        self._queued: list[bytes] = []  # written once connected
        self._writer: asyncio.StreamWriter | None = None
        self._broken: BaseException | None = None
        self._task = asyncio.create_task(self._run())

    def send(self, api_key: int, version: int, client_id: str | None, body: Any,
             expect_answer: bool = True) -> asyncio.Future[bytes] | None:
        """Write one request now (or queue it until connected); the future gets the answer's bytes."""
        if self._broken is not None:
            raise UpstreamError(f"the connection to {self._name} is closed: {self._broken}")
        cid = next(self._ids) & 0x7FFFFFFF
        data = encode_request(body, cid, client_id)
        future: asyncio.Future[bytes] | None = None
        if expect_answer:
            future = asyncio.get_running_loop().create_future()
            self._pending[cid] = future
        if self._writer is None:
            self._queued.append(data)
        else:
            self._writer.write(data)
        return future

    async def _run(self) -> None:
        try:
            reader, writer = await asyncio.open_connection(*self._address, limit=2**20)
            self._writer = writer
            for data in self._queued:
                writer.write(data)
            self._queued.clear()
            while True:
                size = frame_length(await reader.readexactly(4), self._max_bytes)
                frame = await reader.readexactly(size)
                (cid,) = _CID.unpack_from(frame, 0)
                future = self._pending.pop(cid, None)
                if future is not None and not future.done():
                    future.set_result(frame[4:])
        except asyncio.CancelledError:
            self._fail(UpstreamError("closed"))
            raise
        except Exception as exc:  # noqa: BLE001 - any failure ends this connection the same way
            lost = bool(self._pending or self._queued)
            self._fail(exc)
            self._on_broken(self, lost)
        finally:
            if self._writer is not None:
                self._writer.close()

    def _fail(self, exc: BaseException) -> None:
        self._broken = exc
        pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(UpstreamError(f"the connection to {self._name} failed: {exc!r}"))

    def close(self) -> None:
        self._task.cancel()


class ForwardingDataPlane:
    """The data plane of a worker w > 0 (see the module doc)."""

    def __init__(self, config: Config, server: Any, upstream: tuple[str, int], *,
                 brokers: Callable[[], list[Broker]]) -> None:
        self._config = config
        self._server = server
        self._address = upstream
        self._brokers = brokers
        self._upstreams: dict[int, Upstream] = {}
        self._metadata_answers: dict[tuple[Any, ...], Any] = {}  # see _metadata_answer
        self._metadata_bytes = 0
        self._partitions: dict[str, int] = {}
        self._log_end: dict[tuple[str, int], int] = {}
        self._refresh_task: asyncio.Task[None] | None = None
        self._refresh_lock = asyncio.Lock()
        self._refreshes_started = 0
        self._refreshed = 0  # the ordinal of the last refresh that completed

    # -- DataPlane -------------------------------------------------------------------------------------------

    def register(self, table: ApiTable) -> None:
        from coordinator.dataplane.embedded import EmbeddedDataPlane
        from coordinator.security import Security

        ranges = ApiTable()
        EmbeddedDataPlane(self._config, lambda: Broker(0, "", 0)).register(ranges)
        Security(self._config, None).register(ranges)  # the SASL, ACL and SCRAM APIs: worker 0 keeps that state
        for spec in ranges.specs():
            if spec.api_key != ApiKey.API_VERSIONS:
                table.register(spec.api_key, spec.min_version, spec.max_version, self._handler(spec.api_key))

    async def start(self) -> None:
        self._refresh_task = asyncio.create_task(self._refresh_periodically())

    async def close(self) -> None:
        if self._refresh_task is not None:
            self._refresh_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._refresh_task
        for upstream in self._upstreams.values():
            upstream.close()
        self._upstreams.clear()

    def log_end_offset(self, topic: str, partition: int) -> int | None:
        return self._log_end.get((topic, partition))

    def partition_count(self, topic: str) -> int | None:
        return self._partitions.get(topic)

    async def catch_up(self) -> None:
        asked = self._refreshes_started
        async with self._refresh_lock:
            if self._refreshed > asked:
                return  # a refresh that began after the call has completed meanwhile
            self._refreshes_started += 1
            ordinal = self._refreshes_started
            await self.refresh()
            self._refreshed = ordinal

    def connection_closed(self, connection_id: int) -> None:
        upstream = self._upstreams.pop(connection_id, None)
        if upstream is not None:
            upstream.close()

    # -- relaying ---------------------------------------------------------------------------------------------

    def _upstream(self, connection_id: int) -> Upstream:
        upstream = self._upstreams.get(connection_id)
        if upstream is None:
            upstream = Upstream(self._address, self._config["socket.request.max.bytes"],
                                functools.partial(self._broken, connection_id))
            self._upstreams[connection_id] = upstream
        return upstream

    def _broken(self, connection_id: int, upstream: Upstream, lost: bool) -> None:
        """The upstream of a client connection ended. With nothing in flight (worker 0 closed it as idle, say)
        the next request opens a new one; with answers lost, the client connection is closed too (the client
        reconnects and retries, as after losing a broker)."""
        if self._upstreams.get(connection_id) is upstream:
            del self._upstreams[connection_id]
        conn = self._server.connections.get(connection_id) if lost else None
        if conn is not None:
            log.info("closing connection %d: its relay to worker 0 failed", connection_id)
            asyncio.create_task(conn.abort())

    def _handler(self, api_key: int) -> Any:
        async def forward(ctx: RequestContext, request: Any) -> Any:
            no_answer = api_key == ApiKey.PRODUCE and getattr(request, "acks", 1) == 0
            future = self._upstream(ctx.connection_id).send(api_key, ctx.api_version, ctx.client_id, request,
                                                            expect_answer=not no_answer)
            if future is None:
                return None
            payload = await future
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
        fields["brokers"] = [{"node_id": b.node_id, "host": b.host, "port": b.port, "rack": None}
                             for b in self._brokers()]
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
        metadata = await self._ask(ApiKey.METADATA, 12, {"topics": None, "allow_auto_topic_creation": False,
                                                  "include_topic_authorized_operations": False})
        partitions = {t.name: len(t.partitions) for t in metadata.topics if t.error_code == 0 and t.name}
        self._partitions = partitions
        if not partitions:
            self._log_end = {}
            return
        offsets = await self._ask(ApiKey.LIST_OFFSETS, 7, {
            "replica_id": -1, "isolation_level": 0,
            "topics": [{"name": name, "partitions": [
                {"partition_index": p, "current_leader_epoch": -1, "timestamp": LATEST_TIMESTAMP}
                for p in range(count)]} for name, count in partitions.items()],
        })
        self._log_end = {(t.name, p.partition_index): int(p.offset) for t in offsets.topics
                         for p in t.partitions if p.error_code == 0}


class PeerRelay:
    """Group requests for a group another worker owns, relayed to that worker (any worker answers any group).

    FindCoordinator sends stock clients straight to a group's owner, so they never come here. A client that skips
    it (a raw client written against one broker, a tool that sends everything to its bootstrap address) still gets
    the owner's answer instead of NOT_COORDINATOR. The relay works like the data-plane forwarder above: one
    upstream connection per client connection and owner, written before the first await (so a client's requests
    reach the owner in the order it sent them), closed with the client connection; a broken upstream with
    requests in flight closes the client connection. The owner sees the relay's address as the member's client
    host (DescribeGroups); the client id is the client's own.
    """

    def __init__(self, config: Config, server: Any, address_of: Callable[[int], tuple[str, int]]) -> None:
        self._max_bytes = config["socket.request.max.bytes"]
        self._server = server
        self._address_of = address_of
        self._upstreams: dict[tuple[int, int], Upstream] = {}

    async def call(self, worker: int, ctx: RequestContext, request: Any) -> Any:
        key = (ctx.connection_id, worker)
        upstream = self._upstreams.get(key)
        if upstream is None:
            upstream = Upstream(self._address_of(worker), self._max_bytes, functools.partial(self._broken, key),
                                name=f"worker {worker}")
            self._upstreams[key] = upstream
        future = upstream.send(ctx.api_key, ctx.api_version, ctx.client_id, request)
        assert future is not None
        return decode_response(ctx.api_key, ctx.api_version, await future)

    def _broken(self, key: tuple[int, int], upstream: Upstream, lost: bool) -> None:
        if self._upstreams.get(key) is upstream:
            del self._upstreams[key]
        conn = self._server.connections.get(key[0]) if lost else None
        if conn is not None:
            log.info("closing connection %d: its relay to worker %d failed", key[0], key[1])
            asyncio.create_task(conn.abort())

    def connection_closed(self, connection_id: int) -> None:
        for key in [k for k in self._upstreams if k[0] == connection_id]:
            self._upstreams.pop(key).close()

    def close(self) -> None:
        for upstream in self._upstreams.values():
            upstream.close()
        self._upstreams.clear()
