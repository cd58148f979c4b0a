"""The same group scenarios with every client library that has a group-member driver, each in its own
process: confluent-kafka, kafka-python, aiokafka (tests/e2e/groups/clients/*_member.py), franz-go (go/main.go,
built here with `go build` against the Go module proxy, cache in .deps/go) and KafkaJS (js/kafkajs_client.js,
`npm ci` here, cache in .deps/npm). The Java clients run the same scenarios in test_java_clients.py, kcat in
test_kcat_groups.py.

    test_group_lifecycle     join (2 members, even split) -> consume + commit (every record exactly once,
                             committed offsets = high watermarks) -> admin list/describe, delete refused
                             (NON_EMPTY_GROUP)
                             -> a member leaves (LeaveGroup: the other gets everything well before the session
                             timeout) -> after the last member leaves, admin delete works and list no longer
                             shows it
    test_static_membership   two static members; one closes (no LeaveGroup) and a new process with its
                             group.instance.id gets the same partitions without a rebalance of the other;
                             then a duplicate of the other member's instance id takes over and the older
                             process is told it
                             is fenced (FENCED_INSTANCE_ID)

Each scenario's outcome goes to the compatibility results (compat_matrix), with the API versions the client
used (recorded by the proxy in front of the server).

Two clients run the same scenarios twice, once per group protocol: confluent-kafka and franz-go with the
classic protocol (JoinGroup/SyncGroup), and as "confluent-kafka-848" (`group.protocol=consumer`) and
"franz-go-848" (kgo.ServerSideBalancer(), its KIP-848 opt-in, used when ApiVersions lists
ConsumerGroupHeartbeat v1) with the consumer group protocol of KIP-848; test_group_lifecycle asserts which one
each used. With KIP-848 the fencing scenario is Kafka's for that protocol: a second process with an instance id
in use is refused (UNRELEASED_INSTANCE_ID) and the member holding it keeps its partitions, where the classic
protocol fences the older member.

Client behaviour written down (no server-side accommodation was needed for any of them):
- On FENCED_INSTANCE_ID franz-go keeps retrying the join with backoff and reports the error from PollFetches;
  the member program treats it as fatal and closes (as the Java client does).
- KafkaJS 2.2.4 has no static membership (no groupInstanceId anywhere in the library; KIP-345 is not
  implemented): static restart and fencing are n.a. for it, checked by test_kafkajs_has_no_static_membership.
- Admin: confluent-kafka's AdminClient, kafka-python's KafkaAdminClient and aiokafka's AIOKafkaAdminClient
  (clients/py_admin.py), kadm and KafkaJS's admin. aiokafka 0.14's admin client has no way to delete a group:
  its admin scenario is list and describe only (said so in the results).
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import compat_matrix
import pytest
from compat_matrix import not_applicable, record, scenario, set_version

from tests.support.members import (
    FENCED_INSTANCE_ID,
    RD_FATAL,
    RD_FENCED,
    Member,
    Members,
    admin,
    check_exactly_once,
    commit_errors,
    committed_offsets,
    consumed_all,
    create_topic,
    high_watermarks,
    produce_batch,
    regex_subscription,
    rolling_migration,
    wait_for,
    wait_split,
)
from tests.support.server import PYTHON, REPO, ServerProcess

pytestmark = pytest.mark.e2e

COMPAT = Path(__file__).resolve().parent
GO_DIR = COMPAT / "go"
JS_DIR = COMPAT / "js"
DEPS = REPO / ".deps"

PARTITIONS = 6
SESSION_MS = 20000
HEARTBEAT_MS = 1000
QUIET_S = 3.0
NON_EMPTY_GROUP = 68


def need(tool: str) -> str:
    # The official Go tarball installs to /usr/local/go, which a non-login shell may not have on PATH.
    path = shutil.which(tool) or shutil.which(tool, path="/usr/local/go/bin")
    if path is None:
        if os.environ.get("CI"):
            pytest.fail(f"{tool} is not on PATH (CI runs every compatibility test)", pytrace=False)
        pytest.skip(f"{tool} is not on PATH")
    return path


def run_setup(cmd: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 600) -> str:
    proc = subprocess.run(
        cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )
    if proc.returncode != 0:
        pytest.fail(
            f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}",
            pytrace=False,
        )
    return proc.stdout


@pytest.fixture(scope="session")
def franz_go_binary() -> Path:
    """tests/compat/go built once per session; modules and build cache under .deps/go (CI caches it)."""
    go = need("go")
    env = dict(
        os.environ,
        GOMODCACHE=str(DEPS / "go" / "mod"),
        GOCACHE=str(DEPS / "go" / "cache"),
        GOFLAGS="-mod=mod",
    )
    out = DEPS / "go" / "bin" / "franzgo"
    out.parent.mkdir(parents=True, exist_ok=True)
    run_setup([go, "build", "-o", str(out), "."], GO_DIR, env)
    return out


@pytest.fixture(scope="session")
def kafkajs_dir() -> Path:
    """tests/compat/js with node_modules from `npm ci` (package-lock.json pins kafkajs; cache: .deps/npm)."""
    need("node")
    npm = need("npm")
    installed = JS_DIR / "node_modules" / "kafkajs" / "package.json"
    lock = json.loads((JS_DIR / "package-lock.json").read_text())
    want = lock["packages"]["node_modules/kafkajs"]["version"]
    if not installed.exists() or json.loads(installed.read_text())["version"] != want:
        run_setup(
            [npm, "ci", "--cache", str(DEPS / "npm"), "--prefer-offline", "--no-audit", "--no-fund"], JS_DIR
        )
    return JS_DIR


# -- drivers: one per client library -------------------------------------------------------------------------


class StdoutMember(Member):
    """A member program that writes its events to stdout (redirected to the events file), logs to stderr."""

    def start(self) -> StdoutMember:
        with open(self.events_path, "wb") as out, open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(self.cmd, cwd=REPO, stdin=subprocess.PIPE, stdout=out, stderr=log)
        self.started_at = time.time()
        return self


@dataclasses.dataclass
class Driver:
    client: str  # compat_matrix client key
    version: str
    start: Callable[..., Member]  # (pool, name, server, group, topic, instance_id=None) -> Member
    admin: Callable[..., dict[str, Any]] | None  # (server, command, group) -> normalized answer
    static: bool = True
    kip848: bool = False  # uses the consumer group protocol (ConsumerGroupHeartbeat)


def python_driver(client: str, lib: str, settings: dict[str, object]) -> Driver:
    dist = {
        "confluent-kafka": "confluent-kafka",
        "confluent-kafka-848": "confluent-kafka",
        "kafka-python": "kafka-python",
        "aiokafka": "aiokafka",
    }[client]

    def start(
        pool: Members,
        name: str,
        server: ServerProcess,
        group: str,
        topic: str,
        instance_id: str | None = None,
        regex: bool = False,
    ) -> Member:
        # (`regex`: librdkafka takes a topic that starts with ^ as a regular expression; the others have none)
        assert not regex or (lib == "ck" and topic.startswith("^")), (lib, topic)
        return pool.start(lib, name, server, group, topic, instance_id=instance_id, settings=settings)

    def ck_admin(server: ServerProcess, command: str, group: str) -> dict[str, Any]:
        res = admin(server, command, *(["--group", group] if group and command != "list" else []))
        if command == "list":
            return {
                "error": res["error"],
                "groups": {g["group_id"]: (g["state"] or "").upper() for g in res["groups"]},
            }
        if command == "describe":
            return {
                "error": res["error"],
                "state": (res.get("state") or "").upper(),
                "members": [
                    (m["client_id"], sorted(p for _t, p in m["assignment"])) for m in res.get("members", [])
                ],
            }
        err = res["error"]
        return {"error": None if err is None else err["code"]}

    def py_admin(server: ServerProcess, command: str, group: str) -> dict[str, Any]:
        # kafka-python's KafkaAdminClient / aiokafka's AIOKafkaAdminClient (clients/py_admin.py, normalized).
        return json.loads(
            run_tool(
                [
                    PYTHON,
                    str(COMPAT / "clients" / "py_admin.py"),
                    command,
                    "--lib",
                    lib,
                    "--bootstrap",
                    server.bootstrap,
                    "--group",
                    group,
                ],
                server,
            )
        )

    return Driver(
        client,
        importlib.metadata.version(dist),
        start,
        ck_admin if lib == "ck" else py_admin,
        kip848=settings.get("group.protocol") == "consumer",
    )


def go_driver(binary: Path, server_side: bool) -> Driver:
    """franz-go: with `server_side`, kgo.ServerSideBalancer() (KIP-848), else the classic protocol."""
    version = subprocess.run(
        [str(binary), "version"], capture_output=True, text=True, check=True, stdin=subprocess.DEVNULL
    ).stdout.strip()

    def start(
        pool: Members,
        name: str,
        server: ServerProcess,
        group: str,
        topic: str,
        instance_id: str | None = None,
        regex: bool = False,
    ) -> Member:
        pool.server = server
        cmd = [
            str(binary),
            "member",
            "--bootstrap",
            server.bootstrap,
            "--topic",
            topic,
            "--group",
            group,
            "--name",
            name,
            "--session-timeout-ms",
            str(SESSION_MS),
            "--heartbeat-interval-ms",
            str(HEARTBEAT_MS),
            "--balancer",
            "range",
            f"--server-side-balancer={'true' if server_side else 'false'}",
        ]
        if instance_id:
            cmd += ["--instance-id", instance_id]
        if regex:
            cmd.append("--regex")
        m = StdoutMember(client, name, cmd, pool.run_dir)
        pool.all.append(m)
        return m.start()

    client = "franz-go-848" if server_side else "franz-go"

    def go_admin(server: ServerProcess, command: str, group: str) -> dict[str, Any]:
        res = json.loads(
            run_tool(
                [str(binary), "admin", command, "--bootstrap", server.bootstrap, "--group", group], server
            )
        )
        err = res.get("error") or res.get("group_error")
        if command == "list":
            return {"error": err, "groups": {g["group_id"]: g["state"].upper() for g in res["groups"]}}
        if command == "describe":
            return {
                "error": err,
                "state": res["state"].upper(),
                "members": [(m["client_id"], [p for _t, p in m["assignment"]]) for m in res["members"]],
            }
        return {"error": None if err is None else err["code"]}

    return Driver(client, version, start, go_admin, kip848=server_side)


def js_driver(js_dir: Path) -> Driver:
    version = json.loads((js_dir / "node_modules" / "kafkajs" / "package.json").read_text())["version"]
    script = str(js_dir / "kafkajs_client.js")

    def start(
        pool: Members,
        name: str,
        server: ServerProcess,
        group: str,
        topic: str,
        instance_id: str | None = None,
    ) -> Member:
        assert instance_id is None, "KafkaJS has no static membership"
        pool.server = server
        cmd = [
            "node",
            script,
            "member",
            "--bootstrap",
            server.bootstrap,
            "--topic",
            topic,
            "--group",
            group,
            "--name",
            name,
            "--session-timeout-ms",
            str(SESSION_MS),
            "--heartbeat-interval-ms",
            str(HEARTBEAT_MS),
        ]
        m = StdoutMember("kafkajs", name, cmd, pool.run_dir)
        pool.all.append(m)
        return m.start()

    def js_admin(server: ServerProcess, command: str, group: str) -> dict[str, Any]:
        res = json.loads(
            run_tool(
                ["node", script, "admin", command, "--bootstrap", server.bootstrap, "--group", group], server
            )
        )
        if command == "list":  # ListGroups v<3 in KafkaJS: no state
            return {"error": res["error"], "groups": {g["group_id"]: "" for g in res["groups"]}}
        if command == "describe":
            return {
                "error": res["error"],
                "state": res["state"].upper(),
                "members": [(m["client_id"], [p for _t, p in m["assignment"]]) for m in res["members"]],
            }
        err = res["error"]
        if err is None:
            return {"error": None}
        # KafkaJS throws KafkaJSDeleteGroupsError carrying each group's error code.
        codes = [g["code"] for g in err.get("groups") or []]
        return {"error": codes[0] if codes else err}

    return Driver("kafkajs", version, start, js_admin, static=False)


def run_tool(cmd: list[str], server: ServerProcess, timeout: float = 60) -> str:
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO, stdin=subprocess.DEVNULL
    )
    if proc.returncode != 0:
        pytest.fail(
            f"exit {proc.returncode}: {' '.join(cmd)}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}\n"
            + server.output(),
            pytrace=False,
        )
    return proc.stdout


CK = {
    "partition.assignment.strategy": "range",
    "session.timeout.ms": SESSION_MS,
    "heartbeat.interval.ms": HEARTBEAT_MS,
}
# The consumer group protocol: timeouts and intervals are the server's (group.consumer.*, set by the compat
# server fixture), the assignor is the server's `range`.
CK_848 = {"group.protocol": "consumer", "group.remote.assignor": "range"}
KP = {"session_timeout_ms": SESSION_MS, "heartbeat_interval_ms": HEARTBEAT_MS}
CLIENTS = [
    "confluent-kafka",
    "confluent-kafka-848",
    "kafka-python",
    "aiokafka",
    "franz-go",
    "franz-go-848",
    "kafkajs",
]


@pytest.fixture
def driver(request) -> Driver:
    client = request.param
    if client == "confluent-kafka":
        return python_driver(client, "ck", CK)
    if client == "confluent-kafka-848":
        return python_driver(client, "ck", CK_848)
    if client == "kafka-python":
        return python_driver(client, "kp", KP)
    if client == "aiokafka":
        return python_driver(client, "aio", KP)
    if client in ("franz-go", "franz-go-848"):
        return go_driver(request.getfixturevalue("franz_go_binary"), server_side=client == "franz-go-848")
    return js_driver(request.getfixturevalue("kafkajs_dir"))


def proxy_of(request):
    return request.node.compat_proxy


# -- scenarios -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("driver", CLIENTS, indirect=True)
def test_group_lifecycle(members, server, tmp_path, driver, request):
    c, proxy = driver.client, proxy_of(request)
    set_version(c, driver.version)
    group, topic = f"matrix-{c}", f"matrix-{c}-topic"
    create_topic(server, topic, PARTITIONS)

    with scenario(c, "join", request, proxy=proxy):
        ms = [driver.start(members, f"{c}-m{i}", server, group, topic) for i in range(2)]
        split = wait_split(members, ms, PARTITIONS, [3, 3], timeout=60)
        if proxy is not None and c in ("confluent-kafka", "confluent-kafka-848", "franz-go", "franz-go-848"):
            # (through the front, test_front_matrix.py, there is no proxy) The protocol the client used.
            used = proxy.api_versions(compat_matrix.CLIENTS[c]["client_ids"])
            if driver.kip848:
                assert "ConsumerGroupHeartbeat" in used and "JoinGroup" not in used, used
                compat_matrix.note(c, "the consumer group protocol of KIP-848 (ConsumerGroupHeartbeat)")
            else:
                assert "JoinGroup" in used and "SyncGroup" in used, used
                assert "ConsumerGroupHeartbeat" not in used, used

    with scenario(c, "consume_commit", request, proxy=proxy):
        # Produced once the split is settled: no rebalance while records are in flight, so exactly once holds
        # whatever a client does with uncommitted records on a revocation.
        placed = produce_batch(server, topic, 300, 700, tmp_path)
        wait_for(lambda: consumed_all(ms, placed), 60, "everything consumed", members.describe)
        hw = high_watermarks(placed, PARTITIONS)
        wait_for(
            lambda: committed_offsets(server, group, topic, PARTITIONS) == hw,
            30,
            f"committed offsets to reach {hw}",
            members.describe,
        )
        check_exactly_once(ms, placed)
        assert not commit_errors(ms), members.describe()

    no_delete = False
    if driver.admin is None:
        record(
            c,
            "admin",
            "n.t.",
            detail="no admin driver for this client in the matrix",
            test=request.node.nodeid,
        )
    else:
        with scenario(c, "admin", request, proxy=proxy, record_pass=False):
            listed = driver.admin(server, "list", group)
            assert listed["error"] is None and group in listed["groups"], listed
            assert listed["groups"][group] in ("", "STABLE"), listed
            d = driver.admin(server, "describe", group)
            assert d["error"] is None and d["state"] == "STABLE", d
            assert sorted(p for _cid, ps in d["members"] for p in ps) == list(range(PARTITIONS)), d
            assert sorted(frozenset(ps) for _cid, ps in d["members"]) == sorted(split.values()), (d, split)
            refused = driver.admin(server, "delete", group)
            no_delete = bool(refused.get("unsupported"))  # aiokafka: no DeleteGroups in its admin client
            assert no_delete or refused["error"] == NON_EMPTY_GROUP, refused

    with scenario(c, "member_leaves", request, proxy=proxy):
        leaver, stay = ms[1], ms[0]
        t_leave = time.monotonic()
        assert leaver.close() == 0, members.describe([leaver])
        wait_split(members, [stay], PARTITIONS, [PARTITIONS], timeout=SESSION_MS / 1000 - 5)
        took = time.monotonic() - t_leave
        print(f"{c}: the leaver's partitions moved in {took:.2f}s")
        assert took < SESSION_MS / 1000 - 5, took
        batch2 = produce_batch(server, topic, 120, 701, tmp_path)
        placed |= batch2
        wait_for(lambda: consumed_all(ms, placed), 60, "batch 2 consumed", members.describe)
        hw = high_watermarks(placed, PARTITIONS)
        wait_for(
            lambda: committed_offsets(server, group, topic, PARTITIONS) == hw,
            30,
            f"committed offsets to reach {hw}",
            members.describe,
        )
        assert stay.close() == 0, members.describe([stay])
        check_exactly_once(ms, placed)

    if driver.admin is not None and no_delete:
        record(
            c,
            "admin",
            "pass",
            test=request.node.nodeid,
            proxy=proxy,
            detail=f"list and describe only: {c} {driver.version}'s admin client has no delete of groups",
        )
    elif driver.admin is not None:
        with scenario(c, "admin", request, proxy=proxy):
            deleted = driver.admin(server, "delete", group)
            assert deleted["error"] is None, deleted
            listed = driver.admin(server, "list", group)
            assert listed["error"] is None and group not in listed["groups"], listed
    if not driver.static:
        for s in ("static_restart", "fencing"):
            not_applicable(c, s, request, "no static membership (group.instance.id) in KafkaJS")


def fenced_error(e: dict[str, Any]) -> bool:
    text = f"{e.get('name')} {e.get('str')}".lower()
    return (
        e.get("code") in (FENCED_INSTANCE_ID, RD_FENCED)
        or "fenced" in text
        or (e.get("code") == RD_FATAL and "fenc" in text)
    )


@pytest.mark.parametrize("driver", [c for c in CLIENTS if c != "kafkajs"], indirect=True)
def test_static_membership(members, server, tmp_path, driver, request):
    c, proxy = driver.client, proxy_of(request)
    set_version(c, driver.version)
    group, topic = f"matrix-static-{c}", f"matrix-static-{c}-topic"
    create_topic(server, topic, PARTITIONS)

    if c in STATIC_LEAVE_LIMITS:
        # The restart scenario cannot pass with this client (see STATIC_LEAVE_LIMITS); fencing is still tried.
        a = driver.start(members, f"{c}-a", server, group, topic, instance_id=f"{group}-a")
        wait_split(members, [a], PARTITIONS, [PARTITIONS], timeout=60, stable_for=0)
        b = driver.start(members, f"{c}-b", server, group, topic, instance_id=f"{group}-b")
        split = wait_split(members, [a, b], PARTITIONS, [3, 3], timeout=60)
        record(
            c,
            "static_restart",
            "fail",
            detail=f"client behaviour: {STATIC_LEAVE_LIMITS[c]}",
            test=request.node.nodeid,
        )
        refused_duplicate(c, members, server, group, topic, driver, a, b, b, split, request, proxy)
        return

    with scenario(c, "static_restart", request, proxy=proxy):
        a = driver.start(members, f"{c}-a", server, group, topic, instance_id=f"{group}-a")
        wait_split(members, [a], PARTITIONS, [PARTITIONS], timeout=60, stable_for=0)  # a leads
        b = driver.start(members, f"{c}-b", server, group, topic, instance_id=f"{group}-b")
        split = wait_split(members, [a, b], PARTITIONS, [3, 3], timeout=60)
        placed = produce_batch(server, topic, 120, 710, tmp_path)
        wait_for(lambda: consumed_all([a, b], placed), 60, "batch 1 consumed", members.describe)
        seen_a = len(a.rebalance_events())
        t_gone = time.time()
        assert b.close() == 0, members.describe([b])  # a static member sends no LeaveGroup
        b2 = driver.start(members, f"{c}-b2", server, group, topic, instance_id=f"{group}-b")
        wait_for(
            lambda: b2.held(), SESSION_MS / 1000, "the restarted static member's assignment", members.describe
        )
        print(f"{c}: static member back {b2.events('assigned')[0]['t'] - t_gone:.2f}s after it went away")
        assert b2.held() == split[b.name], members.describe()
        batch2 = produce_batch(server, topic, 120, 711, tmp_path)
        placed |= batch2
        wait_for(lambda: consumed_all([a, b, b2], placed), 60, "batch 2 consumed", members.describe)
        time.sleep(max(0.0, QUIET_S - (time.time() - b2.events("assigned")[0]["t"])))
        assert a.rebalance_events()[seen_a:] == [], members.describe()
        assert a.held() == split[a.name]
        check_exactly_once([a, b, b2], placed)

    limit = FENCING_CLIENT_LIMITS.get(c)
    try:
        if driver.kip848:
            refused_duplicate(c, members, server, group, topic, driver, a, b, b2, split, request, proxy)
        else:
            fencing(c, members, server, group, topic, driver, a, b, b2, split, request, proxy)
    except (pytest.fail.Exception, AssertionError):
        if limit is None:
            raise
        record(c, "fencing", "fail", detail=f"client behaviour: {limit}", test=request.node.nodeid)
        pytest.xfail(f"{c} {driver.version}: {limit}")


# KIP-848 clients whose static leave (epoch -2) Kafka refuses: a static member that leaves stays in the group
# until its session expires, so a restart cannot get its partitions back without a rebalance (Kafka 4.x
# behaves the same with these clients).
STATIC_LEAVE_LIMITS = {
    "franz-go-848": (
        "franz-go 1.22.2 leaves a static KIP-848 member with epoch -2 but no instance id, which Kafka refuses "
        '(INVALID_REQUEST, "InstanceId can\'t be null"): a restart within the session timeout is refused '
        "UNRELEASED_INSTANCE_ID until the old member's session expires, and the group rebalances twice"
    ),
}


# Client behaviour, not the server's: the server answers the older member's Heartbeat/OffsetCommit/SyncGroup
# with FENCED_INSTANCE_ID as Kafka does, and replaces the member again when it rejoins with an empty member
# id.
FENCING_CLIENT_LIMITS = {
    "kafka-python": (
        "kafka-python 3.0.12 does not surface FENCED_INSTANCE_ID to the application: its heartbeat thread "
        "logs it and stops, then the consumer rejoins with an empty member id, replacing the newer process, "
        "which does the same (the two keep replacing each other)"
    ),
    "aiokafka": (
        "aiokafka 0.14.0 has no handling of FENCED_INSTANCE_ID: the consumer rejoins with an empty member "
        "id, replacing the newer process, which does the same (the two keep replacing each other)"
    ),
}


def fencing(c, members, server, group, topic, driver, a, b, b2, split, request, proxy) -> None:
    with scenario(c, "fencing", request, proxy=proxy):
        seen_b2 = len(b2.rebalance_events())
        a2 = driver.start(members, f"{c}-a2", server, group, topic, instance_id=f"{group}-a")
        wait_for(lambda: a2.held(), 30, "the duplicate of a to be assigned", members.describe)
        assert a2.held() == split[a.name], members.describe()
        # A client that reports it does so within a heartbeat or two; one that never does
        # (FENCING_CLIENT_LIMITS) is given 10 s.
        errs = wait_for(
            lambda: [e for e in a.errors() if fenced_error(e)],
            10 if c in FENCING_CLIENT_LIMITS else 20,
            "the older member to be told it is fenced",
            members.describe,
        )
        print(f"{c}: fenced member reported {errs[0]}")
        if a.alive():
            a.close()
        assert not a2.errors(), a2.summary()
        assert b2.rebalance_events()[seen_b2:] == [] and b2.held() == split[b.name], members.describe()
        for m in (a2, b2):
            assert m.close() == 0, members.describe([m])


UNRELEASED_INSTANCE_ID = 111


def refused_error(e: dict[str, Any]) -> bool:
    text = f"{e.get('name')} {e.get('str')}".lower()
    return e.get("code") == UNRELEASED_INSTANCE_ID or "unreleased" in text or "instance id" in text


def refused_duplicate(c, members, server, group, topic, driver, a, b, b2, split, request, proxy) -> None:
    """The fencing scenario under KIP-848 (Kafka's test_fencing_static_consumer with the consumer protocol): a
    second process with an instance id in use is refused (UNRELEASED_INSTANCE_ID) and gets nothing; the member
    holding it keeps its partitions and nobody else is disturbed."""
    with scenario(c, "fencing", request, proxy=proxy):
        seen = {m.name: len(m.rebalance_events()) for m in (a, b2)}
        errors_before = {m.name: len(m.errors()) for m in (a, b2)}
        a2 = driver.start(members, f"{c}-a2", server, group, topic, instance_id=f"{group}-a")
        errs = wait_for(
            lambda: [e for e in a2.errors() if refused_error(e)],
            30,
            "the duplicate to be refused its instance id",
            members.describe,
        )
        print(f"{c}: the duplicate reported {errs[0]}")
        assert a2.held() == frozenset(), members.describe([a2])
        if a2.alive():
            a2.close()
        for m, name in ((a, a.name), (b2, b.name)):
            assert m.rebalance_events()[seen[m.name] :] == [] and m.held() == split[name], members.describe()
            assert m.errors()[errors_before[m.name] :] == [], m.summary()
        for m in (a, b2):
            assert m.close() == 0, members.describe([m])


@pytest.mark.parametrize("driver", ["confluent-kafka-848", "franz-go-848"], indirect=True)
def test_rolling_upgrade_and_downgrade(members, server, tmp_path, driver, request):
    """The group of two classic members of the same library is upgraded by replacing them one at a time with
    consumer-protocol members, then downgraded the same way (tests/support/members.py rolling_migration)."""
    c = driver.client
    set_version(c, driver.version)
    if c == "confluent-kafka-848":
        classic = python_driver("confluent-kafka", "ck", CK)
    else:
        classic = go_driver(request.getfixturevalue("franz_go_binary"), server_side=False)
    group, topic = f"matrix-upgrade-{c}", f"matrix-upgrade-{c}-topic"
    create_topic(server, topic, PARTITIONS)
    # (no proxy: its classic members' JoinGroup/SyncGroup are not this row's API versions)
    with scenario(c, "upgrade", request):
        rolling_migration(
            members,
            server,
            tmp_path,
            group,
            topic,
            PARTITIONS,
            880,
            lambda name: classic.start(members, f"{c}-{name}", server, group, topic),
            lambda name: driver.start(members, f"{c}-{name}", server, group, topic),
        )


@pytest.mark.parametrize("driver", ["confluent-kafka-848", "franz-go-848"], indirect=True)
def test_regex_subscription_picks_up_a_later_topic(members, server, tmp_path, driver, request):
    """One member subscribed by a regular expression, which the server resolves (KIP-848's
    SubscribedTopicRegex): a matching topic created while it runs is assigned and consumed, another is not
    (tests/support/members.py regex_subscription)."""
    c = driver.client
    set_version(c, driver.version)
    group = f"matrix-regex-{c}"
    # (no proxy, as for the upgrade: the row's API versions are its lifecycle's)
    with scenario(c, "regex", request):
        regex_subscription(
            members,
            server,
            tmp_path,
            group,
            f"matrix-rx-{c}",
            890,
            lambda pattern: driver.start(members, f"{c}-rx", server, group, pattern, regex=True),
        )


def test_regex_subscription_is_for_the_consumer_protocol_rows(request):
    """The classic rows: a regex there is the client's own (matched against the topics it reads in Metadata, and
    sent as names); the server resolves one only in the consumer group protocol."""
    for c in ("confluent-kafka", "franz-go"):
        not_applicable(
            c, "regex", request, "run in this library's row for the consumer group protocol (KIP-848)"
        )
    for c in ("kafka-python", "aiokafka", "kafkajs"):
        not_applicable(c, "regex", request, "no consumer group protocol (KIP-848) in this client")


def test_rolling_upgrade_is_for_the_consumer_protocol_rows(request):
    """The classic rows: the upgrade runs in the row of the same library with the consumer group protocol."""
    for c in ("confluent-kafka", "franz-go"):
        not_applicable(
            c, "upgrade", request, "run in this library's row for the consumer group protocol (KIP-848)"
        )
    for c in ("kafka-python", "aiokafka", "kafkajs"):
        not_applicable(c, "upgrade", request, "no consumer group protocol (KIP-848) in this client")


def test_kafkajs_has_no_static_membership(kafkajs_dir, request):
    """KafkaJS 2.x never sends a group instance id: static membership and fencing are n.a. for it."""
    src = kafkajs_dir / "node_modules" / "kafkajs" / "src"
    consumer = (src / "consumer" / "index.js").read_text()
    hits = [p for p in src.rglob("*.js") if "groupInstanceId" in p.read_text()]
    assert "groupInstanceId" not in consumer
    # The protocol encoders carry the field (JoinGroup v5+ schemas) but the consumer never sets it.
    assert all("protocol/requests" in str(p) for p in hits), hits
    for s in ("static_restart", "fencing"):
        not_applicable("kafkajs", s, request, "KafkaJS 2.x has no static membership (no group.instance.id)")
