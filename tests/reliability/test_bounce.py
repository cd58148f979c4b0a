"""Consumer bounce and server rolling bounce, after Kafka's system tests (tests/kafkatest/tests/client/consumer_test.py,
OffsetValidationTest), with confluent-kafka members (tests/e2e/groups/clients/ck_member.py: synchronous commit
after every poll) and a producer that keeps producing throughout (clients/steady_producer.py: acks=all,
idempotent). Differences from upstream: one server instead of two brokers (a "broker bounce" restarts it on the
same port and data dir), 6 partitions instead of 1 so that every member owns some, and fewer bounces (2 instead
of 5) to fit the CI budget. Every scenario ends with: the group converges (an even split held for a while) and
every record the producer had acknowledged was consumed by some member.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
import types
from pathlib import Path

import pytest

from tests.support.crash import CrashServer
from tests.support.members import (
    FENCED_INSTANCE_ID,
    RD_FATAL,
    RD_FENCED,
    Members,
    create_topic,
    wait_for,
    wait_split,
)
from tests.support.server import PYTHON

pytestmark = pytest.mark.e2e

CLIENTS = Path(__file__).resolve().parent / "clients"
PARTITIONS = 6
ASSIGNORS = ["range", "cooperative-sticky"]
BOUNCES = 2


def settings(assignor: str, session_ms: int = 10000) -> dict:
    return {
        "partition.assignment.strategy": assignor,
        "session.timeout.ms": session_ms,
        "heartbeat.interval.ms": 1000,
        "reconnect.backoff.ms": 50,
        "reconnect.backoff.max.ms": 500,
    }


class SteadyProducer:
    def __init__(self, bootstrap: str, topic: str, out: Path, rate: float = 100) -> None:
        self.out = out
        self.proc = subprocess.Popen(
            [
                PYTHON,
                str(CLIENTS / "steady_producer.py"),
                "--bootstrap",
                bootstrap,
                "--topic",
                topic,
                "--partitions",
                str(PARTITIONS),
                "--rate",
                str(rate),
                "--output",
                str(out),
            ],
            stderr=subprocess.PIPE,
            text=True,
        )

    def stop(self) -> dict[tuple[int, int], str]:
        self.proc.send_signal(signal.SIGTERM)
        _, err = self.proc.communicate(timeout=90)
        assert self.proc.returncode == 0, err
        result = json.loads(self.out.read_text())
        assert result["failed"] == 0, f"the producer could not deliver {result['failed']} records"
        return {(p, o): k for p, o, k in result["delivered"]}

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate(timeout=10)


def check_all_consumed(pool: Members, delivered: dict[tuple[int, int], str], timeout: float = 60) -> dict:
    """Wait until every delivered record was consumed by some member; return figures (duplicates included)."""

    def seen() -> list[tuple[int, int, str | None]]:
        return [r for m in pool.all for r in m.records()]

    wait_for(
        lambda: {(p, o) for p, o, _ in seen()} >= delivered.keys(),
        timeout,
        f"all {len(delivered)} delivered records to be consumed",
        pool.describe,
    )
    records = seen()
    wrong = [(p, o, k) for p, o, k in records if (p, o) in delivered and delivered[(p, o)] != k]
    assert not wrong, f"records consumed with the wrong key: {wrong[:5]}"
    return {
        "delivered": len(delivered),
        "consumed": len(records),
        "duplicates": len(records) - len({(p, o) for p, o, _ in records}),
    }


def restart(
    pool: Members,
    member,
    server,
    group: str,
    topic: str,
    name: str,
    conf: dict,
    instance_id: str | None = None,
    clean: bool = True,
):
    if clean:
        assert member.close() == 0, member.summary()
    else:
        member.kill()
    return pool.start("ck", name, server, group, topic, instance_id=instance_id, settings=conf)


@pytest.mark.parametrize("assignor", ASSIGNORS)
@pytest.mark.parametrize("bounce_mode", ["rolling", "all"])
def test_consumer_bounce(members, server, tmp_path, assignor, bounce_mode):
    """Upstream: test_consumer_bounce (clean_shutdown=True, bounce_mode all/rolling)."""
    group, topic = f"bounce-{bounce_mode}-{assignor}", f"bounce-{bounce_mode}-{assignor}-t"
    create_topic(server, topic, PARTITIONS)
    producer = SteadyProducer(server.bootstrap, topic, tmp_path / "delivered.json")
    try:
        conf = settings(assignor)
        group_members = [members.start("ck", f"c{i}", server, group, topic, settings=conf) for i in range(3)]
        wait_split(members, group_members, PARTITIONS, [2, 2, 2], timeout=60)
        started = time.monotonic()
        for bounce in range(BOUNCES):
            if bounce_mode == "rolling":
                for i in range(3):
                    group_members[i] = restart(
                        members, group_members[i], server, group, topic, f"c{i}-b{bounce}", conf
                    )
                    wait_split(members, group_members, PARTITIONS, [2, 2, 2], timeout=60)
            else:
                for m in group_members:
                    m.send("close")
                for m in group_members:
                    assert m.close() == 0, m.summary()
                group_members = [
                    members.start("ck", f"c{i}-b{bounce}", server, group, topic, settings=conf)
                    for i in range(3)
                ]
                wait_split(members, group_members, PARTITIONS, [2, 2, 2], timeout=60)
        bounced_s = time.monotonic() - started
        delivered = producer.stop()
        figures = check_all_consumed(members, delivered)
    finally:
        producer.kill()
    print(
        f"\nconsumer bounce ({bounce_mode}, {assignor}): {BOUNCES} bounces of 3 members in {bounced_s:.1f} s; "
        f"{figures}"
    )


@pytest.mark.parametrize("assignor", ASSIGNORS)
def test_server_rolling_bounce(tmp_path, assignor):
    """Upstream: test_broker_rolling_bounce (clean restarts; the consumers' session timeout exceeds the restart
    time, so the bounces must cause no rebalance). Here the one server is restarted (SIGTERM, same port and data
    dir); groups come back Stable from the log, so members carry on without a rebalance."""
    group, topic = f"server-bounce-{assignor}", f"server-bounce-{assignor}-t"
    server = CrashServer(tmp_path, {"num.partitions": PARTITIONS, "group.initial.rebalance.delay.ms": 0})
    server.start()
    endpoint = types.SimpleNamespace(bootstrap=server.bootstrap, output=lambda: server.stderr_tail())
    pool = Members(tmp_path)
    producer = None
    try:
        server.wait_ready()
        create_topic(endpoint, topic, PARTITIONS)
        producer = SteadyProducer(endpoint.bootstrap, topic, tmp_path / "delivered.json")
        conf = settings(assignor, session_ms=30000)
        group_members = [pool.start("ck", f"c{i}", endpoint, group, topic, settings=conf) for i in range(3)]
        wait_split(pool, group_members, PARTITIONS, [2, 2, 2], timeout=60, stable_for=2)
        before = [len(m.rebalance_events()) for m in group_members]
        downtime, stop_s = [], []
        for _ in range(BOUNCES):
            stopped = time.monotonic()
            assert server.stop() == 0
            stop_s.append(time.monotonic() - stopped)
            server.start()
            server.wait_ready()
            downtime.append(time.monotonic() - stopped)
            time.sleep(3)  # members reconnect, heartbeat, fetch
        delivered = producer.stop()
        figures = check_all_consumed(pool, delivered)
        after = [len(m.rebalance_events()) for m in group_members]
        unexpected = [m.rebalance_events()[n:] for m, n in zip(group_members, before, strict=True)]
        print(
            f"\nserver rolling bounce ({assignor}): {BOUNCES} restarts, down {max(downtime):.2f} s at most "
            f"(graceful stop {max(stop_s):.2f} s of it); "
            f"rebalance callbacks during the bounces: {sum(after) - sum(before)}; {figures}"
        )
        assert after == before, f"the server bounces caused rebalances: {unexpected}\n{pool.describe()}"
    finally:
        if producer is not None:
            producer.kill()
        pool.cleanup()
        if server.proc is not None:
            server.stop()


@pytest.mark.parametrize("bounce_mode", ["rolling", "all"])
def test_static_consumer_bounce_with_eager_assignment(members, server, tmp_path, bounce_mode):
    """Upstream: test_static_consumer_bounce (static_membership=True; test_static_consumer_bounce_with_eager_assignment
    in later Kafka versions): static members (range, session 60 s) are bounced, all but the first; the member kept
    alive must see no revocation, since no rebalance is triggered."""
    group, topic = f"static-bounce-{bounce_mode}", f"static-bounce-{bounce_mode}-t"
    create_topic(server, topic, PARTITIONS)
    producer = SteadyProducer(server.bootstrap, topic, tmp_path / "delivered.json")
    try:
        conf = settings("range", session_ms=60000)
        group_members = [
            members.start("ck", f"s{i}", server, group, topic, instance_id=f"static-{i}", settings=conf)
            for i in range(3)
        ]
        split = wait_split(members, group_members, PARTITIONS, [2, 2, 2], timeout=60, stable_for=2)
        keeper = group_members[0]
        keeper_events = len(keeper.rebalance_events())
        for bounce in range(BOUNCES):
            if bounce_mode == "rolling":
                for i in (1, 2):
                    group_members[i] = restart(
                        members,
                        group_members[i],
                        server,
                        group,
                        topic,
                        f"s{i}-b{bounce}",
                        conf,
                        instance_id=f"static-{i}",
                    )
                    wait_split(members, group_members, PARTITIONS, [2, 2, 2], timeout=60)
            else:
                for i in (1, 2):
                    assert group_members[i].close() == 0
                for i in (1, 2):
                    group_members[i] = members.start(
                        "ck",
                        f"s{i}-b{bounce}",
                        server,
                        group,
                        topic,
                        instance_id=f"static-{i}",
                        settings=conf,
                    )
                wait_split(members, group_members, PARTITIONS, [2, 2, 2], timeout=60)
        revokes = [e for e in keeper.rebalance_events()[keeper_events:] if e["ev"] in ("revoked", "lost")]
        delivered = producer.stop()
        figures = check_all_consumed(members, delivered)
        same = {m.name.split("-")[0]: sorted(m.held()) for m in group_members}
    finally:
        producer.kill()
    print(
        f"\nstatic consumer bounce ({bounce_mode}, range): {BOUNCES} bounces of 2 of 3 static members; revocations "
        f"seen by the member kept alive: {len(revokes)}; assignment before {split}, after {same}; {figures}"
    )
    assert not revokes, f"the member kept alive was revoked: {revokes}\n{members.describe()}"


def test_fencing_static_consumer(members, server, tmp_path):
    """Upstream: test_fencing_static_consumer (num_conflict_consumers=2, fencing_stage="all"): 3 static members and
    2 conflicting ones reusing two of their group.instance.ids start together; exactly 3 stay in the group, the
    2 fenced ones get the fatal FENCED_INSTANCE_ID and exit."""
    group, topic = "fencing-all", "fencing-all-t"
    create_topic(server, topic, PARTITIONS)
    conf = settings("range", session_ms=60000)
    normal = [
        members.start("ck", f"n{i}", server, group, topic, instance_id=f"fence-{i}", settings=conf)
        for i in range(3)
    ]
    conflict = [
        members.start("ck", f"x{i}", server, group, topic, instance_id=f"fence-{i}", settings=conf)
        for i in range(2)
    ]
    everyone = normal + conflict

    def fenced(member) -> bool:
        return any(e["code"] in (FENCED_INSTANCE_ID, RD_FENCED, RD_FATAL) for e in member.events("error"))

    wait_for(
        lambda: sum(1 for m in everyone if not m.alive()) == 2,
        90,
        "exactly two members (the fenced ones) to exit",
        members.describe,
    )
    alive = [m for m in everyone if m.alive()]
    dead = [m for m in everyone if not m.alive()]
    wait_split(members, alive, PARTITIONS, [2, 2, 2], timeout=60, stable_for=2)
    assert all(fenced(m) for m in dead), members.describe(dead)
    assert sorted({m.cmd[m.cmd.index("--instance-id") + 1] for m in alive}) == [
        "fence-0",
        "fence-1",
        "fence-2",
    ]
    print(
        f"\nfencing (stage all, 2 conflicts): fenced and exited: {[m.name for m in dead]}; "
        f"in the group: {[m.name for m in alive]}"
    )


@pytest.mark.parametrize("clean", [True, False], ids=["clean", "hard"])
def test_consumer_failure(members, server, tmp_path, clean):
    """Upstream: test_consumer_failure (here also with a hard failure, SIGKILL): the owner of partition 0 stops;
    the others take over its partitions (at once after a clean LeaveGroup, within the session timeout after a
    kill) and go on consuming everything."""
    group, topic = f"failure-{clean}", f"failure-{clean}-t"
    create_topic(server, topic, PARTITIONS)
    session_ms = 6000
    producer = SteadyProducer(server.bootstrap, topic, tmp_path / "delivered.json")
    try:
        conf = settings("range", session_ms=session_ms)
        group_members = [members.start("ck", f"f{i}", server, group, topic, settings=conf) for i in range(3)]
        wait_split(members, group_members, PARTITIONS, [2, 2, 2], timeout=60)
        owner = next(m for m in group_members if 0 in m.held())
        rest = [m for m in group_members if m is not owner]
        stopped = time.time()
        if clean:
            assert owner.close() == 0
        else:
            owner.kill()
        wait_split(members, rest, PARTITIONS, [3, 3], timeout=session_ms / 1000 * 2 + 5, stable_for=0)
        took = max(m.rebalance_events()[-1]["t"] for m in rest) - stopped
        time.sleep(1)
        delivered = producer.stop()
        figures = check_all_consumed(members, delivered)
    finally:
        producer.kill()
    print(
        f"\nconsumer failure ({'clean close' if clean else 'SIGKILL'}): partitions moved after {took:.1f} s; "
        f"{figures}"
    )
    if clean:
        assert took < session_ms / 1000, "a clean close (LeaveGroup) should not wait for the session timeout"
