#!/usr/bin/env python
"""Group-join benchmark: how long 10 confluent-kafka consumers take to form a group and all hold partitions.

For each target, a 10-partition topic is created, then per round (5 by default):

  * 10 consumer PROCESSES are started (this script with --worker; startup is not timed: each creates its
    Consumer, reports "ready" and waits for "go" on stdin);
  * all are told "go" at once and call subscribe() (partition.assignment.strategy=range,
    heartbeat.interval.ms=500, session.timeout.ms=6000 by default, a fresh group id per round);
  * measured: from the LAST subscribe() call to the first moment all 10 hold a non-empty assignment (taken
    from the workers' own wall-clock timestamps of their subscribe and rebalance callbacks);
  * the workers are then closed (LeaveGroup) before the next round.

Targets:
  server  this project's server, started as the e2e tests start it (tests/support/server.py) with
          --set group.initial.rebalance.delay.ms=0
  mock    librdkafka's own mock cluster (1 broker), created in this process via ctypes from the librdkafka
          bundled in the confluent_kafka wheel (rd_kafka_mock_cluster_new), with
          rd_kafka_mock_group_initial_rebalance_delay_ms(0) and the topic made by rd_kafka_mock_topic_create
          (the mock does not implement CreateTopics); the worker processes reach it over TCP.

Why session.timeout.ms=6000 (the smallest the server accepts by default, --session-timeout-ms to change): the
mock's classic group, once up, waits a fixed session.timeout.ms - 1000 for members to (re)join before it elects a
leader (rdkafka_mock_cgrp.c, rd_kafka_mock_cgrp_classic_rebalance), so with librdkafka's default 45 s session
every mock round takes ~44 s; a Kafka-style coordinator ends the join phase as soon as every known member rejoined.

Prints a table: target, median seconds, min, max, ratio (median / the mock's median).

Run: .venv/bin/python bench/group_join.py [--rounds 5] [--consumers 10] [--targets server,mock]
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from targets import MockCluster  # noqa: E402  (librdkafka's mock cluster through ctypes, shared with compare.py)

CONSUMER_CONF = {
    "partition.assignment.strategy": "range",
    "heartbeat.interval.ms": 500,
    "enable.auto.commit": False,
    "auto.offset.reset": "earliest",
}


# -- worker (one consumer process) ---------------------------------------------------------------------


def worker(args: argparse.Namespace) -> None:
    from confluent_kafka import Consumer

    def say(ev: str, **fields) -> None:
        sys.stdout.write(json.dumps({"ev": ev, "t": time.time(), **fields}) + "\n")
        sys.stdout.flush()

    consumer = Consumer(
        {
            "bootstrap.servers": args.bootstrap,
            "group.id": args.group,
            "client.id": f"bench-join-{args.index}",
            "session.timeout.ms": args.session_timeout_ms,
            **CONSUMER_CONF,
        }
    )
    held: set[int] = set()

    def on_assign(_c, parts) -> None:
        held.clear()
        held.update(p.partition for p in parts)
        say("held", partitions=sorted(held))

    def on_revoke(_c, _parts) -> None:
        held.clear()
        say("held", partitions=[])

    commands: queue.Queue[str] = queue.Queue()

    def read_stdin() -> None:
        for line in sys.stdin:
            commands.put(line.strip())
        commands.put("stop")

    threading.Thread(target=read_stdin, daemon=True).start()
    say("ready")
    if commands.get() != "go":
        consumer.close()
        return
    consumer.subscribe([args.topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_revoke)
    say("subscribed")
    deadline = time.monotonic() + args.max_runtime
    while time.monotonic() < deadline:
        try:
            if commands.get_nowait() == "stop":
                break
        except queue.Empty:
            pass
        msg = consumer.poll(0.05)
        if msg is not None and msg.error() is not None:
            say("error", str=msg.error().str())
    consumer.close()
    say("closed")


# -- targets ---------------------------------------------------------------------------------------------


class ServerTarget:
    def __init__(self, run_dir: Path) -> None:
        from tests.support.server import start_server

        self.server = start_server(run_dir, {"group.initial.rebalance.delay.ms": "0"})
        self.bootstrap = self.server.bootstrap

    def create_topic(self, name: str, partitions: int) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])[name].result(
            timeout=30
        )

    def close(self) -> None:
        self.server.stop()


# -- one round ---------------------------------------------------------------------------------------------


class Worker:
    def __init__(
        self, index: int, bootstrap: str, group: str, topic: str, log_dir: Path, session_timeout_ms: int
    ) -> None:
        self.index = index
        self.lines: queue.Queue[dict] = queue.Queue()
        self.log = open(log_dir / f"worker{index}.log", "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(Path(__file__).resolve()),
                "--worker",
                "--index",
                str(index),
                "--bootstrap",
                bootstrap,
                "--group",
                group,
                "--topic",
                topic,
                "--session-timeout-ms",
                str(session_timeout_ms),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            cwd=REPO,
        )
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            try:
                self.lines.put(json.loads(raw))
            except json.JSONDecodeError:
                pass

    def send(self, text: str) -> None:
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(text.encode() + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass

    def stop(self, timeout: float = 30.0) -> None:
        self.send("stop")
        try:
            if self.proc.stdin:
                self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.thread.join(timeout=5)
        if self.proc.stdout:
            self.proc.stdout.close()
        self.log.close()


def one_round(
    bootstrap: str, topic: str, group: str, n: int, log_dir: Path, timeout: float, session_timeout_ms: int
) -> float:
    workers = [Worker(i, bootstrap, group, topic, log_dir, session_timeout_ms) for i in range(n)]
    try:
        events: list[tuple[float, int, dict]] = []

        def drain(block_s: float) -> None:
            end = time.monotonic() + block_s
            while True:
                got = False
                for w in workers:
                    try:
                        while True:
                            e = w.lines.get_nowait()
                            events.append((e["t"], w.index, e))
                            got = True
                    except queue.Empty:
                        pass
                if time.monotonic() >= end:
                    return
                if not got:
                    time.sleep(0.01)

        deadline = time.monotonic() + 60
        while sum(1 for _t, _i, e in events if e["ev"] == "ready") < n:
            if time.monotonic() > deadline or any(w.proc.poll() is not None for w in workers):
                raise RuntimeError(f"workers did not all start; see {log_dir}")
            drain(0.05)
        for w in workers:
            w.send("go")

        deadline = time.monotonic() + timeout
        while True:
            drain(0.05)
            subscribed = [t for t, _i, e in events if e["ev"] == "subscribed"]
            if len(subscribed) == n:
                last_subscribe = max(subscribed)
                held: dict[int, list[int]] = {}
                for t, i, e in sorted(events, key=lambda x: x[0]):
                    if e["ev"] == "held":
                        held[i] = e["partitions"]
                        if len(held) == n and all(held.values()):
                            return t - last_subscribe
            if time.monotonic() > deadline:
                raise RuntimeError(f"not all {n} consumers held partitions within {timeout}s; see {log_dir}")
    finally:
        for w in workers:
            w.send("stop")
        for w in workers:
            w.stop()


def run_target(name: str, target, args: argparse.Namespace, base: Path) -> list[float]:
    topic = f"bench-join-{name}"
    target.create_topic(topic, args.partitions)
    times = []
    for r in range(args.rounds):
        log_dir = base / f"{name}-round{r}"
        log_dir.mkdir(parents=True)
        took = one_round(
            target.bootstrap,
            topic,
            f"bench-join-{name}-{r}-{os.getpid()}",
            args.consumers,
            log_dir,
            args.round_timeout,
            args.session_timeout_ms,
        )
        times.append(took)
        print(f"  {name} round {r + 1}: {took:.3f}s", flush=True)
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--index", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--bootstrap", help=argparse.SUPPRESS)
    ap.add_argument("--group", help=argparse.SUPPRESS)
    ap.add_argument("--topic", help=argparse.SUPPRESS)
    ap.add_argument("--max-runtime", type=float, default=180.0, help=argparse.SUPPRESS)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--consumers", type=int, default=10)
    ap.add_argument("--partitions", type=int, default=10)
    ap.add_argument("--targets", default="server,mock")
    ap.add_argument("--session-timeout-ms", type=int, default=6000)
    ap.add_argument("--round-timeout", type=float, default=90.0)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return

    base = Path(tempfile.mkdtemp(prefix="bench-group-join-"))
    print(
        f"{args.consumers} confluent-kafka consumer processes, {args.partitions} partitions, range, "
        f"heartbeat.interval.ms=500, session.timeout.ms={args.session_timeout_ms}, {args.rounds} rounds per target; logs in {base}",
        flush=True,
    )
    results: dict[str, list[float]] = {}
    for name in args.targets.split(","):
        if name == "server":
            target = ServerTarget(base / "server")
        elif name == "mock":
            target = MockCluster(1)
            print(f"  mock cluster from {target.library} at {target.bootstrap}", flush=True)
        else:
            raise SystemExit(f"unknown target {name}")
        try:
            results[name] = run_target(name, target, args, base)
        finally:
            target.close()

    ref = statistics.median(results["mock"]) if "mock" in results else None
    print()
    print(f"{'target':<8} {'median s':>9} {'min s':>8} {'max s':>8} {'ratio':>7}")
    for name, times in results.items():
        med = statistics.median(times)
        ratio = f"{med / ref:7.2f}" if ref else "      -"
        print(f"{name:<8} {med:9.3f} {min(times):8.3f} {max(times):8.3f} {ratio}")
    if ref:
        print("ratio = median / the mock cluster's median")


if __name__ == "__main__":
    main()
