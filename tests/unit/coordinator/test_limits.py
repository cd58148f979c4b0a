"""Resource limits of the listener: max.connections, max.connections.per.ip (+ overrides), connections.max.idle.ms.

Idle expiry is tested through `Server.expire_idle(now)` with a loop time the test picks, so nothing here waits for
a timeout to pass; the one test that lets the sweeper run only asserts that it eventually closes (generous bound).
"""

from __future__ import annotations

import asyncio
import socket
import struct
import time

import pytest
from kio.schema.api_versions.v0.request import ApiVersionsRequest as ApiVersionsRequestV0
from kio.schema.heartbeat.v0.request import HeartbeatRequest as HeartbeatV0

from coordinator.config import Config, ConfigError
from protocol.errors import ErrorCode
from tests.support.wire import WireClient, encode_request, recv_frame

from .server_thread import run_on, running

WAIT_S = 20.0  # generous: the machine is shared


def _serves(sock: socket.socket) -> bool:
    """True if the connection answers an ApiVersions request, False if the server closed it."""
    try:
        sock.sendall(encode_request(ApiVersionsRequestV0(), 7))
        payload = recv_frame(sock)
    except (ConnectionError, OSError):
        return False
    return struct.unpack_from(">i", payload)[0] == 7


def _closed_by_server(sock: socket.socket) -> bool:
    """Reads (and drops) whatever is pending until the server's close shows: EOF or a reset."""
    sock.settimeout(WAIT_S)
    try:
        while sock.recv(65536):
            pass
        return True
    except ConnectionError:
        return True


def _connect(server) -> socket.socket:
    sock = socket.create_connection(server.bound, timeout=WAIT_S)
    return sock


def _on_loop(server, fn):
    async def call():
        return fn(asyncio.get_running_loop())

    return run_on(server, call(), WAIT_S)


def _wait_until(predicate) -> None:
    deadline = time.monotonic() + WAIT_S
    while not predicate():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_overrides_parse_kafka_format():
    config = Config({"max.connections.per.ip.overrides": "127.0.0.1:5, localhost:0,[::1]:7"})
    assert config["max.connections.per.ip.overrides"] == (("127.0.0.1", 5), ("localhost", 0), ("::1", 7))
    for bad in ("127.0.0.1", "127.0.0.1:x", "h:-1", ":3"):
        with pytest.raises(ConfigError):
            Config({"max.connections.per.ip.overrides": bad})
    assert Config()["connections.max.idle.ms"] == 600000  # Kafka's default
    assert Config()["max.connections.per.ip"] == 2147483647


def test_max_connections_per_ip_closes_the_connection_beyond_it():
    with running(max_connections_per_ip=2) as server:
        first, second = _connect(server), _connect(server)
        try:
            assert _serves(first) and _serves(second)
            third = _connect(server)  # the TCP handshake completes; the server closes it at accept
            assert _closed_by_server(third)
            third.close()
            assert _serves(first) and _serves(second)  # the others are unaffected
            first.close()
            _wait_until(lambda: server.connections_per_ip.get("127.0.0.1", 0) < 2)
            fourth = _connect(server)
            assert _serves(fourth)  # a slot freed
            fourth.close()
        finally:
            first.close()
            second.close()


def test_per_ip_override_replaces_the_limit_for_that_address():
    with running(max_connections_per_ip=0, max_connections_per_ip_overrides="127.0.0.1:2") as server:
        socks = [_connect(server) for _ in range(2)]
        try:
            assert all(_serves(s) for s in socks)
            extra = _connect(server)
            assert _closed_by_server(extra)
            extra.close()
        finally:
            for s in socks:
                s.close()


def test_per_ip_override_by_hostname():
    with running(max_connections_per_ip=1, max_connections_per_ip_overrides="localhost:3") as server:
        socks = [_connect(server) for _ in range(3)]
        try:
            assert all(_serves(s) for s in socks)
        finally:
            for s in socks:
                s.close()


def test_max_connections_makes_the_connections_beyond_it_wait_for_a_free_slot():
    """As Kafka's acceptor: not refused, held unanswered until a connection closes, then served in order."""
    with running(max_connections=3) as server:
        socks = [_connect(server) for _ in range(3)]
        waiting = []
        try:
            assert all(_serves(s) for s in socks)
            for i in range(2):
                extra = _connect(server)
                extra.sendall(encode_request(ApiVersionsRequestV0(), 100 + i))
                waiting.append(extra)
            _wait_until(lambda: len(server._slot_waiters) == 2)
            for extra in waiting:
                extra.settimeout(0.3)
                with pytest.raises(TimeoutError):
                    extra.recv(1)  # not answered, not closed
                extra.settimeout(WAIT_S)
            assert all(_serves(s) for s in socks)  # the others are served meanwhile

            socks.pop().close()  # a slot frees: the first waiting connection takes it
            assert struct.unpack_from(">i", recv_frame(waiting[0]))[0] == 100
            waiting[1].settimeout(0.3)
            with pytest.raises(TimeoutError):
                waiting[1].recv(1)
            waiting[1].settimeout(WAIT_S)
            socks.pop().close()
            assert struct.unpack_from(">i", recv_frame(waiting[1]))[0] == 101
            assert _on_loop(server, lambda loop: len(server.connections)) == 3
        finally:
            for s in socks + waiting:
                s.close()


def test_connections_waiting_for_a_slot_are_closed_at_shutdown():
    with running(max_connections=1) as server:
        held = _connect(server)
        assert _serves(held)
        extra = _connect(server)
        _wait_until(lambda: len(server._slot_waiters) == 1)
    assert _closed_by_server(extra)
    extra.close()
    held.close()


def _parked_heartbeat(release: list[asyncio.Event]):
    def setup(server) -> None:
        async def handler(ctx, request):
            event = asyncio.Event()
            release.append(event)
            await event.wait()
            return {"error_code": ErrorCode.none, "throttle_time_ms": 0}

        server.table.register(12, 0, 4, handler)

    return setup


def test_idle_connections_are_closed_but_not_those_with_a_request_in_flight():
    release: list[asyncio.Event] = []
    with running(_parked_heartbeat(release), connections_max_idle_ms=600000) as server:
        idle, trickling, parked, active = (_connect(server) for _ in range(4))
        try:
            assert _serves(active)
            trickling.sendall(b"\x00\x00\x00")  # a partial length prefix: an unfinished request is idleness
            parked.sendall(encode_request(HeartbeatV0(group_id="g", generation_id=1, member_id="m"), 1))
            _wait_until(lambda: len(release) == 1)
            _wait_until(lambda: len(server.connections) == 4)
            assert _on_loop(server, lambda loop: server.expire_idle(loop.time() + 599.0)) == 0
            assert _on_loop(server, lambda loop: server.expire_idle(loop.time() + 601.0)) == 3
            for sock in (idle, trickling, active):
                assert _closed_by_server(sock)
            _on_loop(server, lambda loop: release[0].set())
            parked.settimeout(WAIT_S)
            assert len(parked.recv(4)) == 4  # the parked answer still leaves
            with WireClient(*server.bound) as fresh:  # and the listener still serves
                assert fresh.call(ApiVersionsRequestV0()).error_code == ErrorCode.none
        finally:
            for sock in (idle, trickling, parked, active):
                sock.close()


def test_idle_sweeper_closes_a_silent_connection():
    with running(connections_max_idle_ms=200) as server:
        sock = _connect(server)
        try:
            assert _closed_by_server(sock)  # no timing assertion: only that it happens (within WAIT_S)
        finally:
            sock.close()


def test_idle_expiry_off_with_minus_one():
    with running(connections_max_idle_ms=-1) as server:
        sock = _connect(server)
        try:
            _wait_until(lambda: len(server.connections) == 1)
            assert _on_loop(server, lambda loop: server.expire_idle(loop.time() + 1e9)) == 0
            assert _serves(sock)
        finally:
            sock.close()


def test_queued_max_requests_per_connection_stops_reading_until_answers_leave():
    release: list[asyncio.Event] = []
    queued = 5
    with running(_parked_heartbeat(release), queued_max_requests_per_connection=queued) as server:
        with socket.create_connection(server.bound, timeout=WAIT_S) as sock:
            total = 40
            sock.sendall(
                b"".join(
                    encode_request(HeartbeatV0(group_id="g", generation_id=1, member_id="m"), i)
                    for i in range(1, total + 1)
                )
            )
            # Started: the one the writer is waiting on, `queued` in the queue, and one decoded by the reader that
            # waits for room in the queue; then the reader stops reading.
            _wait_until(lambda: len(release) >= queued + 2)
            time.sleep(
                0.2
            )  # more would only show up if reading went on (a wrong pass is possible, never a wrong fail)
            assert len(release) == queued + 2
            answered = []
            while len(answered) < total:
                _on_loop(server, lambda loop: [e.set() for e in release])
                sock.settimeout(WAIT_S)
                payload = recv_frame(sock)
                answered.append(struct.unpack_from(">i", payload)[0])
            assert answered == list(range(1, total + 1))  # in order, none lost


def test_a_peer_that_never_reads_its_answers_is_idle():
    """Its answers back up until the writer waits on the socket (not on a handler): that is idleness, and
    expiry closes it, as Kafka closes a connection with no read or write activity whatever is queued on it."""
    with running(queued_max_requests_per_connection=4) as server:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(server.bound)
        sock.setblocking(False)
        burst = encode_request(ApiVersionsRequestV0(), 1) * 512
        try:
            blocked = 0
            deadline = time.monotonic() + WAIT_S
            while blocked < 20:  # 20 sends in a row refused: the server stopped reading
                assert time.monotonic() < deadline
                try:
                    sock.send(burst)
                    blocked = 0
                except BlockingIOError:
                    blocked += 1
                    time.sleep(0.05)
            conn = next(iter(server.connections.values()))
            # The server answers until its socket buffer is full, then its writer waits on the socket for good.
            _wait_until(
                lambda: _on_loop(
                    server, lambda loop: not conn.awaiting_answer and loop.time() - conn.last_active > 0.5
                )
            )
            assert _on_loop(server, lambda loop: server.expire_idle(loop.time() + 601.0)) == 1
            sock.setblocking(True)
            assert _closed_by_server(sock)
        finally:
            sock.close()


def _padded_heartbeat(correlation: int, frame_size: int) -> bytes:
    """A Heartbeat v0 request whose frame is `frame_size` bytes: the decoder ignores bytes after the body."""
    raw = encode_request(HeartbeatV0(group_id="g", generation_id=1, member_id="m"), correlation)[4:]
    return struct.pack(">i", frame_size) + raw + b"\x00" * (frame_size - len(raw))


def test_queued_max_request_bytes_stops_all_reading_until_handlers_finish():
    release: list[asyncio.Event] = []
    frame = 100_000
    with running(_parked_heartbeat(release), queued_max_request_bytes=frame * 2 + 8) as server:
        socks = [_connect(server) for _ in range(4)]
        try:
            for i, sock in enumerate(socks[:3]):
                sock.sendall(_padded_heartbeat(i + 1, frame))
            _wait_until(lambda: len(release) == 2 and server.request_memory.waiting == 1)
            assert server.request_memory.used == 2 * frame  # the third waits before reading its body
            socks[3].sendall(encode_request(ApiVersionsRequestV0(), 9))  # small, but over the bound too
            _wait_until(lambda: server.request_memory.waiting == 2)
            assert len(release) == 2
            _on_loop(server, lambda loop: release[0].set())  # one handler finishes: room for the third
            assert struct.unpack_from(">i", recv_frame(socks[0]))[0] == 1
            _wait_until(lambda: len(release) == 3)
            _on_loop(server, lambda loop: [e.set() for e in release])
            for i, sock in enumerate(socks[1:3]):
                assert struct.unpack_from(">i", recv_frame(sock))[0] == i + 2
            assert struct.unpack_from(">i", recv_frame(socks[3]))[0] == 9
            _wait_until(lambda: server.request_memory.used == 0)
        finally:
            for sock in socks:
                sock.close()


def test_a_request_over_queued_max_request_bytes_is_read_when_nothing_else_is_held():
    with running(queued_max_request_bytes=1000) as server, _connect(server) as sock:
        head = struct.pack(">hhi", 18, 0, 3) + struct.pack(">h", 1) + b"x"
        sock.sendall(struct.pack(">i", 5000) + head + b"\x00" * (5000 - len(head)))
        assert struct.unpack_from(">i", recv_frame(sock))[0] == 3
        _wait_until(lambda: server.request_memory.used == 0)
