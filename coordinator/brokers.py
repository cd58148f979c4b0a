"""Listening sockets and the addresses clients see. Light on imports: the supervisor of several workers uses it
before it starts them.

What address a client sees (`client_address`): the advertised listener if one is set; for a wildcard listener,
the local address of the connection the current request came in on (`local_address`, set by each connection), so
a client is told the address it already reached; else the bound address. Metadata, FindCoordinator and every
worker's view of the others follow this one rule.

A listener is bound here, not by asyncio: a port that is still taken (a predecessor SIGKILLed a moment ago whose
workers have not died yet, a client connection that happens to hold the port as its local one) is retried for
`BIND_RETRY_S` with a line in the log, then refused with a message that says what was tried.
"""

from __future__ import annotations

import contextvars
import dataclasses
import errno
import logging
import socket
import time

log = logging.getLogger(__name__)

WILDCARDS = ("", "0.0.0.0", "::")
LISTEN_BACKLOG = 4096  # capped by net.core.somaxconn; asyncio's default of 100 overflowed with 500 clients
BIND_RETRY_S = 10.0
_RETRY_PAUSE_S = 0.1


# The local address a request arrived on: a wildcard listener advertises the address its client reached.
local_address: contextvars.ContextVar[tuple[str, int]] = contextvars.ContextVar("local_address")


@dataclasses.dataclass(frozen=True, slots=True)
class Broker:
    """A node as clients reach it (Metadata's brokers, FindCoordinator's answer)."""

    node_id: int
    host: str
    port: int


def client_address(host: str, port: int, advertised: tuple[str, int] | None = None) -> tuple[str, int]:
    """The address a client should use for a listener bound on host:port (see the module doc). An advertised
    port of 0 means the bound port."""
    if advertised is not None:
        return advertised[0], advertised[1] or port
    if host in WILDCARDS:
        host = local_address.get((host, port))[0]
        if host in WILDCARDS:
            host = socket.gethostname()
    return host, port


def show_host(host: str) -> str:
    """A host as the announce line prints it."""
    if host in WILDCARDS:
        return "0.0.0.0"
    return f"[{host}]" if ":" in host else host


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
                return socket.create_server(
                    ("", port),
                    family=socket.AF_INET6,
                    backlog=LISTEN_BACKLOG,
                    reuse_port=False,
                    dualstack_ipv6=socket.has_dualstack_ipv6(),
                )
            return socket.create_server((bind_host, port), family=family, backlog=LISTEN_BACKLOG)
        except OSError as exc:
            retry = exc.errno == errno.EADDRINUSE and port != 0
            if not retry or time.monotonic() >= deadline:
                tried = f" (retried for {retry_s:.0f} s)" if retry and retry_s > 0 else ""
                raise ListenError(
                    exc.errno, f"cannot listen on {address}: {exc.strerror or exc}{tried}"
                ) from exc
            if not warned:
                log.warning("%s is in use; retrying for up to %.0f s", address, retry_s)
                warned = True
            time.sleep(_RETRY_PAUSE_S)
