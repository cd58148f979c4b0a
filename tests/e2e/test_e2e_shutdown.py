"""SIGTERM while clients are connected: an idle socket, a half-sent frame, a Fetch parked in its long poll,
and a live consumer process. The server still exits 0, promptly (it does not sit out the long poll)."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time

import pytest

from tests.support.e2e import CLIENTS, create_topic
from tests.support.server import PYTHON, REPO
from tests.support.wire import WireClient, decode_response, encode_request, make, request_class

pytestmark = pytest.mark.e2e

PROMPT_S = 5.0


def _read_to_eof(sock: socket.socket, timeout: float = 5.0) -> bytes:
    """Read until EOF; return what arrived. Fails if the socket stays open."""
    sock.settimeout(timeout)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass
    except TimeoutError:
        pytest.fail(f"connection still open {timeout}s after the server stopped")
    return data


def test_sigterm_with_connected_clients_and_parked_fetch(server_factory):
    server = server_factory()
    create_topic("ck", server, "idle", 1)
    with contextlib.ExitStack() as stack:
        consumer = subprocess.Popen(
            [PYTHON, str(CLIENTS / "ck.py"), "consume", "--bootstrap", server.bootstrap, "--topic", "idle",
             "--partitions", "1", "--expect", "1", "--timeout", "60"],
            cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        stack.callback(consumer.wait, timeout=10)
        stack.callback(consumer.kill)
        idle = stack.enter_context(socket.create_connection((server.host, server.port), timeout=5))
        partial = stack.enter_context(socket.create_connection((server.host, server.port), timeout=5))
        partial.sendall(b"\x00\x00")  # half a length prefix
        parked = stack.enter_context(WireClient(server.host, server.port))
        fetch = make(request_class(1, 4), {
            "replica_id": -1, "max_wait": 30000, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "topics": [{"topic": "idle", "partitions": [
                {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}],
        })  # fmt: skip
        parked.sock.sendall(encode_request(fetch, 77))
        time.sleep(1.5)  # the consumer is connected and fetching; the raw Fetch is parked
        assert consumer.poll() is None, "the consumer process exited early"

        t0 = time.monotonic()
        code = server.stop()  # raises (and the test fails) if it takes more than 10 s
        elapsed = time.monotonic() - t0
        assert code == 0, f"exit code {code}\n{server.output()}"
        assert elapsed < PROMPT_S, f"shutdown took {elapsed:.1f}s with a 30 s Fetch parked"

        answer = _read_to_eof(parked.sock)
        if answer:  # an early, empty answer to the parked fetch is fine; garbage is not
            size = int.from_bytes(answer[:4], "big")
            cid, resp = decode_response(1, 4, answer[4 : 4 + size])
            assert cid == 77
            assert all(not p.records for t in resp.responses for p in t.partitions)
        assert _read_to_eof(idle) == b""
        assert _read_to_eof(partial) == b""
