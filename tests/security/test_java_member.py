"""A Java (Apache kafka-clients 4.x) consumer-group member (tests/compat/java/GroupMember.java) over SASL/SCRAM
against the authorizer: without ACLs it gets TopicAuthorizationException from its first Metadata, with TOPIC READ
alone GroupAuthorizationException, with Kafka's minimum consumer ACLs
(GROUP READ, here PREFIXED; TOPIC READ) it consumes and commits, and a DENY on the topic then stops it with
TopicAuthorizationException, as against Kafka."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AclOperation, AclPermissionType, ResourcePatternType, ResourceType
from security_clients import admin, binding, create_acls, create_topic, produce, sasl
from security_support import USERS, SecureServers, acl_server_settings

from tests.support.java import JAVA_OPTS, classpath, fetch_jar_set, need_tools

pytestmark = pytest.mark.e2e

JAVA_SOURCES = Path(__file__).resolve().parents[1] / "compat" / "java"
WAIT_S = 60.0


@pytest.fixture(scope="module")
def java_member(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The classpath of GroupMember compiled against kafka-clients 4.x."""
    need_tools("java", "javac")
    jars = fetch_jar_set("kafka-clients-4")
    classes = tmp_path_factory.mktemp("java-member")
    proc = subprocess.run(
        [
            "javac",
            "-nowarn",
            "-Xlint:none",
            "-d",
            str(classes),
            "-cp",
            str(jars / "*"),
            *sorted(str(p) for p in JAVA_SOURCES.glob("*.java")),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        stdin=subprocess.DEVNULL,
    )
    if proc.returncode != 0:
        pytest.fail(f"javac failed:\n{proc.stdout}\n{proc.stderr}", pytrace=False)
    return classpath(classes, jars)


def run_member(
    cp: str, run_dir: Path, bootstrap: str, group: str, topic: str, want: str
) -> list[dict[str, Any]]:
    """Run a member until it emits an event named `want` (or an error), then close it; return its events."""
    events_path, log_path = run_dir / f"{group}.events", run_dir / f"{group}.log"
    jaas = (
        'org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" '
        f'password="{USERS["alice"]}";'
    )
    cmd = [
        "java",
        *JAVA_OPTS,
        "-cp",
        cp,
        "GroupMember",
        "--bootstrap",
        bootstrap,
        "--topic",
        topic,
        "--group",
        group,
        "--name",
        group,
        "--max-runtime",
        str(WAIT_S),
        "--set",
        "security.protocol=SASL_PLAINTEXT",
        "--set",
        "sasl.mechanism=SCRAM-SHA-512",
        "--set",
        f"sasl.jaas.config={jaas}",
        "--set",
        "auto.offset.reset=earliest",
    ]
    with open(events_path, "wb") as out, open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=out, stderr=log)
    events: list[dict[str, Any]] = []
    try:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            events = [json.loads(line) for line in events_path.read_text().splitlines() if line.strip()]
            if any(e["ev"] in (want, "error") for e in events) or proc.poll() is not None:
                break
            time.sleep(0.2)
    finally:
        if proc.poll() is None:
            assert proc.stdin is not None
            proc.stdin.write(b"close\n")
            proc.stdin.close()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        elif proc.stdin is not None:
            proc.stdin.close()
    return [json.loads(line) for line in events_path.read_text().splitlines() if line.strip()]


def errors(events: list[dict[str, Any]]) -> set[str]:
    return {e["name"] for e in events if e["ev"] == "error"}


def test_java_member_against_acls(secure_servers: SecureServers, java_member: str, tmp_path: Path) -> None:
    server = secure_servers(acl_server_settings())
    root = admin(server)
    create_topic(root, "payments", partitions=2)
    assert set(produce(sasl(server, "admin"), "payments", 4)) == {None}
    bootstrap = server.listeners["SASL_PLAINTEXT"]

    # No ACLs: the Java consumer's first Metadata for its subscription already fails (as against Kafka).
    events = run_member(java_member, tmp_path, bootstrap, "spark-kafka-source-j0", "payments", "commit")
    assert "TopicAuthorizationException" in errors(events), events
    # TOPIC READ but no GROUP READ: the group refuses it.
    create_acls(root, binding(ResourceType.TOPIC, "payments", "User:alice", AclOperation.READ))
    events = run_member(java_member, tmp_path, bootstrap, "spark-kafka-source-j1", "payments", "commit")
    assert "GroupAuthorizationException" in errors(events), events

    create_acls(
        root,
        binding(
            ResourceType.GROUP,
            "spark-kafka-source-",
            "User:alice",
            AclOperation.READ,
            pattern=ResourcePatternType.PREFIXED,
        ),
    )
    events = run_member(java_member, tmp_path, bootstrap, "spark-kafka-source-j2", "payments", "commit")
    assert errors(events) == set(), events
    assert sum(len(e["recs"]) for e in events if e["ev"] == "records") == 4
    assert any(e["ev"] == "commit" for e in events)

    create_acls(
        root, binding(ResourceType.TOPIC, "payments", "User:*", AclOperation.READ, AclPermissionType.DENY)
    )
    events = run_member(java_member, tmp_path, bootstrap, "spark-kafka-source-j3", "payments", "commit")
    assert "TopicAuthorizationException" in errors(events), events
