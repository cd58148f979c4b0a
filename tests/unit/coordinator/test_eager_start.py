"""coordinator.server.connection.start: a handler runs on the caller's stack until it first suspends; an answer
ready by then costs no task, and one that is not carries on in a task exactly as if it had been one."""

from __future__ import annotations

import asyncio

import pytest

from coordinator.server.connection import Ready, start


def test_an_answer_ready_at_once_needs_no_task() -> None:
    steps: list[str] = []

    async def handler() -> str:
        steps.append("ran")
        return "answer"

    async def main() -> None:
        started = start(handler())
        assert steps == ["ran"]  # before start() returned
        assert isinstance(started, Ready) and started.done() and started.value == "answer"
        assert not started.cancel()

    asyncio.run(main())


def test_a_handler_that_suspends_carries_on_in_a_task() -> None:
    steps: list[str] = []

    async def handler(future: asyncio.Future[int]) -> int:
        steps.append("before")
        value = await future
        steps.append("after")
        await asyncio.sleep(0)  # a bare yield, too
        return value + 1

    async def main() -> None:
        future = asyncio.get_running_loop().create_future()
        task = start(handler(future))
        assert steps == ["before"] and isinstance(task, asyncio.Task) and not task.done()
        future.set_result(41)
        assert await task == 42
        assert steps == ["before", "after"]

    asyncio.run(main())


def test_errors_and_cancellation_reach_the_handler_after_it_suspended() -> None:
    cleaned: list[str] = []

    async def failing(future: asyncio.Future[None]) -> None:
        await future
        raise ValueError("late")

    async def waiting(future: asyncio.Future[None]) -> None:
        try:
            await future
        finally:
            cleaned.append("finally")

    async def main() -> None:
        loop = asyncio.get_running_loop()
        first = loop.create_future()
        task = start(failing(first))
        first.set_result(None)
        with pytest.raises(ValueError, match="late"):
            await task
        second = loop.create_future()
        task = start(waiting(second))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert cleaned == ["finally"]

    asyncio.run(main())


def test_an_error_before_the_first_suspension_is_the_callers() -> None:
    async def handler() -> None:
        raise KeyError("now")

    async def main() -> None:
        with pytest.raises(KeyError):
            start(handler())

    asyncio.run(main())
