"""Helpers for the consumer-group e2e tests: group members running in their own processes (clients/*_member.py),
followed through the JSON-lines event files they write, plus produce/admin helpers and exactly-once checks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest

from tests.support.e2e import make_messages, produce, run, run_client
from tests.support.server import PYTHON, REPO, ServerProcess, readyz

GROUP_CLIENTS = Path(__file__).resolve().parents[1] / "e2e" / "groups" / "clients"
MEMBER_SCRIPTS = {"ck": "ck_member.py", "kp": "kp_member.py", "aio": "aio_member.py"}

NON_EMPTY_GROUP = 68
FENCED_INSTANCE_ID = 82
RD_FENCED = -144  # librdkafka's KafkaError._FENCED
RD_FATAL = -150  # librdkafka's KafkaError._FATAL


class Member:
    """One group member process. Its events file is parsed incrementally; see clients/_events.py."""

    def __init__(self, lib: str, name: str, cmd: list[str], run_dir: Path) -> None:
        self.lib = lib
        self.name = name
        self.cmd = cmd
        self.events_path = run_dir / f"{name}.events.jsonl"
        self.log_path = run_dir / f"{name}.log"
        self.proc: subprocess.Popen | None = None
        self._events: list[dict[str, Any]] = []
        self._pos = 0
        self._tail = b""

    def start(self) -> Member:
        self.events_path.touch()
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                self.cmd, cwd=REPO, stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT
            )
        self.started_at = time.time()
        return self

    # -- reading --------------------------------------------------------------------------------
    def events(self, kind: str | Iterable[str] | None = None) -> list[dict[str, Any]]:
        with open(self.events_path, "rb") as f:
            f.seek(self._pos)
            data = f.read()
        self._pos += len(data)
        data = self._tail + data
        lines = data.split(b"\n")
        self._tail = lines.pop()
        self._events.extend(json.loads(line) for line in lines if line.strip())
        if kind is None:
            return list(self._events)
        kinds = {kind} if isinstance(kind, str) else set(kind)
        return [e for e in self._events if e["ev"] in kinds]

    def held(self) -> frozenset[int]:
        changes = self.events(("assigned", "revoked", "lost"))
        return frozenset(changes[-1]["held"]) if changes else frozenset()

    def rebalance_events(self) -> list[dict[str, Any]]:
        return self.events(("assigned", "revoked", "lost"))

    def records(self) -> list[tuple[int, int, str | None]]:
        return [(r[0], r[1], r[2]) for e in self.events("records") for r in e["recs"]]

    def errors(self) -> list[dict[str, Any]]:
        return self.events(("error", "commit_error"))

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log(self, limit: int = 4000) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""
        return text[-limit:]

    def summary(self) -> str:
        state = "alive" if self.alive() else f"exited {self.proc.returncode if self.proc else None}"
        evs = [e for e in self.events() if e["ev"] != "records"]
        n_recs = len(self.records())
        lines = [f"[{self.name}] {self.lib} {state}; held={sorted(self.held())}; {n_recs} records"]
        for e in evs[-14:]:
            fields = {k: v for k, v in e.items() if k not in ("ev", "t", "member")}
            lines.append(f"    {e['t']:.3f} {e['ev']} {json.dumps(fields)[:300]}")
        out = self.log(1500).strip()
        if out:
            lines.append("    log: " + out.replace("\n", "\n         "))
        return "\n".join(lines)

    # -- control --------------------------------------------------------------------------------
    def send(self, command: str) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(command.encode() + b"\n")
        self.proc.stdin.flush()

    def _close_stdin(self) -> None:
        if self.proc is not None and self.proc.stdin is not None and not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()
            except (BrokenPipeError, OSError):
                pass

    def close(self, timeout: float = 30.0) -> int:
        """Ask the member to close its consumer (LeaveGroup for a dynamic member) and exit; return its exit code."""
        assert self.proc is not None
        if self.proc.poll() is None:
            try:
                self.send("close")
            except (BrokenPipeError, OSError):
                pass
        self._close_stdin()
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"member {self.name} did not exit within {timeout}s of `close`\n{self.summary()}")

    def kill(self) -> None:
        """SIGKILL: no LeaveGroup, no commit, nothing."""
        assert self.proc is not None
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)
        self._close_stdin()

    def cleanup(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait(timeout=10)
            self._close_stdin()


class Members:
    """Factory and registry of member processes of one test; every one still running is killed at teardown."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.all: list[Member] = []
        self.server: ServerProcess | None = None

    def start(
        self,
        lib: str,
        name: str,
        server: ServerProcess,
        group: str,
        topic: str,
        *,
        instance_id: str | None = None,
        client_id: str | None = None,
        settings: dict[str, object] | None = None,
        max_runtime: float = 150.0,
    ) -> Member:
        self.server = server
        cmd = [
            PYTHON,
            str(GROUP_CLIENTS / MEMBER_SCRIPTS[lib]),
            "--bootstrap",
            server.bootstrap,
            "--group",
            group,
            "--topic",
            topic,
            "--events",
            "",
            "--name",
            name,
            "--max-runtime",
            str(max_runtime),
        ]
        if instance_id:
            cmd += ["--instance-id", instance_id]
        if client_id:
            cmd += ["--client-id", client_id]
        for k, v in (settings or {}).items():
            cmd += ["--set", f"{k}={v}"]
        member = Member(lib, name, cmd, self.run_dir)
        member.cmd[member.cmd.index("--events") + 1] = str(member.events_path)
        self.all.append(member)
        return member.start()

    def cleanup(self) -> None:
        for m in self.all:
            m.cleanup()

    def describe(self, members: Iterable[Member] | None = None) -> str:
        text = "\n".join(m.summary() for m in (members if members is not None else self.all))
        if self.server is not None:
            text += "\n" + self.server.output()
        return text


# -- waiting ----------------------------------------------------------------------------------------


def wait_for(
    predicate: Callable[[], Any],
    timeout: float,
    what: str,
    diagnose: Callable[[], str] = lambda: "",
    interval: float = 0.1,
) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}\n{diagnose()}", pytrace=False)
        time.sleep(interval)


def split_ok(members: list[Member], partitions: int, sizes: list[int] | None = None) -> bool:
    """The members' assignments are disjoint, cover every partition, and have the given sizes (in any order)."""
    held = [m.held() for m in members]
    if sum(len(h) for h in held) != partitions or frozenset().union(*held) != frozenset(range(partitions)):
        return False
    return sizes is None or sorted(len(h) for h in held) == sorted(sizes)


def wait_split(
    pool: Members,
    members: list[Member],
    partitions: int,
    sizes: list[int] | None,
    timeout: float,
    stable_for: float = 0.5,
) -> dict[str, frozenset[int]]:
    """Wait until split_ok() has held continuously for `stable_for` seconds; return {name: partitions}."""
    since: list[float | None] = [None]

    def settled() -> bool:
        dead = [m.name for m in members if not m.alive()]
        if dead:
            pytest.fail(f"members {dead} exited while waiting for a split\n{pool.describe()}", pytrace=False)
        if not split_ok(members, partitions, sizes):
            since[0] = None
            return False
        if since[0] is None:
            since[0] = time.monotonic()
        return time.monotonic() - since[0] >= stable_for

    wait_for(
        settled,
        timeout,
        f"{[m.name for m in members]} to split {partitions} partitions as {sizes}",
        lambda: pool.describe(),
    )
    return {m.name: m.held() for m in members}


def even_sizes(partitions: int, n: int) -> list[int]:
    return [partitions // n + (1 if i < partitions % n else 0) for i in range(n)]


# -- producing and checking ---------------------------------------------------------------------------


def create_topic(server: ServerProcess, topic: str, partitions: int) -> None:
    result = run_client("ck", "create-topic", server, "--topic", topic, "--partitions", str(partitions))
    assert result["error"] is None, f"{result}\n{server.output()}"


def produce_batch(
    server: ServerProcess, topic: str, n: int, seed: int, tmp_path: Path, partitions: int | None = None
) -> dict[tuple[int, int], str]:
    """Produce n keyed messages with confluent-kafka (acks=all) in a separate process;
    return {(partition, offset): key_hex}. With `partitions`, message i goes to partition i % partitions."""
    messages = make_messages(n, seed)
    if partitions is not None:
        for i, m in enumerate(messages):
            m["partition"] = i % partitions
    batch_dir = tmp_path / f"produce-{seed}"
    batch_dir.mkdir(exist_ok=True)
    delivered = produce("ck", server, topic, messages, batch_dir)
    assert len(delivered) == n
    failed = [(i, d) for i, d in enumerate(delivered) if d is None or d["error"] is not None]
    assert not failed, f"{len(failed)} of {n} messages not delivered, first: {failed[:3]}"
    placed = {(d["partition"], d["offset"]): messages[i]["key"] for i, d in enumerate(delivered)}
    assert len(placed) == n, "two messages acknowledged at the same partition and offset"
    return placed


def all_records(members: Iterable[Member]) -> list[tuple[int, int, str | None]]:
    return [r for m in members for r in m.records()]


def consumed_all(members: Iterable[Member], placed: dict[tuple[int, int], str]) -> bool:
    seen = {(p, o) for p, o, _k in all_records(members)}
    return seen >= placed.keys()


def check_exactly_once(members: Iterable[Member], placed: dict[tuple[int, int], str]) -> None:
    """Every produced message consumed exactly once over all the members (live, closed or killed), with its key,
    and nothing else consumed."""
    records = all_records(members)
    counts = Counter((p, o) for p, o, _k in records)
    dups = sorted(k for k, c in counts.items() if c > 1)
    missing = sorted(placed.keys() - counts.keys())
    extra = sorted(counts.keys() - placed.keys())
    wrong_key = sorted((p, o) for p, o, k in records if (p, o) in placed and placed[(p, o)] != k)
    assert not dups, f"{len(dups)} records consumed more than once, first {dups[:10]}"
    assert not missing, f"{len(missing)} produced records never consumed, first {missing[:10]}"
    assert not extra, f"{len(extra)} consumed records were never produced, first {extra[:10]}"
    assert not wrong_key, f"{len(wrong_key)} records with the wrong key, first {wrong_key[:10]}"


def high_watermarks(placed: dict[tuple[int, int], str], partitions: int) -> dict[int, int]:
    hw = dict.fromkeys(range(partitions), 0)
    for p, o in placed:
        hw[p] = max(hw[p], o + 1)
    return hw


def commit_errors(members: Iterable[Member]) -> list[dict[str, Any]]:
    return [e for m in members for e in m.events("commit_error")]


def member_errors(members: Iterable[Member]) -> list[dict[str, Any]]:
    return [e for m in members for e in m.events(("error", "commit_error"))]


# -- admin --------------------------------------------------------------------------------------------


def admin(server: ServerProcess, command: str, *args: str, timeout: float = 40.0) -> dict[str, Any]:
    """Run clients/ck_admin.py COMMAND in its own process; return its JSON answer."""
    cmd = [PYTHON, str(GROUP_CLIENTS / "ck_admin.py"), command, "--bootstrap", server.bootstrap, *args]
    proc = run(cmd, server, timeout=timeout)
    try:
        return json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(
            f"ck_admin printed no JSON: {' '.join(cmd)}\nstdout: {proc.stdout[-3000:]!r}\n"
            f"stderr: {proc.stderr[-3000:]!r}"
        )


def committed_offsets(server: ServerProcess, group: str, topic: str, partitions: int) -> dict[int, int]:
    res = admin(server, "offsets", "--group", group, "--topic", topic, "--partitions", str(partitions))
    assert res["error"] is None, res
    assert not res.get("partition_errors"), res
    return {int(k.rsplit(":", 1)[1]): v for k, v in res["offsets"].items() if k.rsplit(":", 1)[0] == topic}


def admin_http(
    server: Any, method: str, path: str, body: Any = None, token: str | None = None
) -> tuple[int, dict[str, Any]]:
    """A JSON request to the server's admin API (with `token` as the admin bearer token): (HTTP status, JSON
    body)."""
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(server.admin_url + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, json.load(exc)


def wait_ready(server: Any) -> None:
    """The admin API answers 503 while the group log loads."""

    wait_for(lambda: readyz(server.admin_url, timeout=10), 60, "the server to be ready", server.output)


# -- migration between the group protocols (KIP-848) ---------------------------------------------------------


def group_type(server: ServerProcess, group: str) -> str:
    """ "classic" or "consumer": the group's type, as the server's admin API describes it."""
    status, described = admin_http(server, "GET", f"/v1/groups/{group}")
    assert status == 200, described
    return described["type"]


def rolling_migration(
    pool: Members,
    server: ServerProcess,
    tmp_path: Path,
    group: str,
    topic: str,
    partitions: int,
    seed: int,
    start_classic: Callable[[str], Member],
    start_consumer: Callable[[str], Member],
    *,
    downgrade: bool = True,
    timeout: float = 60,
) -> list[Member]:
    """Kafka's consumer_protocol_migration_test: a live classic group of two members is upgraded by replacing
    them one at a time with consumer-protocol members (`start_consumer(name)`), then (with `downgrade`)
    downgraded the same way with classic members (`start_classic(name)`). The group changes type under them
    (the first consumer-protocol member upgrades it; the last one leaving downgrades it), the partitions stay
    split, a batch is produced at every step, and every record is consumed exactly once with no commit error.
    The members still running at the end are closed. Returns every member started."""
    placed = produce_batch(server, topic, 120, seed, tmp_path, partitions=partitions)
    live = [start_classic("old0"), start_classic("old1")]
    everyone = list(live)
    half = even_sizes(partitions, 2)
    wait_split(pool, live, partitions, half, timeout=timeout)
    wait_for(lambda: consumed_all(everyone, placed), 40, "batch 1 consumed", pool.describe)
    assert group_type(server, group) == "classic"

    steps = [(start_consumer, "new0", "consumer"), (start_consumer, "new1", "consumer")]
    if downgrade:
        steps += [(start_classic, "back0", "consumer"), (start_classic, "back1", "classic")]
    for i, (start, name, expected) in enumerate(steps):
        new = start(name)
        live.append(new)
        everyone.append(new)
        wait_split(pool, live, partitions, even_sizes(partitions, 3), timeout=timeout)
        placed |= produce_batch(server, topic, 60, seed + 1 + i, tmp_path, partitions=partitions)
        old = live.pop(0)
        assert old.close() == 0, pool.describe([old])
        wait_split(pool, live, partitions, half, timeout=timeout)
        wait_for(
            lambda placed=placed: consumed_all(everyone, placed), 40, f"batch {i + 2} consumed", pool.describe
        )
        # upgraded when the first consumer-protocol member joined (a classic member still in it), classic again
        # once the last consumer-protocol member left
        assert group_type(server, group) == expected, (name, pool.describe())
    for m in live:
        assert m.close() == 0, pool.describe([m])
    assert not commit_errors(everyone), pool.describe()
    assert not [e for m in everyone for e in m.errors()], pool.describe()
    check_exactly_once(everyone, placed)
    return everyone


def regex_subscription(
    pool: Members,
    server: ServerProcess,
    tmp_path: Path,
    group: str,
    prefix: str,
    seed: int,
    start: Callable[[str], Member],
    *,
    timeout: float = 40,
) -> Member:
    """KIP-848's regex subscription: one member of `group` subscribed to `^PREFIX-.*` (`start(pattern)`) consumes
    PREFIX-one, then PREFIX-two, created while it runs, and never `other-PREFIX`, created with it: the server
    resolves the pattern against the topics as they come. Every record of both topics is consumed and committed,
    with no commit error; the member is closed. Returns it."""
    one, two, other = f"{prefix}-one", f"{prefix}-two", f"other-{prefix}"
    create_topic(server, one, 2)
    placed_one = produce_batch(server, one, 50, seed, tmp_path, partitions=2)
    m = start(f"^{prefix}-.*")

    def topics_seen() -> set[str]:
        return {t for e in m.events("records") for t in e.get("topics", ())}

    wait_for(
        lambda: topics_seen() == {one} and len(m.records()) >= len(placed_one),
        timeout,
        f"{one} consumed",
        pool.describe,
    )
    assert group_type(server, group) == "consumer", pool.describe([m])  # the server resolves the pattern
    create_topic(server, two, 3)
    create_topic(server, other, 1)
    placed_two = produce_batch(server, two, 30, seed + 1, tmp_path, partitions=3)
    produce_batch(server, other, 5, seed + 2, tmp_path)
    wait_for(lambda: two in topics_seen(), timeout, "the later topic picked up and consumed", pool.describe)
    wait_for(
        lambda: len(m.records()) >= len(placed_one) + len(placed_two),
        20,
        "every record of both topics",
        pool.describe,
    )
    assigned = {t for e in m.events("assigned") for t in e.get("topics", ())}
    assert assigned == {one, two} and topics_seen() == {one, two}, pool.describe([m])
    for topic, placed, partitions in ((one, placed_one, 2), (two, placed_two, 3)):
        hw = high_watermarks(placed, partitions)
        wait_for(
            lambda topic=topic, partitions=partitions, hw=hw: (
                committed_offsets(server, group, topic, partitions) == hw
            ),
            20,
            f"the offsets of {topic} committed",
            pool.describe,
        )
    assert not commit_errors([m]), pool.describe([m])
    assert m.close() == 0, pool.describe([m])
    return m
