"""The server: the Kafka listener, the admin HTTP listener, and the parts they serve.

Start-up binds both listeners (port 0 picks a free port) and then announces the chosen addresses on one line,
`listening kafka=HOST:PORT admin=HOST:PORT`, so scripts can find them. Shutdown stops accepting, stops reading new
requests, answers what is in flight (bounded by `shutdown.timeout.ms`), then closes the connections and the parts.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import socket
from typing import Any

from coordinator.brokers import LISTEN_BACKLOG, bind_listener
from coordinator.config import Config, parse_hostport  # noqa: F401 - parse_hostport: re-exported
from coordinator.dataplane import Broker, DataPlane
from protocol.api import ApiTable

from . import admin
from .connection import Connection, RequestMemory, local_address
from .metrics import ServerMetrics

log = logging.getLogger(__name__)

_WILDCARDS = ("", "0.0.0.0", "::")


class Server:
    def __init__(
        self,
        config: Config,
        listen: tuple[str, int] = ("0.0.0.0", 9092),
        admin_listen: tuple[str, int] | None = ("0.0.0.0", 9464),
        advertised: tuple[str, int] | None = None,
        data_dir: str = "./data",
    ) -> None:
        self.config = config
        self.listen = listen
        self.admin_listen = admin_listen
        self.advertised_listener = advertised
        self.data_dir = data_dir
        self.table = ApiTable()
        self.metrics = ServerMetrics()
        self.connections: dict[int, Connection] = {}
        self._ids = itertools.count(1)
        self._server: asyncio.base_events.Server | None = None
        self._admin: Any = None
        self.bound: tuple[str, int] = listen
        self.admin_bound: tuple[str, int] | None = None
        self.listening = False
        self.parts: list[Any] = []
        self.dataplane: DataPlane | None = None
        self.groups: Any = None
        self.connections_per_ip: dict[str, int] = {}  # max.connections.per.ip bookkeeping
        self.request_memory = RequestMemory(config["queued.max.request.bytes"])
        self._idle_sweeper: asyncio.Task[None] | None = None
        # Set by coordinator.server.workers: sockets its supervisor bound, the workers' layout, and the admin
        # middleware of worker 0 that fronts the other workers.
        self.listen_socket: socket.socket | None = None
        self.admin_socket: socket.socket | None = None
        self.topology: Any = None
        self.admin_middleware: Any = None
        # Set by app.build_server (coordinator.security): listener sessions, TLS, and the listeners of `listeners`
        # after the first (the first one is `listen`, with `primary_listener` its spec).
        self.security: Any = None
        self.primary_listener: Any = None
        self.extra_listeners: list[tuple[Any, Any, tuple[str, int]]] = []  # (spec, asyncio server, bound)

    # -- identity ---------------------------------------------------------------------------------

    def broker(self) -> Broker:
        """This node as a client should reach it: the advertised listener if set; for a wildcard listener, the
        local address of the connection the current request came in on; else the bound address."""
        node_id = self.config["node.id"]
        local = local_address.get(None)
        if self.security is not None and self.primary_listener is not None:
            # `listeners`: answer with the listener the client came in on (`advertised.listeners` first).
            name = self.primary_listener.name
            for spec, _, (extra_host, extra_port) in self.extra_listeners:
                if local is not None and local[1] == extra_port:
                    name = spec.name
                    advertised = self.security.advertised.get(name)
                    if advertised is not None:
                        return Broker(node_id, advertised[0], advertised[1] or extra_port)
                    return Broker(node_id, local[0] if extra_host in _WILDCARDS else extra_host, extra_port)
            advertised = self.security.advertised.get(name)
            if advertised is not None:
                return Broker(node_id, advertised[0], advertised[1] or self.bound[1])
        if self.advertised_listener is not None:
            host, port = self.advertised_listener
            return Broker(node_id, host, port or self.bound[1])
        host, port = self.bound
        if host in _WILDCARDS:
            host = local_address.get((host, port))[0]
            if host in _WILDCARDS:
                host = socket.gethostname()
        return Broker(node_id, host, port)

    # -- lifecycle --------------------------------------------------------------------------------

    def add_part(self, part: Any) -> None:
        """A part registers its APIs and is started and closed with the server."""
        part.register(self.table)
        self.parts.append(part)

    async def start(self) -> None:
        for part in self.parts:
            await part.start()
        host, port = self.listen
        sock = self.listen_socket
        if sock is None:
            sock = await asyncio.to_thread(bind_listener, host, port)
        # backlog: asyncio listens again on a given socket, with 100 unless told (500 clients connecting at once
        # overflowed that and got resets)
        self._server = await asyncio.start_server(self._accept, sock=sock, backlog=LISTEN_BACKLOG, limit=2**20,
                                                   ssl=self._listener_ssl(self.primary_listener))
        self.bound = (host, sock.getsockname()[1])
        await self._start_extra_listeners()
        if self.admin_listen is not None:
            self._admin, self.admin_bound = await admin.start(self, *self.admin_listen, sock=self.admin_socket)
        self.listening = True
        if self.config["connections.max.idle.ms"] >= 0:
            self._idle_sweeper = asyncio.create_task(self._sweep_idle())

    @property
    def ready(self) -> bool:
        """Listening, and every part that loads state (the group log) has loaded it."""
        return self.listening and all(getattr(part, "ready", True) for part in self.parts)

    def announce(self) -> str:
        kafka = f"{_show(self.bound[0])}:{self.bound[1]}"
        admin_part = f"{_show(self.admin_bound[0])}:{self.admin_bound[1]}" if self.admin_bound else "off"
        return f"listening kafka={kafka} admin={admin_part}"

    def _listener_ssl(self, spec: Any) -> Any:
        return self.security.ssl_context if spec is not None and spec.tls else None

    async def _start_extra_listeners(self) -> None:
        """The listeners of `listeners` after the first (coordinator.security.listeners)."""
        if self.security is None:
            return
        for spec in self.security.listeners[1:]:
            sock = await asyncio.to_thread(bind_listener, spec.host, spec.port)
            server = await asyncio.start_server(
                functools.partial(self._accept, listener=spec), sock=sock, backlog=LISTEN_BACKLOG, limit=2**20,
                ssl=self._listener_ssl(spec),
            )
            self.extra_listeners.append((spec, server, (spec.host, sock.getsockname()[1])))

    def listeners_line(self) -> str | None:
        """`listeners NAME=HOST:PORT ...` for every listener of `listeners`, or None without that setting."""
        if self.primary_listener is None:
            return None
        fields = [f"{self.primary_listener.name}={_show(self.bound[0])}:{self.bound[1]}"]
        fields += [f"{spec.name}={_show(bound[0])}:{bound[1]}" for spec, _, bound in self.extra_listeners]
        return "listeners " + " ".join(fields)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, listener: Any = None) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        peer_ip = (writer.get_extra_info("peername") or ("",))[0]
        refused = self._over_connection_limit(peer_ip)
        if refused:
            log.info("closing a new connection from %s: %s", peer_ip, refused)
            writer.transport.abort()
            return
        conn_id = next(self._ids)
        conn = Connection(self, reader, writer, conn_id)
        if self.security is not None:
            spec = listener or self.primary_listener
            if spec is not None:
                conn.session = self.security.session(spec, writer.get_extra_info("ssl_object"))
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
            left = self.connections_per_ip.pop(peer_ip, 1) - 1
            if left > 0:
                self.connections_per_ip[peer_ip] = left
            for part in self.parts:
                closed = getattr(part, "connection_closed", None)
                if closed is not None:
                    closed(conn_id)  # e.g. the forwarder drops this connection's upstream

    # -- resource limits (max.connections, max.connections.per.ip, connections.max.idle.ms) -----------

    def _over_connection_limit(self, peer_ip: str) -> str | None:
        """Why a new connection from `peer_ip` is refused, or None. Counted per listener (per worker)."""
        if len(self.connections) >= self.config["max.connections"]:
            return f"max.connections={self.config['max.connections']} reached"
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
            log.info("closing connection %d from %s: idle for more than connections.max.idle.ms",
                     conn.connection_id, conn.peer_host)
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
        self.listening = False
        if self._idle_sweeper is not None:
            self._idle_sweeper.cancel()
        if self._server is not None:
            self._server.close()  # stop accepting
        for _, extra, _ in self.extra_listeners:
            extra.close()
        conns = list(self.connections.values())
        for conn in conns:
            conn.stop_reading()
        for part in self.parts:
            stop_waiting = getattr(part, "stop_waiting", None)
            if stop_waiting is not None:
                stop_waiting()  # long polls answer now with what they have, instead of holding up shutdown
        timeout_s = self.config["shutdown.timeout.ms"] / 1000
        if conns:
            waits = [asyncio.create_task(c.done.wait()) for c in conns]
            _, late = await asyncio.wait(waits, timeout=timeout_s)
            for task in late:
                task.cancel()
            for conn in list(self.connections.values()):
                await conn.abort()
        if self._server is not None:
            await self._server.wait_closed()
        for _, extra, _ in self.extra_listeners:
            await extra.wait_closed()
        for part in reversed(self.parts):
            await part.close()
        if self._admin is not None:
            await self._admin.cleanup()


@functools.lru_cache(maxsize=64)
def _resolve(host: str) -> str | None:
    """The IPv4/IPv6 address of a host named in max.connections.per.ip.overrides (Kafka resolves them too)."""
    try:
        return socket.getaddrinfo(host, None)[0][4][0]
    except (OSError, UnicodeError):
        return None


def _show(host: str) -> str:
    if host in _WILDCARDS:
        return "0.0.0.0"
    return f"[{host}]" if ":" in host else host
