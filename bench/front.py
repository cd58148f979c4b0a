#!/usr/bin/env python
"""The server in front of a cluster against the same clients talking to the cluster directly, in one run.

Starts a 3-node Apache Kafka 4.x cluster (KRaft, tests/support/kafka_cluster.py, jars from Maven Central) and the
server in front of it (`upstream.bootstrap.servers`), then measures each of these directly and through the front,
back to back:

  * produce throughput: confluent-kafka, acks=all, linger.ms=5, --messages records of --size bytes (1 KiB) over 6
    partitions replicated three ways;
  * fetch throughput: the same records read by an assign()-only confluent-kafka consumer;
  * round trips: ListOffsets (v7, latest) to partition 0's leader, sequential on one raw connection, p50/p99 (us);
    through the front the connection goes to the front's port of that leader, so the figure includes the hop.

Runs direct then front `--rounds` times (2) and keeps each target's best figures; prints every round, then a
table with the ratios (front / direct) and the front's CPU seconds. Goals of issue #16: >= 0.9x direct
throughput at 1 KiB records, <= 150 us added p50.

    .venv/bin/python bench/front.py [--messages 200000] [--size 1024] [--round-trips 5000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402

from bench.dataplane import server_cpu_seconds  # noqa: E402
from tests.support.kafka_cluster import KafkaCluster, create_replicated_topic  # noqa: E402
from tests.support.server import start_server  # noqa: E402
from tests.support.wire import WireClient, make, request_class  # noqa: E402

PARTITIONS = 6


def produce(bootstrap: str, topic: str, n: int, size: int) -> float:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    value = b"x" * size
    started = time.perf_counter()
    for i in range(n):
        while True:
            try:
                producer.produce(topic, value=value, partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 1000 == 0:
            producer.poll(0)
    left = producer.flush(120)
    took = time.perf_counter() - started
    assert left == 0, f"{left} records not delivered"
    return n * size / took / 1e6


def fetch(bootstrap: str, topic: str, n: int, size: int) -> float:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-front-reader",
            "enable.auto.commit": False,
            "fetch.max.bytes": 52428800,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got = 0
    started = None
    deadline = time.monotonic() + 120
    while got < n and time.monotonic() < deadline:
        batch = consumer.consume(10000, 1.0)
        if batch and started is None:
            started = time.perf_counter()
        got += sum(1 for m in batch if not m.error())
    took = time.perf_counter() - (started or time.perf_counter())
    consumer.close()
    assert got >= n, f"read {got} of {n}"
    return n * size / took / 1e6


def leader_address(bootstrap: str, topic: str) -> tuple[str, int]:
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    with WireClient(host, int(port)) as client:
        answer = client.call(
            make(
                request_class(3, 12),
                {
                    "topics": [{"name": topic, "topic_id": None}],
                    "allow_auto_topic_creation": False,
                    "include_topic_authorized_operations": False,
                },
            )
        )
    leader = next(p.leader_id for t in answer.topics for p in t.partitions if p.partition_index == 0)
    broker = next(b for b in answer.brokers if b.node_id == leader)
    return broker.host, broker.port


def round_trips(address: tuple[str, int], topic: str, count: int) -> tuple[float, float]:
    request = make(
        request_class(2, 7),
        {
            "replica_id": -1,
            "isolation_level": 0,
            "topics": [
                {
                    "name": topic,
                    "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}],
                }
            ],
        },
    )
    times = []
    with WireClient(*address) as client:
        for _ in range(200):
            client.call(request)
        for _ in range(count):
            started = time.perf_counter_ns()
            client.call(request)
            times.append((time.perf_counter_ns() - started) / 1000)
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.99)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=200_000)
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--round-trips", type=int, default=5000)
    p.add_argument(
        "--rounds", type=int, default=2, help="direct then front, this many times; the best is kept"
    )
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-front-") as tmp:
        run = Path(tmp)
        print("starting a 3-node Kafka cluster ...", flush=True)
        cluster = KafkaCluster(run / "cluster")
        server = None
        try:
            server = start_server(run / "front", {"upstream.bootstrap.servers": cluster.bootstrap})
            print(
                f"Apache Kafka {cluster.version} at {cluster.bootstrap}; the front at {server.bootstrap}",
                flush=True,
            )
            rows = []
            cpu_before = server_cpu_seconds(server.proc.pid)
            results: dict[str, dict[str, float]] = {}
            # Two rounds, alternating, each target's better figure kept: the first fetch of a run is slower than
            # the rest (page cache, JIT), whichever target it is.
            for round_ in range(args.rounds):
                for name, bootstrap in (("direct", cluster.bootstrap), ("front", server.bootstrap)):
                    topic = f"bench-{name}-{round_}"
                    create_replicated_topic(bootstrap, topic, PARTITIONS)
                    cpu = server_cpu_seconds(server.proc.pid)
                    r = {
                        "produce": produce(bootstrap, topic, args.messages, args.size),
                        "fetch": fetch(bootstrap, topic, args.messages, args.size),
                    }
                    r["p50"], r["p99"] = round_trips(
                        leader_address(bootstrap, topic), topic, args.round_trips
                    )
                    r["front_cpu"] = server_cpu_seconds(server.proc.pid) - cpu
                    print(
                        f"round {round_ + 1} {name}: " + ", ".join(f"{k} {v:.1f}" for k, v in r.items()),
                        flush=True,
                    )
                    best = results.setdefault(name, r)
                    for key in ("produce", "fetch"):
                        best[key] = max(best[key], r[key])
                    for key in ("p50", "p99"):
                        best[key] = min(best[key], r[key])
            d, f = results["direct"], results["front"]
            rows = [
                ("produce MB/s (acks=all)", d["produce"], f["produce"], f["produce"] / d["produce"]),
                ("fetch MB/s", d["fetch"], f["fetch"], f["fetch"] / d["fetch"]),
                ("ListOffsets p50 us", d["p50"], f["p50"], f["p50"] / d["p50"]),
                ("ListOffsets p99 us", d["p99"], f["p99"], f["p99"] / d["p99"]),
            ]
            print(f"\n{args.messages} records of {args.size} B, {PARTITIONS} partitions, replication 3\n")
            print(f"| {'figure':<24} | {'direct':>10} | {'front':>10} | {'front/direct':>12} |")
            print(f"|{'-' * 26}|{'-' * 12}|{'-' * 12}|{'-' * 14}|")
            for label, a, b, ratio in rows:
                print(f"| {label:<24} | {a:>10.1f} | {b:>10.1f} | {ratio:>11.2f}x |")
            print(
                f"\nadded p50: {f['p50'] - d['p50']:.0f} us; the front's CPU (round 1): {f['front_cpu']:.1f} s "
                f"(all run: {server_cpu_seconds(server.proc.pid) - cpu_before:.1f} s)"
            )
        finally:
            if server is not None:
                server.stop()
            cluster.close()


if __name__ == "__main__":
    main()
