"""The manual clock and timer that drive every group test."""

from coordinator.clock import ManualClock, ManualTimer, join_key, session_timeout_key, sync_key
from coordinator.result import CoordinatorResult


def _op(log, name):
    def op():
        log.append(name)
        return CoordinatorResult(responses=[(name, name)])

    return op


def test_ops_fire_in_deadline_order_after_the_clock_jumps():
    clock = ManualClock()
    timer = ManualTimer(clock)
    fired = []
    timer.schedule("b", 20, _op(fired, "b"))
    timer.schedule("a", 10, _op(fired, "a"))
    timer.schedule("c", 30, _op(fired, "c"))
    assert timer.advance(9) == []
    results = timer.advance(11)
    assert fired == ["a", "b"]
    assert [r.responses for r in results] == [[("a", "a")], [("b", "b")]]
    assert clock.monotonic_ms() == 20
    assert timer.keys() == {"c"}
    assert timer.deadline_ms("c") == 30


def test_same_key_replaces_and_cancel_forgets():
    clock = ManualClock()
    timer = ManualTimer(clock)
    fired = []
    timer.schedule("k", 10, _op(fired, "first"))
    timer.schedule("k", 50, _op(fired, "second"))
    timer.advance(10)
    assert fired == []
    assert timer.is_scheduled("k")
    timer.cancel("k")
    assert not timer.is_scheduled("k")
    timer.advance(100)
    assert fired == []


def test_op_scheduled_while_firing_runs_if_already_due():
    clock = ManualClock()
    timer = ManualTimer(clock)
    fired = []

    def first():
        fired.append("first")
        timer.schedule("again", 0, _op(fired, "again"))
        timer.schedule("later", 100, _op(fired, "later"))
        return CoordinatorResult()

    timer.schedule("first", 5, first)
    timer.advance(5)
    assert fired == ["first", "again"]
    assert timer.keys() == {"later"}


def test_wall_clock_moves_with_monotonic_clock():
    clock = ManualClock(monotonic_start_ms=0, wall_start_ms=1000)
    clock.advance(250)
    assert (clock.monotonic_ms(), clock.wall_ms()) == (250, 1250)


def test_keys_are_kafkas():
    assert session_timeout_key("g", "m") == "heartbeat-g-m"
    assert join_key("g") == "join-g"
    assert sync_key("g") == "sync-g"
