"""Members leaving and coming back: a closing member's partitions move to the others at once (LeaveGroup), and
committed offsets survive every consumer restart: no duplicates, no gaps."""

from __future__ import annotations

import time

import pytest

from tests.support.members import (
    check_exactly_once,
    commit_errors,
    committed_offsets,
    consumed_all,
    create_topic,
    high_watermarks,
    produce_batch,
    wait_for,
    wait_split,
)

pytestmark = pytest.mark.e2e

PARTITIONS = 6
# Long enough that only a LeaveGroup (never a session expiry) can explain a quick reassignment.
SETTINGS = {
    "partition.assignment.strategy": "range",
    "session.timeout.ms": 30000,
    "heartbeat.interval.ms": 1000,
}


def test_leave_moves_partitions_and_offsets_survive_restarts(members, server, tmp_path):
    group, topic = "leave-restart", "leave-restart-topic"
    create_topic(server, topic, PARTITIONS)
    placed = produce_batch(server, topic, 300, 300, tmp_path)
    a, b, c = (members.start("ck", name, server, group, topic, settings=SETTINGS) for name in ("a", "b", "c"))
    wait_split(members, [a, b, c], PARTITIONS, [2, 2, 2], timeout=40)
    wait_for(lambda: consumed_all([a, b, c], placed), 30, "batch 1 consumed", members.describe)

    # c leaves politely: a and b take over its partitions long before its 30 s session could expire.
    t_leave = time.time()
    assert c.close() == 0, members.describe([c])
    wait_split(members, [a, b], PARTITIONS, [3, 3], timeout=15)
    took = max(m.rebalance_events()[-1]["t"] for m in (a, b)) - t_leave
    print(f"partitions of the leaving member reassigned {took:.2f}s after close()")
    assert took < 10, f"reassignment after LeaveGroup took {took:.1f}s"

    batch2 = produce_batch(server, topic, 300, 301, tmp_path)
    placed |= batch2
    wait_for(lambda: consumed_all([a, b, c], placed), 30, "batch 2 consumed", members.describe)

    # a leaves too: b holds everything.
    assert a.close() == 0, members.describe([a])
    wait_split(members, [b], PARTITIONS, [6], timeout=15)
    placed |= produce_batch(server, topic, 300, 302, tmp_path)
    wait_for(lambda: consumed_all([a, b, c], placed), 30, "batch 3 consumed", members.describe)

    # The group empties; what was committed is the end of every partition.
    assert b.close() == 0, members.describe([b])
    hw_before_restart = high_watermarks(placed, PARTITIONS)
    assert committed_offsets(server, group, topic, PARTITIONS) == hw_before_restart

    # New processes, same group: they resume right after the last committed offsets.
    batch4 = produce_batch(server, topic, 300, 303, tmp_path)
    placed |= batch4
    d, e = (members.start("ck", name, server, group, topic, settings=SETTINGS) for name in ("d", "e"))
    wait_split(members, [d, e], PARTITIONS, [3, 3], timeout=40)
    everyone = [a, b, c, d, e]
    wait_for(lambda: consumed_all(everyone, placed), 30, "batch 4 consumed", members.describe)
    for m in (d, e):
        assert m.close() == 0, members.describe([m])

    for m in (d, e):
        first = {}
        for p, o, _k in m.records():
            first.setdefault(p, o)
        resumed_wrong = {p: (o, hw_before_restart[p]) for p, o in first.items() if o != hw_before_restart[p]}
        assert not resumed_wrong, f"{m.name} resumed at (first offset, committed) {resumed_wrong}"
        assert all((p, o) in batch4 for p, o, _k in m.records()), (
            f"{m.name} re-read records committed earlier"
        )
    check_exactly_once(everyone, placed)
    assert commit_errors(everyone) == [], members.describe()
    assert committed_offsets(server, group, topic, PARTITIONS) == high_watermarks(placed, PARTITIONS)
