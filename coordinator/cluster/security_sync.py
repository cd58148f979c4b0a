"""The security state (ACLs, SCRAM credentials) of `serve --workers N`: one durable copy, in force on every worker.

Worker 0 keeps the durable state (coordinator.security.store, DATA_DIR/security) and answers the ACL and SCRAM
APIs; the other workers forward those APIs to it (coordinator.cluster.forwarding) and keep a replica in memory,
which their SASL listeners and authorizer use. A write is answered only once it is in force everywhere: worker 0
appends it (fsynced), applies it, then pushes it to every other worker and waits for each to apply it.

The replicas follow worker 0 by (epoch, sequence): the epoch is drawn at worker 0's start, the sequence counts its
writes. Worker 0 pushes each write to a worker as one `sync` message over the internal channel
(coordinator.cluster.internal), one at a time per worker; a replica applies the write that follows the last one
it has, ignores one it has already applied, and answers `need_full` to anything else (it has just started, worker
0 has restarted, a push was lost), on which worker 0 sends it the whole state instead. A worker starting up asks
worker 0 for the whole state (`hello`) before it opens its listeners, so it never serves a client without the
ACLs and credentials; worker 0 pushes its whole state to every worker when it starts, so a write it persisted but
could not push before a crash is in force again.

A worker that is restarting holds a push until it listens again (its supervisor keeps its socket); a push not
applied within SYNC_TIMEOUT_S fails the write (the client gets an error and may retry; the record is durable on
worker 0 and every worker has it after its next push or start).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import secrets
from typing import Any

from coordinator.config import Config
from coordinator.security.store import SecurityStore

from .internal import HELLO, SYNC, InternalChannel
from .topology import Topology
from .upstream import Upstream, UpstreamError

log = logging.getLogger(__name__)

SYNC_TIMEOUT_S = 15.0  # a write waits this long for every worker to apply it
HELLO_TIMEOUT_S = 300.0  # a starting worker waits this long for worker 0 (which may be loading a large log)
RETRY_S = 0.2

Records = list[tuple[bytes, bytes | None]]


def records_json(records: Records) -> list[list[str | None]]:
    """Records as JSON values (base64 keys and values, None for a tombstone)."""
    return [
        [base64.b64encode(k).decode(), None if v is None else base64.b64encode(v).decode()]
        for k, v in records
    ]


def records_from_json(items: list[list[str | None]]) -> Records:
    return [(base64.b64decode(str(k)), None if v is None else base64.b64decode(v)) for k, v in items]


def encode_records(records: Records) -> bytes:
    return json.dumps(records_json(records)).encode()


def decode_records(data: bytes) -> Records:
    return records_from_json(json.loads(data or b"[]"))


class SecuritySync:
    """Worker 0's publisher or another worker's replica (see the module doc)."""

    def __init__(
        self, config: Config, topology: Topology, channel: InternalChannel, store: SecurityStore
    ) -> None:
        self.topology = topology
        self.channel = channel
        self.store = store
        self.max_bytes = int(config["socket.request.max.bytes"])
        self.primary = topology.index == 0
        self.epoch: str | None = secrets.token_hex(8) if self.primary else None
        self.seq = 0
        self._upstreams: dict[int, Upstream] = {}
        self._locks: dict[int, asyncio.Lock] = {}
        self._initial: asyncio.Task[None] | None = None
        if self.primary:
            channel.kinds[HELLO] = self._hello
        else:
            channel.kinds[SYNC] = self._sync

    # -- worker 0 ------------------------------------------------------------------------------------

    def start_publishing(self) -> None:
        """Worker 0, once its own writes at start (bootstrap users) are done: from now on every write is pushed,
        and the whole state is pushed to every other worker now, in the background (they take it once they
        listen, which they do once worker 0 has answered their `hello`)."""
        if self.primary:
            self.store.on_written = self.publish
            self._initial = asyncio.create_task(self._push_all_full())

    async def _push_all_full(self) -> None:
        async def one(worker: int) -> None:
            async with self._lock(worker):
                await self._send_full(worker)

        results = await asyncio.gather(*(one(w) for w in self._peers()), return_exceptions=True)
        for worker, result in zip(self._peers(), results, strict=True):
            if isinstance(result, BaseException):
                log.warning("pushing the security state to worker %d at start failed: %r", worker, result)

    async def publish(self, records: Records) -> None:
        """A write worker 0 has made durable and applied: in force on every worker when this returns."""
        self.seq += 1
        seq, data = self.seq, encode_records(records)
        try:
            async with asyncio.timeout(SYNC_TIMEOUT_S):
                await asyncio.gather(*(self._push(w, seq, data) for w in self._peers()))
        except TimeoutError:
            raise TimeoutError(
                f"the security change was not applied by every worker within {SYNC_TIMEOUT_S:.0f} s"
            ) from None

    async def _push(self, worker: int, seq: int, data: bytes) -> None:
        async with self._lock(worker):
            answer = await self._send(worker, data, full=False, seq=seq)
            if answer == b"need_full":
                await self._send_full(worker)
            elif answer != b"ok":
                raise RuntimeError(f"worker {worker} did not apply the security change: {answer!r}")

    async def _send_full(self, worker: int) -> None:
        answer = await self._send(worker, encode_records(self.store.snapshot()), full=True, seq=self.seq)
        if answer != b"ok":
            raise RuntimeError(f"worker {worker} did not take the security state: {answer!r}")

    async def _send(self, worker: int, data: bytes, *, full: bool, seq: int) -> bytes:
        """One sync message, retried on a new connection until answered (the caller bounds the time)."""
        while True:
            upstream = self._upstreams.get(worker)
            if upstream is None:
                upstream = self._upstreams[worker] = Upstream(
                    self.topology.address(worker),
                    self.max_bytes,
                    self._broken(worker),
                    name=f"worker {worker}",
                    channel=self.channel,
                )
            try:
                return await upstream.send_kind(SYNC, data, epoch=self.epoch, seq=seq, full=full)
            except UpstreamError as exc:
                log.debug("security sync to worker %d: %r; retrying", worker, exc)
                if self._upstreams.get(worker) is upstream:
                    del self._upstreams[worker]
                    upstream.close()
                await asyncio.sleep(RETRY_S)

    def _broken(self, worker: int) -> Any:
        def broken(upstream: Upstream, _lost: bool) -> None:
            if self._upstreams.get(worker) is upstream:
                del self._upstreams[worker]

        return broken

    def _lock(self, worker: int) -> asyncio.Lock:
        return self._locks.setdefault(worker, asyncio.Lock())

    def _peers(self) -> list[int]:
        return [w for w in range(self.topology.count) if w != self.topology.index]

    async def _hello(self, meta: dict[str, Any], data: bytes) -> bytes:
        """A worker starting up: the whole state, with its epoch and sequence."""
        return json.dumps(
            {
                "epoch": self.epoch,
                "seq": self.seq,
                "records": records_json(self.store.snapshot()),
            }
        ).encode()

    async def close(self) -> None:
        if self._initial is not None:
            self._initial.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._initial
        for upstream in self._upstreams.values():
            upstream.close()
        self._upstreams.clear()

    # -- the other workers ---------------------------------------------------------------------------

    async def initial_sync(self) -> None:
        """Another worker, before it serves: take worker 0's whole state (waiting for worker 0 to be up)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + HELLO_TIMEOUT_S
        while True:
            upstream = Upstream(
                self.topology.address(0), self.max_bytes, lambda _u, _lost: None, channel=self.channel
            )
            try:
                async with asyncio.timeout_at(deadline):
                    data = await upstream.send_kind(HELLO, b"")
                if data.startswith(b"error:"):
                    raise UpstreamError(data.decode(errors="replace"))
                answer = json.loads(data)
                self._take(answer["epoch"], int(answer["seq"]), records_from_json(answer["records"]))
                log.info(
                    "security state from worker 0: %d ACLs, %d SCRAM credentials",
                    len(self.store.authorizer.acls()),
                    len(self.store.credentials),
                )
                return
            except UpstreamError as exc:
                if loop.time() >= deadline:
                    raise TimeoutError("worker 0 did not send the security state") from exc
                await asyncio.sleep(RETRY_S)
            finally:
                upstream.close()

    def _take(self, epoch: str, seq: int, records: Records) -> bool:
        """The whole state, unless it is older than what this worker has."""
        if self.epoch == epoch and seq < self.seq:
            return False
        self.store.replace(records)
        self.epoch, self.seq = epoch, seq
        return True

    async def _sync(self, meta: dict[str, Any], data: bytes) -> bytes:
        epoch, seq = meta.get("epoch"), int(meta.get("seq", 0))
        if meta.get("full"):
            self._take(str(epoch), seq, decode_records(data))
            return b"ok"
        if epoch != self.epoch or seq > self.seq + 1:
            return b"need_full"
        if seq == self.seq + 1:
            for key, value in decode_records(data):
                self.store.replay(key, value)
            self.seq = seq
        return b"ok"
