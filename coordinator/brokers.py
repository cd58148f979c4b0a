"""Listening sockets and the addresses clients see. Light on imports: the supervisor of several workers uses it
before it starts them.

A listener is bound here, not by asyncio: a port that is still taken (a predecessor SIGKILLed a moment ago whose
workers have not died yet, a client connection that happens to hold the port as its local one) is retried for
`BIND_RETRY_S` with a line in the log, then refused with a message that says what was tried.
"""

from __future__ import annotations

import errno
import logging
import socket
import time

log = logging.getLogger(__name__)

LISTEN_BACKLOG = 4096  # capped by net.core.somaxconn; asyncio's default of 100 overflowed with 500 clients
BIND_RETRY_S = 10.0
_RETRY_PAUSE_S = 0.1


class ListenError(OSError):
    """A listener could not be bound; the message names the address (and how long a taken port was retried)."""


def bind_listener(host: str, port: int, retry_s: float = BIND_RETRY_S) -> socket.socket:
    """A listening TCP socket on HOST:PORT (port 0: a free port; host "", "0.0.0.0": every IPv4 address; "::":
    every address, IPv4 too where the system can). EADDRINUSE on a given port is retried for `retry_s` seconds.
    Raises ListenError."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    bind_host = "" if host in ("", "0.0.0.0") else host
    address = f"[{host}]:{port}" if ":" in host else f"{host or '0.0.0.0'}:{port}"
    deadline = time.monotonic() + retry_s
    warned = False
    while True:
        try:
            if host == "::":
                return socket.create_server(("", port), family=socket.AF_INET6, backlog=LISTEN_BACKLOG,
                                            reuse_port=False, dualstack_ipv6=socket.has_dualstack_ipv6())
            return socket.create_server((bind_host, port), family=family, backlog=LISTEN_BACKLOG)
        except OSError as exc:
            retry = exc.errno == errno.EADDRINUSE and port != 0
            if not retry or time.monotonic() >= deadline:
                tried = f" (retried for {retry_s:.0f} s)" if retry and retry_s > 0 else ""
                raise ListenError(exc.errno, f"cannot listen on {address}: {exc.strerror or exc}{tried}") from exc
            if not warned:
                log.warning("%s is in use; retrying for up to %.0f s", address, retry_s)
                warned = True
            time.sleep(_RETRY_PAUSE_S)
