"""Kafka's own tools against a secured server (kafka-tools 4.x jars, fetched by scripts/fetch-jars.sh):
kafka-acls (org.apache.kafka.tools.AclCommand) adds, lists and removes ACLs over SASL/SCRAM, and
kafka-consumer-groups run as a lag-exporter principal holding only docs/security.md's minimum ACLs (DESCRIBE on groups
and topics) describes every group's offsets and lag."""

from __future__ import annotations

from pathlib import Path

import pytest
from security_clients import admin, consume, create_topic, produce, sasl
from security_support import USERS, SecureServers, acl_server_settings

from tests.support.java import fetch_jar_set, run_java_tool

pytestmark = pytest.mark.e2e

ACLS = "org.apache.kafka.tools.AclCommand"
GROUPS = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"


def client_properties(path: Path, user: str, password: str) -> Path:
    path.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{user}" password="{password}";\n'
    )
    return path


def test_kafka_acls_and_exporter_minimum_acls(secure_servers: SecureServers, tmp_path: Path) -> None:
    tools = fetch_jar_set("kafka-tools")
    server = secure_servers(
        acl_server_settings(
            **{
                "scram.bootstrap.users": ",".join(
                    f"{u}:{p}" for u, p in {**USERS, "exporter": "exporter-secret"}.items()
                )
            }
        )
    )
    bootstrap = server.listeners["SASL_PLAINTEXT"]
    root_props = client_properties(tmp_path / "admin.properties", "admin", USERS["admin"])
    exporter_props = client_properties(tmp_path / "exporter.properties", "exporter", "exporter-secret")

    def acls(*args: str, check: bool = True):  # type: ignore[no-untyped-def]
        return run_java_tool(
            tools,
            ACLS,
            "--bootstrap-server",
            bootstrap,
            "--command-config",
            str(root_props),
            *args,
            server=server.process,
            check=check,
        )

    acls(
        "--add",
        "--allow-principal",
        "User:exporter",
        "--operation",
        "Describe",
        "--group",
        "*",
        "--topic",
        "*",
    )
    acls(
        "--add",
        "--allow-principal",
        "User:alice",
        "--operation",
        "Read",
        "--resource-pattern-type",
        "prefixed",
        "--group",
        "spark-kafka-source-",
        "--topic",
        "clicks",
    )
    listed = acls("--list").stdout
    assert "resourceType=GROUP, name=spark-kafka-source-, patternType=PREFIXED" in listed
    assert "principal=User:exporter, host=*, operation=DESCRIBE, permissionType=ALLOW" in listed

    root = admin(server)
    create_topic(root, "clicks", partitions=2)
    assert set(produce(sasl(server, "admin"), "clicks", 6)) == {None}
    values, errors = consume(sasl(server, "alice"), "spark-kafka-source-9f-driver-0", "clicks", 6)
    assert errors == [] and len(values) == 6

    # The exporter sees the group, its committed offsets and its lag with DESCRIBE alone.
    described = run_java_tool(
        tools,
        GROUPS,
        "--bootstrap-server",
        bootstrap,
        "--command-config",
        str(exporter_props),
        "--describe",
        "--all-groups",
        server=server.process,
    ).stdout
    rows = [
        line.split() for line in described.splitlines() if line.startswith("spark-kafka-source-9f-driver-0")
    ]
    assert {r[1] for r in rows} == {"clicks"} and sum(int(r[3]) for r in rows) == 6  # CURRENT-OFFSET
    assert all(r[5] == "0" for r in rows)  # LAG
    # ... but may not delete it (GROUP DELETE): Kafka's tool reports GroupAuthorizationException.
    deleted = run_java_tool(
        tools,
        GROUPS,
        "--bootstrap-server",
        bootstrap,
        "--command-config",
        str(exporter_props),
        "--delete",
        "--group",
        "spark-kafka-source-9f-driver-0",
        server=server.process,
        check=False,
    )
    assert "GroupAuthorizationException" in deleted.stdout + deleted.stderr, deleted

    acls(
        "--remove",
        "--force",
        "--allow-principal",
        "User:alice",
        "--operation",
        "Read",
        "--resource-pattern-type",
        "prefixed",
        "--group",
        "spark-kafka-source-",
    )
    assert "spark-kafka-source-" not in acls("--list").stdout
