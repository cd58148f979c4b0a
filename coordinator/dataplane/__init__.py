"""The data plane: topics and partitions, behind one interface.

`EmbeddedDataPlane` (standalone) keeps partition logs itself; `ForwardingDataPlane` (coordinator.cluster.forwarding)
relays data requests to the process that keeps them; an upstream implementation (later) forwards data requests to
an existing Kafka cluster and rewrites Metadata to point at this server. The server asks a data plane
only to register its handlers in the API table and for the facts the coordinator needs (node identity, log-end
offsets for lag).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Protocol

from protocol.api import ApiTable


class DataPlane(Protocol):
    def register(self, table: ApiTable) -> None:
        """Register Metadata, CreateTopics, DeleteTopics, Produce, ListOffsets and Fetch handlers."""

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    def log_end_offset(self, topic: str, partition: int) -> int | None:
        """The high watermark of a partition, or None when it does not exist."""

    def partition_count(self, topic: str) -> int | None:
        """The number of partitions of a topic, or None when it does not exist."""

    async def catch_up(self) -> None:
        """Return once `log_end_offset` and `partition_count` reflect every topic change acknowledged before the
        call (read-your-writes for the admin API: a topic created a moment ago is known)."""


class SharedRefresh:
    """`catch_up` for a data plane that follows another process's topics through a cache (the forwarder of a
    worker, the front's upstream cluster): `await shared()` returns once a `refresh()` that began after the call
    has completed; concurrent callers share one."""

    def __init__(self, refresh: Callable[[], Awaitable[None]]) -> None:
        self._refresh = refresh
        self._lock = asyncio.Lock()
        self._started = 0
        self._completed = 0  # the ordinal of the last refresh that completed

    async def __call__(self) -> None:
        asked = self._started
        async with self._lock:
            if self._completed > asked:
                return  # a refresh that began after the call has completed meanwhile
            self._started += 1
            ordinal = self._started
            await self._refresh()
            self._completed = ordinal
