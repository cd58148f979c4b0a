#!/usr/bin/env python
"""Durable OffsetCommit benchmark: commits/s and commit latency with fsync on (the server always fsyncs).

Starts the server the way the e2e tests do (tests/support/server.py, a temp data dir), then for each linger
setting (group.coordinator.append.linger.ms; --linger-ms, default "10,0": the default and no lingering) runs:

  (a) 1 connection, sequential commits of 1 partition (send, wait for the answer, send the next);
  (b) 50 connections (asyncio raw-wire clients in this process, requests encoded with kio), each committing
      sequentially; every connection commits its own partition of one group.

Commits are simple OffsetCommit v8 requests (generation -1, one partition each) with increasing offsets; an
answer counts only if its partition error is NONE, and the server answers only once the record is fsynced.
Latency is measured per request, from just before the request is written to the socket until its answer is
decoded. Each phase runs --seconds (default 5) after a 1 s warm-up. Server CPU (utime+stime from /proc) is
reported per phase so a client-bound run can be told from a server-bound one.

Run: .venv/bin/python bench/commit_latency.py [--seconds 5] [--connections 50] [--linger-ms 10,0]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kio.schema.offset_commit.v8.request import (  # noqa: E402
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)

from tests.support.server import start_server  # noqa: E402
from tests.support.wire import create_topics, decode_response, encode_request, recv_frame  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")
GROUP, TOPIC = "bench-commits", "bench-topic"


def server_cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def commit_request(partition: int, offset: int) -> OffsetCommitRequest:
    return OffsetCommitRequest(
        group_id=GROUP,
        generation_id_or_member_epoch=-1,
        member_id="",
        group_instance_id=None,
        topics=(
            OffsetCommitRequestTopic(
                name=TOPIC,
                partitions=(
                    OffsetCommitRequestPartition(
                        partition_index=partition,
                        committed_offset=offset,
                        committed_leader_epoch=-1,
                        committed_metadata="",
                    ),
                ),
            ),
        ),
    )


def check(payload: bytes) -> None:
    _, body = decode_response(8, 8, payload)
    code = body.topics[0].partitions[0].error_code
    if code != 0:
        raise RuntimeError(f"commit answered error {code}")


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, max(0, int(round(q / 100 * len(sorted_values) + 0.5)) - 1))
    return sorted_values[index]


# -- (a) one connection, sequential ------------------------------------------------------------------------


def sequential(host: str, port: int, seconds: float, warmup: float) -> list[float]:
    latencies: list[float] = []
    with socket.create_connection((host, port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        offset = 0
        start = time.perf_counter()
        measure_from = start + warmup
        end = measure_from + seconds
        while True:
            offset += 1
            frame = encode_request(commit_request(0, offset), offset, client_id="bench")
            t0 = time.perf_counter()
            if t0 >= end:
                break
            sock.sendall(frame)
            check(recv_frame(sock))
            if t0 >= measure_from:
                latencies.append(time.perf_counter() - t0)
    return latencies


# -- (b) N connections, each sequential --------------------------------------------------------------------


async def one_connection(
    host: str, port: int, partition: int, measure_from: float, end: float, latencies: list[float]
) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    offset = 0
    try:
        while True:
            offset += 1
            frame = encode_request(commit_request(partition, offset), offset, client_id=f"bench-{partition}")
            t0 = time.perf_counter()
            if t0 >= end:
                break
            writer.write(frame)
            size = struct.unpack(">i", await reader.readexactly(4))[0]
            check(await reader.readexactly(size))
            if t0 >= measure_from:
                latencies.append(time.perf_counter() - t0)
    finally:
        writer.close()
        await writer.wait_closed()


async def concurrent(host: str, port: int, connections: int, seconds: float, warmup: float) -> list[float]:
    latencies: list[float] = []
    start = time.perf_counter()
    measure_from = start + warmup
    end = measure_from + seconds
    await asyncio.gather(
        *(one_connection(host, port, i, measure_from, end, latencies) for i in range(connections))
    )
    return latencies


# -- main --------------------------------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--warmup", type=float, default=1.0)
    ap.add_argument("--connections", type=int, default=50)
    ap.add_argument("--linger-ms", default="10,0")
    args = ap.parse_args()

    load_before = os.getloadavg()
    rows = []
    for linger in [int(x) for x in args.linger_ms.split(",")]:
        with tempfile.TemporaryDirectory(prefix="bench-commit-") as tmp:
            server = start_server(Path(tmp), {"group.coordinator.append.linger.ms": linger})
            try:
                host, port = server.host, server.port
                pid = server.proc.pid
                create_topics(host, port, {TOPIC: max(1, args.connections)})  # commits name real partitions
                phases = (
                    (
                        "1 conn, sequential",
                        lambda h=host, p=port: sequential(h, p, args.seconds, args.warmup),
                    ),
                    (
                        f"{args.connections} conns, sequential each",
                        lambda h=host, p=port: asyncio.run(
                            concurrent(h, p, args.connections, args.seconds, args.warmup)
                        ),
                    ),
                )
                for name, run in phases:
                    cpu0 = server_cpu_seconds(pid)
                    wall0 = time.perf_counter()
                    latencies = run()
                    wall = time.perf_counter() - wall0
                    cpu = server_cpu_seconds(pid) - cpu0
                    latencies.sort()
                    rows.append(
                        (
                            linger,
                            name,
                            len(latencies),
                            len(latencies) / args.seconds,
                            percentile(latencies, 50) * 1000,
                            percentile(latencies, 99) * 1000,
                            latencies[-1] * 1000 if latencies else float("nan"),
                            cpu / wall,
                            statistics.fmean(latencies) * 1000 if latencies else float("nan"),
                        )
                    )
                    print(f"  done: linger {linger} ms, {name}", file=sys.stderr, flush=True)
            finally:
                server.stop()

    print()
    print(
        f"Durable OffsetCommit (v8, 1 partition per request, fsync before every answer), "
        f"{args.seconds:.0f} s per phase, {os.cpu_count()} CPUs; load average before {load_before[0]:.2f}, "
        f"after {os.getloadavg()[0]:.2f} (anything else running on the machine skews these figures)"
    )
    header = (
        f"{'linger.ms':>9}  {'scenario':<28} {'commits':>8} {'commits/s':>10} {'p50 ms':>8} {'p99 ms':>8} "
        f"{'max ms':>8} {'mean ms':>8} {'server CPU':>10}"
    )
    print(header)
    print("-" * len(header))
    for linger, name, n, rate, p50, p99, mx, cpu, mean in rows:
        print(
            f"{linger:>9}  {name:<28} {n:>8} {rate:>10.0f} {p50:>8.2f} {p99:>8.2f} {mx:>8.2f} {mean:>8.2f} "
            f"{cpu * 100:>9.0f}%"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
