"""Coordinator workers: `serve --workers N` runs N processes, each owning a share of the group shards.

This is how Kafka spreads group coordinators over brokers, done inside one machine: groups are partitioned into
shards by `coordinator.sharding.shard_of(group_id, offsets.topic.num.partitions)`, and worker w owns the shards p
with p % N == w. Every worker is a broker to the clients: it has its own Kafka listener (with `--listen HOST:PORT`,
worker w listens on PORT+w; with port 0 on the consecutive ports of a free block) and node id (node.id + w), Metadata from any worker
lists all of them, and FindCoordinator answers the worker that owns the group's shard. A group API sent to a
worker that does not own the group is relayed to the owner (forward.PeerRelay): stock clients go to the owner
directly, and a client that never asks FindCoordinator (one written against a single broker) still gets answers.

The data plane stays in worker 0 (the embedded topic log; topics' partition leaders are node.id + 0). Workers
w > 0 serve the data-plane APIs through coordinator.server.forward, which relays them to worker 0.

Process model. The process the user started is the supervisor: it binds every listening socket itself (so a port
of 0 is resolved once, a restarted worker gets the very same socket, and connections made while a worker restarts
wait in the backlog), then starts each worker as `python -m coordinator serve ...` (its own arguments, with the worker's
part in the environment variable KGC_WORKER_SPEC) with those sockets inherited, waits until every worker says it serves (one line on a pipe), and only then prints the one
announce line, `listening kafka=HOST:PORT admin=HOST:PORT` (worker 0's addresses). A worker that dies is
restarted (with a growing pause if it keeps dying); SIGTERM or SIGINT stops all of them (the supervisor closes its
copies of the listening sockets first, so a worker relaying to a peer that has stopped is refused at once instead
of waiting in a backlog nobody accepts; each worker shuts down gracefully) and then the supervisor exits. A worker asks the kernel to SIGKILL it when the supervisor dies
(prctl PR_SET_PDEATHSIG), so a SIGKILLed supervisor leaves no worker behind. Workers write their logs to the same
stdout/stderr, each line prefixed with `worker=W`.

Admin HTTP. Worker 0's admin listener stays the one entry point; every other worker has an internal one on
127.0.0.1. Worker 0 proxies /v1/groups/{group}... for groups it does not own to the owner, merges /v1/groups,
reports /readyz ready only when every worker is, and serves every worker's /metrics series with a `worker` label.
With one worker (the default) none of this exists: `serve` runs the server in its own process, exactly as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import dataclasses
import errno
import functools
import json
import logging
import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from coordinator.brokers import ListenError, bind_listener
from coordinator.config import Config

if TYPE_CHECKING:
    from coordinator.dataplane import Broker

# The supervisor imports this module before it starts the workers: what only workers use (the protocol and
# server modules, ~0.3-0.9 s of imports) is imported inside the functions that need it.

log = logging.getLogger(__name__)

_WILDCARDS = ("", "0.0.0.0", "::")
PR_SET_PDEATHSIG = 1
BLOCK_ATTEMPTS = 50  # port 0 with several workers: tries at a block of consecutive free ports
READY_TIMEOUT_S = 300.0  # loading a large group log takes a while; the announce line waits for it
RESTART_BACKOFF_S = (0.0, 0.5, 1.0, 2.0, 5.0)
STABLE_AFTER_S = 30.0  # a worker that ran this long has its restart backoff reset
# Before the announce line, a worker that dies is restarted this many times (a SIGKILLed predecessor may still
# hold a lock for a moment) before the supervisor gives up and exits 1 (a bad setting fails every time).
EARLY_RESTARTS = 2


def shard_of(group_id: str, shards: int) -> int:
    from coordinator import sharding

    return int(sharding.shard_of(group_id, shards))


# -- the owner rule ---------------------------------------------------------------------------------------------


def worker_of_shard(shard: int, workers: int) -> int:
    return shard % workers


def owned_shards(index: int, shards: int, workers: int) -> frozenset[int]:
    """The shards worker `index` of `workers` loads and serves."""
    return frozenset(p for p in range(shards) if worker_of_shard(p, workers) == index)


def owner_of(group_id: str, shards: int, workers: int) -> int:
    """The worker that coordinates `group_id`."""
    return worker_of_shard(shard_of(group_id, shards), workers)


def unsupported_with_workers(config: Config) -> str | None:
    """Why these settings cannot run with several workers yet, or None. Authentication sessions live on a
    connection and the authorizer would have to wrap every worker's APIs with one shared ACL state."""
    names = [name for name in ("listeners", "authorizer.class.name", "scram.bootstrap.users")
             if name in dict(config.items()) and config[name]]
    if names:
        return f"{', '.join(names)}: not supported with more than one worker yet"
    return None


def cores() -> int:
    """The cores this process may run on (its CPU affinity, which containers and taskset narrow)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def requested_workers(value: int | str | None, config: Config) -> int:
    """`--workers` (a number or `auto`), else the setting coordinator.workers; 0 means auto."""
    if value is None:
        return int(config["coordinator.workers"])
    if str(value).strip().lower() == "auto":
        return 0
    count = int(value)
    if count < 1:
        raise ValueError(f"--workers must be at least 1 or auto, got {value}")
    return count


def resolve_workers(value: int | str | None, config: Config) -> int:
    """How many workers to run: as requested, or one per core for auto (the default). Settings that cannot run
    with several workers (see unsupported_with_workers) make auto one, and a number above one a ValueError."""
    requested = requested_workers(value, config)
    count = requested or cores()
    why = unsupported_with_workers(config) if count > 1 else None
    if why is None:
        return count
    if requested:
        raise ValueError(f"--workers {count}: {why}")
    log.info("one worker instead of one per core: %s", why)
    return 1


# -- what a worker is told ----------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class WorkerSpec:
    """Everything a worker process needs from its supervisor (JSON in the environment variable KGC_WORKER_SPEC)."""

    index: int
    count: int
    host: str  # the Kafka listen host (the same for every worker)
    kafka_ports: tuple[int, ...]  # bound port of every worker's Kafka listener
    internal_admin: tuple[str | None, ...]  # "127.0.0.1:PORT" of each worker's internal admin listener
    kafka_fd: int
    admin_fd: int | None  # worker 0: the public admin socket; others: their internal one
    admin_host: str | None
    notify_fd: int
    supervisor_pid: int

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> WorkerSpec:
        data = json.loads(text)
        data["kafka_ports"] = tuple(data["kafka_ports"])
        data["internal_admin"] = tuple(data["internal_admin"])
        return cls(**data)


class Topology:
    """The workers as clients see them, from inside worker `spec.index`."""

    def __init__(self, spec: WorkerSpec, node_id_base: int, shards: int,
                 advertised: tuple[str, int] | None) -> None:
        self.spec = spec
        self.index = spec.index
        self.count = spec.count
        self.node_id_base = node_id_base
        self.shards = shards
        self.advertised = advertised

    def broker(self, worker: int) -> Broker:
        """Worker `worker` as a client should reach it: the advertised host (port + worker, or the bound port
        when the advertised port is 0), else the listen host, or for a wildcard listener the local address the
        current request came in on (as Server.broker does)."""
        from coordinator.dataplane import Broker

        from .connection import local_address

        node_id = self.node_id_base + worker
        if self.advertised is not None:
            host, port = self.advertised
            return Broker(node_id, host, port + worker if port else self.spec.kafka_ports[worker])
        host = self.spec.host
        if host in _WILDCARDS:
            host = local_address.get((host, 0))[0]
            if host in _WILDCARDS:
                host = socket.gethostname()
        return Broker(node_id, host, self.spec.kafka_ports[worker])

    def brokers(self) -> list[Broker]:
        return [self.broker(w) for w in range(self.count)]

    def owner(self, group_id: str) -> int:
        return owner_of(group_id, self.shards, self.count)

    def owner_broker(self, group_id: str) -> Broker:
        return self.broker(self.owner(group_id))

    def owned_shards(self) -> frozenset[int]:
        return owned_shards(self.index, self.shards, self.count)

    def upstream(self) -> tuple[str, int]:
        """Where worker 0's Kafka listener is reachable from this machine."""
        return self.address(0)

    def address(self, worker: int) -> tuple[str, int]:
        """Where worker `worker`'s Kafka listener is reachable from this machine."""
        host = self.spec.host
        if host in _WILDCARDS:
            host = "::1" if host == "::" else "127.0.0.1"
        return host, self.spec.kafka_ports[worker]

    def peer_admin_urls(self) -> dict[int, str]:
        """The internal admin listeners of the other workers (worker 0 asks them)."""
        return {w: f"http://{addr}" for w, addr in enumerate(self.spec.internal_admin)
                if addr is not None and w != self.index}


# -- the supervisor -----------------------------------------------------------------------------------------------


def _bind_block(host: str, count: int) -> list[socket.socket]:
    """`count` listening sockets on consecutive free ports, the first one picked by the kernel: worker w gets
    PORT+w as with an explicit port, so a restart with `--listen HOST:PORT` (PORT from the announce line) binds
    the very same ports. A port of the block that is taken makes it try another block."""
    for _attempt in range(BLOCK_ATTEMPTS):
        first = bind_listener(host, 0)
        block = [first]
        base = first.getsockname()[1]
        try:
            for w in range(1, count):
                if base + w > 65535:
                    raise OSError(errno.EADDRINUSE, "the block runs past port 65535")
                block.append(bind_listener(host, base + w, retry_s=0))
            return block
        except OSError as exc:
            for sock in block:
                sock.close()
            if exc.errno != errno.EADDRINUSE:
                raise
    raise ListenError(errno.EADDRINUSE, f"cannot listen on {_show(host)}: no {count} consecutive free ports "
                                        f"found in {BLOCK_ATTEMPTS} attempts")


def _show(host: str) -> str:
    if host in _WILDCARDS:
        return "0.0.0.0"
    return f"[{host}]" if ":" in host else host


@dataclasses.dataclass
class _Child:
    index: int
    proc: subprocess.Popen[bytes] | None = None
    notify: int | None = None  # read end of its ready pipe
    ready: bool = False
    started: float = 0.0
    failures: int = 0
    restart_at: float | None = None


class Supervisor:
    """Binds the sockets, runs the workers, restarts the ones that die, stops them all on SIGTERM/SIGINT."""

    def __init__(self, count: int, child_args: Sequence[str], listen: tuple[str, int],
                 admin_listen: tuple[str, int] | None, shutdown_timeout_s: float) -> None:
        self.count = count
        self.child_args = list(child_args)
        self.listen = listen
        self.admin_listen = admin_listen
        self.shutdown_timeout_s = shutdown_timeout_s
        self.children = [_Child(w) for w in range(count)]
        self.kafka_sockets: list[socket.socket] = []
        self.admin_sockets: list[socket.socket | None] = []
        self._stop = False

    def bind(self) -> None:
        host, port = self.listen
        if port:
            self.kafka_sockets = [bind_listener(host, port + w) for w in range(self.count)]
        else:
            self.kafka_sockets = _bind_block(host, self.count)
        for w in range(self.count):
            if w == 0:
                if self.admin_listen is None:
                    self.admin_sockets.append(None)
                else:
                    self.admin_sockets.append(bind_listener(*self.admin_listen))
            else:
                self.admin_sockets.append(bind_listener("127.0.0.1", 0))

    def spec(self, w: int, notify_fd: int) -> WorkerSpec:
        admin = self.admin_sockets[w]
        return WorkerSpec(
            index=w, count=self.count, host=self.listen[0],
            kafka_ports=tuple(s.getsockname()[1] for s in self.kafka_sockets),
            internal_admin=tuple(None if w2 == 0 or s is None else f"127.0.0.1:{s.getsockname()[1]}"
                                 for w2, s in enumerate(self.admin_sockets)),
            kafka_fd=self.kafka_sockets[w].fileno(),
            admin_fd=admin.fileno() if admin is not None else None,
            admin_host=(self.admin_listen[0] if w == 0 and self.admin_listen else "127.0.0.1")
            if admin is not None else None,
            notify_fd=notify_fd, supervisor_pid=os.getpid(),
        )

    def announce(self) -> str:
        kafka = f"{_show(self.listen[0])}:{self.kafka_sockets[0].getsockname()[1]}"
        admin_sock = self.admin_sockets[0]
        admin = "off" if admin_sock is None or self.admin_listen is None else \
            f"{_show(self.admin_listen[0])}:{admin_sock.getsockname()[1]}"
        return f"listening kafka={kafka} admin={admin}"

    def spawn(self, child: _Child) -> None:
        read_fd, write_fd = os.pipe()
        spec = self.spec(child.index, write_fd)
        fds = [self.kafka_sockets[child.index].fileno(), write_fd]
        if spec.admin_fd is not None:
            fds.append(spec.admin_fd)
        cmd = [sys.executable, "-m", "coordinator", *self.child_args]
        env = dict(os.environ, KGC_WORKER_SPEC=spec.to_json())
        try:
            child.proc = subprocess.Popen(cmd, pass_fds=fds, stdin=subprocess.DEVNULL, env=env)
        finally:
            os.close(write_fd)
        child.notify = read_fd
        child.ready = False
        child.started = time.monotonic()
        child.restart_at = None
        log.info("worker %d started: pid %d", child.index, child.proc.pid)

    def _on_signal(self, signum: int, frame: Any) -> None:
        self._stop = True

    def run(self) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        try:
            self.bind()
        except OSError as exc:
            print(f"kafka-group-coordinator: {exc}", file=sys.stderr)
            return 1
        for child in self.children:
            self.spawn(child)
        announced = False
        started = time.monotonic()
        while not self._stop:
            self._read_notifications(0.2)
            now = time.monotonic()
            for child in self.children:
                if child.proc is not None and child.proc.poll() is not None:
                    if not announced and child.failures >= EARLY_RESTARTS:
                        log.error("worker %d exited with code %s before serving, %d times", child.index,
                                  child.proc.returncode, child.failures + 1)
                        self._stop_all()
                        return 1
                    self._died(child, now)
                if child.proc is None and child.restart_at is not None and now >= child.restart_at:
                    self.spawn(child)
            if not announced and all(c.ready for c in self.children):
                announced = True
                line = self.announce()
                print(line, flush=True)
                log.info("%s (%d workers)", line, self.count)
            if not announced and now - started > READY_TIMEOUT_S:
                log.error("the workers did not all start serving within %.0f s", READY_TIMEOUT_S)
                self._stop_all()
                return 1
        log.info("shutting down %d workers", self.count)
        return self._stop_all()

    def _read_notifications(self, timeout_s: float) -> None:
        fds = [c.notify for c in self.children if c.notify is not None]
        if not fds:
            time.sleep(timeout_s)
            return
        try:
            readable, _, _ = select.select(fds, [], [], timeout_s)
        except InterruptedError:  # pragma: no cover - PEP 475 retries; a signal handler may still cut in
            return
        for child in self.children:
            if child.notify is not None and child.notify in readable:
                data = os.read(child.notify, 64)
                if data:
                    child.ready = True
                else:  # the worker closed its end: it is gone or going
                    os.close(child.notify)
                    child.notify = None

    def _died(self, child: _Child, now: float) -> None:
        assert child.proc is not None
        code = child.proc.returncode
        if child.notify is not None:
            os.close(child.notify)
            child.notify = None
        child.proc = None
        child.ready = False
        child.failures = 0 if now - child.started > STABLE_AFTER_S else child.failures + 1
        pause = RESTART_BACKOFF_S[min(child.failures, len(RESTART_BACKOFF_S) - 1)]
        child.restart_at = now + pause
        log.warning("worker %d exited with code %s; restarting it in %.1f s", child.index, code, pause)

    def _stop_all(self) -> int:
        # Our copies of the listening sockets go first: once a stopping worker closes its own, its port is closed
        # for good, so a peer relaying to it is refused at once (a connection left in a backlog that nobody
        # accepts any more would wait on a dead peer until the shutdown timeout).
        for sock in [*self.kafka_sockets, *self.admin_sockets]:
            if sock is not None:
                sock.close()
        for child in self.children:
            if child.proc is not None and child.proc.poll() is None:
                child.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.shutdown_timeout_s + 10.0
        code = 0
        for child in self.children:
            if child.proc is None:
                continue
            try:
                rc = child.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.error("worker %d did not stop in time; killing it", child.index)
                child.proc.kill()
                rc = child.proc.wait()
            if rc != 0:
                log.error("worker %d exited with code %s", child.index, rc)
                code = 1
            if child.notify is not None:
                os.close(child.notify)
                child.notify = None
        log.info("stopped")
        return code


# -- a worker -----------------------------------------------------------------------------------------------------


def die_with_parent(supervisor_pid: int) -> None:
    """Ask the kernel to SIGKILL this process when its parent dies; exit now if it already has."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            log.warning("prctl(PR_SET_PDEATHSIG) failed: errno %d", ctypes.get_errno())
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        log.warning("prctl is not available: this worker will outlive a killed supervisor")
    if os.getppid() != supervisor_pid:
        os._exit(1)


def build_worker_server(config: Config, spec: WorkerSpec, advertised: tuple[str, int] | None,
                        data_dir: str) -> Any:
    """One worker's server: its pre-bound listeners, its share of the shards, Metadata listing every worker,
    FindCoordinator naming the owner; the embedded data plane in worker 0, a forwarder to it elsewhere."""
    from .app import install_security
    from .groups import GroupCoordinator
    from .listener import Server
    from .lookup import CoordinatorLookup
    from .metrics import ShardCollector

    base = int(config["node.id"])
    topology = Topology(spec, base, int(config["offsets.topic.num.partitions"]), advertised)
    config.set("node.id", base + spec.index)
    my_advertised = None
    if advertised is not None:
        host, port = advertised
        my_advertised = (host, port + spec.index if port else 0)
    server = Server(config, listen=(spec.host, spec.kafka_ports[spec.index]),
                    admin_listen=(spec.admin_host or "127.0.0.1", 0) if spec.admin_fd is not None else None,
                    advertised=my_advertised, data_dir=data_dir)
    server.listen_socket = socket.socket(fileno=spec.kafka_fd)
    server.admin_socket = socket.socket(fileno=spec.admin_fd) if spec.admin_fd is not None else None
    server.topology = topology
    if spec.index == 0:
        from coordinator.dataplane.embedded import EmbeddedDataPlane

        dataplane: Any = EmbeddedDataPlane(config, server.broker, data_dir=data_dir, brokers=topology.brokers)
    else:
        from .forward import ForwardingDataPlane

        dataplane = ForwardingDataPlane(config, server, topology.upstream(), brokers=topology.brokers)
    server.dataplane = dataplane
    server.add_part(dataplane)
    server.add_part(CoordinatorLookup(server.broker, owner=topology.owner_broker))
    server.groups = GroupCoordinator(config, data_dir, owned=topology.owned_shards())
    if spec.count > 1:
        from .forward import PeerRelay

        server.groups.relay = PeerRelay(config, server, topology.address)
        server.groups.owner_of_shard = functools.partial(worker_of_shard, workers=spec.count)
    server.add_part(server.groups)
    server.metrics.registry.register(ShardCollector(server.groups))
    if spec.index == 0:
        install_security(server, config, data_dir)  # the other workers relay its APIs (forward.py)
    if spec.index == 0 and spec.count > 1:
        peers = AdminPeers(server, topology)
        server.add_part(peers)
        server.admin_middleware = peers.middleware
    return server


async def serve_worker(server: Any, notify_fd: int) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await server.start()
    try:
        os.write(notify_fd, b"serving\n")
    except OSError:
        pass  # the supervisor is gone; PR_SET_PDEATHSIG ends us
    log.info("%s", server.announce())
    await stop.wait()
    log.info("shutting down")
    await server.close()
    os.close(notify_fd)
    log.info("stopped")


def run_worker(server: Any, notify_fd: int) -> None:
    import uvloop

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(serve_worker(server, notify_fd))


# -- admin HTTP across workers ------------------------------------------------------------------------------------


class AdminPeers:
    """Worker 0's admin listener in front of the others' internal ones (see the module doc)."""

    def __init__(self, server: Any, topology: Topology) -> None:
        self.server = server
        self.topology = topology
        self.peers = topology.peer_admin_urls()
        self._session: Any = None

    # A server part only for its lifecycle: the HTTP client session closes with the server.
    def register(self, table: Any) -> None:
        pass

    async def start(self) -> None:
        pass

    def session(self) -> Any:
        import aiohttp

        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def _get(self, url: str) -> tuple[int, bytes, str]:
        async with self.session().get(url) as resp:
            return resp.status, await resp.read(), resp.headers.get("Content-Type", "")

    @property
    def middleware(self) -> Callable[..., Awaitable[Any]]:
        from aiohttp import web

        @web.middleware
        async def peers(request: web.Request, handler: Any) -> web.StreamResponse:
            path = request.path
            if path == "/readyz":
                return await self._readyz(request, handler)
            if path == "/metrics":
                return await self._metrics(request, handler)
            if path == "/v1/groups":
                return await self._list_groups(request, handler)
            if path.startswith("/v1/groups/"):
                import urllib.parse

                group_id = urllib.parse.unquote(request.match_info.get("group", "")) \
                    if "group" in request.match_info else None
                if group_id:
                    owner = self.topology.owner(group_id)
                    if owner != self.topology.index:
                        return await self._proxy(request, owner)
            return await handler(request)

        return peers

    async def _proxy(self, request: Any, owner: int) -> Any:
        from aiohttp import web

        url = self.peers[owner] + request.raw_path
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() in ("content-type", "authorization")}
        try:
            async with self.session().request(request.method, url, data=body or None, headers=headers) as resp:
                payload = await resp.read()
                return web.Response(body=payload, status=resp.status,
                                    content_type=resp.content_type or "application/json")
        except (OSError, asyncio.TimeoutError, Exception) as exc:  # noqa: B014 - aiohttp's errors are OSErrors
            if isinstance(exc, asyncio.CancelledError):
                raise
            return web.json_response({"error": "COORDINATOR_NOT_AVAILABLE",
                                      "message": f"worker {owner} does not answer: {exc}"}, status=503)

    async def _readyz(self, request: Any, handler: Any) -> Any:
        from aiohttp import web

        local = await handler(request)
        if local.status != 200:
            return local
        for w, url in self.peers.items():
            try:
                status, _, _ = await self._get(url + "/readyz")
            except Exception:  # noqa: BLE001 - a worker that does not answer is not ready
                status = 0
            if status != 200:
                return web.json_response({"status": "not ready", "worker": w}, status=503)
        return local

    async def _list_groups(self, request: Any, handler: Any) -> Any:
        from aiohttp import web

        local = await handler(request)
        if local.status != 200:
            return local
        groups = list(json.loads(local.body)["groups"])
        query = request.rel_url.query_string
        for w, url in self.peers.items():
            try:
                status, payload, _ = await self._get(url + "/v1/groups" + ("?" + query if query else ""))
            except Exception as exc:  # noqa: BLE001
                return web.json_response({"error": "COORDINATOR_NOT_AVAILABLE",
                                          "message": f"worker {w} does not answer: {exc}"}, status=503)
            if status != 200:
                return web.Response(body=payload, status=status, content_type="application/json")
            groups.extend(json.loads(payload)["groups"])
        groups.sort(key=lambda g: str(g.get("group_id", g.get("group", ""))))
        return web.json_response({"groups": groups})

    async def _metrics(self, request: Any, handler: Any) -> Any:
        from aiohttp import web
        from prometheus_client import CONTENT_TYPE_LATEST

        local = await handler(request)
        texts = {self.topology.index: local.body.decode()}
        for w, url in self.peers.items():
            with contextlib.suppress(Exception):  # a restarting worker's series are missing for a scrape
                status, payload, _ = await self._get(url + "/metrics")
                if status == 200:
                    texts[w] = payload.decode()
        return web.Response(body=merge_expositions(texts), headers={"Content-Type": CONTENT_TYPE_LATEST})


def merge_expositions(texts: dict[int, str]) -> bytes:
    """Prometheus text expositions of several workers as one: every sample gets a `worker` label, and families
    of the same name are merged (one HELP/TYPE each), as a valid exposition requires."""
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.metrics_core import Metric
    from prometheus_client.parser import text_string_to_metric_families
    from prometheus_client.samples import Sample

    families: dict[str, Metric] = {}
    for worker in sorted(texts):
        for family in text_string_to_metric_families(texts[worker]):
            merged = families.get(family.name)
            if merged is None:
                merged = families[family.name] = Metric(family.name, family.documentation, family.type,
                                                        family.unit)
            for s in family.samples:
                merged.samples.append(Sample(s.name, {**s.labels, "worker": str(worker)}, s.value, s.timestamp,
                                             s.exemplar))

    class _Merged:
        def collect(self) -> list[Metric]:
            return list(families.values())

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Merged())  # type: ignore[arg-type]
    return bytes(generate_latest(registry))
