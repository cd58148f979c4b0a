"""Timing of the group log: a decorator around storage.Log.

storage.Log counts what it does (`stats()`: appends, fsync rounds, bytes, compactions) but does not time it. The
server wraps the shard's log in `TimedLog` once the log is loaded: every attribute and call is delegated
unchanged, and `append` and `compact` additionally report how long their futures took to complete — for an
append that is the time from queueing to durable (the group-commit linger, the write and the fsync), which is
what a request waiting for its records pays.
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable
from typing import Any

Observer = Callable[[float], None]


class TimedLog:
    def __init__(self, log: Any, on_append: Observer, on_compact: Observer,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.wrapped = log
        self._on_append = on_append
        self._on_compact = on_compact
        self._clock = clock

    def append(self, *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
        started = self._clock()
        future: concurrent.futures.Future[Any] = self.wrapped.append(*args, **kwargs)
        future.add_done_callback(lambda f: self._done(f, started, self._on_append))
        return future

    def compact(self, *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
        started = self._clock()
        future: concurrent.futures.Future[Any] = self.wrapped.compact(*args, **kwargs)
        future.add_done_callback(lambda f: self._done(f, started, self._on_compact))
        return future

    def _done(self, future: concurrent.futures.Future[Any], started: float, observe: Observer) -> None:
        if not future.cancelled() and future.exception() is None:
            observe(self._clock() - started)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.wrapped, name)
