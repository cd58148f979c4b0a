"""Assemble a standalone server from its parts and run it until SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys

from coordinator.config import Config

from .groups import GroupCoordinator
from .listener import Server
from .lookup import CoordinatorLookup
from .metrics import ShardCollector

log = logging.getLogger(__name__)


def build_server(
    config: Config,
    listen: tuple[str, int],
    admin_listen: tuple[str, int] | None,
    advertised: tuple[str, int] | None,
    data_dir: str,
) -> Server:
    from coordinator.dataplane.embedded import EmbeddedDataPlane

    server = Server(config, listen=listen, admin_listen=admin_listen, advertised=advertised, data_dir=data_dir)
    dataplane = EmbeddedDataPlane(config, server.broker, data_dir=data_dir)
    server.dataplane = dataplane
    server.add_part(dataplane)
    server.add_part(CoordinatorLookup(server.broker))
    server.groups = GroupCoordinator(config, data_dir)
    server.add_part(server.groups)
    server.metrics.registry.register(ShardCollector(server.groups))
    install_security(server, config, data_dir)
    return server


def install_security(server: Server, config: Config, data_dir: str | None) -> None:
    """Listeners, SASL, SCRAM and ACLs (coordinator.security). Added after every other part, so that its
    authorizer wraps all their APIs; with `listeners` set, its first listener replaces --listen."""
    from coordinator.security import Security

    security = Security(config, data_dir, server.dataplane, server.metrics.registry)
    server.security = security
    if security.listeners:
        first = security.listeners[0]
        server.listen = (first.host, first.port)
        server.primary_listener = first
    server.add_part(security)


async def serve(server: Server) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await server.start()
    listeners = server.listeners_line()
    if listeners is not None:
        print(listeners, flush=True)  # before the announce line, which scripts wait for
    print(server.announce(), flush=True)
    log.info("%s", server.announce())
    await stop.wait()
    log.info("shutting down")
    await server.close()
    log.info("stopped")


def run(server: Server) -> None:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency; this only helps odd platforms
        asyncio.run(serve(server))
        return
    if sys.version_info >= (3, 12):
        uvloop.run(serve(server))
    else:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(serve(server))
