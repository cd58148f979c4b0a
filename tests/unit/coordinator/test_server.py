"""The network server: framing bounds, ordered pipelining, unknown keys and versions, shutdown."""

from __future__ import annotations

import asyncio
import socket
import struct
import threading

import pytest
from kio.schema.api_versions.v0.request import ApiVersionsRequest as ApiVersionsRequestV0
from kio.schema.api_versions.v3.request import ApiVersionsRequest as ApiVersionsRequestV3
from kio.schema.find_coordinator.v1.request import FindCoordinatorRequest as FindCoordinatorV1
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest as FindCoordinatorV4
from kio.schema.heartbeat.v0.request import HeartbeatRequest as HeartbeatV0

from coordinator.server.lookup import CoordinatorLookup
from coordinator.server.runtime import Ready
from coordinator.tasks import cancel_and_wait
from protocol.errors import ErrorCode
from tests.support.wire import WireClient, encode_request, recv_frame

from .server_thread import run_on, running


def _with_lookup(server):
    server.add_part(CoordinatorLookup(server.broker))


def _alive(server) -> bool:
    with WireClient(*server.bound) as c:
        return c.call(ApiVersionsRequestV0()).error_code == ErrorCode.none


def test_api_versions_lists_the_table():
    with running(_with_lookup) as server, WireClient(*server.bound) as c:
        body = c.call(ApiVersionsRequestV3(client_software_name="t", client_software_version="1"))
        assert body.error_code == ErrorCode.none
        ranges = {k.api_key: (k.min_version, k.max_version) for k in body.api_keys}
        assert ranges[18] == (0, 4)
        assert ranges[10] == (0, 6)


def test_api_versions_unsupported_version_answers_v0_body():
    with running() as server, WireClient(*server.bound) as c:
        # ApiVersions v9 does not exist: the answer must be a v0 body with UNSUPPORTED_VERSION and our ranges.
        raw = struct.pack(">hhi", 18, 9, 42) + struct.pack(">h", 1) + b"x" + b"\x00\x00\x00"
        c.sock.sendall(struct.pack(">i", len(raw)) + raw)
        payload = recv_frame(c.sock)
        correlation, error_code, count = struct.unpack_from(">ihi", payload, 0)
        assert correlation == 42
        assert error_code == ErrorCode.unsupported_version
        assert count >= 1
        key, lo, hi = struct.unpack_from(">hhh", payload, 10)
        assert (key, lo, hi) == (18, 0, 4)
        assert len(payload) == 10 + 6 * count  # strictly v0-shaped: nothing after the array


def test_unsupported_version_of_other_api_gets_error_code():
    with running(_with_lookup) as server, WireClient(*server.bound) as c:
        # FindCoordinator v0 is served; build a v1-shaped request but claim version 7 (unknown to kio): closed.
        raw = struct.pack(">hhi", 10, 7, 1) + struct.pack(">h", -1) + b"\x00"
        c.sock.sendall(struct.pack(">i", len(raw)) + raw)
        with pytest.raises(ConnectionError):
            recv_frame(c.sock)
        assert _alive(server)


def test_find_coordinator_names_this_node():
    with running(_with_lookup) as server, WireClient(*server.bound) as c:
        body = c.call(FindCoordinatorV1(key="g", key_type=0))
        assert body.error_code == ErrorCode.none
        assert (body.host, body.port) == server.bound
        batched = c.call(FindCoordinatorV4(key_type=0, coordinator_keys=("a", "b")))
        assert [x.key for x in batched.coordinators] == ["a", "b"]
        assert all(x.port == server.bound[1] for x in batched.coordinators)
        txn = c.call(FindCoordinatorV4(key_type=1, coordinator_keys=("t",)))
        assert txn.coordinators[0].error_code == ErrorCode.coordinator_not_available


@pytest.mark.parametrize("prefix", [struct.pack(">i", -1), struct.pack(">i", 2**31 - 1)])
def test_bad_frame_length_closes_only_that_connection(prefix):
    with running(socket_request_max_bytes=1024) as server, WireClient(*server.bound) as bad:
        bad.sock.sendall(prefix)
        with pytest.raises(ConnectionError):
            recv_frame(bad.sock)
        assert _alive(server)


def test_frame_at_the_limit_is_read_and_over_it_closes():
    limit = 4096
    with running(socket_request_max_bytes=limit) as server, WireClient(*server.bound) as c:
        # An ApiVersions v0 request padded to exactly the limit: trailing bytes are ignored, as Kafka does.
        header = struct.pack(">hhi", 18, 0, 5) + struct.pack(">h", 1) + b"x"
        c.sock.sendall(struct.pack(">i", limit) + header + b"\x00" * (limit - len(header)))
        assert struct.unpack_from(">i", recv_frame(c.sock))[0] == 5
        c.sock.sendall(struct.pack(">i", limit + 1) + b"\x00" * (limit + 1))
        with pytest.raises(ConnectionError):
            recv_frame(c.sock)


def test_garbage_and_unknown_api_key_close_the_connection():
    with running() as server:
        for raw in (
            b"\x00\x01",
            struct.pack(">hhi", 999, 0, 1) + b"\xff\xff",
            struct.pack(">hhi", 18, 3, 1) + b"\x00\x05ab",
        ):
            with WireClient(*server.bound) as c:
                c.sock.sendall(struct.pack(">i", len(raw)) + raw)
                with pytest.raises(ConnectionError):
                    recv_frame(c.sock)
        assert _alive(server)


def test_pipelined_requests_are_answered_in_order():
    with running(_with_lookup) as server, WireClient(*server.bound) as c:
        requests = [
            FindCoordinatorV1(key=f"g{i}", key_type=0) if i % 2 else ApiVersionsRequestV0()
            for i in range(200)
        ]
        c.sock.sendall(b"".join(encode_request(r, i) for i, r in enumerate(requests)))
        for i, r in enumerate(requests):
            got, _ = c.recv(r)
            assert got == i


def test_unimplemented_api_closes_connection():
    # Heartbeat is not in this table: an unknown key closes only this connection.
    with running() as server, WireClient(*server.bound) as c:
        c.send(HeartbeatV0(group_id="g", generation_id=1, member_id="m"))
        with pytest.raises(ConnectionError):
            recv_frame(c.sock)
        assert _alive(server)


def test_handler_failure_answers_unknown_server_error():
    async def boom(ctx, request):
        raise RuntimeError("boom")

    def setup(server):
        server.table.register(10, 0, 6, boom)

    with running(setup) as server, WireClient(*server.bound) as c:
        body = c.call(FindCoordinatorV1(key="g", key_type=0))
        assert body.error_code == ErrorCode.unknown_server_error
        assert _alive(server)


def test_handlers_without_a_coroutine_answer_in_request_order():
    """A handler may return its answer Ready, or a future that gets it (the hot paths); a future that fails and
    a handler that raises before returning answer UNKNOWN_SERVER_ERROR, and the connection carries on."""

    def answer(host: str) -> dict:
        return {
            "throttle_time": 0,
            "error_code": ErrorCode.none,
            "error_message": None,
            "node_id": 1,
            "host": host,
            "port": 1,
        }

    later: list[asyncio.Future] = []

    def handler(ctx, request):
        if request.key == "ready":
            return Ready(answer("ready"))
        if request.key == "raise":
            raise RuntimeError("boom")
        future = asyncio.get_running_loop().create_future()
        later.append(future)
        if len(later) == 2:  # the second pending one: settle both, the first with an error
            later[0].set_exception(RuntimeError("late boom"))
            asyncio.get_running_loop().call_later(0.05, later[1].set_result, answer("late"))
        return future

    def setup(server):
        server.table.register(10, 0, 3, handler)

    keys = ["ready", "failing", "ready", "late", "raise", "ready"]
    with running(setup) as server, WireClient(*server.bound) as c:
        requests = [FindCoordinatorV1(key=k, key_type=0) for k in keys]
        c.sock.sendall(b"".join(encode_request(r, i) for i, r in enumerate(requests)))
        got = [c.recv(r) for r in requests]
        assert [correlation for correlation, _ in got] == list(range(len(keys)))
        assert [(b.error_code, b.host) for _, b in got] == [
            (ErrorCode.none, "ready"),
            (ErrorCode.unknown_server_error, ""),
            (ErrorCode.none, "ready"),
            (ErrorCode.none, "late"),
            (ErrorCode.unknown_server_error, ""),
            (ErrorCode.none, "ready"),
        ]
        assert _alive(server)


def test_shutdown_answers_in_flight_requests():
    arrived = threading.Event()

    async def slow(ctx, request):
        arrived.set()
        await asyncio.sleep(0.3)
        return {
            "throttle_time": 0,
            "error_code": ErrorCode.none,
            "error_message": None,
            "node_id": 1,
            "host": "h",
            "port": 1,
        }

    def setup(server):
        server.table.register(10, 0, 3, slow)

    c = None
    with running(setup) as server:
        c = WireClient(*server.bound)
        c.send(FindCoordinatorV1(key="g", key_type=0))
        assert arrived.wait(10)
        # leaving the block closes the server while the request is in flight
    got, body = c.recv(FindCoordinatorV1(key="g", key_type=0))
    assert body.host == "h"
    with pytest.raises((ConnectionError, socket.timeout)):
        recv_frame(c.sock)
    c.close()


def test_shutdown_names_the_requests_it_gave_up_on(caplog):
    """A request still unanswered after shutdown.timeout.ms is dropped with its connection, and the log says
    which (api/version by connection): what a slow stop waited for."""
    arrived = threading.Event()

    async def never(ctx, request):
        arrived.set()
        await asyncio.Event().wait()

    def setup(server):
        server.table.register(10, 0, 3, never)

    with caplog.at_level("WARNING", logger="coordinator.server.listener"):
        with running(setup, shutdown_timeout_ms=200) as server:
            c = WireClient(*server.bound)
            c.send(FindCoordinatorV1(key="g", key_type=0))
            assert arrived.wait(10)
        c.close()
    busy = [r.getMessage() for r in caplog.records if "still busy" in r.getMessage()]
    assert len(busy) == 1 and "['10/v1']" in busy[0], caplog.text


def test_shutdown_goes_on_past_a_part_whose_close_never_ends(caplog):
    """A part stuck in its close holds the shutdown up for shutdown.timeout.ms (at least 1 s), not forever; the log
    says where it was stuck, and the parts before it are still closed."""
    closed = []

    class Stuck:
        def register(self, table):
            pass

        async def start(self):
            pass

        async def close(self):
            await asyncio.Event().wait()

    class Fine:
        def register(self, table):
            pass

        async def start(self):
            pass

        async def close(self):
            closed.append("fine")

    def setup(server):
        server.add_part(Fine())
        server.add_part(Stuck())

    with caplog.at_level("WARNING", logger="coordinator.server.listener"):
        with running(setup, shutdown_timeout_ms=200):
            pass
    assert closed == ["fine"]
    text = caplog.text
    assert "closing Stuck did not finish" in text, text
    assert "Stuck.close" in text, text  # the stack of the stuck step


def test_cancel_and_wait_stops_a_task_that_swallows_a_cancellation():
    """Python 3.11's wait_for can return a result instead of raising when cancelled; a loop around it goes round
    again. cancel_and_wait cancels until the task ends."""

    async def main():
        swallowed = 0

        async def loop_forever():
            nonlocal swallowed
            while True:
                try:
                    await asyncio.sleep(3600)
                except asyncio.CancelledError:
                    if swallowed == 0:
                        swallowed += 1
                        continue  # the first cancellation is lost, as in wait_for's race
                    raise

        task = asyncio.create_task(loop_forever())
        await asyncio.sleep(0)
        assert await cancel_and_wait([task], "test", 2.0)
        assert task.cancelled() and swallowed == 1

        give_in = False

        async def stops_when_told():
            while True:
                try:
                    await asyncio.sleep(3600)
                except asyncio.CancelledError:
                    if give_in:
                        raise

        stubborn = asyncio.create_task(stops_when_told())
        await asyncio.sleep(0)
        assert not await cancel_and_wait([stubborn], "test", 0.2)  # gives up on it, and says so
        give_in = True
        assert await cancel_and_wait([stubborn], "test", 1.0)

    asyncio.run(main())


def test_every_listener_is_bound_before_any_serves():
    """A part may add listeners while it starts (the front: one per upstream broker) and its answers name them
    (FindCoordinator, Metadata): when the first listener takes connections, every other one has its port."""
    from coordinator.server.listener import KafkaListener, Server

    class AddsListeners:
        def __init__(self, server: Server) -> None:
            self.server = server

        def register(self, table) -> None:
            pass

        async def start(self) -> None:
            for _ in range(3):
                await self.server.add_listener(KafkaListener("PLAINTEXT", "127.0.0.1", 0))

        async def close(self) -> None:
            pass

    seen: list[list[int]] = []

    def setup(server: Server) -> None:
        server.add_part(AddsListeners(server))
        accept_on = server._accept_on

        async def recording(listener) -> None:
            seen.append([other.bound_port for other in server.listeners])
            await accept_on(listener)

        server._accept_on = recording

    with running(setup) as server:
        assert len(server.listeners) == 4
        assert len(seen) == 4 and all(port > 0 for ports in seen for port in ports), seen
        for listener in server.listeners:  # each takes connections
            with WireClient("127.0.0.1", listener.bound_port) as c:
                assert c.call(ApiVersionsRequestV0()).error_code == ErrorCode.none


def test_every_connection_waiting_in_the_listen_queue_is_taken_at_once():
    """When a listener is readable, every connection waiting in its listen queue is taken, not one per turn of the
    event loop (asyncio.start_server on uvloop took one: on a busy loop, 500 consumers starting together waited
    seconds for their first answer); each then answers."""
    with running() as server:
        listener = server.listeners[0]
        assert listener.sock is not None
        fd = listener.sock.fileno()

        async def stop_taking() -> None:
            asyncio.get_running_loop().remove_reader(fd)

        async def take_once() -> int:
            before = len(server._opened)
            server._take_connections(listener)
            taken = len(server._opened) - before
            asyncio.get_running_loop().add_reader(fd, server._take_connections, listener)
            return taken

        run_on(server, stop_taking())
        clients = [socket.create_connection(server.bound, timeout=10) for _ in range(50)]
        try:
            assert run_on(server, take_once()) == 50
            for i, client in enumerate(clients):
                client.sendall(encode_request(ApiVersionsRequestV0(), i))
            for client in clients:
                assert struct.unpack_from(">ih", recv_frame(client))[1] == ErrorCode.none
        finally:
            for client in clients:
                client.close()
