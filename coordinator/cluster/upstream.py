"""One ordered Kafka connection to another coordinator process: requests written in call order, answers matched by
correlation id (used by the relay and the forwarder of coordinator.cluster).

A request is encoded and written synchronously, before the caller's first await: connection handlers start in
request order, so requests reach the peer in the order the client sent them. When the connection breaks, every
request without an answer fails with UpstreamError and `on_broken(upstream, lost)` says whether any was lost.

With a channel (coordinator.cluster.internal; the workers of a supervisor always have one) the peer's address is
its internal listener and every request goes inside an Envelope naming who it is from (`origin`): the client whose
request is relayed, or the worker itself.

Without a channel it is a plain Kafka client connection (the front's connections to the brokers of an upstream
cluster, coordinator.front): `opener` makes the connection (TLS, SASL), and `send_frame` passes a client's request
frame on as it is, with only its correlation id replaced.
"""

from __future__ import annotations

import asyncio
import itertools
import struct
from collections.abc import Awaitable, Callable
from typing import Any

from protocol.api import encode_request
from protocol.envelope import decode_envelope_response
from protocol.framing import frame_length

from .internal import REQUEST, WORKER_ORIGIN, InternalChannel, Origin

_CID = struct.Struct(">i")

Opener = Callable[[], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]


class UpstreamError(ConnectionError):
    pass


class Upstream:
    """One connection to another worker: requests written in call order, answers matched by correlation id."""

    def __init__(
        self,
        address: tuple[str, int],
        max_bytes: int,
        on_broken: Callable[[Upstream, bool], None],
        name: str = "worker 0",
        channel: InternalChannel | None = None,
        opener: Opener | None = None,
    ) -> None:
        """`on_broken(self, lost)` when the connection ends by itself; `lost`: requests had no answer yet.
        `opener`: makes the connection (default: plain TCP to `address`)."""
        self._channel = channel
        self._opener = opener
        self._loop = asyncio.get_running_loop()
        self._sent_at: dict[int, float] = {}  # loop time each pending request was written (see `overdue`)
        self._address = address
        self._name = name
        self._max_bytes = max_bytes
        self._on_broken = on_broken
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[bytes]] = {}
        self._raw: set[int] = set()  # correlation ids of send_kind messages
        self._queued: list[bytes | bytearray] = []  # written once connected
        self._writer: asyncio.StreamWriter | None = None
        self._broken: BaseException | None = None
        self._task = asyncio.create_task(self._run())

    def send(
        self,
        api_key: int,
        version: int,
        client_id: str | None,
        body: Any,
        expect_answer: bool = True,
        origin: Origin | None = None,
    ) -> asyncio.Future[bytes] | None:
        """Write one request now (or queue it until connected); the future gets the answer's bytes from after
        its correlation id. `origin`: whom it is from (default: this worker)."""
        if self._broken is not None:
            raise UpstreamError(f"the connection to {self._name} is closed: {self._broken}")
        cid = next(self._ids) & 0x7FFFFFFF
        data = encode_request(body, cid, client_id)
        if self._channel is not None:
            data = self._channel.envelope(memoryview(data)[4:].tobytes(), cid, origin or WORKER_ORIGIN)
        return self._write(cid, data, expect_answer)

    def send_kind(self, kind: str, data: bytes, **extra: Any) -> asyncio.Future[bytes]:
        """One of the channel's own messages (not a Kafka request); the future gets the answer's data."""
        if self._broken is not None:
            raise UpstreamError(f"the connection to {self._name} is closed: {self._broken}")
        assert self._channel is not None and kind != REQUEST
        cid = next(self._ids) & 0x7FFFFFFF
        frame = self._channel.envelope(data, cid, WORKER_ORIGIN, kind, **extra)
        future = self._write(cid, frame, True)
        assert future is not None
        self._raw.add(cid)
        return future

    def send_frame(
        self, frame: bytes | memoryview, expect_answer: bool = True
    ) -> asyncio.Future[bytes] | None:
        """Write a client's request frame (without its length prefix) as it is, with a correlation id of this
        connection; the future gets the answer's bytes from after its correlation id (header tags included)."""
        if self._broken is not None:
            raise UpstreamError(f"the connection to {self._name} is closed: {self._broken}")
        assert self._channel is None
        cid = next(self._ids) & 0x7FFFFFFF
        data = bytearray(4 + len(frame))
        data[4:] = frame
        _CID.pack_into(data, 0, len(frame))  # the length prefix
        _CID.pack_into(data, 8, cid)  # after the api key and version
        return self._write(cid, data, expect_answer)

    @property
    def pending(self) -> int:
        return len(self._pending)

    @property
    def idle(self) -> bool:
        """Nothing waits for an answer or to be written: closing it now loses nothing."""
        return not self._pending and not self._queued

    def overdue(self, now: float, timeout_s: float) -> bool:
        """A request has waited more than `timeout_s` (loop time `now`) for its answer."""
        return any(now - sent > timeout_s for sent in self._sent_at.values())

    def fail(self, reason: str) -> None:
        """End the connection now (a request timed out): every pending request fails, `on_broken` is told."""
        if self._broken is not None:
            return
        lost = bool(self._pending or self._queued)
        self._fail(UpstreamError(reason))
        self._task.cancel()
        self._on_broken(self, lost)

    def _write(self, cid: int, data: bytes | bytearray, expect_answer: bool) -> asyncio.Future[bytes] | None:
        future: asyncio.Future[bytes] | None = None
        if expect_answer:
            future = self._loop.create_future()
            self._pending[cid] = future
            self._sent_at[cid] = self._loop.time()
        if self._writer is None:
            self._queued.append(data)
        else:
            self._writer.write(data)
        return future

    async def _run(self) -> None:
        try:
            if self._opener is not None:
                reader, writer = await self._opener()
            else:
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
                self._sent_at.pop(cid, None)
                raw = cid in self._raw
                self._raw.discard(cid)
                if future is None or future.done():
                    continue
                if self._channel is None:
                    future.set_result(frame[4:])
                    continue
                error, inner = decode_envelope_response(memoryview(frame)[4:])
                if error or inner is None:
                    future.set_exception(UpstreamError(f"{self._name} refused an Envelope: error {error}"))
                elif raw:
                    future.set_result(bytes(inner))
                else:
                    future.set_result(bytes(inner)[4:])
        except asyncio.CancelledError:
            if self._broken is None:
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
        self._sent_at.clear()
        pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                error = UpstreamError(f"the connection to {self._name} failed: {exc!r}")
                error.__cause__ = exc  # e.g. the front's refused credentials (coordinator.front.connect)
                future.set_exception(error)

    def close(self) -> None:
        self._task.cancel()
