"""The shard runtime: runs the pure group state machine on the event loop.

A request becomes a call into the state machine with an opaque token (an asyncio future stands behind it). The
state machine answers with a CoordinatorResult: records to persist and (token, response) pairs to release. The runtime
appends the records, replays them into the state machine once they are durable, and only then resolves the futures
of that result, so an answer never claims a write that is not on disk. A parked JoinGroup/SyncGroup simply has no
response yet: a later result (another member's request, a timer) carries it, and the runtime resolves it then.

Timers are the state machine's own: `AsyncioTimer` implements coordinator.clock.Timer with `loop.call_later`, and an
expired operation's result goes through the same path as a request's.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Generator
from typing import Any, Protocol

log = logging.getLogger(__name__)


class LoopClock:
    """coordinator.clock.Clock on the event loop's monotonic clock."""

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._loop = loop

    def monotonic_ms(self) -> int:
        loop = self._loop
        if loop is None:  # the running one, kept (get_running_loop() costs a system call)
            loop = self._loop = asyncio.get_running_loop()
        return int(loop.time() * 1000)

    def wall_ms(self) -> int:
        return int(time.time() * 1000)


class Applier(Protocol):
    barriers: set[asyncio.Task[None]]

    def apply(self, result: Any) -> None: ...

    async def quiesce(self, group_id: str | None = None) -> None: ...


class AsyncioTimer:
    """coordinator.clock.Timer: one pending operation per key; scheduling a key again replaces it.

    Rescheduling a key to a later time (a session timeout pushed back by every heartbeat) only records the new
    deadline and operation: the armed loop timer, when it fires early, re-arms itself for the recorded deadline.
    That saves a cancel and a new loop timer per heartbeat.
    """

    def __init__(self, runtime: Applier) -> None:
        self._runtime = runtime
        self._loop: asyncio.AbstractEventLoop | None = None
        # key -> [loop timer, when it fires (loop time), deadline (loop time), operation]
        self._entries: dict[str, list[Any]] = {}
        self._deferred: dict[str, asyncio.Task[None]] = {}

    def schedule(self, key: str, delay_ms: int, op: Callable[[], Any]) -> None:
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        deadline = loop.time() + max(delay_ms, 0) / 1000
        deferred = self._deferred.pop(key, None)
        if deferred is not None:
            deferred.cancel()
        entry = self._entries.get(key)
        if entry is not None:
            if entry[1] <= deadline:
                entry[2] = deadline
                entry[3] = op
                return
            entry[0].cancel()
        self._entries[key] = [loop.call_at(deadline, self._fire, key), deadline, deadline, op]

    def cancel(self, key: str) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            entry[0].cancel()
        deferred = self._deferred.pop(key, None)
        if deferred is not None:
            deferred.cancel()

    def is_scheduled(self, key: str) -> bool:
        return key in self._entries or key in self._deferred

    def cancel_all(self) -> None:
        for entry in self._entries.values():
            entry[0].cancel()
        self._entries.clear()
        for task in self._deferred.values():
            task.cancel()
        self._deferred.clear()

    def _fire(self, key: str) -> None:
        entry = self._entries.get(key)
        if entry is None:
            return
        loop = self._loop or asyncio.get_running_loop()
        if entry[2] > entry[1]:  # pushed back since it was armed
            entry[1] = entry[2]
            entry[0] = loop.call_at(entry[2], self._fire, key)
            return
        del self._entries[key]
        op = entry[3]
        if self._runtime.barriers:
            self._deferred[key] = loop.create_task(self._fire_later(key, op))
            return
        self._run(key, op)

    async def _fire_later(self, key: str, op: Callable[[], Any]) -> None:
        await self._runtime.quiesce()
        if self._deferred.get(key) is asyncio.current_task():
            del self._deferred[key]
            self._run(key, op)

    def _run(self, key: str, op: Callable[[], Any]) -> None:
        try:
            result = op()
        except Exception:
            log.exception("timer operation %s failed", key)
            return
        self._runtime.apply(result)


class ShardRuntime:
    """Delivers a state machine's results: records first (durably when a log is attached), then responses.

    A result with records is appended to the log; once the append is fsynced the records are replayed into the
    state machine and the result's responses released. If the append fails or is not durable within
    `timeout_ms` (offsets.commit.timeout.ms), the state machine's `on_append_failure` undoes what it applied and
    its answers (a retriable COORDINATOR_NOT_AVAILABLE) are released instead. The results of one loop iteration
    (a burst of commits) share one append, one task and one timer: a result joins the newest write while that
    write's task has not started, and they succeed or fail together, settled in the order they were applied. A
    result without records that follows writes still in flight waits for them to settle, so an answer never
    overtakes a write it may depend on.

    Barrier writes (group metadata: a new group, the leader's assignment, a static replacement) go further: the
    state machine applies them in memory before they are durable and undoes them if the append fails, so nothing
    may be computed on top of them meanwhile. Membership requests wait for `quiesce()` before they enter the
    state machine, and timer operations that fire meanwhile are deferred until the barrier settles; a follower's
    SyncGroup therefore sees the leader's assignment only once it is on disk (Kafka parks it instead). Requests
    wait only for their own group's barriers (`quiesce(group)`), so one group's rebalance does not hold back the
    heartbeats of the other groups of its shard.
    """

    def __init__(
        self,
        log: Any = None,
        timeout_ms: int = 5000,
        failure_error: int = 15,
        on_append: Callable[[float], None] | None = None,
    ) -> None:
        """`on_append(seconds)`: how long each successful append took, from queueing to durable (the log's
        group-commit linger, the write and the fsync: what a request waiting for its records pays)."""
        self.machine: Any = None  # the state machine; set once it is built (it needs our timer)
        self.log = log  # storage.Log or None (tests, in-memory)
        self._on_append = on_append
        self.timeout_ms = timeout_ms
        self.failure_error = failure_error  # COORDINATOR_NOT_AVAILABLE
        # The requests waiting for their answer: token -> its future and, for a `submit`, the answer to give if
        # the shard is given up meanwhile, as (function, *arguments) (None: the future fails with ShardAborted).
        self._futures: dict[object, tuple[asyncio.Future[Any], tuple[Any, ...] | None]] = {}
        # The token of the request `submit` is applying: its answer, released at once, is kept in _sync_answer
        # instead of resolving a future.
        self._sync_token: Token | None = None
        self._sync_answer: Any = _PENDING
        self._writes: set[asyncio.Task[None]] = set()
        # The answers without records that wait for writes in flight: a write -> [remaining, result] for each
        # answer waiting for it, in the order they were applied; the write releases them itself when it is
        # replayed (no task each: an answer is on the wire two loop turns after its write is durable, not four).
        # None once the write released them, until it is done.
        self._followers: dict[asyncio.Task[None], list[list[Any]] | None] = {}
        # The newest write: each write waits for the one before it, so waiting for the newest waits for all
        # (passing every write in flight to each new one made a burst of n writes cost O(n^2)).
        self._last: asyncio.Task[None] | None = None
        self.barriers: set[asyncio.Task[None]] = set()
        self._group_barriers: dict[str, set[asyncio.Task[None]]] = {}  # by group id
        self._last_by_group: dict[str, asyncio.Task[None]] = {}  # the newest write in flight of each group
        self._written: dict[asyncio.Task[None], set[str]] = {}  # a write in flight -> the groups it writes
        self._last_ungrouped: asyncio.Task[None] | None = None  # the newest write of no known group
        self._open: _Batch | None = None  # the newest write, while its task has not started
        self.append_failures = 0
        # Stall tracking (see GroupCoordinator's shard failure): the loop time of the first failed or timed-out
        # append since the last one that succeeded. While the log hangs (the last append timed out), a new write
        # is failed as soon as the writes before it settle instead of being queued behind the disk: only one
        # write at a time probes the log, so nothing piles up there.
        self.stalled_since: float | None = None
        self.hung = False  # the last append timed out (an error that comes back at once piles nothing up)
        self.fast_failures = 0
        self.aborted = False
        # Appends in flight when the log reports settled flushes (settled_hook): append future -> the future
        # _persist waits on, and when it was queued. Without the hook, each append future is wrapped instead.
        self._bridged = False
        self._durable: dict[Any, tuple[asyncio.Future[Any], float]] = {}
        # The event loop, once known: asyncio.get_running_loop() costs a getpid() system call in Python 3.11 (it
        # checks for a fork), once or twice per request on this path.
        self._loop: asyncio.AbstractEventLoop | None = None

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        return loop

    def settled_hook(self) -> Callable[[list[Any]], None]:
        """For storage.Log.open(settled=...): the writer thread hands over each flush's appends with one
        thread-safe call, instead of one per append (asyncio.wrap_future); the appends are made with
        Log.append_settled, so none needs a future of its own. Call on the event loop."""
        loop = self._running_loop()
        self._bridged = True

        def settled(futures: list[Any]) -> None:
            loop.call_soon_threadsafe(self._settle, futures)

        return settled

    def _settle(self, futures: list[Any]) -> None:
        now = time.perf_counter()
        for appended in futures:
            waiting = self._durable.pop(appended, None)
            if waiting is None:
                continue  # timed out meanwhile
            durable, started = waiting
            if durable.done():
                continue
            exc = appended.exception()
            if exc is not None:
                durable.set_exception(exc)
                continue
            durable.set_result(appended.result())
            if self._on_append is not None:
                self._on_append(now - started)

    async def _wait_for(self, tasks: list[asyncio.Task[None]]) -> None:
        """Wait until each of `tasks` is done, whatever its outcome (asyncio.wait without its set building and the
        getpid() of its get_running_loop(): this runs once per write)."""
        for task in tasks:
            if not task.done():
                waiter: asyncio.Future[None] = self._running_loop().create_future()
                task.add_done_callback(functools.partial(_wake, waiter))
                await waiter

    def must_wait(self, group_id: str | None = None) -> bool:
        """`quiesce(group_id)` would wait: a barrier write of the group (of any group, for None) is in flight."""
        return bool(self.barriers) if group_id is None else group_id in self._group_barriers

    async def quiesce(self, group_id: str | None = None) -> None:
        """Wait until no barrier write is in flight (of `group_id` only, when given: a group's requests never
        wait for another group's writes)."""
        if group_id is None:
            while self.barriers:
                await asyncio.wait(list(self.barriers))
            return
        while True:
            pending = self._group_barriers.get(group_id)
            if not pending:
                return
            await asyncio.wait(list(pending))

    async def call(
        self, method: Callable[..., Any], *args: Any, group: str | None = None, **kwargs: Any
    ) -> Any:
        """Run one request through the state machine and wait for its answer (perhaps parked for a while).
        `group`: the one group the request is about, if it is about one (see `apply`).

        Raises ShardAborted if the shard is given up (see `abort`) before the answer is ready."""
        if self.aborted:
            raise ShardAborted()
        token = Token()
        future: asyncio.Future[Any] = self._running_loop().create_future()
        self._futures[token] = (future, None)
        try:
            self.apply(method(token, *args, **kwargs), group)
            return await future
        finally:
            self._futures.pop(token, None)

    def submit(
        self,
        method: Callable[..., Any],
        *args: Any,
        group: str | None = None,
        aborted: tuple[Any, ...],
        **kwargs: Any,
    ) -> Ready | asyncio.Future[Any]:
        """`call` without a coroutine: Ready with the answer if the state machine released it at once (a
        heartbeat), else a future that gets it (a commit, once durable). `aborted`, (function, *arguments): the
        call whose result is the answer instead if the shard is given up before then. The caller checks
        `self.aborted` first. A future cancelled by its waiter stays registered until the state machine releases
        its token, which every request without a parked answer does within its write's timeout."""
        token = Token()
        self._sync_token = token
        try:
            self.apply(method(token, *args, **kwargs), group)
        finally:
            self._sync_token = None
            answer, self._sync_answer = self._sync_answer, _PENDING
        if answer is not _PENDING:
            return Ready(answer)
        future: asyncio.Future[Any] = self._running_loop().create_future()
        self._futures[token] = (future, aborted)
        return future

    def apply(self, result: Any, group: str | None = None) -> None:
        """Deliver a result (see the class doc). `group`: the one group it is about, if known. Writes are chained
        in append order whatever their group; an answer without records waits for the writes in flight of its
        own group and for writes of no known group (timers, requests naming several groups), not for other
        groups' writes: a heartbeat is not held behind another group's fsync."""
        if result is None or self.aborted:
            return
        if result.records and self.log is not None:
            batch, last = self._open, self._last
            task: asyncio.Task[None]
            if (
                batch is not None
                and last is not None
                and batch.task is last
                and not last.done()
                and not self.hung
            ):
                # the newest write has not started yet: these records go in its append (one append, one
                # task and one timer for all the writes of a loop iteration, in the order they were applied)
                batch.results.append(result)
                task = last
            else:
                if self.hung and self._earlier():
                    self.fast_failures += 1
                    batch = _Batch(result)
                    task = self._running_loop().create_task(self._fail_write(batch, self._earlier()))
                else:
                    batch = self._open = _Batch(result)
                    task = self._running_loop().create_task(self._persist(batch, self._earlier()))
                batch.task = task
                self._last = task
                self._writes.add(task)
                task.add_done_callback(self._write_settled)
            groups = result.barrier_groups
            if groups:
                self.barriers.add(task)
                task.add_done_callback(self.barriers.discard)
                for g in groups:
                    self._group_barriers.setdefault(g, set()).add(task)
                task.add_done_callback(functools.partial(self._barrier_done, groups))
            if group is None:
                self._last_ungrouped = task
            else:
                groups.add(group)
            if groups:
                last_by_group = self._last_by_group
                for g in groups:
                    last_by_group[g] = task
                # one done callback per write, for the groups of all the results that share it
                written = self._written.get(task)
                if written is None:
                    self._written[task] = set(groups)
                    task.add_done_callback(self._write_done)
                else:
                    written |= groups
            return
        earlier = self._earlier() if group is None else self._earlier_for(group)
        if earlier:
            follower: list[Any] = [0, result]
            followers = self._followers
            for write in earlier:
                waiting = followers.get(write, _NONE)
                if waiting is None:
                    continue  # replayed, and its answers released, already
                if waiting is _NONE:
                    followers[write] = [follower]
                else:
                    waiting.append(follower)
                follower[0] += 1
            if follower[0]:
                return
        self._deliver(result)

    def _release_followers(self, batch: _Batch) -> None:
        """The write of `batch` is replayed (or failed, and its failure answered): release the answers that waited
        for it and for nothing later."""
        task = batch.task
        if task is None:
            return
        followers = self._followers.get(task)
        self._followers[task] = None
        if followers:
            for follower in followers:
                follower[0] -= 1
                if not follower[0] and not self.aborted:
                    self._deliver(follower[1])

    def _write_settled(self, task: asyncio.Task[None]) -> None:
        self._writes.discard(task)
        self._followers.pop(task, None)

    def _write_done(self, task: asyncio.Task[None]) -> None:
        for g in self._written.pop(task, ()):
            if self._last_by_group.get(g) is task:
                del self._last_by_group[g]

    def _earlier_for(self, group: str) -> list[asyncio.Task[None]]:
        return [
            t
            for t in (self._last_by_group.get(group), self._last_ungrouped)
            if t is not None and not t.done()
        ]

    def _barrier_done(self, groups: set[str], task: asyncio.Task[None]) -> None:
        for group in groups:
            pending = self._group_barriers.get(group)
            if pending is not None:
                pending.discard(task)
                if not pending:
                    del self._group_barriers[group]

    def _earlier(self) -> list[asyncio.Task[None]]:
        last = self._last
        return [last] if last is not None and not last.done() else []

    def _deliver(self, result: Any) -> None:
        if result.records:  # (an answer alone, a heartbeat's, has none)
            self._replay(result.records)
        self._release(result.responses)

    def _replay(self, records: list[Any]) -> None:
        """Apply durable records to the state machine, in order."""
        replay_entries = getattr(self.machine, "replay_entries", None)
        if replay_entries is not None:  # a shard: offset commits replayed without decoding objects
            replay_entries([(0, record.key, record.value, 0) for record in records])
        else:
            for record in records:
                self.machine.replay(record)

    def _release(self, responses: Any) -> None:
        for token, response in responses:
            if token is self._sync_token:
                self._sync_answer = response  # submit's own request, answered at once: no future needed
                continue
            waiting = self._futures.pop(token, None)
            if waiting is not None and not waiting[0].done():
                waiting[0].set_result(response)

    async def _persist(self, batch: _Batch, earlier: list[asyncio.Task[None]]) -> None:
        try:
            await self._append(batch, earlier)
        finally:
            self._release_followers(batch)

    async def _fail_write(self, batch: _Batch, earlier: list[asyncio.Task[None]]) -> None:
        try:
            await self._fail(batch.results[0], earlier)
        finally:
            self._release_followers(batch)

    async def _append(self, batch: _Batch, earlier: list[asyncio.Task[None]]) -> None:
        if self._open is batch:
            self._open = None  # started: a later write makes a batch of its own
        results = batch.results
        entries = [(r.key, r.value) for result in results for r in result.records]
        appended = None
        try:
            if self._bridged:
                appended = self.log.append_settled(entries)  # no future: _settle hears of it
                durable: asyncio.Future[Any] = self._running_loop().create_future()
                self._durable[appended] = (durable, time.perf_counter())
                # A timer handle on our own future instead of asyncio.wait_for (a waiter future, a wrapped future
                # and two callbacks per write): on timeout it fails with TimeoutError, as asyncio.timeout raises.
                expiry = self._running_loop().call_later(self.timeout_ms / 1000, _expire, durable)
                try:
                    await durable
                finally:
                    expiry.cancel()
            else:
                appended = self.log.append(entries)
                if self._on_append is not None:
                    appended.add_done_callback(
                        functools.partial(_observe, self._on_append, time.perf_counter())
                    )
                # the timeout cancels the wrapped append: withdrawn from the log's queue if still there
                async with asyncio.timeout(self.timeout_ms / 1000):
                    await asyncio.wrap_future(appended)
        except Exception as exc:  # StorageError, timeout, closed log: all answer a retriable error
            if appended is not None:
                self._durable.pop(appended, None)
            self.append_failures += 1
            if self.stalled_since is None:
                self.stalled_since = self._running_loop().time()
            self.hung = isinstance(exc, asyncio.TimeoutError)
            log.warning("append of %d records failed: %r", len(entries), exc)
            for result in results:  # undone in the order they were applied
                await self._fail(result, earlier)
                earlier = []
            return
        self.stalled_since = None
        self.hung = False
        earlier = [t for t in earlier if not t.done()]  # writes complete in order: usually all of them are
        if earlier:
            await self._wait_for(earlier)  # replay in append order
        if not self.aborted:
            # the whole append replayed in one call, then its answers released in the order they were applied
            self._replay([record for result in results for record in result.records])
            for result in results:
                self._release(result.responses)

    async def _fail(self, result: Any, earlier: list[asyncio.Task[None]]) -> None:
        """The result's records are not written: undo what it applied and release its failure answers."""
        if earlier:
            await self._wait_for(earlier)
        failure = result.on_append_failure(self.failure_error) if result.on_append_failure else None
        if failure is not None:
            self.apply(failure)

    def stalled_for(self) -> float:
        """Seconds since the log started failing or timing out (0 when it is healthy)."""
        if self.stalled_since is None:
            return 0.0
        return self._running_loop().time() - self.stalled_since

    def abort(self) -> None:
        """Give the shard up: every waiting request gets ShardAborted (a `submit`: its `aborted` answer), later
        results are dropped."""
        self.aborted = True
        for future, aborted in list(self._futures.values()):
            if not future.done():
                if aborted is None:
                    future.set_exception(ShardAborted())
                else:
                    future.set_result(aborted[0](*aborted[1:]))

    async def drain(self) -> None:
        """Wait for every write in flight to settle."""
        while self._writes:
            await asyncio.wait(list(self._writes))


class _Batch:
    """The results whose records go in one append: those applied before its task (`_persist`) started."""

    __slots__ = ("results", "task")

    def __init__(self, result: Any) -> None:
        self.results = [result]
        self.task: asyncio.Task[None] | None = None


def _wake(waiter: asyncio.Future[None], _task: Any) -> None:
    if not waiter.done():
        waiter.set_result(None)


def _expire(durable: asyncio.Future[Any]) -> None:
    if not durable.done():
        durable.set_exception(TimeoutError())


def _observe(observer: Callable[[float], None], started: float, future: Any) -> None:
    """Runs in the log's writer thread when an append completes."""
    if not future.cancelled() and future.exception() is None:
        observer(time.perf_counter() - started)


class Ready:
    """An answer that was ready when its request was started: stands where the future or task that would carry
    it would (`done()` is true); awaiting it gives the answer at once."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def done(self) -> bool:
        return True

    def cancel(self) -> bool:
        return False

    def __await__(self) -> Generator[Any, None, Any]:
        return self.value
        yield  # a generator: `await` on it returns the value without suspending


_PENDING: Any = object()  # ShardRuntime._sync_answer while no answer is kept
_NONE: Any = object()  # no entry in ShardRuntime._followers


class ShardAborted(Exception):
    """The shard was given up (failed and reloading) while this request waited in it."""


class Token:
    """Identifies one request inside the state machine; opaque to it."""

    __slots__ = ()
