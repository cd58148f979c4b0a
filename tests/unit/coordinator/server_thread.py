"""Run a Server (or a whole App) on its own event loop in a background thread, for tests that talk to it over
sockets."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import weakref
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from typing import Any, TypeVar

from coordinator.app import App
from coordinator.config import Config
from coordinator.server.listener import KafkaListener, Server

T = TypeVar("T")
_loops: weakref.WeakKeyDictionary[Server, asyncio.AbstractEventLoop] = weakref.WeakKeyDictionary()


def run_on(server: Server, coro: Coroutine[Any, Any, T], timeout_s: float = 10.0) -> T:
    """Run `coro` on the event loop of a server started by `running` or `running_app` and return its result."""
    return asyncio.run_coroutine_threadsafe(coro, _loops[server]).result(timeout_s)


@contextlib.contextmanager
def _on_its_own_loop(
    server: Server, start: Callable[[], Awaitable[None]], close: Callable[[], Awaitable[None]]
) -> Iterator[None]:
    loop = asyncio.new_event_loop()
    _loops[server] = loop
    started = threading.Event()

    def main() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(start())
        started.set()
        loop.run_forever()

    thread = threading.Thread(target=main, daemon=True)
    thread.start()
    assert started.wait(10), "server did not start"
    try:
        yield
    finally:
        asyncio.run_coroutine_threadsafe(close(), loop).result(15)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


@contextlib.contextmanager
def running(setup: Callable[[Server], None] | None = None, **settings: object) -> Iterator[Server]:
    """A Kafka listener on 127.0.0.1:0 with the parts `setup(server)` adds; settings by their names with
    underscores (`socket_request_max_bytes=1024`) or dots."""
    config = Config({k.replace("_", "."): v for k, v in settings.items()})
    server = Server(config, [KafkaListener("PLAINTEXT", "127.0.0.1", 0)])
    if setup is not None:
        setup(server)
    with _on_its_own_loop(server, server.start, server.close):
        yield server


@contextlib.contextmanager
def running_app(built: App) -> Iterator[App]:
    """A whole server as coordinator.app assembles it (Kafka and admin listeners)."""
    with _on_its_own_loop(built.server, built.start, built.close):
        yield built
