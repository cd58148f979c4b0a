"""The process model of `serve --workers N` (coordinator.cluster.topology says how the work is divided).

The process the user started is the supervisor: it binds every listening socket itself (so a port of 0 is
resolved once, a restarted worker gets the very same socket, and connections made while a worker restarts wait in
the backlog), then starts each worker as `python -m coordinator serve ...` (its own arguments, with the worker's
part in the environment variable KGC_WORKER_SPEC) with those sockets inherited, waits until every worker says it
serves (one line on a pipe), and only then prints the one announce line, `listening kafka=HOST:PORT
admin=HOST:PORT` (worker 0's addresses). A worker that dies is restarted (with a growing pause if it keeps
dying); SIGTERM or SIGINT stops all of them (the supervisor closes its copies of the listening sockets first, so a
worker relaying to a peer that has stopped is refused at once instead of waiting in a backlog nobody accepts;
each worker shuts down gracefully) and then the supervisor exits. A worker asks the kernel to SIGKILL it when the
supervisor dies (prctl PR_SET_PDEATHSIG), so a SIGKILLed supervisor leaves no worker behind. Workers write their
logs to the same stdout/stderr, each line prefixed with `worker=W`.

Admin HTTP. Worker 0's admin listener stays the one entry point; every other worker has an internal one on
127.0.0.1 (coordinator.admin.peers fronts them). With one worker none of this exists: `serve` runs the server in
its own process.

In front of a cluster (`shared`), the workers are instances of one coordinator (coordinator.front.instances): the
cluster divides the shards among them, as among instances on several machines, and none of the above division
applies. The supervisor binds the primary listener once and every worker accepts on that one socket (any instance
answers any request, so the bootstrap address is the same whichever worker takes a connection, and stays open
while one restarts); each worker opens its own broker listeners (coordinator.front.dataplane) and tells their
ports on its pipe, and a worker that replaces it gets them to listen on again; each has its own admin listener at
the admin port + w, as separate instances have theirs.

Light on imports: nothing of the server is imported here, so the supervisor starts its workers quickly.
"""

from __future__ import annotations

import ctypes
import dataclasses
import errno
import logging
import os
import secrets
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

from coordinator.brokers import ListenError, bind_listener, show_host

from .topology import WorkerSpec

log = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1
BLOCK_ATTEMPTS = 50  # port 0 with several workers: tries at a block of consecutive free ports
READY_TIMEOUT_S = 300.0  # loading a large group log takes a while; the announce line waits for it
RESTART_BACKOFF_S = (0.0, 0.5, 1.0, 2.0, 5.0)
STABLE_AFTER_S = 30.0  # a worker that ran this long has its restart backoff reset
# Before the announce line, a worker that dies is restarted this many times (a SIGKILLed predecessor may still
# hold a lock for a moment) before the supervisor gives up and exits 1 (a bad setting fails every time).
EARLY_RESTARTS = 2


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
    raise ListenError(
        errno.EADDRINUSE,
        f"cannot listen on {show_host(host)}: no {count} consecutive free ports "
        f"found in {BLOCK_ATTEMPTS} attempts",
    )


def _bind_each(host: str, port: int, count: int) -> list[socket.socket]:
    """One listening socket per worker: worker w's on PORT+w, or with PORT 0 on a block of free ports."""
    if port:
        return [bind_listener(host, port + w) for w in range(count)]
    return _bind_block(host, count)


@dataclasses.dataclass
class _Child:
    index: int
    proc: subprocess.Popen[bytes] | None = None
    notify: int | None = None  # read end of its ready pipe (`_told`)
    ready: bool = False
    started: float = 0.0
    failures: int = 0
    restart_at: float | None = None
    unread: bytes = b""  # the start of a line on its pipe
    # in front of a cluster: the ports of its broker listeners, for the worker that replaces it
    broker_ports: dict[int, int] = dataclasses.field(default_factory=dict)


class Supervisor:
    """Binds the sockets, runs the workers, restarts the ones that die, stops them all on SIGTERM/SIGINT."""

    def __init__(
        self,
        count: int,
        child_args: Sequence[str],
        listen: tuple[str, int],
        admin_listen: tuple[str, int] | None,
        shutdown_timeout_s: float,
        listeners: Sequence[tuple[str, str, int]] = (),
        shared: bool = False,
    ) -> None:
        """`listeners`: the `listeners` setting as (name, host, port), in its order; none: --listen only.
        `shared`: in front of a cluster, every worker an instance on the one socket of the primary listener."""
        self.count = count
        self.shared = shared
        self.child_args = list(child_args)
        self.named_listeners = bool(listeners)
        self.listeners = list(listeners) or [("PLAINTEXT", *listen)]
        self.listen = (self.listeners[0][1], self.listeners[0][2])
        self.admin_listen = admin_listen
        self.shutdown_timeout_s = shutdown_timeout_s
        self.children = [_Child(w) for w in range(count)]
        self.listener_sockets: list[list[socket.socket]] = []  # [listener][worker]
        self.internal_sockets: list[socket.socket] = []
        self.admin_sockets: list[socket.socket | None] = []
        self.secret = secrets.token_hex(32)  # the internal channel's (coordinator.cluster.internal)
        self._stop = False

    @property
    def kafka_sockets(self) -> list[socket.socket]:
        """Every worker's socket of the primary listener."""
        return self.listener_sockets[0] if self.listener_sockets else []

    def bind(self) -> None:
        if self.shared:
            self._bind_shared()
            return
        for _name, host, port in self.listeners:
            self.listener_sockets.append(_bind_each(host, port, self.count))
        self.internal_sockets = [bind_listener("127.0.0.1", 0) for _ in range(self.count)]
        for w in range(self.count):
            if w == 0:
                if self.admin_listen is None:
                    self.admin_sockets.append(None)
                else:
                    self.admin_sockets.append(bind_listener(*self.admin_listen))
            else:
                self.admin_sockets.append(bind_listener("127.0.0.1", 0))

    def _bind_shared(self) -> None:
        (_name, host, port) = self.listeners[0]
        self.listener_sockets = [[bind_listener(host, port)] * self.count]
        if self.admin_listen is None:
            self.admin_sockets = [None] * self.count
            return
        self.admin_sockets = list(_bind_each(*self.admin_listen, self.count))

    def spec(self, w: int, notify_fd: int) -> WorkerSpec:
        admin = self.admin_sockets[w]
        return WorkerSpec(
            index=w,
            count=self.count,
            listeners=tuple(
                (name, host, tuple(s.getsockname()[1] for s in socks))
                for (name, host, _port), socks in zip(self.listeners, self.listener_sockets, strict=True)
            ),
            listener_fds=tuple(socks[w].fileno() for socks in self.listener_sockets),
            internal_ports=tuple(s.getsockname()[1] for s in self.internal_sockets),
            internal_fd=self.internal_sockets[w].fileno() if self.internal_sockets else -1,
            secret=self.secret,
            internal_admin=tuple(
                None if w2 == 0 or s is None or self.shared else f"127.0.0.1:{s.getsockname()[1]}"
                for w2, s in enumerate(self.admin_sockets)
            ),
            admin_fd=admin.fileno() if admin is not None else None,
            admin_host=(
                self.admin_listen[0] if (w == 0 or self.shared) and self.admin_listen else "127.0.0.1"
            )
            if admin is not None
            else None,
            notify_fd=notify_fd,
            supervisor_pid=os.getpid(),
            broker_ports=dict(self.children[w].broker_ports),
        )

    def announce(self) -> str:
        kafka = f"{show_host(self.listen[0])}:{self.kafka_sockets[0].getsockname()[1]}"
        admin_sock = self.admin_sockets[0]
        admin = (
            "off"
            if admin_sock is None or self.admin_listen is None
            else f"{show_host(self.admin_listen[0])}:{admin_sock.getsockname()[1]}"
        )
        return f"listening kafka={kafka} admin={admin}"

    def listeners_line(self) -> str | None:
        """`listeners NAME=HOST:PORT ...` (worker 0's) for the `listeners` setting, as one process prints it."""
        if not self.named_listeners:
            return None
        return "listeners " + " ".join(
            f"{name}={show_host(host)}:{socks[0].getsockname()[1]}"
            for (name, host, _port), socks in zip(self.listeners, self.listener_sockets, strict=True)
        )

    def spawn(self, child: _Child) -> None:
        read_fd, write_fd = os.pipe()
        spec = self.spec(child.index, write_fd)
        fds = [*spec.listener_fds, write_fd]
        if spec.internal_fd >= 0:
            fds.append(spec.internal_fd)
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
                        log.error(
                            "worker %d exited with code %s before serving, %d times",
                            child.index,
                            child.proc.returncode,
                            child.failures + 1,
                        )
                        self._stop_all()
                        return 1
                    self._died(child, now)
                if child.proc is None and child.restart_at is not None and now >= child.restart_at:
                    self.spawn(child)
            if not announced and all(c.ready for c in self.children):
                announced = True
                listeners = self.listeners_line()
                if listeners is not None:
                    print(listeners, flush=True)  # before the announce line, which scripts wait for
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
                data = os.read(child.notify, 4096)
                if data:
                    self._told(child, data)
                else:  # the worker closed its end: it is gone or going
                    os.close(child.notify)
                    child.notify = None

    @staticmethod
    def _told(child: _Child, data: bytes) -> None:
        """A worker's lines: `serving` once it serves; in front of a cluster `port NODE PORT` for each broker
        listener it binds (given to the worker that replaces it, coordinator.front.dataplane)."""
        *lines, child.unread = (child.unread + data).split(b"\n")
        for line in lines:
            words = line.split()
            if words == [b"serving"]:
                child.ready = True
            elif len(words) == 3 and words[0] == b"port" and words[1].isdigit() and words[2].isdigit():
                child.broker_ports[int(words[1])] = int(words[2])

    def _died(self, child: _Child, now: float) -> None:
        assert child.proc is not None
        code = child.proc.returncode
        if child.notify is not None:
            os.close(child.notify)
            child.notify = None
        child.unread = b""
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
        every = [sock for socks in self.listener_sockets for sock in socks]
        for sock in [*every, *self.internal_sockets, *self.admin_sockets]:
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
