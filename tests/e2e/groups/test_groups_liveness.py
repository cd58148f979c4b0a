"""Liveness: a SIGKILLed member's session expires and its partitions move to the survivors; a member that stops
polling past max.poll.interval.ms loses its partitions to the others and is given partitions again once it polls."""

from __future__ import annotations

import time

import pytest

from tests.support.members import create_topic, wait_for, wait_split

pytestmark = pytest.mark.e2e

PARTITIONS = 6
SESSION_MS = 6000
BASE = {
    "partition.assignment.strategy": "range",
    "session.timeout.ms": SESSION_MS,
    "heartbeat.interval.ms": 1000,
}


def test_killed_member_partitions_move_within_session_timeout(members, server):
    group, topic = "live-kill", "live-kill-topic"
    create_topic(server, topic, PARTITIONS)
    a, b, c = (members.start("ck", n, server, group, topic, settings=BASE) for n in ("a", "b", "c"))
    wait_split(members, [a, b, c], PARTITIONS, [2, 2, 2], timeout=40)

    t_kill = time.time()
    c.kill()
    limit = SESSION_MS / 1000 + 3
    wait_split(members, [a, b], PARTITIONS, [3, 3], timeout=limit + 2, stable_for=0)
    took = max(m.rebalance_events()[-1]["t"] for m in (a, b)) - t_kill
    print(f"partitions of the SIGKILLed member reassigned {took:.2f}s after the kill")
    assert took <= limit, f"reassignment took {took:.2f}s > session.timeout.ms + 3 s\n" + members.describe()
    for m in (a, b):
        assert m.close() == 0, members.describe([m])


def test_member_past_max_poll_interval_loses_then_regains_partitions(members, server):
    group, topic = "live-poll", "live-poll-topic"
    max_poll_s, stall_s = 7.0, 12.0
    settings = {**BASE, "max.poll.interval.ms": int(max_poll_s * 1000)}
    create_topic(server, topic, PARTITIONS)
    a, b, c = (members.start("ck", n, server, group, topic, settings=settings) for n in ("a", "b", "c"))
    wait_split(members, [a, b, c], PARTITIONS, [2, 2, 2], timeout=40)

    t_stall = time.time()
    c.send(f"stall {stall_s}")  # c stops calling poll(); librdkafka's background thread keeps heartbeating
    wait_split(members, [a, b], PARTITIONS, [3, 3], timeout=max_poll_s + SESSION_MS / 1000 + 3, stable_for=0)
    took = max(m.rebalance_events()[-1]["t"] for m in (a, b)) - t_stall
    print(f"the stalled member's partitions reached the others {took:.2f}s after it stopped polling")
    assert took >= max_poll_s - 1.5, (
        f"partitions moved after {took:.2f}s, before max.poll.interval.ms expired"
    )
    assert c.alive()

    # c polls again (at t_stall + 12 s): it rejoins and gets partitions; the group settles on 2/2/2 again.
    wait_for(
        lambda: c.events("resumed"), stall_s + 5, "the stalled member to resume polling", members.describe
    )
    t_resumed = c.events("resumed")[0]["t"]
    wait_split(members, [a, b, c], PARTITIONS, [2, 2, 2], timeout=30)
    regained = [e for e in c.events("assigned") if e["t"] > t_resumed and e["partitions"]]
    assert regained, "the member that came back was not assigned partitions again\n" + members.describe()
    print(
        f"rejoined and assigned {regained[-1]['t'] - t_resumed:.2f}s after polling again; "
        f"errors it saw: {[(e['name'], e['str']) for e in c.errors()]}"
    )
    for m in (a, b, c):
        assert m.close() == 0, members.describe([m])
