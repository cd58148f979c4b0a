"""Run a Server on its own event loop in a background thread, for tests that talk to it over sockets."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import weakref
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

from coordinator.config import Config
from coordinator.server.listener import Server


T = TypeVar("T")
_loops: weakref.WeakKeyDictionary[Server, asyncio.AbstractEventLoop] = weakref.WeakKeyDictionary()


def run_on(server: Server, coro: Coroutine[Any, Any, T], timeout_s: float = 10.0) -> T:
    """Run `coro` on the event loop of a server started by `running` and return its result."""
    return asyncio.run_coroutine_threadsafe(coro, _loops[server]).result(timeout_s)


@contextlib.contextmanager
def running(setup: Callable[[Server], None] | None = None, **settings: object) -> Iterator[Server]:
    config = Config({k.replace("_", "."): v for k, v in settings.items()})
    server = Server(config, listen=("127.0.0.1", 0), admin_listen=("127.0.0.1", 0))
    if setup is not None:
        setup(server)
    loop = asyncio.new_event_loop()
    _loops[server] = loop
    started = threading.Event()

    def main() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(server.start())
        started.set()
        loop.run_forever()

    thread = threading.Thread(target=main, daemon=True)
    thread.start()
    assert started.wait(10), "server did not start"
    try:
        yield server
    finally:
        asyncio.run_coroutine_threadsafe(server.close(), loop).result(15)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
