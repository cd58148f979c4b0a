"""Waiting for a condition instead of sleeping for a while: a test that needs "the fetch has parked" or "the
follower's SyncGroup is waiting" polls that state (yielding to the loop) rather than sleeping and hoping."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


async def until(predicate: Callable[[], object], what: str = "the condition", timeout: float = 5.0) -> None:
    """Return as soon as `predicate()` is true; fail after `timeout` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout}s")
        await asyncio.sleep(0.001)
