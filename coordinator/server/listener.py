"""The Kafka listener: accepts connections on every Kafka listener of this node, enforces the connection limits,
expires idle connections, and serves the parts' APIs through one API table.

What a server serves is its parts (coordinator.server.parts): each registers its APIs and is started and closed
with the server. The assembly (coordinator.app) builds the parts and the admin HTTP listener; this module knows
neither. Start-up starts the parts, then binds the listeners (port 0 picks a free port). Shutdown stops
accepting, stops reading new requests, lets every part stop waiting (long polls, parked joins answer now),
answers what is in flight (bounded by `shutdown.timeout.ms`), then closes the connections and the parts.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import functools
import itertools
import logging
import socket
import ssl
import time
from collections.abc import Callable, Sequence
from typing import Any

from coordinator.brokers import LISTEN_BACKLOG, Broker, bind_listener, client_address, local_address
from coordinator.config import Config
from coordinator.tasks import cancel_and_wait, stacks
from protocol.api import ApiTable

from .connection import Connection, RequestMemory
from .metrics import ServerMetrics
from .parts import Part

log = logging.getLogger(__name__)


@dataclasses.dataclass
class KafkaListener:
    """One Kafka listener of this node. The first one of a server is its primary listener (the announce line,
    Metadata for clients that reached none of the others)."""

    name: str
    host: str
    port: int  # as configured; 0: a free port, chosen when bound
    advertised: tuple[str, int] | None = None  # what clients are told (port 0: the bound port)
    ssl: ssl.SSLContext | None = None
    spec: Any = None  # passed to the server's `sessions` for each connection (coordinator.security's spec)
    # bound already (a worker's, by its supervisor), or by the server at start
    sock: socket.socket | None = None
    bound_port: int = 0
    # A worker's internal listener: the channel its connections unwrap every request with (Envelopes from the
    # other workers, coordinator.cluster.internal); not counted against the connection limits.
    internal: Any = None


Sessions = Callable[[Any, Any], Any]
"""`sessions(listener.spec, ssl_object)`: a new connection's security session (coordinator.security)."""


class Server:
    def __init__(
        self,
        config: Config,
        listeners: Sequence[KafkaListener],
        *,
        metrics: ServerMetrics | None = None,
        sessions: Sessions | None = None,
    ) -> None:
        self.config = config
        self.listeners = list(listeners)
        self.sessions = sessions
        self.table = ApiTable()
        self.metrics = metrics or ServerMetrics()
        self.connections: dict[int, Connection] = {}
        self.connections_per_ip: dict[str, int] = {}  # max.connections.per.ip bookkeeping
        self.request_memory = RequestMemory(config["queued.max.request.bytes"])
        self.parts: list[Part] = []
        self.listening = False
        self._ids = itertools.count(1)
        self._acceptors: list[socket.socket] = []  # the listening sockets this server takes connections on
        self._opened: set[asyncio.Task[None]] = set()  # one task per accepted connection, until it is closed
        self._idle_sweeper: asyncio.Task[None] | None = None
        # Connections held unread until a slot under max.connections frees (Kafka's acceptor waits too).
        self._slot_waiters: collections.deque[asyncio.Future[bool]] = collections.deque()
        self._reserved_slots = 0  # slots freed for a waiter that has not taken its place yet
        self._accepting: set[asyncio.WriteTransport] = set()  # accepted connections (aborted at close)
        self._closing = False
        self._internal = 0  # connections from other workers (in `connections`, outside max.connections)

    # -- identity --------------------------------------------------------------------------------------------

    @property
    def node_id(self) -> int:
        return int(self.config["node.id"])

    @property
    def bound(self) -> tuple[str, int]:
        """The primary listener's host and bound port."""
        primary = self.listeners[0]
        return primary.host, primary.bound_port

    def broker(self) -> Broker:
        """This node as the client of the current request should reach it (coordinator.brokers.client_address),
        through the listener that client came in on."""
        listener = self.listeners[0]
        local = local_address.get(None)
        if local is not None:
            for other in self.listeners[1:]:
                if other.bound_port == local[1]:
                    listener = other
                    break
        host, port = client_address(listener.host, listener.bound_port, listener.advertised)
        return Broker(self.node_id, host, port)

    # -- lifecycle -------------------------------------------------------------------------------------------

    def add_part(self, part: Part) -> None:
        """A part registers its APIs and is started and closed with the server, in the order added."""
        part.register(self.table)
        self.parts.append(part)

    async def start(self) -> None:
        for part in self.parts:
            await part.start()
        # Every listener is bound (its port known) before any serves: an answer that names another listener (the
        # front's FindCoordinator and Metadata name one per upstream broker) never names one not bound yet, port 0.
        for listener in self.listeners:
            await self._bind(listener)
        for listener in self.listeners:
            await self._accept_on(listener)
        self.listening = True
        if self.config["connections.max.idle.ms"] >= 0:
            self._idle_sweeper = asyncio.create_task(self._sweep_idle())

    async def add_listener(self, listener: KafkaListener) -> None:
        """One more listener, bound now (its port known once this returns); it takes connections now when the
        server listens already, else with the others at start (a part may add listeners while it starts: the
        front's one per upstream broker, coordinator.front)."""
        self.listeners.append(listener)
        await self._bind(listener)
        if self.listening:
            await self._accept_on(listener)

    async def _bind(self, listener: KafkaListener) -> None:
        if listener.sock is None:
            listener.sock = await asyncio.to_thread(bind_listener, listener.host, listener.port)
        listener.bound_port = listener.sock.getsockname()[1]

    async def _accept_on(self, listener: KafkaListener) -> None:
        """Take connections on a listener `_bind` has bound: every connection waiting in its listen queue each
        time it is readable, as Kafka's acceptor thread does. (asyncio.start_server on uvloop takes one per turn
        of the event loop: on a busy loop, 500 consumers starting together waited seconds in the listen queue
        for their first answer, and joined a group over 10-30 s instead of at once.)"""
        sock = listener.sock
        assert sock is not None
        sock.listen(LISTEN_BACKLOG)  # (500 clients connecting at once overflowed asyncio's default of 100)
        sock.setblocking(False)
        asyncio.get_running_loop().add_reader(sock.fileno(), self._take_connections, listener)
        self._acceptors.append(sock)

    def _take_connections(self, listener: KafkaListener) -> None:
        sock = listener.sock
        if sock is None or sock not in self._acceptors:
            return
        loop = asyncio.get_running_loop()
        for _ in range(ACCEPT_BATCH):
            try:
                conn, _address = sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:
                continue  # gone before it was taken
            except OSError as exc:
                # out of file descriptors or buffers: try again in a while, as asyncio's own server does
                log.warning(
                    "accepting a connection on %s failed (%s); trying again in 1 s", listener.name, exc
                )
                loop.remove_reader(sock.fileno())
                loop.call_later(ACCEPT_RETRY_S, self._resume_accepting, listener)
                return
            conn.setblocking(False)
            task = loop.create_task(self._open(conn, listener))
            self._opened.add(task)
            task.add_done_callback(self._opened.discard)

    def _resume_accepting(self, listener: KafkaListener) -> None:
        sock = listener.sock
        if sock is not None and sock in self._acceptors and not self._closing:
            asyncio.get_running_loop().add_reader(sock.fileno(), self._take_connections, listener)

    async def _open(self, conn: socket.socket, listener: KafkaListener) -> None:
        """An accepted connection as a stream pair (the TLS handshake first, on a TLS listener), then served."""
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=2**20, loop=loop)
        protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
        try:
            transport, _ = await loop.connect_accepted_socket(lambda: protocol, sock=conn, ssl=listener.ssl)
        except OSError as exc:  # the peer left, or its TLS handshake failed or timed out (both OSErrors)
            log.debug("connection on %s not opened: %r", listener.name, exc)
            conn.close()
            return
        writer = asyncio.StreamWriter(transport, protocol, reader, loop)
        await self._accept(reader, writer, listener)

    @property
    def ready(self) -> bool:
        """Listening, and every part that loads state (the group log) has loaded it."""
        return self.listening and all(getattr(part, "ready", True) for part in self.parts)

    async def _accept(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, listener: KafkaListener
    ) -> None:
        if self._closing:  # accepted just before the listeners closed
            writer.transport.abort()
            return
        self._accepting.add(writer.transport)
        try:
            await self._serve(reader, writer, listener)
        finally:
            self._accepting.discard(writer.transport)

    async def _serve(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, listener: KafkaListener
    ) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        peer_ip = (writer.get_extra_info("peername") or ("",))[0]
        if listener.internal is not None:
            await self._serve_internal(reader, writer, listener)
            return
        refused = self._over_ip_limit(peer_ip)
        if refused:
            log.info("closing a new connection from %s: %s", peer_ip, refused)
            writer.transport.abort()
            return
        if not await self._take_slot(peer_ip):
            writer.transport.abort()
            return
        refused = self._over_ip_limit(peer_ip)  # others from that address may have come in while it waited
        if refused:
            log.info("closing a new connection from %s: %s", peer_ip, refused)
            writer.transport.abort()
            self._release_slot()
            return
        conn_id = next(self._ids)
        conn = Connection(self, reader, writer, conn_id)
        if self.sessions is not None and listener.spec is not None:
            conn.session = self.sessions(listener.spec, writer.get_extra_info("ssl_object"))
        self.connections[conn_id] = conn
        self.connections_per_ip[peer_ip] = self.connections_per_ip.get(peer_ip, 0) + 1
        self.metrics.connections.inc()
        try:
            await conn.run()
        except Exception:
            log.exception("connection %d failed", conn_id)
        finally:
            self.metrics.connections.dec()
            self.connections.pop(conn_id, None)
            self._release_slot()
            left = self.connections_per_ip.pop(peer_ip, 1) - 1
            if left > 0:
                self.connections_per_ip[peer_ip] = left
            self._connection_closed(conn_id)

    async def _serve_internal(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, listener: KafkaListener
    ) -> None:
        """A connection from another worker: outside max.connections (a relay must not wait behind the clients
        it relays for), closed with the server like any other."""
        conn_id = next(self._ids)
        conn = Connection(self, reader, writer, conn_id)
        conn.internal = listener.internal
        self.connections[conn_id] = conn
        self._internal += 1
        try:
            await conn.run()
        except Exception:
            log.exception("internal connection %d failed", conn_id)
        finally:
            self.connections.pop(conn_id, None)
            self._internal -= 1
            self._connection_closed(conn_id)

    def _connection_closed(self, conn_id: int) -> None:
        for part in self.parts:
            closed = getattr(part, "connection_closed", None)
            if closed is not None:
                closed(conn_id)  # e.g. the forwarder drops this connection's upstream

    def abort_connection(self, connection_id: int) -> None:
        """Drop a client connection without answering what is in flight (its relay to another node broke)."""
        conn = self.connections.get(connection_id)
        if conn is not None:
            conn.close_idle()

    # -- resource limits (max.connections, max.connections.per.ip, connections.max.idle.ms) ------------------

    async def _take_slot(self, peer_ip: str) -> bool:
        """A place under max.connections (counted per listener, per worker). As Kafka's acceptor, a connection
        beyond it is not refused: it waits, unread, until one closes, first come first served. False (close it)
        when the server is closing or as many wait as a listen backlog holds."""
        limit = self.config["max.connections"]
        if not self._slot_waiters and len(self.connections) - self._internal + self._reserved_slots < limit:
            return True
        if len(self._slot_waiters) >= LISTEN_BACKLOG:
            log.info(
                "closing a new connection from %s: max.connections=%d reached, and its queue", peer_ip, limit
            )
            return False
        if not self._slot_waiters:
            log.info("max.connections=%d reached: new connections wait for a free slot", limit)
        waiter: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._slot_waiters.append(waiter)
        try:
            granted = await waiter
        except BaseException:  # the connection's task is cancelled
            if waiter.done() and not waiter.cancelled() and waiter.result():
                self._reserved_slots -= 1  # granted meanwhile: pass the slot on
                self._release_slot()
            else:
                with contextlib.suppress(ValueError):
                    self._slot_waiters.remove(waiter)
            raise
        if granted:
            self._reserved_slots -= 1
        return granted and self.listening

    def _release_slot(self) -> None:
        """A connection closed: the first waiting one takes its place."""
        limit = self.config["max.connections"]
        while self._slot_waiters and len(self.connections) - self._internal + self._reserved_slots < limit:
            waiter = self._slot_waiters.popleft()
            if not waiter.done():
                self._reserved_slots += 1
                waiter.set_result(True)

    def _over_ip_limit(self, peer_ip: str) -> str | None:
        """Why a new connection from `peer_ip` is refused (Kafka closes those too), or None."""
        limit = self.config["max.connections.per.ip"]
        for host, count in self.config["max.connections.per.ip.overrides"]:
            if host == peer_ip or _resolve(host) == peer_ip:
                limit = count
                break
        if self.connections_per_ip.get(peer_ip, 0) >= limit:
            return f"max.connections.per.ip={limit} reached for {peer_ip}"
        return None

    def expire_idle(self, now: float) -> int:
        """Close the connections idle for longer than connections.max.idle.ms at loop time `now` (seconds);
        return how many were closed."""
        idle_s = self.config["connections.max.idle.ms"] / 1000
        if idle_s < 0:
            return 0
        expired = [c for c in self.connections.values() if c.idle_for(now) > idle_s]
        for conn in expired:
            log.info(
                "closing connection %d from %s: idle for more than connections.max.idle.ms",
                conn.connection_id,
                conn.peer_host,
            )
            conn.close_idle()
        return len(expired)

    async def _sweep_idle(self) -> None:
        idle_ms = self.config["connections.max.idle.ms"]
        period_s = min(max(idle_ms / 10_000, 0.01), 1.0)
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(period_s)
            self.expire_idle(loop.time())

    async def close(self) -> None:
        """Stop accepting, let requests in flight finish for up to shutdown.timeout.ms, drop what is left, close
        the parts. Every step is bounded: a stuck step is logged with where it was stuck, and the close goes on."""
        self.listening = False
        self._closing = True
        if self._idle_sweeper is not None:
            self._idle_sweeper.cancel()
        while self._slot_waiters:  # connections waiting for a slot are closed
            waiter = self._slot_waiters.popleft()
            if not waiter.done():
                waiter.set_result(False)
        loop = asyncio.get_running_loop()
        for sock in self._acceptors:  # stop accepting
            loop.remove_reader(sock.fileno())
            sock.close()
        self._acceptors.clear()
        conns = list(self.connections.values())
        for conn in conns:
            conn.stop_reading()
        for part in self.parts:
            stop_waiting = getattr(part, "stop_waiting", None)
            if stop_waiting is not None:
                stop_waiting()  # long polls and parked joins answer now, instead of holding up shutdown
        timeout_s = self.config["shutdown.timeout.ms"] / 1000
        deadline = loop.time() + timeout_s
        if conns:
            waits = [asyncio.create_task(c.done.wait()) for c in conns]
            _, late = await asyncio.wait(waits, timeout=timeout_s)
            for task in late:
                task.cancel()
            busy = {c.connection_id: c.in_flight() for c in conns if not c.done.is_set()}
            if busy:
                log.warning(
                    "shutdown: %d connection(s) still busy after shutdown.timeout.ms, dropped; requests in "
                    "flight (api/version) by connection: %s",
                    len(busy),
                    busy,
                )
        for conn in list(self.connections.values()):  # those still busy, and any accepted meanwhile
            await conn.abort()
        for transport in list(self._accepting):  # accepted, not yet a connection (waiting for a slot, ...)
            transport.abort()
        started = time.monotonic()
        # every accepted connection's task ends once its connection is closed
        closed = asyncio.ensure_future(asyncio.gather(*self._opened, return_exceptions=True))
        if not await cancel_after(closed, max(deadline - loop.time(), MIN_STEP_S)):
            log.warning("shutdown: the listeners still had connections open; not waiting for them")
        _log_if_slow("closing the accepted connections", started)
        for part in reversed(self.parts):
            started = time.monotonic()
            closing = asyncio.ensure_future(part.close())
            if not await cancel_after(closing, max(deadline - loop.time(), MIN_STEP_S)):
                log.warning("shutdown: closing %s did not finish; went on without it", type(part).__name__)
            _log_if_slow(f"closing {type(part).__name__}", started)


async def cancel_after(task: asyncio.Future[Any], timeout_s: float) -> bool:
    """Wait up to `timeout_s` for `task`; True when it ended. Else log where everything was, cancel it (for sure:
    coordinator.tasks) and return False."""
    done, _ = await asyncio.wait({task}, timeout=timeout_s)
    if done:
        if not task.cancelled() and task.exception() is not None:
            log.error("shutdown: a step failed", exc_info=task.exception())
        return True
    log.warning("shutdown: a step is still running after %.1f s; every task now:\n%s", timeout_s, stacks())
    await cancel_and_wait([task], "shutdown", MIN_STEP_S)
    return False


MIN_STEP_S = 1.0  # at shutdown, each step past shutdown.timeout.ms still gets this long
ACCEPT_BATCH = 1024  # connections taken from a listen queue each time it is readable (then others get a turn)
ACCEPT_RETRY_S = 1.0  # after accept failed for want of descriptors or buffers


def _log_if_slow(what: str, started: float) -> None:
    took = time.monotonic() - started
    if took > 1.0:
        log.warning("shutdown: %s took %.1f s", what, took)


@functools.lru_cache(maxsize=64)
def _resolve(host: str) -> str | None:
    """The IPv4/IPv6 address of a host named in max.connections.per.ip.overrides (Kafka resolves them too)."""
    try:
        return str(socket.getaddrinfo(host, None)[0][4][0])
    except (OSError, UnicodeError):
        return None
