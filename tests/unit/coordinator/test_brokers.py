"""Binding listeners (coordinator.brokers): a taken port is retried for a bounded time, then refused with a message
that names the address; several workers on port 0 get a block of consecutive ports (a restart with the first one
binds the same block)."""

from __future__ import annotations

import errno
import socket
import threading

import pytest

from coordinator.brokers import ListenError, bind_listener
from coordinator.cluster.supervisor import _bind_block


def _taken() -> socket.socket:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    return holder


def test_a_port_in_use_is_retried_until_it_is_free():
    holder = _taken()
    port = holder.getsockname()[1]
    threading.Timer(0.3, holder.close).start()  # the predecessor lets go a moment later
    sock = bind_listener("127.0.0.1", port, retry_s=10)
    with sock:
        assert sock.getsockname()[1] == port


def test_a_port_that_stays_in_use_is_refused_with_the_address_and_the_time_tried():
    with _taken() as holder:
        port = holder.getsockname()[1]
        with pytest.raises(ListenError) as caught:
            bind_listener("127.0.0.1", port, retry_s=0.3)
    assert caught.value.errno == errno.EADDRINUSE
    assert f"cannot listen on 127.0.0.1:{port}" in str(caught.value)
    assert "retried for" in str(caught.value)


def test_without_retry_a_taken_port_fails_at_once():
    with _taken() as holder:
        with pytest.raises(ListenError, match="cannot listen on"):
            bind_listener("127.0.0.1", holder.getsockname()[1], retry_s=0)


def test_port_0_for_several_workers_binds_consecutive_ports():
    block = _bind_block("127.0.0.1", 3)
    try:
        ports = [s.getsockname()[1] for s in block]
        assert ports == [ports[0], ports[0] + 1, ports[0] + 2]
    finally:
        for s in block:
            s.close()
    # A restart with the announced port binds the same block (nothing holds it now).
    again = [bind_listener("127.0.0.1", ports[0] + w) for w in range(3)]
    for s in again:
        s.close()


def test_a_block_never_includes_a_taken_port():
    taken = []
    try:
        block = _bind_block("127.0.0.1", 2)
        ports = [s.getsockname()[1] for s in block]
        for s in block:
            s.close()
        holder = socket.socket()
        holder.bind(("127.0.0.1", ports[1]))
        holder.listen()
        taken.append(holder)
        block = _bind_block("127.0.0.1", 2)
        got = [s.getsockname()[1] for s in block]
        for s in block:
            s.close()
        assert got[1] == got[0] + 1 and ports[1] not in got
    finally:
        for s in taken:
            s.close()
