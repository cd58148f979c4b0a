#!/usr/bin/env python
"""What a consumer group protocol (KIP-848) heartbeat costs the coordinator: this server against Apache Kafka.

For each target and each N (--members, 100,500 by default), in one run:

  * a topic of N partitions is created and N members, raw-frame clients in this process (kio encodes the
    requests, bench/rawkafka.py's pipelining connection carries them), each on its own connection to the
    group's coordinator (FindCoordinator), join one group with ConsumerGroupHeartbeat v1 (epoch 0, subscribed
    to the topic, a client-made member id as Kafka 4 wants);
  * every member then heartbeats as librdkafka does: once per heartbeat interval the target gives (500 ms, the
    setting both targets get from bench/targets.py), acknowledging each new assignment by listing what it was
    given (a member that must give partitions up does so at its next heartbeat);
  * join: from the first heartbeat to the moment every partition is held, by one member each, every member
    holding at least one (when N members share N partitions: one each);
  * before that, one member joins and leaves until the group's coordinator answers without a coordinator error
    (Kafka loads the __consumer_offsets partition on first use), then the target's idle CPU is taken over 5 s;
  * steady: after 3 s more, a window of --steady seconds: heartbeats answered per second, their round trip
    (p50, p99, max), and the target's CPU seconds (its process and children: the workers of this server, the
    JVM of Kafka) per heartbeat, as measured and over its idle CPU. The clients' own CPU is not counted.

Both targets run on this machine with the clients, so the figures move with its load; the ratio
(this server / Kafka) of CPU per heartbeat is the figure to compare across days.

Run: .venv/bin/python bench/consumer_heartbeats.py [--targets server,kafka] [--members 100,500] [--steady 20]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import rawkafka as rk  # noqa: E402
from compare import cpu_seconds, log, pct  # noqa: E402
from targets import TargetUnavailable, start_target  # noqa: E402

TOPIC = "heartbeat-topic"
GROUP = "heartbeat-group"
SETTLE_S = 3.0
IDLE_S = 5.0
JOIN_TIMEOUT_S = 120.0


class Member:
    """One KIP-848 member over its own connection: heartbeats at the interval it is given, lists what it was
    assigned in the heartbeat after the assignment (its acknowledgement), nothing otherwise."""

    def __init__(self, conn: rk.Conn) -> None:
        self.conn = conn
        self.member_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        self.epoch = 0
        self.owned: tuple[dict, ...] | None = ()  # () on the join: it holds nothing
        self.held: frozenset[tuple[uuid.UUID, int]] = frozenset()  # the partitions it holds
        self.heartbeats = 0
        self.latencies: list[float] = []
        self.errors: dict[int, int] = {}

    def request(self):
        return rk.consumer_group_heartbeat_request(GROUP, self.member_id, self.epoch, (TOPIC,), self.owned)

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            started = time.perf_counter()
            answer = await self.conn.call(self.request())
            self.latencies.append(time.perf_counter() - started)
            self.heartbeats += 1
            if answer.error_code:
                code = int(answer.error_code)
                self.errors[code] = self.errors.get(code, 0) + 1
                if code not in rk.RETRIABLE:
                    self.epoch, self.owned, self.held = 0, (), frozenset()  # fenced or unknown: join again
                await asyncio.sleep(0.5)
                continue
            self.epoch = answer.member_epoch
            if answer.assignment is not None:
                parts = answer.assignment.topic_partitions
                self.owned = tuple({"topic_id": t.topic_id, "partitions": t.partitions} for t in parts)
                self.held = frozenset((t.topic_id, p) for t in parts for p in t.partitions)
            else:
                self.owned = None
            await asyncio.sleep(answer.heartbeat_interval.total_seconds())


async def measure(target, members: int, steady_s: float) -> dict:
    target.create_topic(TOPIC, members)
    coordinator = await rk.coordinator_of(target.bootstrap, GROUP)
    conns = [await rk.Conn.open(*coordinator) for _ in range(members)]
    # the group's coordinator ready (Kafka loads the __consumer_offsets partition after its first use): one
    # member joins and leaves until it is answered without a coordinator error, before anything is timed
    probe = Member(conns[0])
    await rk.retry_call(probe.conn, probe.request, JOIN_TIMEOUT_S)
    probe.epoch = -1
    await probe.conn.call(probe.request())
    # the target's own CPU with nobody heartbeating (a JVM's, a supervisor's): reported, and taken off below
    cpu0, t0 = cpu_seconds(target.pid), time.perf_counter()
    await asyncio.sleep(IDLE_S)
    idle_share = (cpu_seconds(target.pid) - cpu0) / (time.perf_counter() - t0)
    group = [Member(c) for c in conns]
    stop = asyncio.Event()
    cpu0, t0 = cpu_seconds(target.pid), time.perf_counter()
    tasks = [asyncio.create_task(m.run(stop)) for m in group]
    join_s: float | None = None
    while time.perf_counter() - t0 < JOIN_TIMEOUT_S:
        sizes = [len(m.held) for m in group]
        if all(sizes) and sum(sizes) == members == len(frozenset().union(*(m.held for m in group))):
            join_s = time.perf_counter() - t0
            break
        await asyncio.sleep(0.02)
    join_cpu = cpu_seconds(target.pid) - cpu0
    join_heartbeats = sum(m.heartbeats for m in group)
    await asyncio.sleep(SETTLE_S)
    for m in group:
        m.latencies.clear()
    count0, cpu0, t0 = sum(m.heartbeats for m in group), cpu_seconds(target.pid), time.perf_counter()
    await asyncio.sleep(steady_s)
    count, cpu, elapsed = (
        sum(m.heartbeats for m in group) - count0,
        cpu_seconds(target.pid) - cpu0,
        time.perf_counter() - t0,
    )
    latencies = [x for m in group for x in m.latencies]
    stop.set()
    await asyncio.wait(tasks, timeout=5)
    for c in conns:
        c.close()
    errors: dict[int, int] = {}
    for m in group:
        for code, n in m.errors.items():
            errors[code] = errors.get(code, 0) + n
    return {
        "members": members,
        "join_s": join_s,
        "join_cpu_s": join_cpu,
        "join_heartbeats": join_heartbeats,
        "heartbeats_per_s": count / elapsed,
        "cpu_share": cpu / elapsed,
        "cpu_us_per_heartbeat": cpu / count * 1e6 if count else float("inf"),
        "idle_share": idle_share,
        "net_us_per_heartbeat": max(0.0, cpu - idle_share * elapsed) / count * 1e6 if count else float("inf"),
        "p50_ms": pct(latencies, 50) * 1e3,
        "p99_ms": pct(latencies, 99) * 1e3,
        "max_ms": max(latencies) * 1e3 if latencies else float("nan"),
        "errors": errors,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--targets", default="server,kafka")
    ap.add_argument("--members", default="100,500", help="comma-separated N values")
    ap.add_argument("--steady", type=float, default=20.0, help="seconds of steady heartbeats measured")
    ap.add_argument("--server-rev", default=None, help="run this server at a git revision (git archive)")
    args = ap.parse_args()
    counts = [int(x) for x in args.members.split(",")]
    run_dir = Path(tempfile.mkdtemp(prefix="bench-heartbeats-"))
    results: dict[str, list[dict]] = {}
    versions: dict[str, str] = {}
    for name in args.targets.split(","):
        results[name] = []
        for n in counts:  # a fresh target per N: nothing left of the last group
            log(f"-- {name}: {n} members")
            try:
                target = start_target(name, run_dir / f"n{n}", server_rev=args.server_rev)
            except TargetUnavailable as exc:
                log(f"  {name} unavailable: {exc}")
                break
            versions[name] = target.version
            try:
                res = asyncio.run(measure(target, n, args.steady))
            finally:
                target.close()
            results[name].append(res)
            join = "not reached" if res["join_s"] is None else f"{res['join_s']:.2f} s"
            log(
                f"  join {join} ({res['join_heartbeats']} heartbeats, {res['join_cpu_s']:.2f} CPU s); steady "
                f"{res['heartbeats_per_s']:.0f}/s at {res['cpu_share'] * 100:.0f}% of a core = "
                f"{res['cpu_us_per_heartbeat']:.0f} us each ({res['net_us_per_heartbeat']:.0f} us over its idle "
                f"{res['idle_share'] * 100:.0f}%), round trip p50 {res['p50_ms']:.1f} ms "
                f"p99 {res['p99_ms']:.1f} ms max {res['max_ms']:.1f} ms; errors {res['errors'] or 'none'}"
            )
    print()
    for name, version in versions.items():
        print(f"{name}: {version}")
    print()
    print(
        "| target | N | join s | heartbeats/s | CPU us per heartbeat | over idle | idle CPU | p50 ms | p99 ms |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name, rows in results.items():
        for r in rows:
            join = "not reached" if r["join_s"] is None else f"{r['join_s']:.2f}"
            print(
                f"| {name} | {r['members']} | {join} | {r['heartbeats_per_s']:.0f} | "
                f"{r['cpu_us_per_heartbeat']:.0f} | {r['net_us_per_heartbeat']:.0f} | {r['idle_share'] * 100:.0f}% | "
                f"{r['p50_ms']:.1f} | {r['p99_ms']:.1f} |"
            )
    if "server" in results and "kafka" in results:
        print()
        for ours, theirs in zip(results["server"], results["kafka"], strict=False):
            ratio = ours["cpu_us_per_heartbeat"] / theirs["cpu_us_per_heartbeat"]
            net = ours["net_us_per_heartbeat"] / theirs["net_us_per_heartbeat"]
            print(
                f"N={ours['members']}: CPU per steady heartbeat, server / Kafka = {ratio:.2f} "
                f"({net:.2f} over each one's idle CPU)"
            )
        medians = [
            statistics.median([r["cpu_us_per_heartbeat"] for r in results[name]])
            for name in ("server", "kafka")
        ]
        print(f"median over N: {medians[0]:.0f} us against {medians[1]:.0f} us")


if __name__ == "__main__":
    main()
