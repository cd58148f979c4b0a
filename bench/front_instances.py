#!/usr/bin/env python
"""Several instances in front of one cluster (coordinator.front.instances): what a SIGKILL costs, under commit load.

Starts a 3-node Apache Kafka 4.x cluster (tests/support/kafka_cluster.py; its brokers with kafka-server-start.sh's
JVM flags, or with the tests' faster-starting ones with --test-jvm) once and three instances on one state topic
(--shards partitions). A load of --workers threads commits offsets of --groups simple groups without pause,
each commit sent where FindCoordinator says (asked again after any error), as a client does. Then --rounds times:
SIGKILL one instance (in turn), and measure, for a probe group in each of its shards (each probed by a thread of
its own), the time from the kill to the first commit that a survivor's owner acknowledges; then start a new
instance in its place and wait until the three have divided the shards again. Every acknowledged commit is checked
at the end: the offset each group holds (asked of its owner's admin API) is at least the last one acknowledged for
it.

With --offsets N, N offsets are committed first (groups of 200 partitions), so that a shard taken over is big to
replay; --no-standby turns the instances' hot standbys off (coordinator.instance.standby=false), so a takeover reads
and replays the whole shard: the two side by side show what the standbys save.

With --scale: instead of the rounds, 1 then 2 instances (instance i pinned to core i with taskset), each under the
same closed-loop commit load for --seconds: commits/s in all, the instances' CPU seconds (user + system, from
/proc), commits per CPU-second, and per commit the instances' own requests to the brokers (their metrics) and
their threads' waits (voluntary context switches); the ratio 2-to-1 of each.

Prints each round, then: the takeover (the slowest shard of each round) median and max over the rounds, when the
survivors logged each step of it (the dead instance noticed, the new plan, the last shard claimed and read), the
commit rate achieved (the load is closed-loop: this is the rate the instances sustain with --workers in flight),
errors by code, and the lost commits (0 expected).

    .venv/bin/python bench/front_instances.py [--rounds 10] [--workers 48] [--groups 480] [--shards 12]
        [--offsets 1000000] [--no-standby]
    .venv/bin/python bench/front_instances.py --scale [--seconds 30] [--counts 1,2] [--as-workers] [--no-standby]
        [--op heartbeat] [--generator go [--conns 200] [--window 8]]

--op heartbeat measures heartbeats instead of commits in each --scale phase, from bench/loadgen (Go; built on first
use into .deps/go): it joins --conns members, a group each, through the first instance, and each then heartbeats at
its group's owner (as FindCoordinator names it) with --window requests in flight. A heartbeat is answered by its
owner without a request to the brokers, so this load shows what the instances themselves do with a core each.
--generator go sends the commits of --op commit the same way (one partition each, pipelined).

--counts 1,2,2,1 measures each count twice, in an order that puts the machine's drift during the run on both
alike; the ratio is of each count's phases summed. With --as-workers, the instances of --scale are the workers of
one `serve --workers N` (not pinned: the supervisor's workers run on either core), measured the same way (the
supervisor's and its workers' CPU and waits).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import rawkafka as rk  # noqa: E402
from goloadgen import GO_LOADGEN, build_go_loadgen  # noqa: E402

from coordinator.sharding import shard_of  # noqa: E402
from tests.support.kafka_cluster import KafkaCluster, create_replicated_topic  # noqa: E402
from tests.support.server import readyz, start_server, worker_pids  # noqa: E402
from tests.support.wire import WireClient, make, request_class, simple_commit  # noqa: E402

TOPIC = "bench-instances"


def _address(server: Any) -> tuple[str, int]:
    host, port = server.bootstrap.split(",")[0].rsplit(":", 1)
    return host, int(port)


def _find(server: Any, group: str) -> tuple[int, str, int]:
    with WireClient(*_address(server), timeout=10) as c:
        answer = c.call(make(request_class(10, 3), {"key": group, "key_type": 0}))
    return int(answer.error_code), answer.host, int(answer.port)


class Load:
    """Closed-loop committers: each thread commits its groups' offsets in turn, at their owners."""

    def __init__(self, servers: list[Any], groups: list[str], workers: int) -> None:
        self.servers = servers
        self.groups = groups
        self.acked: dict[str, int] = {}
        self.commits = 0
        self.errors: collections.Counter[str] = collections.Counter()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._run, args=(groups[i::workers],), daemon=True)
            for i in range(workers)
        ]
        for t in self._threads:
            t.start()

    def _run(self, mine: list[str]) -> None:
        owners: dict[str, tuple[str, int]] = {}
        clients: dict[tuple[str, int], WireClient] = {}
        offset = 0
        while not self._stop.is_set():
            offset += 1
            for group in mine:
                try:
                    if group not in owners:
                        live = [s for s in self.servers if s.proc.poll() is None]
                        code, host, port = _find(live[offset % len(live)], group)
                        if code:
                            self._count(f"find {code}")
                            continue
                        owners[group] = (host, port)
                    address = owners[group]
                    if address not in clients:
                        clients[address] = WireClient(*address, timeout=10)
                    (code,) = simple_commit(clients[address], group, TOPIC, {0: offset})
                except OSError as exc:
                    self._count(type(exc).__name__)
                    gone = owners.pop(group, None)
                    client = clients.pop(gone, None) if gone is not None else None
                    if client is not None:
                        client.close()
                    time.sleep(0.01)
                    continue
                if code == 0:
                    with self._lock:
                        self.commits += 1
                        self.acked[group] = max(self.acked.get(group, 0), offset)
                else:
                    self._count(f"commit {code}")
                    owners.pop(group, None)
                    time.sleep(0.01)

    def _count(self, what: str) -> None:
        with self._lock:
            self.errors[what] += 1

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(15)


def _shards_of(server: Any) -> int:
    text = server.stderr_path.read_text()
    marker = "this one serves "
    at = text.rfind(marker)
    return int(text[at + len(marker) :].split()[0]) if at >= 0 else -1


def _owner_index(servers: list[Any], group: str) -> int:
    live = [s for s in servers if s.proc.poll() is None]
    _, _, port = _find(live[0], group)
    for i, s in enumerate(servers):
        if f"through port {port} here" in s.stderr_path.read_text():
            return i
    return -1


def _wait_three(servers: list[Any], timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not all(readyz(s.admin_url) and "3 instances" in s.stderr_path.read_text() for s in servers):
        if time.monotonic() > deadline:
            raise SystemExit("the three instances did not form one coordinator in time")
        time.sleep(0.2)
    time.sleep(2.0)  # the last plan's claims and leases


WIDE = 200  # partitions of the preloaded groups' topic


def _preload(servers: list[Any], offsets: int) -> None:
    """`offsets` offsets in groups of WIDE partitions, each group's commit sent to its owner."""
    import concurrent.futures

    create_replicated_topic(servers[0].bootstrap, f"{TOPIC}-wide", WIDE)
    started = time.monotonic()

    def commit(group: str) -> None:
        for _ in range(20):
            code, host, port = _find(servers[0], group)
            if code == 0:
                with WireClient(host, port, timeout=30) as c:
                    codes = simple_commit(c, group, f"{TOPIC}-wide", dict.fromkeys(range(WIDE), 1))
                if codes == {0}:
                    return
            time.sleep(0.2)
        raise SystemExit(f"preloading {group} failed")

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        list(pool.map(commit, (f"bench-preload-{i}" for i in range(-(-offsets // WIDE)))))
    print(f"preloaded {offsets} offsets in {time.monotonic() - started:.1f} s", flush=True)


def _since_kill(servers: list[Any], logged: list[int], victim: int) -> list[str]:
    """What each survivor logged since `logged` (the logs' lengths before the kill)."""
    return [s.stderr_path.read_text()[logged[i] :] for i, s in enumerate(servers) if i != victim]


def _loads(tails: list[str], shards: set[int]) -> list[tuple[int, float, bool]]:
    """(records replayed, seconds, from a hot standby) of each load of `shards` in the survivors' `tails`."""
    import ast
    import re

    found = []
    for tail in tails:
        for m in re.finditer(r"group shard (\d+) reloaded in [\d.]+s: (\{.*\})", tail):
            if int(m.group(1)) in shards:
                stats = ast.literal_eval(m.group(2))
                found.append((int(stats["records"]), float(stats["seconds"]), bool(stats.get("standby"))))
    return found


def _probe(survivor: Any, probes: dict[int, str], killed_at: float) -> dict[int, float]:
    """Seconds from the kill to the first commit of each shard's probe group acknowledged by its owner (found
    through `survivor`), each shard probed by its own thread (one shard's round trips never delay another's)."""
    served: dict[int, float] = {}

    def probe(shard: int, group: str) -> None:
        while time.monotonic() - killed_at < 60:
            try:
                code, host, port = _find(survivor, group)
                if code == 0:
                    with WireClient(host, port, timeout=5) as c:
                        (code,) = simple_commit(c, group, TOPIC, {0: 1})
            except OSError:
                code = -1
            if code == 0:
                served[shard] = time.monotonic() - killed_at
                return
            time.sleep(0.02)

    threads = [threading.Thread(target=probe, args=item, daemon=True) for item in probes.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return served


PHASES = ("detected", "new plan", "claimed and read")


def _phases(tails: list[str], shards: set[int], killed_wall: float) -> dict[str, float]:
    """When the survivors' `tails` logged each step of the takeover, in seconds after the kill: the first "left
    without a word" (a dead peer noticed), the first new plan, and the last load of `shards` ended (claimed and
    read; it is served a lease after its claim)."""
    import datetime
    import re

    def at(line: str) -> float:
        stamp = datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
        return stamp - killed_wall

    found: dict[str, list[float]] = {name: [] for name in PHASES}
    for tail in tails:
        for line in tail.splitlines():
            if "left without a word" in line:
                found["detected"].append(at(line))
            elif re.search(r"instance group \S+ generation \d+:", line):
                found["new plan"].append(at(line))
            elif (m := re.search(r"group shard (\d+) reloaded in", line)) and int(m.group(1)) in shards:
                found["claimed and read"].append(at(line))
    return {
        name: (max(times) if name == "claimed and read" else min(times))
        for name, times in found.items()
        if times
    }


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _waits(pid: int) -> int:
    """How often the process's threads have waited so far (voluntary context switches: an event loop's sleeps in
    epoll among them)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            for line in (task / "status").read_text().splitlines():
                if line.startswith("voluntary_ctxt_switches:"):
                    total += int(line.split()[1])
    return total


def _upstream_requests(admin_url: str) -> float:
    """An instance's own requests to the brokers so far (its kafka_group_coordinator_upstream_requests)."""
    with urllib.request.urlopen(f"{admin_url}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("kafka_group_coordinator_upstream_requests_total{")
    )


def _processes(servers: list[Any]) -> tuple[list[int], list[str]]:
    """The pids of the servers' processes (a supervisor's workers too) and every instance's admin URL (worker w of
    a `serve --workers N` has its own at the admin port + w)."""
    pids, admins = [], []
    for s in servers:
        pids += [s.proc.pid, *worker_pids(s.proc.pid)]
        host, port = s.admin_url.rsplit(":", 1)
        admins += [f"{host}:{int(port) + w}" for w in range(int(s.settings.get("coordinator.workers", 1)))]
    return pids, admins


def _commit_phase(servers: list[Any], pids: list[int], admins: list[str], args: argparse.Namespace) -> tuple:
    """One phase of --op commit: the closed-loop committers (Load) for --seconds. Returns (commits acknowledged,
    seconds, the instances' CPU s, a note: per commit, the instances' own requests to the brokers and their
    threads' waits)."""
    load = Load(servers, [f"bench-scale-{i}" for i in range(args.groups)], args.workers)
    time.sleep(5.0)  # warm: every group's owner known
    cpu0 = sum(_cpu_s(pid) for pid in pids)
    asked0 = sum(_upstream_requests(url) for url in admins)
    waits0 = sum(_waits(pid) for pid in pids)
    commits0, started = load.commits, time.monotonic()
    time.sleep(args.seconds)
    commits = load.commits - commits0
    elapsed = time.monotonic() - started
    cpu = sum(_cpu_s(pid) for pid in pids) - cpu0
    asked = sum(_upstream_requests(url) for url in admins) - asked0
    waits = sum(_waits(pid) for pid in pids) - waits0
    load.stop()
    note = (
        f"{asked / commits:.2f} requests of the instances' own to the brokers per commit, "
        f"{waits / commits:.2f} waits of their threads per commit"
    )
    return commits, elapsed, cpu, note


def _go_phase(bootstrap: str, pids: list[int], args: argparse.Namespace, log: Path, prefix: str) -> tuple:
    """One phase with bench/loadgen: its --conns members, one group each, send --op requests (heartbeats, or
    commits of one partition of TOPIC) with --window in flight each for --seconds, each where FindCoordinator
    names the group's owner. Returns (requests answered, seconds, the instances' CPU s, a note: the generator's
    cores and any error codes)."""
    versions = json.dumps({str(k): v for k, v in rk.negotiate(bootstrap).items()})
    command = [
        str(GO_LOADGEN),
        "-bootstrap",
        bootstrap,
        "-versions",
        versions,
        "-op",
        args.op,
        "-topic",
        TOPIC,
    ]
    command += ["-conns", str(args.conns), "-window", str(args.window), "-duration", str(args.seconds)]
    command += ["-prefix", prefix, "-session-ms", "30000"]
    with open(log, "w") as err:
        gen = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True)
    try:

        def event(name: str) -> dict[str, Any]:
            assert gen.stdout is not None
            for line in gen.stdout:
                doc = json.loads(line)
                if doc.get("ev") == "failed":
                    raise SystemExit(f"the load generator failed: {doc}")
                if doc.get("ev") == name:
                    return doc
            raise SystemExit(f"the load generator ended before {name!r} (its log: {log})")

        event("ready")
        cpu0 = sum(_cpu_s(pid) for pid in pids)
        assert gen.stdin is not None
        gen.stdin.write("go\n")
        gen.stdin.flush()
        time.sleep(args.seconds)  # the generator's own --seconds, from the same "go"
        cpu = sum(_cpu_s(pid) for pid in pids) - cpu0
        result = event("result")
    finally:
        gen.kill()
        gen.wait(10)
    note = f"the generator at {result['cpu_s'] / result['seconds']:.2f} cores"
    if result.get("error_codes"):
        note += f", error codes in {result['checked']} answers checked: {result['error_codes']}"
    return result["answers"], result["seconds"], cpu, note


def wait_formed(servers: list[Any], count: int, timeout: float = 90) -> None:
    """Until every server is ready and has logged that `count` instances form its coordinator."""
    deadline = time.monotonic() + timeout
    while not all(readyz(s.admin_url) and f"{count} instances" in s.stderr_path.read_text() for s in servers):
        if time.monotonic() > deadline:
            raise SystemExit("the instances did not form one coordinator in time")
        time.sleep(0.2)


def _scale(cluster: Any, run: Path, args: argparse.Namespace) -> None:
    rows = []
    counts = [int(c) for c in args.counts.split(",")]
    unit = "heartbeats" if args.op == "heartbeat" else "commits"
    # heartbeats come from bench/loadgen only
    generator = "go" if args.op == "heartbeat" else args.generator
    if generator == "go" and (why := build_go_loadgen()) is not None:
        raise SystemExit(f"the Go load generator (bench/loadgen) did not build: {why}")
    for round_, count in enumerate(counts):
        settings = {
            "upstream.bootstrap.servers": cluster.bootstrap,
            "coordinator.state.topic": f"bench-scale-{uuid.uuid4().hex[:6]}",
            "offsets.topic.num.partitions": args.shards,
            "coordinator.instance.standby": not args.no_standby,
        }
        if args.as_workers:  # one `serve --workers N`: its workers are the instances (on either core)
            servers = [start_server(run / f"scale-{count}", {**settings, "coordinator.workers": count})]
        else:
            servers = [
                start_server(
                    run / f"scale-{count}-{i}", settings, prefix=["taskset", "-c", str(i % os.cpu_count())]
                )
                for i in range(count)
            ]
        try:
            wait_formed(servers, count)
            time.sleep(2.0)
            if round_ == 0:
                create_replicated_topic(servers[0].bootstrap, TOPIC, 1)
            pids, admins = _processes(servers)
            if generator == "go":
                done, elapsed, cpu, note = _go_phase(
                    servers[0].bootstrap,
                    pids,
                    args,
                    run / f"loadgen-{round_}.log",
                    f"bench-{args.op}-{round_}",
                )
            else:
                done, elapsed, cpu, note = _commit_phase(servers, pids, admins, args)
            rows.append((count, done, elapsed, cpu))
            print(
                f"{count} instance(s): {done / elapsed:.0f} {unit}/s, {cpu:.1f} CPU s, {done / cpu:.0f} {unit} "
                f"per CPU-s, {note}",
                flush=True,
            )
        finally:
            for s in servers:
                s.proc.terminate()
            for s in servers:
                s.proc.wait(30)
    print()
    print(f"| instances | {unit}/s | instances' CPU s | {unit} per CPU-s |")
    print("|---|---|---|---|")
    for count, done, elapsed, cpu in rows:
        print(f"| {count} | {done / elapsed:.0f} | {cpu:.1f} | {done / cpu:.0f} |")
    # every phase of one count together (with --counts 1,2,2,1 the drift of the machine falls on both alike)
    total = {c: [sum(row[k] for row in rows if row[0] == c) for k in (1, 2, 3)] for c in sorted(set(counts))}
    if 1 in total:
        d1, e1, u1 = total[1]
        for count, (d, e, u) in total.items():
            if count > 1:
                print(f"| {count} / 1 | {(d / e) / (d1 / e1):.2f}x | | {(d / u) / (d1 / u1):.2f}x |")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--workers", type=int, default=48)
    parser.add_argument("--groups", type=int, default=480)
    parser.add_argument("--shards", type=int, default=12)
    parser.add_argument("--scale", action="store_true")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument(
        "--counts",
        default="1,2",
        help="with --scale: the instance counts measured, in this order (e.g. 1,2,2,1; each count's phases summed)",
    )
    parser.add_argument(
        "--op",
        choices=("commit", "heartbeat"),
        default="commit",
        help="with --scale: what the load sends",
    )
    parser.add_argument(
        "--generator",
        choices=("python", "go"),
        default="python",
        help="with --scale: the load, closed-loop commits from threads here (--workers, --groups), or bench/loadgen "
        "(--conns members of a group each, --window requests in flight each; always for --op heartbeat)",
    )
    parser.add_argument("--conns", type=int, default=200, help="with --generator go: members")
    parser.add_argument("--window", type=int, default=8, help="with --generator go: requests in flight each")
    parser.add_argument(
        "--as-workers",
        action="store_true",
        help="with --scale: the instances as the workers of one `serve --workers N` instead of N servers",
    )
    parser.add_argument(
        "--offsets",
        type=int,
        default=0,
        help="offsets committed before the rounds (groups of 200 partitions), so that shards are big to replay",
    )
    parser.add_argument(
        "--test-jvm",
        action="store_true",
        help="the brokers with the tests' JVM flags (C1 only, 384 MB), as the figures before 2026-11-29 were "
        "measured; by default they run with kafka-server-start.sh's, as a user's cluster does",
    )
    parser.add_argument(
        "--no-standby",
        action="store_true",
        help="coordinator.instance.standby=false: takeovers replay whole shards",
    )
    args = parser.parse_args()

    run = Path(tempfile.mkdtemp(prefix="bench-instances-"))
    (run / "kafka").mkdir()
    cluster = KafkaCluster(run / "kafka", production_jvm=not args.test_jvm)
    servers: list[Any] = []
    if args.scale:
        try:
            _scale(cluster, run, args)
        finally:
            cluster.close()
        return
    try:
        settings = {
            "upstream.bootstrap.servers": cluster.bootstrap,
            "coordinator.state.topic": f"bench-instances-{uuid.uuid4().hex[:6]}",
            "offsets.topic.num.partitions": args.shards,
            "coordinator.instance.standby": not args.no_standby,
        }
        for i in range(3):
            servers.append(start_server(run / f"instance-{i}", settings))
        _wait_three(servers)
        create_replicated_topic(servers[0].bootstrap, TOPIC, 1)
        if args.offsets:
            _preload(servers, args.offsets)
        groups = [f"bench-instances-{i}" for i in range(args.groups)]
        load = Load(servers, groups, args.workers)
        time.sleep(5.0)
        started, commits0 = time.monotonic(), load.commits
        takeovers: list[float] = []
        # (records, seconds, from a standby) of each shard taken over
        replayed: list[tuple[int, float, bool]] = []
        steps: list[dict[str, float]] = []  # each round's phases (_phases), seconds after the kill
        for round_ in range(args.rounds):
            victim = round_ % 3
            probes: dict[int, str] = {}
            for g in (f"bench-probe-{round_}-{i}" for i in range(40 * args.shards)):
                if _owner_index(servers, g) == victim:
                    probes.setdefault(shard_of(g, args.shards), g)
            logged = [len(s.stderr_path.read_text()) for s in servers]
            killed_wall, killed_at = time.time(), time.monotonic()
            servers[victim].proc.send_signal(signal.SIGKILL)
            servers[victim].proc.wait(10)
            survivor = servers[(victim + 1) % 3]
            served = _probe(survivor, probes, killed_at)
            slowest = max(served.values(), default=float("nan"))
            takeovers.append(slowest)
            tails = _since_kill(servers, logged, victim)
            loads = _loads(tails, set(probes))
            replayed.extend(loads)
            phases = _phases(tails, set(probes), killed_wall)
            steps.append(phases)
            print(
                f"round {round_}: killed instance {victim} ({len(probes)} shards): served again after "
                f"{min(served.values(), default=float('nan')):.2f}-{slowest:.2f} s"
                + (
                    ""
                    if len(served) == len(probes)
                    else f"; {len(probes) - len(served)} shards NOT within 60 s"
                )
                + f"; the new owners replayed {sum(r for r, _, _ in loads)} records in "
                f"{max((t for _, t, _ in loads), default=0.0):.2f} s at most"
                f" ({sum(1 for *_, standby in loads if standby)} of {len(loads)} shards from a hot standby); "
                + ", ".join(f"{name} {at:.2f} s" for name, at in phases.items()),
                flush=True,
            )
            servers[victim] = start_server(run / f"instance-{victim}-{round_}", settings)
            _wait_three(servers)
        elapsed = time.monotonic() - started
        rate = (load.commits - commits0) / elapsed
        load.stop()
        lost = 0
        for group, offset in sorted(load.acked.items()):
            owner = servers[_owner_index(servers, group)]
            with urllib.request.urlopen(f"{owner.admin_url}/v1/groups/{group}", timeout=10) as answer:
                held = {o["partition"]: o["committed_offset"] for o in json.load(answer)["offsets"]}
            if held.get(0, -1) < offset:
                lost += 1
        print()
        print(
            f"| rounds | takeover median | takeover max | commits/s (closed loop, {args.workers} in flight) | lost |"
        )
        print("|---|---|---|---|---|")
        print(
            f"| {len(takeovers)} | {statistics.median(takeovers):.2f} s | {max(takeovers):.2f} s | {rate:.0f} | "
            f"{lost} of {len(load.acked)} groups |"
        )
        if replayed:
            print(
                f"shards taken over: {len(replayed)}, {sum(1 for *_, sb in replayed if sb)} from a hot standby; "
                f"records replayed per shard: median {statistics.median(r for r, _, _ in replayed):.0f}, "
                f"max {max(r for r, _, _ in replayed)}; load seconds per shard: median "
                f"{statistics.median(t for _, t, _ in replayed):.2f}, max {max(t for _, t, _ in replayed):.2f}"
            )
        for name in PHASES:
            seen = [p[name] for p in steps if name in p]
            if seen:
                print(
                    f"{name}: median {statistics.median(seen):.2f} s, max {max(seen):.2f} s after the kill "
                    f"({len(seen)} rounds)"
                )
        print(f"errors seen by the load (retried): {dict(load.errors)}")
        print(f"shards per instance at the end: {[_shards_of(s) for s in servers]}")
    finally:
        for s in servers:
            if s.proc.poll() is None:
                s.proc.terminate()
        for s in servers:
            try:
                s.proc.wait(20)
            except Exception:  # noqa: BLE001
                s.proc.kill()
        cluster.close()


if __name__ == "__main__":
    main()
