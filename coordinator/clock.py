"""Time for the pure state machine: a Clock to read, a Timer to schedule operations, and test doubles.

The group state machine never reads the system clock and never sleeps. It asks an injected `Clock` for the
time and an injected `Timer` to run an operation later (Kafka's `Time` and `CoordinatorTimer`). An operation
is a plain callable returning a `CoordinatorResult`; the production timer (the shard runtime's, on the event
loop) runs it with `loop.call_later` and hands the result to the runtime exactly as it would a request's
result. Scheduling a key that is already scheduled replaces the earlier operation, so "reset the session timer
of member M" is a single call.

`ManualClock` and `ManualTimer` make tests deterministic: nothing fires until the test advances time, and
`ManualTimer.advance(ms)` returns the results of the operations that fired so a test can assert on their
records and responses. Like Kafka's `MockCoordinatorTimer` (driven by
`GroupMetadataManagerTestContext.sleep`), the clock jumps by the whole amount first and the expired operations
then run in deadline order; an operation scheduled while firing runs in the same call if its deadline has
already passed.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from coordinator.result import CoordinatorResult

TimerOp = Callable[[], "CoordinatorResult"]


class Clock(Protocol):
    def monotonic_ms(self) -> int:
        """Milliseconds on a clock that never goes back; for deadlines."""
        ...

    def wall_ms(self) -> int:
        """Milliseconds since the Unix epoch; for persisted timestamps (commit and state timestamps)."""
        ...


class Timer(Protocol):
    def schedule(self, key: str, delay_ms: int, op: TimerOp) -> None:
        """Run `op` once, `delay_ms` from now. A key scheduled again replaces its earlier operation."""
        ...

    def cancel(self, key: str) -> None:
        """Forget the operation under `key`, if any."""
        ...

    def is_scheduled(self, key: str) -> bool: ...


# -- timer keys (Kafka's names, GroupMetadataManager.classicGroup{Heartbeat,Join,Sync}Key) -------------------


def session_timeout_key(group_id: str, member_id: str) -> str:
    """The session (heartbeat) timer of a member, and of a pending member (KIP-394)."""
    return f"heartbeat-{group_id}-{member_id}"


def pending_member_key(group_id: str, member_id: str) -> str:
    """A pending member's expiry shares the session timer key: rejoining replaces one with the other."""
    return session_timeout_key(group_id, member_id)


def join_key(group_id: str) -> str:
    """Completion of a group's join phase (initial delay, or the rebalance timeout)."""
    return f"join-{group_id}"


def sync_key(group_id: str) -> str:
    """Expiry of the sync phase: members that have not sent SyncGroup by then are removed."""
    return f"sync-{group_id}"


OFFSETS_EXPIRATION_KEY = "expire-group-metadata"
"""The periodic offset retention job (KIP-211), Kafka's GROUP_EXPIRATION_KEY."""


# -- test doubles --------------------------------------------------------------------------------------------


class ManualClock:
    """A Clock that moves only when told to; wall time starts at `wall_start_ms` and moves along."""

    def __init__(self, monotonic_start_ms: int = 0, wall_start_ms: int = 1_700_000_000_000) -> None:
        self._monotonic_ms = monotonic_start_ms
        self._wall_offset_ms = wall_start_ms - monotonic_start_ms

    def monotonic_ms(self) -> int:
        return self._monotonic_ms

    def wall_ms(self) -> int:
        return self._monotonic_ms + self._wall_offset_ms

    def advance(self, ms: int) -> None:
        if ms < 0:
            raise ValueError("time does not go back")
        self._monotonic_ms += ms

    def set_wall_ms(self, wall_ms: int) -> None:
        """The wall clock reads `wall_ms` now; monotonic time does not move (a process that starts later)."""
        self._wall_offset_ms = wall_ms - self._monotonic_ms


@dataclasses.dataclass(frozen=True, slots=True)
class ScheduledOp:
    deadline_ms: int
    key: str
    op: TimerOp


class ManualTimer:
    """A Timer on a ManualClock: operations run only from `advance` (or `poll`), in deadline order."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self._ops: dict[str, tuple[int, ScheduledOp]] = {}  # key -> (sequence, op)
        self._heap: list[tuple[int, int, str]] = []  # (deadline, sequence, key); stale entries skipped
        self._sequence = itertools.count()

    def schedule(self, key: str, delay_ms: int, op: TimerOp) -> None:
        seq = next(self._sequence)
        scheduled = ScheduledOp(self.clock.monotonic_ms() + max(delay_ms, 0), key, op)
        self._ops[key] = (seq, scheduled)
        heapq.heappush(self._heap, (scheduled.deadline_ms, seq, key))

    def cancel(self, key: str) -> None:
        self._ops.pop(key, None)

    def is_scheduled(self, key: str) -> bool:
        return key in self._ops

    def get(self, key: str) -> ScheduledOp | None:
        entry = self._ops.get(key)
        return entry[1] if entry else None

    def deadline_ms(self, key: str) -> int | None:
        scheduled = self.get(key)
        return scheduled.deadline_ms if scheduled else None

    def keys(self) -> set[str]:
        return set(self._ops)

    def advance(self, ms: int) -> list[CoordinatorResult]:
        """Move the clock forward by `ms`, then run every operation now due; return their results."""
        self.clock.advance(ms)
        return self.poll()

    def poll(self) -> list[CoordinatorResult]:
        results = []
        now = self.clock.monotonic_ms()
        while self._heap and self._heap[0][0] <= now:
            _, seq, key = heapq.heappop(self._heap)
            entry = self._ops.get(key)
            if entry is None or entry[0] != seq:
                continue  # cancelled or replaced
            del self._ops[key]
            results.append(entry[1].op())
        return results
