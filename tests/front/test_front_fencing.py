"""Two servers on one state topic never both answer for a shard: a server that starts claims every shard's writer
on the cluster (its transactional id), which fences the server that held it. From the moment the new server is
ready the old one answers nothing from the shards it lost (reads included: DescribeGroups and Heartbeat answer
from a shard's memory), nothing it acknowledged is lost, and it says it is not ready.

(OffsetFetch is not a shard read in front of a cluster: it is answered from the cluster, coordinator.front.groups.)"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

from tests.support.kafka_cluster import create_replicated_topic
from tests.support.server import readyz
from tests.support.wire import WireClient, make, request_class, simple_commit

pytestmark = pytest.mark.e2e

SHARDS = 3
REFUSED = {14, 15, 16}  # COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR
NOT_COORDINATOR = 16
LEASE_MS = 1500


def _client(server) -> WireClient:
    host, port = server.bootstrap.split(",")[0].rsplit(":", 1)
    return WireClient(host, int(port), timeout=40)


def _commit(client: WireClient, group: str, topic: str, offset: int) -> int:
    (code,) = simple_commit(client, group, topic, {0: offset})
    return code


def _describe(client: WireClient, groups: list[str]) -> list[tuple[int, str]]:
    """(error code, state) of each group, as DescribeGroups answers from the shards' memory."""
    answer = client.call(
        make(request_class(15, 5), {"groups": groups, "include_authorized_operations": False})
    )
    return [(int(g.error_code), g.group_state) for g in answer.groups]


def _offsets(server, group: str) -> dict[tuple[str, int], int]:
    """The group's offsets as the server's shard holds them (its admin API)."""
    with urllib.request.urlopen(f"{server.admin_url}/v1/groups/{group}", timeout=10) as answer:
        data = json.load(answer)
    return {(o["topic"], o["partition"]): o["committed_offset"] for o in data["offsets"]}


def _wait_ready(server, timeout: float = 60) -> float:
    deadline = time.monotonic() + timeout
    while not readyz(server.admin_url):
        assert time.monotonic() < deadline, f"not ready within {timeout}s:\n{server.output()}"
        time.sleep(0.02)
    return time.monotonic()


def _settings(kafka_cluster, **extra: object) -> dict[str, object]:
    """Servers in front of `kafka_cluster` on a state topic of their own (a fresh one per test), which relay no
    request to each other: what an instance answers for a group it does not own is its own answer (the relay is
    tests/front/test_front_instances.py's)."""
    return {
        "upstream.bootstrap.servers": kafka_cluster.bootstrap,
        "coordinator.state.topic": f"kgc-fencing-{uuid.uuid4().hex[:8]}",
        "offsets.topic.num.partitions": SHARDS,
        "coordinator.state.lease.ms": LEASE_MS,
        "coordinator.instance.relay.listener": "",
        **extra,
    }


def _mine(server, group: str) -> bool:
    """Whether `server`'s FindCoordinator names a listener of `server` itself for `group`."""
    with _client(server) as c:
        answer = c.call(make(request_class(10, 3), {"key": group, "key_type": 0}))
    assert answer.error_code == 0, answer
    return f"through port {answer.port} here" in server.stderr_path.read_text()


def test_a_second_instance_takes_its_share_and_the_first_stops_answering_for_it(
    server_factory, kafka_cluster
):
    """Two instances divide the shards (coordinator.front.instances); a shard that moves is claimed by its new
    owner, which fences the old: from the moment the new instance is ready the old one answers no read and takes
    no write for the groups it gave up, and the new one has everything the old one acknowledged."""
    settings = _settings(kafka_cluster)
    old = server_factory(settings)
    _wait_ready(old)
    topic = "front-fencing-topic"
    create_replicated_topic(old.bootstrap, topic, 1)
    groups = [f"front-fencing-{i}" for i in range(12)]  # over every shard
    with _client(old) as c:
        for i, group in enumerate(groups):
            assert _commit(c, group, topic, 100 + i) == 0, old.output()
        assert _describe(c, groups) == [(0, "Empty")] * len(groups)

    new = server_factory(settings)
    _wait_ready(new)
    moved = [g for g in groups if _mine(new, g)]
    kept = [g for g in groups if g not in moved]
    assert moved and kept, (moved, kept, new.output())
    with _client(old) as c:
        described = _describe(c, moved)
        assert all(code in REFUSED for code, _ in described), (described, old.output())
        for group in moved:
            assert _commit(c, group, topic, 999) in REFUSED
        assert _describe(c, kept) == [(0, "Empty")] * len(kept)
    with _client(new) as c:
        assert _describe(c, moved) == [(0, "Empty")] * len(moved), new.output()
        for group in moved:
            assert _offsets(new, group) == {(topic, 0): 100 + groups.index(group)}
            assert _commit(c, group, topic, 200 + groups.index(group)) == 0
    assert [_offsets(new, g) for g in moved] == [{(topic, 0): 200 + groups.index(g)} for g in moved]
    assert [_offsets(old, g) for g in kept] == [{(topic, 0): 100 + groups.index(g)} for g in kept]


CUT_UID = (
    54321  # the old server runs as this user, so that iptables can cut it (only it) off from the cluster
)


class _Cut:
    """iptables rules that drop what processes of CUT_UID send to the cluster's brokers (a network partition of
    one server from the cluster, its clients still reaching it); removed on exit."""

    def __init__(self, ports: list[int]) -> None:
        self.rules = [
            [
                "OUTPUT",
                "-m",
                "owner",
                "--uid-owner",
                str(CUT_UID),
                "-p",
                "tcp",
                "-d",
                "127.0.0.1",
                "--dport",
                str(p),
            ]
            + ["-j", "DROP"]
            for p in ports
        ]
        self.active = False

    def cut(self) -> None:
        for rule in self.rules:
            subprocess.run(["iptables", "-A", *rule], check=True, capture_output=True)
        self.active = True

    def heal(self) -> None:
        if self.active:
            for rule in self.rules:
                subprocess.run(["iptables", "-D", *rule], check=False, capture_output=True)
        self.active = False


def _can_cut() -> str | None:
    if os.geteuid() != 0:
        return "not root"
    if shutil.which("iptables") is None or shutil.which("setpriv") is None:
        return "no iptables or setpriv"
    probe = ["OUTPUT", "-m", "owner", "--uid-owner", str(CUT_UID), "-p", "tcp", "--dport", "1", "-j", "DROP"]
    added = subprocess.run(["iptables", "-A", *probe], capture_output=True, text=True)
    if added.returncode != 0:
        return f"iptables refuses an owner rule: {added.stderr.strip()}"
    subprocess.run(["iptables", "-D", *probe], capture_output=True)
    return None


def test_a_server_cut_off_from_the_cluster_stops_answering_before_its_successor_starts(
    server_factory, kafka_cluster, tmp_path, request
):
    """A network partition of the old server from the cluster (its clients still reach it): its lease lapses, so
    it stops answering (reads included) before the new server, started meanwhile on the same state topic, answers
    at all; healed, it finds out that it was fenced and stays out (NOT_COORDINATOR, not ready), and the new server
    goes on with everything acknowledged."""
    why = _can_cut()
    if why is not None:
        pytest.skip(f"cannot cut one process off from the cluster here: {why}")
    from tests.support.kafka_cluster import NODE_IDS
    from tests.support.server import start_server

    settings = _settings(kafka_cluster, **{"upstream.request.timeout.ms": 3000})
    data_dir = Path(tempfile.mkdtemp(prefix="kgc-cut-"))  # pytest's own tmp is root's alone
    os.chown(data_dir, CUT_UID, CUT_UID)
    old = start_server(
        tmp_path / "old",
        settings,
        data_dir=data_dir,
        prefix=["setpriv", f"--reuid={CUT_UID}", f"--regid={CUT_UID}", "--clear-groups"],
    )
    server_factory.started.append(old)
    request.addfinalizer(lambda: shutil.rmtree(data_dir, ignore_errors=True))
    _wait_ready(old)
    topic = f"front-partition-{uuid.uuid4().hex[:6]}"
    create_replicated_topic(old.bootstrap, topic, 1)
    groups = [f"front-partition-{i}" for i in range(12)]
    with _client(old) as c:
        for i, group in enumerate(groups):
            assert _commit(c, group, topic, 100 + i) == 0, old.output()

    cut = _Cut([kafka_cluster.ports[n] for n in NODE_IDS])
    # The old server's answers, watched from the cut on: (time, every group answered).
    answered: list[tuple[float, bool]] = []
    watching = threading.Event()

    def watch() -> None:
        with _client(old) as c:
            while not watching.is_set():
                codes = [code for code, _ in _describe(c, groups)]
                answered.append((time.monotonic(), any(code == 0 for code in codes)))
                time.sleep(0.05)

    try:
        cut.cut()
        cut_at = time.monotonic()
        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        new = server_factory(settings)
        with _client(new) as c:
            first_answer = None
            while True:  # the new server's first answer (its shards are claimed one by one)
                described = _describe(c, groups)
                assert all(code == 0 or code in REFUSED for code, _ in described), described
                if first_answer is None and any(code == 0 for code, _ in described):
                    first_answer = time.monotonic()
                if all(code == 0 for code, _ in described):
                    break
                assert time.monotonic() - cut_at < 60, new.output()
                time.sleep(0.02)
            assert described == [(0, "Empty")] * len(groups)
            assert [_offsets(new, g) for g in groups] == [{(topic, 0): 100 + i} for i in range(len(groups))]
        time.sleep(0.5)
        watching.set()
        watcher.join(10)
        last_answer = max((at for at, ok in answered if ok), default=cut_at)
        print(
            f"\nold server last answered {last_answer - cut_at:.2f}s after the cut; new first answered {first_answer - cut_at:.2f}s after it"
        )
        assert last_answer < first_answer, (last_answer - cut_at, first_answer - cut_at, old.output())
        assert last_answer - cut_at < LEASE_MS / 1000 + 0.5, (
            "the old server answered for longer than its lease"
        )
    finally:
        cut.heal()

    # Healed: the old server finds that the cluster dropped it, gives up what it held and joins again; the two
    # divide the shards, each group answered by its owner with everything acknowledged.
    deadline = time.monotonic() + 60
    while "giving up its shards and joining again" not in old.stderr_path.read_text():
        assert time.monotonic() < deadline, old.output()
        time.sleep(0.2)
    _wait_ready(old)
    _wait_ready(new)
    for i, group in enumerate(groups):
        while True:
            owner = old if _mine(old, group) else new
            with _client(owner) as c:
                code = _commit(c, group, topic, 300 + i)
            if code == 0:
                break
            assert code in REFUSED and time.monotonic() < deadline, (group, code, owner.output())
            time.sleep(0.1)
        assert _offsets(owner, group) == {(topic, 0): 300 + i}
