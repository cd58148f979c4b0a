"""One client connection: framing, ordered pipelining and backpressure.

The reader decodes frames and starts each request's handler at once, in arrival order, so the synchronous part of
each handler runs in request order; the writer awaits their answers in the same order and writes each answer as
soon as it and everything before it is ready. A handler gives its answer Ready, or a future that gets it (the hot
paths: a heartbeat, a commit waiting for its write), or a coroutine, which runs eagerly (`start`): on the reader's
own stack until its first real suspension, and only then as a task. Most answers (a heartbeat, a fetch of committed
offsets) never suspend, so they cost no task and no event-loop round. A parked answer (JoinGroup waiting for the
join barrier) therefore holds back the answers behind it on that connection only, as it does in Kafka. While the
writer has no request of its own waiting, the reader writes a ready answer itself, in one send per burst of
buffered requests: a pipelined heartbeat then costs no hand-off and no wake-up of the writer.

Backpressure both ways: at most `queued.max.requests.per.connection` requests are in flight (the reader stops
reading when the queue is full, so TCP pushes back on the client), and the writer waits for the socket buffer to
drain before taking the next answer.

Anything wrong with a peer's bytes (a negative or oversized frame, a header that does not decode, an unknown API key)
closes that connection only.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import struct
import time
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import Any, Protocol

from coordinator.brokers import local_address
from coordinator.config import Config
from protocol.api import ApiTable, DecodedRequest, RequestContext
from protocol.errors import ErrorCode, ProtocolError
from protocol.framing import frame_length

from .metrics import ServerMetrics
from .runtime import Ready

log = logging.getLogger(__name__)

_LEN = struct.Struct(">i")
_CLOSE = object()
CLOSE = _CLOSE  # a handler's answer that closes the connection without answering (a relay that broke)
WRITE_BATCH = 64  # answers written in one send at most


class RequestMemory:
    """`queued.max.request.bytes`: bytes of requests read but not yet handled, across all connections. A reader
    waits for room before it reads a request's body, so when the bound is reached no connection reads more until
    handlers finish (Kafka's memory pool in front of its socket server). -1: no bound. A request larger than the
    bound is still read when nothing else is held, so the bound cannot deadlock a connection."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.bounded = limit >= 0  # unbounded (the default): nothing to count, no callback per request
        self.used = 0
        self.waiting = 0
        self._freed = asyncio.Event()

    async def acquire(self, size: int) -> None:
        if self.bounded:
            while self.used and self.used + size > self.limit:
                self._freed.clear()
                self.waiting += 1
                try:
                    await self._freed.wait()
                finally:
                    self.waiting -= 1
        self.used += size

    def would_wait(self, size: int) -> bool:
        return self.bounded and self.used > 0 and self.used + size > self.limit

    def release(self, size: int) -> None:
        self.used -= size
        self._freed.set()

    def releaser(self, size: int) -> Callable[[Any], None]:
        """A done-callback for the request's handler task: its bytes are free once it has run."""
        return lambda _task: self.release(size)


class _Resume:
    """The rest of a coroutine that `start` ran up to its first suspension, as an awaitable for a task: it hands
    the task what the coroutine yielded (the future it waits for) and passes every resumption and exception on."""

    __slots__ = ("_coro", "_yielded")

    def __init__(self, coro: Coroutine[Any, Any, Any], yielded: Any) -> None:
        self._coro = coro
        self._yielded = yielded

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, value = self._coro, self._yielded
        self._yielded = None
        while True:
            try:
                sent = yield value
            except BaseException as exc:  # noqa: BLE001 - thrown in by the task (cancellation): pass it on
                try:
                    value = coro.throw(exc)
                except StopIteration as stop:
                    return stop.value
            else:
                try:
                    value = coro.send(sent)
                except StopIteration as stop:
                    return stop.value


async def _finish(resume: _Resume) -> Any:
    return await resume


def start(coro: Coroutine[Any, Any, Any]) -> Ready | asyncio.Task[Any]:
    """Run `coro` now, on the caller's stack, up to its first suspension (Python 3.12's eager tasks, for 3.11):
    Ready with its result if it finished without suspending, else a task that carries on from there. An
    exception it raises before suspending propagates to the caller."""
    try:
        yielded = coro.send(None)
    except StopIteration as stop:
        return Ready(stop.value)
    return asyncio.get_running_loop().create_task(_finish(_Resume(coro, yielded)))


class _Handoff:
    """The reader's hand-off of requests to the writer: a FIFO of at most `limit` items, for one putter and one
    getter at a time (asyncio.Queue without its task accounting, its waiter lists, and the getpid() system call
    its every wait costs in Python 3.11 to find the running loop)."""

    __slots__ = ("items", "_limit", "_loop", "_getter", "_putter")

    def __init__(self, limit: int, loop: asyncio.AbstractEventLoop) -> None:
        self.items: collections.deque[Any] = collections.deque()
        self._limit = limit
        self._loop = loop
        self._getter: asyncio.Future[None] | None = None
        self._putter: asyncio.Future[None] | None = None

    def full(self) -> bool:
        return len(self.items) >= self._limit

    def put_nowait(self, item: Any) -> None:
        self.items.append(item)
        getter = self._getter
        if getter is not None:
            self._getter = None
            if not getter.done():
                getter.set_result(None)

    async def put(self, item: Any) -> None:
        while len(self.items) >= self._limit:
            self._putter = self._loop.create_future()
            await self._putter
        self.put_nowait(item)

    def get_nowait(self) -> Any:
        item = self.items.popleft()
        putter = self._putter
        if putter is not None:
            self._putter = None
            if not putter.done():
                putter.set_result(None)
        return item

    async def get(self) -> Any:
        while not self.items:
            self._getter = self._loop.create_future()
            await self._getter
        return self.get_nowait()


class ConnectionContext(Protocol):
    """What a connection needs of its server (coordinator.server.listener.Server)."""

    config: Config
    table: ApiTable
    metrics: ServerMetrics
    request_memory: RequestMemory


class Connection:
    def __init__(
        self,
        server: ConnectionContext,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        connection_id: int,
    ) -> None:
        self.server = server
        self.reader = reader
        self.writer = writer
        self.connection_id = connection_id
        peer = writer.get_extra_info("peername") or ("", 0)
        sock = writer.get_extra_info("sockname") or ("127.0.0.1", 0)
        self.peer_host: str = peer[0]
        self.local = (sock[0], sock[1])
        self._loop = asyncio.get_running_loop()
        self._queue = _Handoff(server.config["queued.max.requests.per.connection"], self._loop)
        self._reader_task: asyncio.Task[None] | None = None
        self.done = asyncio.Event()
        self.session: Any = None  # coordinator.security's SecuritySession on a server with security
        # On a worker's internal listener: the channel that unwraps the Envelopes other workers send (every
        # request is one) and wraps the answers (coordinator.cluster.internal).
        self.internal: Any = None
        # connections.max.idle.ms: loop time of the last complete request or answer, and requests not yet answered
        self.last_active = self._loop.time()
        self._answering: Any = None  # (decoded request, its handler) whose answer the writer waits for
        # Requests handed to the writer whose answers are not yet written: while there is none, the reader writes
        # a ready answer itself (see _read_loop), as the writer would have right then.
        self._handed = 0

    async def run(self) -> None:
        local_address.set(self.local)
        writer_task = asyncio.create_task(self._write_loop())
        self._reader_task = asyncio.create_task(self._read_loop())
        try:
            await self._reader_task
        except asyncio.CancelledError:
            pass  # stopped reading (shutdown); answer what is in flight below
        await self._queue.put(_CLOSE)
        try:
            await writer_task
        finally:
            self.writer.close()
            try:
                await self.writer.wait_closed()
            except (ConnectionError, OSError):
                pass
            self.done.set()

    def _next_is_ready(self) -> bool:
        pending = self._queue.items  # peeked, not taken
        if not pending:
            return False
        head = pending[0]
        return head is _CLOSE or head[1].done()

    async def _write(self, out: list[bytes], unwritten: list[tuple[Any, Any, float]]) -> bool:
        """Write the encoded answers; False if the connection is gone."""
        try:
            self.writer.write(out[0] if len(out) == 1 else b"".join(out))
            out.clear()
            await self.writer.drain()
        except (ConnectionError, OSError, RuntimeError):  # uvloop: RuntimeError on a closed transport
            out.clear()
            return False
        now = time.perf_counter()
        observe = self.server.metrics.observe_request
        for ctx, response, started in unwritten:
            observe(ctx.api_key, ctx.api_version, response, now - started)
        unwritten.clear()
        return True

    @property
    def awaiting_answer(self) -> bool:
        """The writer waits for a handler (a parked JoinGroup, a long poll)."""
        return self._answering is not None

    def in_flight(self) -> list[str]:
        """The requests not yet answered, as `api/version` (what a late shutdown waits for, for its log)."""
        items = [self._answering] if self._answering is not None else []
        items += [item[:2] for item in list(self._queue.items) if item is not _CLOSE]
        return [f"{d.context.api_key}/v{d.context.api_version}" for d, _ in items]

    def stop_reading(self) -> None:
        if self._reader_task is not None and not self._reader_task.done():
            self._reader_task.cancel()

    def idle_for(self, now: float) -> float:
        """Seconds without a complete request or an answer at loop time `now`; 0 while the writer waits for a
        handler (a parked JoinGroup or a long poll is not idleness). Bytes of an unfinished request do not count,
        so a peer trickling a request a byte at a time is idle; nor does an answer stuck behind a peer that never
        reads (the writer waits for the socket, not for a handler), so that peer is closed too, as in Kafka."""
        return 0.0 if self.awaiting_answer else now - self.last_active

    def close_idle(self) -> None:
        self.stop_reading()
        self.writer.transport.abort()

    async def abort(self) -> None:
        """Drop the connection without answering what is in flight (its handlers are cancelled)."""
        self.stop_reading()
        self.writer.transport.abort()
        if self._answering is not None and type(self._answering[1]) is not Ready:
            self._answering[1].cancel()  # the writer, waiting on it, then finishes

    async def _read_loop(self) -> None:
        max_bytes = self.server.config["socket.request.max.bytes"]
        table = self.server.table
        memory = self.server.request_memory
        held = 0  # bytes taken from queued.max.request.bytes for a request not yet handed to its handler
        # Answers the reader wrote itself (nothing handed to the writer was waiting): sent in one write once no
        # further complete request is buffered, so a burst of pipelined heartbeats costs one send and no hand-off.
        out: list[bytes] = []
        unwritten: list[tuple[Any, Any, float]] = []
        try:
            while True:
                end = self._buffered_end(max_bytes)
                if out and end is None:
                    if not await self._write(out, unwritten):
                        return
                if end is not None and not memory.bounded:
                    frame = self._take_frame(end)  # (no await since `end` was found: still in the buffer)
                else:
                    prefix = await self.reader.readexactly(4)
                    size = frame_length(prefix, max_bytes)
                    if out and memory.would_wait(size):
                        if not await self._write(out, unwritten):
                            return
                    if memory.bounded:
                        await memory.acquire(size)
                        held = size
                    frame = await self.reader.readexactly(size)
                started = time.perf_counter()
                self.last_active = self._loop.time()
                if self.internal is None:
                    decoded = table.decode(frame, self.peer_host, self.connection_id)
                else:
                    decoded = self.internal.unwrap(frame, table, self.connection_id)
                if self.session is not None:
                    self._authenticate(decoded)
                task = self._begin(decoded)
                if isinstance(task, Ready):
                    if held:
                        memory.release(size)
                        held = 0
                    if not self._handed:
                        self.last_active = self._loop.time()
                        if not self._encode_answer(decoded, task.value, started, out, unwritten):
                            if out:
                                await self._write(out, unwritten)
                            await self._queue.put(_CLOSE)
                            return
                        if len(out) >= WRITE_BATCH and not await self._write(out, unwritten):
                            return
                        continue
                elif held:
                    task.add_done_callback(memory.releaser(size))
                    held = 0
                if out and not await self._write(out, unwritten):
                    return
                self._handed += 1
                if self._queue.full():
                    await self._queue.put((decoded, task, started))
                else:
                    self._queue.put_nowait((decoded, task, started))
        except (asyncio.IncompleteReadError, ConnectionError):
            return  # peer went away
        except ProtocolError as exc:
            log.info("closing connection %d from %s: %s", self.connection_id, self.peer_host, exc)
            if out:
                await self._write(out, unwritten)
            await self._queue.put(_CLOSE)
            self.server.metrics.protocol_errors.inc()
        finally:
            if held:
                memory.release(held)

    def _buffered_end(self, max_bytes: int) -> int | None:
        """Where the next request ends in the stream's buffer if all of it is there already (the next reads will
        not wait), else None. Its length prefix is checked as `frame_length` checks it."""
        buf = self.reader._buffer  # type: ignore[attr-defined]  # asyncio.StreamReader's bytearray, peeked
        if len(buf) < 4:
            return None
        end = 4 + frame_length(bytes(buf[:4]), max_bytes)
        return end if len(buf) >= end else None

    def _take_frame(self, end: int) -> bytes:
        """The buffered request ending at `end` (`_buffered_end`), taken as `readexactly` would take it
        (pipelined requests: two coroutines less per request)."""
        reader = self.reader
        buf = reader._buffer  # type: ignore[attr-defined]
        frame = bytes(memoryview(buf)[4:end])
        del buf[:end]
        reader._maybe_resume_transport()  # type: ignore[attr-defined]  # as readexactly does
        return frame

    def _encode_answer(
        self,
        decoded: DecodedRequest,
        response: Any,
        started: float,
        out: list[bytes],
        unwritten: list[tuple[Any, Any, float]],
    ) -> bool:
        """An answer encoded into `out` (by the reader, or the writer) to be sent in the next write. False: close
        the connection once `out` is written (the handler said so, a failed SASL exchange, an answer that cannot
        be encoded)."""
        if response is _CLOSE:
            return False
        ctx = decoded.context
        if response is None:
            self.server.metrics.observe_request(
                ctx.api_key, ctx.api_version, None, time.perf_counter() - started
            )
            return True
        payload = self._payload(decoded, response)
        if payload is None:
            return False
        out.append(_LEN.pack(len(payload)) + payload)
        unwritten.append((ctx, response, started))
        return self.session is None or not self.session.close_after_response

    def _payload(self, decoded: DecodedRequest, response: Any) -> bytes | None:
        """The answer's bytes (framed by the caller); None if it cannot be encoded (logged)."""
        try:
            if isinstance(response, bytes):  # an internal message's answer, already encoded
                payload = response
            else:
                payload = self.server.table.encode_response(decoded.context, response)
            if decoded.envelope is not None:
                payload = self.internal.wrap(decoded, payload)
        except Exception:
            log.exception(
                "cannot encode the answer to api %d v%d", decoded.context.api_key, decoded.context.api_version
            )
            return None
        return payload

    def _authenticate(self, decoded: DecodedRequest) -> None:
        """Give the request its principal; before SASL authentication only ApiVersions and the SASL APIs pass
        (anything else closes the connection, as Kafka does). See coordinator.security.sasl."""
        ctx = decoded.context
        ctx.session = self.session
        ctx.principal = self.session.principal
        if not self.session.allows(ctx.api_key):
            raise ProtocolError(f"unexpected request (api {ctx.api_key}) before SASL authentication")

    def _begin(self, decoded: DecodedRequest) -> Ready | asyncio.Future[Any]:
        """Start the request's handler: Ready with its answer if it has one at once, else the future or task
        that gets it. A handler returns a coroutine, or (the hot paths: a heartbeat, a commit) Ready or a
        future without one."""
        ctx = decoded.context
        if decoded.body is None:
            return Ready(self.server.table.unsupported_version_response(ctx) or _CLOSE)
        try:
            answer = decoded.spec.handler(ctx, decoded.body)
        except Exception:
            return Ready(self._failed(ctx))
        if type(answer) is Ready or isinstance(answer, asyncio.Future):
            return answer
        return start(self._guarded(ctx, answer))

    async def _guarded(self, ctx: RequestContext, answer: Awaitable[Any]) -> Any:
        try:
            return await answer
        except asyncio.CancelledError:
            raise
        except Exception:
            return self._failed(ctx)

    def _failed(self, ctx: RequestContext) -> Any:
        """The answer to a request whose handler failed (logged here, with its exception)."""
        log.exception("handler for api %d v%d failed", ctx.api_key, ctx.api_version)
        return self.server.table.error_response(ctx, ErrorCode.unknown_server_error) or _CLOSE

    async def _write_loop(self) -> None:
        # Answers are written in one send while the next one in line is ready too (pipelined heartbeats and
        # commits): one syscall per burst instead of one per answer. A ready answer never waits for one that is not.
        out: list[bytes] = []
        unwritten: list[tuple[Any, Any, float]] = []
        taken = 0  # requests taken from the queue since the last write
        while True:
            item = self._queue.get_nowait() if self._queue.items else await self._queue.get()
            if item is _CLOSE:
                break
            taken += 1
            decoded, task, started = item
            self._answering = (decoded, task)
            try:
                response = task.value if type(task) is Ready else await task
            except asyncio.CancelledError:
                break
            except Exception:  # a handler's future that failed (a task from _begin never does)
                response = self._failed(decoded.context)
            finally:
                self._answering = None
                self.last_active = (
                    self._loop.time()
                )  # not get_running_loop(): this also runs when GC closes us
            if not self._encode_answer(decoded, response, started, out, unwritten):
                break  # what is in `out` is written below, then the connection closes
            if len(out) < WRITE_BATCH and self._next_is_ready():
                continue
            if out and not await self._write(out, unwritten):
                break
            self._handed -= taken  # their answers are in the transport: the reader may answer the next itself
            taken = 0
        if out:
            await self._write(out, unwritten)
        # Whatever is still queued will never be written: cancel it so nothing waits on a dead connection.
        self.stop_reading()
        while self._queue.items:
            item = self._queue.get_nowait()
            if item is not _CLOSE:
                item[1].cancel()
        if not self.writer.is_closing():
            self.writer.transport.close()
