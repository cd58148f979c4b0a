"""Stopping background tasks for sure, and saying what a stuck one is doing.

One `task.cancel()` does not always stop a task: a loop that catches the cancellation, or Python 3.11's
`asyncio.wait_for`, which returns the result instead of raising when the cancellation arrives in the same loop turn
as the result, lets a `while True` go round again. A close that then awaits the task waits forever, and a server
stuck in its shutdown says nothing. `cancel_and_wait` cancels again until the task ends or a time budget runs out,
and logs where a task that would not stop was."""

from __future__ import annotations

import asyncio
import io
import logging
import sys
import threading
import traceback
from collections.abc import Iterable
from typing import Any

log = logging.getLogger(__name__)

RECANCEL_S = 0.05  # how often a task still running is cancelled again
STOP_TIMEOUT_S = 2.0  # how long a background task gets to stop at a close, unless told otherwise


async def cancel_and_wait(
    tasks: Iterable[asyncio.Future[Any]], what: str, timeout_s: float = STOP_TIMEOUT_S
) -> bool:
    """Cancel `tasks` and wait for them to end, cancelling again every RECANCEL_S, for up to `timeout_s`. True
    when all ended; else logs the stacks of those that did not (`what` names them) and returns False."""
    chosen = list(tasks)
    pending = {t for t in chosen if not t.done()}
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while pending:
        for task in pending:
            task.cancel()
        left = deadline - loop.time()
        if left <= 0:
            log.warning(
                "%s: %d task(s) did not stop within %.1f s\n%s",
                what,
                len(pending),
                timeout_s,
                stacks(pending),
            )
            return False
        _, pending = await asyncio.wait(pending, timeout=min(RECANCEL_S, left))
    for (
        task
    ) in chosen:  # an error a task ended with is of no interest now; retrieved, so asyncio does not log it
        if not task.cancelled():
            task.exception()
    return True


def stacks(tasks: Iterable[asyncio.Future[Any]] | None = None, threads: bool = False) -> str:
    """Where each of `tasks` (default: every task of the running loop) is, and with `threads` where each thread
    is: for a log line about something stuck."""
    out = io.StringIO()
    chosen = asyncio.all_tasks() if tasks is None else tasks
    for task in chosen:
        if isinstance(task, asyncio.Task):
            task.print_stack(limit=12, file=out)
        else:
            print(f"future {task!r}", file=out)
    if threads:
        frames = sys._current_frames()
        for thread in threading.enumerate():
            frame = frames.get(thread.ident or -1)
            if frame is not None and thread is not threading.current_thread():
                print(f"thread {thread.name}:", file=out)
                traceback.print_stack(frame, limit=12, file=out)
    return out.getvalue()
