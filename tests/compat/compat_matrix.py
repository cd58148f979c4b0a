"""The compatibility matrix: which client passed which group scenario, and which API versions it used.

Two parts:

- RecordingProxy: a byte-for-byte TCP relay on 127.0.0.1 in front of the server (the compat `server`
  fixture starts the server with KGC_ADVERTISED_LISTENER set to the relay, so Metadata and FindCoordinator
  send every later connection through it too). It reads only the request header of each frame (api key, api
  version, client.id) and records, per client.id, the versions of every API the client sent: the versions it
  negotiated with the server from the server's ApiVersions answer. Nothing is changed on the way.
- Results: each scenario's outcome (pass / fail / n.a. / n.t.) is written to
  tests/compat/results/latest/CLIENT.json as it happens (git-ignored; a partial run adds to what is there);
  scripts/compat_table.py merges those into the committed results/compat.json and renders the README's
  table. Tests record through `scenario(...)` (a context manager) or, for tests that are not written around
  it (the Java and kafka-consumer-groups modules), through the pytest_runtest_makereport hook in conftest.py
  and TEST_SCENARIOS below.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import socket
import struct
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

RESULTS = Path(__file__).resolve().parent / "results"
LATEST = Path(os.environ.get("KGC_COMPAT_RESULTS", RESULTS / "latest"))

# The scenario list, in table order: key -> column title.
SCENARIOS = {
    "join": "join, even split",
    "consume_commit": "consume + commit",
    "member_leaves": "member leaves",
    "static_restart": "static restart, no rebalance",
    "fencing": "fencing dup. instance id",
    "admin": "admin list/describe/delete",
    "upgrade": "rolling upgrade classic→consumer and back",
    "regex": "regex subscription, later topic",
}

# Every client of the table: key -> (display name, library, client.id prefixes whose requests are its own).
CLIENTS: dict[str, dict[str, Any]] = {
    "confluent-kafka": {
        "name": "confluent-kafka (librdkafka)",
        "registry": "PyPI",
        "client_ids": ["ck-", "e2e-ck-group-admin"],
    },
    "confluent-kafka-848": {
        "name": "confluent-kafka, group.protocol=consumer (KIP-848)",
        "registry": "PyPI",
        "client_ids": ["ck-confluent-kafka-848", "e2e-ck-group-admin"],
    },
    "java-3.9": {"name": "Java kafka-clients 3.9", "registry": "Maven Central", "client_ids": ["java-"]},
    "java-4": {"name": "Java kafka-clients 4.x", "registry": "Maven Central", "client_ids": ["java-"]},
    "java-4-848": {
        "name": "Java kafka-clients 4.x, group.protocol=consumer (KIP-848)",
        "registry": "Maven Central",
        "client_ids": ["java-"],
    },
    "kafka-python": {"name": "kafka-python", "registry": "PyPI", "client_ids": ["kp-"]},
    "aiokafka": {"name": "aiokafka", "registry": "PyPI", "client_ids": ["aio-"]},
    "franz-go": {"name": "franz-go (kgo, kadm)", "registry": "Go module proxy", "client_ids": ["franz-go-"]},
    "franz-go-848": {
        "name": "franz-go, kgo.ServerSideBalancer() (KIP-848)",
        "registry": "Go module proxy",
        "client_ids": ["franz-go-"],
    },
    "kafkajs": {"name": "KafkaJS", "registry": "npm", "client_ids": ["kafkajs-"]},
    "kcat": {"name": "kcat (librdkafka)", "registry": "Debian", "client_ids": ["kcat-"]},
    "kafka-consumer-groups": {
        "name": "kafka-consumer-groups (Kafka tools 4.x)",
        "registry": "Maven Central",
        "client_ids": ["adminclient-"],
    },
}

JAVA_SETS = {"kafka-clients-3.9": "java-3.9", "kafka-clients-4": "java-4"}

# Tests not written around scenario(): test function name -> the scenarios its outcome stands for.
TEST_SCENARIOS = {
    "test_java_members_split_consume_exactly_once_and_take_over_a_leaver": [
        "join",
        "consume_commit",
        "member_leaves",
    ],
    "test_java_static_member_restart_keeps_partitions_without_rebalance": ["static_restart"],
    "test_java_duplicate_instance_id_fences_the_older_member": ["fencing"],
    "test_kafka_consumer_groups_list_describe_reset_delete": ["admin"],
    "test_java_consumer_protocol_split_consume_exactly_once_and_take_over_a_leaver": [
        "join",
        "consume_commit",
        "member_leaves",
    ],
    "test_java_consumer_protocol_static_member_restart_keeps_partitions": ["static_restart"],
    "test_java_consumer_protocol_duplicate_instance_id_is_refused": ["fencing"],
    "test_java_consumer_protocol_rolling_upgrade_and_downgrade": ["upgrade"],
    "test_java_consumer_protocol_regex_subscription_picks_up_a_later_topic": ["regex"],
}

_RANK = {"n.t.": 0, "n.a.": 1, "pass": 2, "fail": 3}  # n.t.: not tested

# "server": the results are the standalone server's (entry["scenarios"]); "front": a test runs the scenario through
# a server in front of a 3-node Kafka cluster (tests/compat/test_front_matrix.py), recorded in entry["front"].
MODE = "server"


# -- recording proxy -----------------------------------------------------------------------------------------


class RecordingProxy:
    """A TCP relay 127.0.0.1:PORT -> upstream recording (client.id, api key, api version) of every request."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self._upstream: tuple[str, int] | None = None
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self._closed = False
        self.seen: dict[str, dict[int, set[int]]] = {}  # client.id -> api key -> versions

    def start(self, upstream: str) -> None:
        host, port = upstream.rsplit(":", 1)
        self._upstream = (host, int(port))
        self._spawn(self._accept_loop)

    def _spawn(self, target, *args) -> None:
        t = threading.Thread(target=target, args=args, name="compat-proxy", daemon=True)
        with self._lock:
            self._threads.append(t)
        t.start()

    def _accept_loop(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self._upstream, timeout=10)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._closed:
                    client.close()
                    upstream.close()
                    return
                self._sockets |= {client, upstream}
            self._spawn(self._requests, client, upstream)
            self._spawn(self._responses, upstream, client)

    def _drop(self, *socks: socket.socket) -> None:
        with self._lock:
            for s in socks:
                if s in self._sockets:
                    self._sockets.discard(s)
                    with contextlib.suppress(OSError):
                        s.shutdown(socket.SHUT_RDWR)
                    s.close()

    @staticmethod
    def _read_exactly(sock: socket.socket, n: int) -> bytes | None:
        chunks = []
        while n:
            chunk = sock.recv(n)
            if not chunk:
                return None
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def _requests(self, client: socket.socket, upstream: socket.socket) -> None:
        try:
            while True:
                prefix = self._read_exactly(client, 4)
                if prefix is None:
                    break
                (size,) = struct.unpack(">i", prefix)
                frame = self._read_exactly(client, size) if size > 0 else b""
                if frame is None:
                    break
                self._note(frame)
                upstream.sendall(prefix + frame)
        except OSError:
            pass
        finally:
            self._drop(client, upstream)

    def _responses(self, upstream: socket.socket, client: socket.socket) -> None:
        try:
            while True:
                data = upstream.recv(65536)
                if not data:
                    break
                client.sendall(data)
        except OSError:
            pass
        finally:
            self._drop(client, upstream)

    def _note(self, frame: bytes) -> None:
        if len(frame) < 10:
            return
        api_key, api_version, _correlation, id_len = struct.unpack_from(">hhih", frame, 0)
        client_id = "" if id_len < 0 else frame[10 : 10 + id_len].decode("utf-8", "replace")
        with self._lock:
            self.seen.setdefault(client_id, {}).setdefault(api_key, set()).add(api_version)

    def api_versions(self, prefixes: list[str]) -> dict[str, list[int]]:
        """{api name: sorted versions} over every client.id that starts with one of `prefixes`."""
        from protocol.api_keys import api_name

        merged: dict[int, set[int]] = {}
        with self._lock:
            for client_id, apis in self.seen.items():
                if any(client_id.startswith(p) for p in prefixes):
                    for key, versions in apis.items():
                        merged.setdefault(key, set()).update(versions)
        return {api_name(k): sorted(v) for k, v in sorted(merged.items())}

    def close(self) -> None:
        with self._lock:
            self._closed = True
            socks = list(self._sockets)
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        self._drop(*socks)
        for t in list(self._threads):
            t.join(timeout=5)


# -- results -------------------------------------------------------------------------------------------------

_session: dict[str, dict[str, Any]] = {}


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).replace(microsecond=0).isoformat()


_touched: set[tuple[str, str]] = set()  # (client, scenario) recorded in this session


def _entry(client: str) -> dict[str, Any]:
    """The client's results: those of earlier sessions (a partial run adds to them), this session's on top."""
    if client not in _session:
        info = CLIENTS[client]
        path = LATEST / f"{client}.json"
        if path.exists():
            with contextlib.suppress(ValueError, KeyError):
                _session[client] = json.loads(path.read_text())
                return _session[client]
        _session[client] = {
            "client": client,
            "name": info["name"],
            "registry": info["registry"],
            "version": None,
            "api_versions": {},
            "scenarios": {},
            "notes": [],
            "recorded_at": _now(),
        }
    return _session[client]


def _write(client: str) -> None:
    LATEST.mkdir(parents=True, exist_ok=True)
    entry = _session[client]
    entry["recorded_at"] = _now()
    tmp = LATEST / f".{client}.json.tmp"
    tmp.write_text(json.dumps(entry, indent=2, sort_keys=True) + "\n")
    tmp.replace(LATEST / f"{client}.json")


def record(
    client: str,
    scenario: str,
    result: str,
    *,
    detail: str = "",
    test: str = "",
    version: str | None = None,
    proxy: RecordingProxy | None = None,
) -> None:
    """Record one outcome. Within a session the worst outcome of a scenario wins (a parametrized test runs a
    scenario more than once: it passes only if every run passed)."""
    assert scenario in SCENARIOS, scenario
    assert result in _RANK, result
    entry = _entry(client)
    if version:
        _set_version(entry, version)
    results = entry["scenarios"] if MODE == "server" else entry.setdefault("front", {})
    old = results.get(scenario)
    key = (client, f"{MODE}:{scenario}")
    if key not in _touched or old is None or _RANK[result] >= _RANK[old["result"]]:
        _touched.add(key)
        results[scenario] = {"result": result, "detail": detail[:400], "test": test}
    if proxy is not None and MODE == "server":
        note_api_versions(client, proxy)
    _write(client)


def note_api_versions(client: str, proxy: RecordingProxy) -> None:
    entry = _entry(client)
    for api, versions in proxy.api_versions(CLIENTS[client]["client_ids"]).items():
        entry["api_versions"][api] = sorted(set(entry["api_versions"].get(api, [])) | set(versions))
    _write(client)


def note(client: str, text: str) -> None:
    entry = _entry(client)
    if text not in entry["notes"]:
        entry["notes"].append(text)
    _write(client)


def _set_version(entry: dict[str, Any], version: str) -> None:
    if entry.get("version") not in (None, version):  # another client version: earlier results do not apply
        entry.update(scenarios={}, api_versions={}, notes=[], front={})
    entry["version"] = version


def set_version(client: str, version: str) -> None:
    _set_version(_entry(client), version)
    _write(client)


@contextlib.contextmanager
def scenario(
    client: str,
    name: str,
    request: pytest.FixtureRequest,
    *,
    version: str | None = None,
    proxy: RecordingProxy | None = None,
    record_pass: bool = True,
) -> Iterator[None]:
    """Run a block as scenario NAME of CLIENT: pass if it completes, fail (and re-raise) if it raises.
    record_pass=False: the first part of a scenario whose pass is recorded by a later block."""
    test = request.node.nodeid
    try:
        yield
    except pytest.skip.Exception:
        raise
    except BaseException as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        record(client, name, "fail", detail=first, test=test, version=version, proxy=proxy)
        raise
    if record_pass:
        record(client, name, "pass", test=test, version=version, proxy=proxy)


def not_applicable(client: str, name: str, request: pytest.FixtureRequest, why: str) -> None:
    record(client, name, "n.a.", detail=why, test=request.node.nodeid)


def record_report(item: pytest.Item, report: pytest.TestReport) -> None:
    """conftest's pytest_runtest_makereport: the outcome of a test listed in TEST_SCENARIOS."""
    if report.when != "call" and not (report.when == "setup" and report.failed):
        return
    name = getattr(item, "originalname", item.name)
    scenarios = TEST_SCENARIOS.get(name)
    if not scenarios:
        return
    funcargs = getattr(item, "funcargs", {})
    version = None
    if name.startswith("test_java_"):
        java = funcargs.get("java_clients")
        if java is None:
            return
        client, version = JAVA_SETS[java.set_name], java.version
        if name.startswith("test_java_consumer_protocol_"):
            client = f"{client}-848"  # kafka-clients 4.x with group.protocol=consumer (3.9's is skipped)
    else:
        client = "kafka-consumer-groups"
        tools = funcargs.get("kafka_tools")
        if tools is not None and (tools / ".complete").exists():
            version = (tools / ".complete").read_text().strip().rsplit(":", 1)[1]
    if report.skipped:
        return
    result = "pass" if report.passed else "fail"
    detail = "" if report.passed else str(report.longrepr).strip().splitlines()[-1][:300]
    proxy = getattr(item, "compat_proxy", None)
    for s in scenarios:
        record(client, s, result, detail=detail, test=item.nodeid, version=version, proxy=proxy)
    if client == "kafka-consumer-groups":
        for s in SCENARIOS.keys() - {"admin"}:
            record(client, s, "n.a.", detail="an admin tool, not a group member", test=item.nodeid)
    else:
        record(
            client,
            "admin",
            "n.t.",
            test=item.nodeid,
            detail="the Java AdminClient is exercised through kafka-consumer-groups (its own row)",
        )
