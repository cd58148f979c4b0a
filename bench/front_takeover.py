#!/usr/bin/env python
"""What a takeover of the state topic costs in front of a cluster, and whether two servers ever answer at once.

Starts a 3-node Apache Kafka 4.x cluster (tests/support/kafka_cluster.py) once, then for each target (this working
tree, and the reference revision --reference-rev, by default the last one before the state topic's writers were
fenced) and each state size (--groups groups, each with --partitions committed offsets):

  * restart: server A on a fresh state topic is filled with the groups (OffsetCommit through it), then SIGKILLed;
    server B starts at once on the same topic. Measured: from the kill to B's first answer for the groups, and B's
    load (from its start to /readyz 200).
  * rolling: with B serving, server C starts on the same topic (a rolling update that starts the new pod first).
    Measured: from C's start to its first answer; the longest time in which neither answered; and the time in
    which both answered (for the same shards: two coordinators of one group, which the fencing must make 0).

"Answered" is a DescribeGroups of four sample groups (spread over shards) with no error for any of them, asked of
each server every 10 ms. Prints each measurement, then one table per target.

    .venv/bin/python bench/front_takeover.py [--groups 100,1000] [--partitions 10] [--reference-rev c7b612b]
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.targets import _e2e_server_module, snapshot  # noqa: E402
from tests.support.kafka_cluster import KafkaCluster, create_replicated_topic  # noqa: E402
from tests.support.wire import WireClient, make, request_class, simple_commit  # noqa: E402

SAMPLE = 4
PROBE_S = 0.01


class Probe:
    """Asks one server every PROBE_S whether it answers for the sample groups; keeps (time, answered)."""

    def __init__(self, server: Any, groups: list[str]) -> None:
        self.server = server
        self.groups = groups
        self.seen: list[tuple[float, bool]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        host, port = self.server.bootstrap.rsplit(":", 1)
        client = None
        while not self._stop.is_set():
            ok = False
            try:
                if client is None:
                    client = WireClient(host, int(port), timeout=2)
                answer = client.call(
                    make(
                        request_class(15, 5), {"groups": self.groups, "include_authorized_operations": False}
                    )
                )
                ok = all(g.error_code == 0 and g.group_state == "Empty" for g in answer.groups)
            except OSError:
                client = None
            self.seen.append((time.monotonic(), ok))
            time.sleep(PROBE_S)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def first_answer(self, after: float) -> float | None:
        return next((t for t, ok in self.seen if ok and t >= after), None)

    def last_answer(self) -> float | None:
        return max((t for t, ok in self.seen if ok), default=None)

    def answering(self, at: float) -> bool:
        """Whether the probe nearest before `at` was answered."""
        before = [ok for t, ok in self.seen if t <= at]
        return bool(before) and before[-1]


def fill(server: Any, topic: str, groups: list[str], partitions: int) -> None:
    host, port = server.bootstrap.rsplit(":", 1)

    def commit(chunk: list[str]) -> None:
        with WireClient(host, int(port), timeout=60) as client:
            for group in chunk:
                codes = simple_commit(client, group, topic, dict.fromkeys(range(partitions), 7))
                assert codes == {0}, (group, codes)

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(commit, [groups[i::16] for i in range(16)]))


def wait_ready(module: Any, server: Any, timeout: float = 300) -> float:
    deadline = time.monotonic() + timeout
    while not module.readyz(server.admin_url):
        if time.monotonic() > deadline:
            raise SystemExit(f"not ready within {timeout}s:\n{server.output()}")
        time.sleep(0.01)
    return time.monotonic()


def run(module: Any, label: str, cluster: KafkaCluster, n_groups: int, partitions: int, tmp: Path) -> dict:
    settings = {
        "upstream.bootstrap.servers": cluster.bootstrap,
        "coordinator.state.topic": f"kgc-takeover-{uuid.uuid4().hex[:8]}",
        "group.initial.rebalance.delay.ms": "0",
    }
    topic = f"takeover-{uuid.uuid4().hex[:6]}"
    groups = [f"takeover-{i}" for i in range(n_groups)]
    sample = groups[:: max(1, n_groups // SAMPLE)][:SAMPLE]
    runs = iter(range(100))

    def start() -> Any:
        return module.start_server(tmp / f"{label}-{n_groups}-{next(runs)}", settings, ready_timeout=300)

    a = start()
    wait_ready(module, a)
    create_replicated_topic(a.bootstrap, topic, partitions)
    filled = time.monotonic()
    fill(a, topic, groups, partitions)
    fill_s = time.monotonic() - filled

    # restart: SIGKILL, then a new server at once
    os.kill(a.proc.pid, signal.SIGKILL)
    a.proc.wait(10)
    killed = time.monotonic()
    b = start()
    probe_b = Probe(b, sample)
    b_ready = wait_ready(module, b)
    while probe_b.first_answer(killed) is None and time.monotonic() - killed < 120:
        time.sleep(0.01)
    b_first = probe_b.first_answer(killed)
    restart = {
        "answers after kill s": (b_first or float("nan")) - killed,
        "ready after kill s": b_ready - killed,
    }

    # rolling: a third server while the second serves
    time.sleep(1.0)
    c_started = time.monotonic()
    c = start()
    probe_c = Probe(c, sample)
    wait_ready(module, c)
    while probe_c.first_answer(c_started) is None and time.monotonic() - c_started < 120:
        time.sleep(0.01)
    time.sleep(3.0)  # long enough for B to learn that it was fenced, if it is
    probe_b.stop()
    probe_c.stop()
    c_first = probe_c.first_answer(c_started) or float("nan")
    times = sorted({t for t, _ in probe_b.seen + probe_c.seen if t >= c_started})
    both = neither = longest_neither = 0.0
    gap_start = None
    for prev, now in zip(times, times[1:], strict=False):
        b_on, c_on = probe_b.answering(prev), probe_c.answering(prev)
        if b_on and c_on:
            both += now - prev
        if not b_on and not c_on:
            neither += now - prev
            gap_start = prev if gap_start is None else gap_start
            longest_neither = max(longest_neither, now - gap_start)
        else:
            gap_start = None
    rolling = {
        "new answers after start s": c_first - c_started,
        "neither answered s": longest_neither,
        "both answered s": both,
        "old still answers at end": probe_b.answering(times[-1]) if times else False,
    }
    for server in (b, c):
        server.proc.kill()
        server.proc.wait(10)
    result = {"groups": n_groups, "offsets": n_groups * partitions, "fill s": fill_s, **restart, **rolling}
    print(f"{label}: {result}", flush=True)
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--groups", default="100,1000", help="state sizes: groups (comma-separated)")
    p.add_argument("--partitions", type=int, default=10, help="offsets per group")
    p.add_argument(
        "--reference-rev",
        default="c7b612b",
        help="the reference revision (default: the last before the state writers were fenced); '' for none",
    )
    args = p.parse_args()
    sizes = [int(g) for g in args.groups.split(",")]
    tmp = Path(tempfile.mkdtemp(prefix="kgc-takeover-"))
    from tests.support import server as this_tree

    targets: list[tuple[str, Any]] = [("this tree", this_tree)]
    if args.reference_rev:
        src = snapshot(args.reference_rev, tmp / f"src-{args.reference_rev}")
        targets.append((f"reference {args.reference_rev}", _e2e_server_module(src)))
    cluster = KafkaCluster(tmp / "kafka")
    try:
        results = {
            label: [run(m, label, cluster, n, args.partitions, tmp) for n in sizes] for label, m in targets
        }
    finally:
        cluster.close()
    keys = [
        "groups",
        "offsets",
        "answers after kill s",
        "ready after kill s",
        "new answers after start s",
        "neither answered s",
        "both answered s",
        "old still answers at end",
    ]
    for label, rows in results.items():
        print(f"\n{label}")
        print("| " + " | ".join(keys) + " |")
        print("|" + "---|" * len(keys))
        for row in rows:
            cells = [f"{row[k]:.2f}" if isinstance(row[k], float) else str(row[k]) for k in keys]
            print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
