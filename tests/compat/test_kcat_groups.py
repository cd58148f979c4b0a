"""kcat as a balanced consumer (`kcat -G GROUP TOPIC`, librdkafka's high-level consumer with auto-commit),
as a user would type it: two kcat processes split the partitions, together print every record exactly once,
their commits are visible through OffsetFetch and DescribeGroups names both; a kcat that is stopped (SIGTERM:
kcat closes its consumer, LeaveGroup) hands its partitions to the other. Static membership with
`-X group.instance.id=...`: a kcat restarted with the same id gets its partitions back without a rebalance,
and a duplicate is fenced (librdkafka's fatal FENCED_INSTANCE_ID: kcat prints it and exits).

Not `-o beginning`: in -G mode kcat applies -o to every assignment it gets, so after a rebalance it would
re-read partitions whose offsets were committed (kcat 1.7.1 behaviour, not the server's);
auto.offset.reset=earliest starts a new group at the beginning and later assignments at the committed offsets.

kcat has no group admin commands: the admin scenario is n.a. for it. kcat comes from Debian
(scripts/install-system-deps.sh); a missing kcat fails these tests.
"""

from __future__ import annotations

import re
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest
from compat_matrix import not_applicable, scenario, set_version

from tests.support.e2e import require_kcat
from tests.support.members import (
    admin,
    committed_offsets,
    create_topic,
    high_watermarks,
    produce_batch,
    wait_for,
)
from tests.support.server import REPO, ServerProcess

pytestmark = pytest.mark.e2e

PARTITIONS = 6
SESSION_MS = 20000
C = "kcat"


def kcat_version(kcat: str) -> str:
    out = subprocess.run([kcat, "-V"], capture_output=True, text=True, stdin=subprocess.DEVNULL).stdout
    m = re.search(r"kcat - Apache Kafka producer and consumer tool.*?Version (\S+)", out, re.S)
    lib = re.search(r"librdkafka version (\S+)", out)
    version = m.group(1) if m else "unknown"
    return f"{version} (librdkafka {lib.group(1)})" if lib else version


class Kcat:
    """One `kcat -G` process; stdout (one "PARTITION OFFSET" line per record) and stderr go to files."""

    def __init__(
        self,
        kcat: str,
        run_dir: Path,
        name: str,
        server: ServerProcess,
        group: str,
        topic: str,
        instance_id: str | None = None,
    ) -> None:
        self.name = name
        self.out = run_dir / f"{name}.out"
        self.err = run_dir / f"{name}.err"
        cmd = [
            kcat,
            "-b",
            server.bootstrap,
            "-G",
            group,
            topic,
            "-u",
            "-f",
            "%p %o\\n",
            "-X",
            "auto.offset.reset=earliest",
            "-X",
            f"client.id=kcat-{name}",
            "-X",
            "partition.assignment.strategy=range",
            "-X",
            "auto.commit.interval.ms=200",
            "-X",
            f"session.timeout.ms={SESSION_MS}",
            "-X",
            "heartbeat.interval.ms=1000",
        ]
        if instance_id:
            cmd += ["-X", f"group.instance.id={instance_id}"]
        with open(self.out, "wb") as out, open(self.err, "wb") as err:
            self.proc = subprocess.Popen(cmd, cwd=REPO, stdin=subprocess.DEVNULL, stdout=out, stderr=err)

    def records(self) -> list[tuple[int, int]]:
        lines = self.out.read_text(errors="replace").splitlines()
        return [
            (int(p), int(o))
            for p, o in (line.split() for line in lines if line.strip())
            if p.isdigit() and o.isdigit()
        ]

    def stderr(self) -> str:
        return self.err.read_text(errors="replace")

    def rebalances(self) -> list[str]:
        return [line for line in self.stderr().splitlines() if "rebalanced" in line]

    def stop(self, timeout: float = 30) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)

    def summary(self) -> str:
        state = "alive" if self.proc.poll() is None else f"exited {self.proc.returncode}"
        return f"[{self.name}] {state}, {len(self.records())} records\n    {self.stderr()[-1500:]}"


@pytest.fixture
def kcats(tmp_path):
    pool: list[Kcat] = []
    yield pool
    for k in pool:
        k.kill()


def describe(server: ServerProcess, group: str) -> dict:
    d = admin(server, "describe", "--group", group)
    assert d["error"] is None, d
    return d


def split_of(server: ServerProcess, group: str) -> dict[str, frozenset[int]]:
    d = describe(server, group)
    # Keyed by group.instance.id where there is one: a static member replaced in place keeps the replaced
    # member's client id in DescribeGroups, as in Kafka (replaceStaticMember copies the old member's
    # clientId).
    return (
        {m["instance_id"] or m["client_id"]: frozenset(p for _t, p in m["assignment"]) for m in d["members"]}
        if d["state"] == "STABLE"
        else {}
    )


def wait_split(server, group, sizes: list[int], diagnose, timeout: float = 60) -> dict[str, frozenset[int]]:
    def ok():
        s = split_of(server, group)
        covered = sorted(p for ps in s.values() for p in ps) == list(range(PARTITIONS))
        return s if covered and sorted(len(ps) for ps in s.values()) == sorted(sizes) else None

    return wait_for(ok, timeout, f"the group to split {PARTITIONS} partitions as {sizes}", diagnose)


def check_exactly_once(ks: list[Kcat], placed: dict[tuple[int, int], str]) -> None:
    counts = Counter(r for k in ks for r in k.records())
    dups = sorted(r for r, n in counts.items() if n > 1)
    missing = sorted(placed.keys() - counts.keys())
    extra = sorted(counts.keys() - placed.keys())
    assert not dups and not missing and not extra, (dups[:10], missing[:10], extra[:10])


def test_kcat_balanced_consumers_split_commit_and_leave(kcats, server, tmp_path, request):
    kcat = require_kcat()
    set_version(C, kcat_version(kcat))
    proxy = request.node.compat_proxy
    group, topic = "kcat-group", "kcat-group-topic"
    create_topic(server, topic, PARTITIONS)

    def diagnose() -> str:
        return "\n".join(k.summary() for k in kcats) + "\n" + server.output()

    with scenario(C, "join", request, proxy=proxy):
        kcats += [Kcat(kcat, tmp_path, f"k{i}", server, group, topic) for i in range(2)]
        split = wait_split(server, group, [3, 3], diagnose)
        assert sorted(split) == ["kcat-k0", "kcat-k1"], split

    with scenario(C, "consume_commit", request, proxy=proxy):
        # Produced once the split is settled: no rebalance while records are in flight.
        placed = produce_batch(server, topic, 300, 720, tmp_path)
        wait_for(
            lambda: {r for k in kcats for r in k.records()} >= placed.keys(),
            60,
            "everything printed",
            diagnose,
        )
        hw = high_watermarks(placed, PARTITIONS)
        wait_for(
            lambda: committed_offsets(server, group, topic, PARTITIONS) == hw,
            30,
            f"auto-committed offsets to reach {hw}",
            diagnose,
        )
        check_exactly_once(kcats, placed)
        for k in kcats:  # each printed only its own partitions
            assert {p for p, _o in k.records()} <= split[f"kcat-{k.name}"], diagnose()

    with scenario(C, "member_leaves", request, proxy=proxy):
        t0 = time.monotonic()
        assert kcats[1].stop() == 0, diagnose()  # SIGTERM: kcat closes the consumer (LeaveGroup)
        wait_split(server, group, [PARTITIONS], diagnose, timeout=SESSION_MS / 1000 - 5)
        print(f"kcat: the leaver's partitions moved in {time.monotonic() - t0:.2f}s")
        placed |= produce_batch(server, topic, 120, 721, tmp_path)
        wait_for(
            lambda: {r for k in kcats for r in k.records()} >= placed.keys(), 60, "batch 2 printed", diagnose
        )
        hw = high_watermarks(placed, PARTITIONS)
        wait_for(
            lambda: committed_offsets(server, group, topic, PARTITIONS) == hw,
            30,
            f"auto-committed offsets to reach {hw}",
            diagnose,
        )
        assert kcats[0].stop() == 0, diagnose()
        check_exactly_once(kcats, placed)
    not_applicable(C, "admin", request, "kcat has no consumer-group admin commands")
    for name in ("upgrade", "regex"):
        not_applicable(C, name, request, "kcat 1.7's librdkafka has no consumer group protocol (KIP-848)")


def test_kcat_static_member_restart_and_fencing(kcats, server, tmp_path, request):
    kcat = require_kcat()
    set_version(C, kcat_version(kcat))
    proxy = request.node.compat_proxy
    group, topic = "kcat-static", "kcat-static-topic"
    create_topic(server, topic, PARTITIONS)

    def diagnose() -> str:
        return "\n".join(k.summary() for k in kcats) + "\n" + server.output()

    with scenario(C, "static_restart", request, proxy=proxy):
        a = Kcat(kcat, tmp_path, "a", server, group, topic, instance_id="kcat-static-a")
        kcats.append(a)
        wait_split(server, group, [PARTITIONS], diagnose)
        b = Kcat(kcat, tmp_path, "b", server, group, topic, instance_id="kcat-static-b")
        kcats.append(b)
        split = wait_split(server, group, [3, 3], diagnose)
        placed = produce_batch(server, topic, 120, 730, tmp_path)
        wait_for(
            lambda: {r for k in kcats for r in k.records()} >= placed.keys(), 60, "batch 1 printed", diagnose
        )
        hw = high_watermarks(placed, PARTITIONS)
        wait_for(lambda: committed_offsets(server, group, topic, PARTITIONS) == hw, 30, "commits", diagnose)
        seen_a = len(a.rebalances())
        assert b.stop() == 0, diagnose()  # a static member: no LeaveGroup
        b2 = Kcat(kcat, tmp_path, "b2", server, group, topic, instance_id="kcat-static-b")
        kcats.append(b2)
        wait_for(lambda: b2.rebalances(), SESSION_MS / 1000, "the restarted kcat to be assigned", diagnose)
        after = split_of(server, group)
        assert after == split, (after, split)
        placed |= produce_batch(server, topic, 120, 731, tmp_path)
        wait_for(
            lambda: {r for k in kcats for r in k.records()} >= placed.keys(), 60, "batch 2 printed", diagnose
        )
        time.sleep(3.0)  # a few of a's heartbeats: they would have seen a rebalance
        assert a.rebalances()[seen_a:] == [], diagnose()
        check_exactly_once(kcats, placed)

    with scenario(C, "fencing", request, proxy=proxy):
        a2 = Kcat(kcat, tmp_path, "a2", server, group, topic, instance_id="kcat-static-a")
        kcats.append(a2)
        wait_for(lambda: a2.rebalances(), 30, "the duplicate to be assigned", diagnose)
        wait_for(lambda: a.proc.poll() is not None, 30, "the fenced kcat to exit", diagnose)
        assert re.search(r"fenced|FENCED_INSTANCE_ID", a.stderr(), re.I), a.summary()
        print("kcat: fenced kcat said:", [line for line in a.stderr().splitlines() if "enced" in line][:2])
        assert split_of(server, group) == split, diagnose()
        for k in (a2, b2):
            assert k.stop() == 0, diagnose()
