#!/usr/bin/env python
"""Load-generator process for bench/compare.py (several of these run at once; one asyncio loop each, uvloop).

Modes (JSON lines out on stdout, commands in on stdin):

  throughput  --conns K: K connections, each a member of its own group (JoinGroup/SyncGroup), keeping their
              sessions alive with a heartbeat every 2 s; prints {"ev": "ready"}; on "go" every connection keeps
              --window identical pre-encoded requests in flight (Heartbeat, or OffsetCommit of 1 partition with the
              member's generation) for --duration s; prints {"ev": "result", answers, errors, checked, cpu_s}.
              One answer in 64 is decoded and its error codes checked.
  idle        --members M in groups of --group-size, one connection each, heartbeating every --interval-ms and
              rejoining when told REBALANCE_IN_PROGRESS; prints "ready" once all have synced, then every 5 s a
              status line; "stop" ends it with a result (heartbeats, errors, rebalances seen).
  commits     simple commits (generation -1) of --partitions offsets to groups --first..--last-1 over --conns
              connections with --window in flight; prints {"ev": "result", requests, errors, seconds}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import rawkafka as rk  # noqa: E402


def say(ev: str, **fields) -> None:
    sys.stdout.write(json.dumps({"ev": ev, "t": time.time(), **fields}) + "\n")
    sys.stdout.flush()


def cpu_s() -> float:
    t = os.times()
    return t.user + t.system


async def stdin_lines() -> asyncio.Queue[str]:
    loop = asyncio.get_running_loop()
    q: asyncio.Queue[str] = asyncio.Queue()

    def reader() -> None:
        for line in sys.stdin:
            loop.call_soon_threadsafe(q.put_nowait, line.strip())
        loop.call_soon_threadsafe(q.put_nowait, "stop")

    # A daemon thread, not the loop's executor: asyncio.run would wait for a blocked stdin read at exit.
    threading.Thread(target=reader, daemon=True).start()
    return q


async def gather_limited(coros, limit: int) -> list:
    sem = asyncio.Semaphore(limit)

    async def one(c):
        async with sem:
            return await c

    return await asyncio.gather(*(one(c) for c in coros))


class Stats:
    def __init__(self) -> None:
        self.heartbeats = 0
        self.errors = 0


async def keepalive(
    m: rk.Member, interval_s: float, stop: asyncio.Event, stats: Stats, offset_s: float = 0.0
) -> None:
    """Heartbeat every interval_s (rejoining when told to) until `stop`; starts as soon as the member joined, so
    early members do not expire while the others are still joining."""
    if offset_s:
        try:
            await asyncio.wait_for(stop.wait(), offset_s)
            return
        except TimeoutError:
            pass
    while not stop.is_set():
        try:
            err = await m.heartbeat_or_rejoin()
        except (OSError, rk.BenchError):
            stats.errors += 1
            return
        stats.heartbeats += 1
        if err:
            stats.errors += 1
        try:
            await asyncio.wait_for(stop.wait(), interval_s)
        except TimeoutError:
            pass


async def open_members(
    args, versions, groups: list[str], interval_s: float, stop: asyncio.Event, stats: Stats
) -> tuple[list[rk.Member], list[asyncio.Task]]:
    host, port = args.bootstrap.rsplit(":", 1)
    tasks: list[asyncio.Task] = []

    async def make(group: str) -> rk.Member:
        conn = await rk.Conn.open(host, int(port))
        m = rk.Member(conn, versions, group, args.topic, args.session_ms, args.session_ms)
        await m.find_coordinator()
        return m

    members = await gather_limited([make(g) for g in groups], 200)

    async def join(m: rk.Member) -> None:
        await m.join()
        tasks.append(asyncio.create_task(keepalive(m, interval_s, stop, stats, interval_s * random.random())))

    await gather_limited([join(m) for m in members], args.join_concurrency)
    return members, tasks


async def throughput(args, versions) -> None:
    groups = [f"{args.prefix}-{i}" for i in range(args.conns)]
    stop, stats = asyncio.Event(), Stats()
    commands = await stdin_lines()
    members, tasks = await open_members(args, versions, groups, 2.0, stop, stats)
    say("ready", members=len(members))
    while (cmd := await commands.get()) not in ("go", "stop"):
        pass
    stop.set()
    await asyncio.gather(*tasks)
    if cmd == "stop":
        return
    for i, m in enumerate(members):
        if args.op == "heartbeat":
            body = rk.heartbeat_request(versions, m.group, m.generation, m.member_id, None)
        else:
            body = rk.commit_request(
                versions, m.group, m.generation, m.member_id, None, args.topic, 1, 1000 + i
            )
        m.conn.start_blast(body, args.window)
    c0, t0 = cpu_s(), time.perf_counter()
    await asyncio.sleep(args.duration)
    answers = sum(m.conn.answers for m in members)
    elapsed = time.perf_counter() - t0
    c1 = cpu_s()
    for m in members:
        m.conn.stop_blast()
    codes: dict[int, int] = {}
    for m in members:
        for k, n in m.conn.error_codes.items():
            codes[k] = codes.get(k, 0) + n
    say(
        "result",
        answers=answers,
        seconds=elapsed,
        errors=sum(m.conn.errors for m in members),
        checked=sum(m.conn.checked for m in members),
        error_codes=codes,
        cpu_s=c1 - c0,
    )
    await asyncio.sleep(0.5)
    for m in members:
        m.conn.close()


async def idle(args, versions) -> None:
    groups = [f"{args.prefix}-{i // args.group_size}" for i in range(args.members)]
    stop, stats = asyncio.Event(), Stats()
    commands = await stdin_lines()
    members, tasks = await open_members(args, versions, groups, args.interval_ms / 1000, stop, stats)
    say(
        "ready",
        members=len(members),
        rebalances=sum(m.rebalances_seen for m in members),
        heartbeats=stats.heartbeats,
        errors=stats.errors,
    )

    async def status() -> None:
        while True:
            await asyncio.sleep(5)
            say(
                "status",
                heartbeats=stats.heartbeats,
                errors=stats.errors,
                rebalances=sum(m.rebalances_seen for m in members),
            )

    st = asyncio.create_task(status())
    c0 = cpu_s()
    h0, e0, r0 = stats.heartbeats, stats.errors, sum(m.rebalances_seen for m in members)
    while await commands.get() != "stop":
        pass
    stop.set()
    st.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    say(
        "result",
        heartbeats=stats.heartbeats - h0,
        errors=stats.errors - e0,
        rebalances=sum(m.rebalances_seen for m in members) - r0,
        cpu_s=cpu_s() - c0,
    )
    for m in members:
        m.conn.close()


async def commits(args, versions) -> None:
    host, port = args.bootstrap.rsplit(":", 1)
    conns = [await rk.Conn.open(host, int(port)) for _ in range(args.conns)]
    # Find the coordinator once per connection (Kafka creates __consumer_offsets on the first one).
    await asyncio.gather(
        *(rk.retry_call(c, lambda: rk.find_coordinator_request(versions, f"{args.prefix}-0")) for c in conns)
    )
    todo = list(range(args.first, args.last))
    stats = {"requests": 0, "errors": 0, "codes": {}}
    t0 = time.perf_counter()

    async def worker(conn: rk.Conn, mine: list[int]) -> None:
        pending: list[asyncio.Future] = []

        async def drain(futs) -> None:
            for fut in futs:
                resp = await fut
                stats["requests"] += 1
                err = rk.first_error(resp)
                if err:
                    stats["errors"] += 1
                    stats["codes"][err] = stats["codes"].get(err, 0) + 1

        for g in mine:
            pending.append(
                conn.call(
                    rk.commit_request(
                        versions,
                        f"{args.prefix}-{g}",
                        -1,
                        "",
                        None,
                        args.topic,
                        args.partitions,
                        1_000_000 + g,
                    )
                )
            )
            if len(pending) >= args.window:
                await drain(pending[:1])
                pending = pending[1:]
        await drain(pending)

    await asyncio.gather(*(worker(c, todo[i :: len(conns)]) for i, c in enumerate(conns)))
    say(
        "result",
        requests=stats["requests"],
        errors=stats["errors"],
        error_codes=stats["codes"],
        seconds=time.perf_counter() - t0,
    )
    for c in conns:
        c.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["throughput", "idle", "commits"])
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--versions", required=True, help="JSON {api_key: version}")
    ap.add_argument("--prefix", default="bench")
    ap.add_argument("--topic", default="bench-topic")
    ap.add_argument("--session-ms", type=int, default=10_000)
    ap.add_argument("--join-concurrency", type=int, default=1000)
    ap.add_argument("--conns", type=int, default=100)
    ap.add_argument("--op", choices=["heartbeat", "commit"], default="heartbeat")
    ap.add_argument("--window", type=int, default=8)
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--members", type=int, default=1000)
    ap.add_argument("--group-size", type=int, default=10)
    ap.add_argument("--interval-ms", type=int, default=3000)
    ap.add_argument("--first", type=int, default=0)
    ap.add_argument("--last", type=int, default=1000)
    ap.add_argument("--partitions", type=int, default=100)
    args = ap.parse_args()
    versions = {int(k): v for k, v in json.loads(args.versions).items()}
    try:
        import uvloop

        run = uvloop.run
    except (ImportError, AttributeError):
        run = asyncio.run
    try:
        run({"throughput": throughput, "idle": idle, "commits": commits}[args.mode](args, versions))
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which records it
        say("failed", error=f"{type(exc).__name__}: {exc}")
        raise


if __name__ == "__main__":
    main()
