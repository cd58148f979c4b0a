"""Kafka's own config tool (kafka-configs.sh, i.e. kafka.admin.ConfigCommand of Kafka 4.x) on group configs
(`--entity-type groups`): set, describe, delete, refused values; standalone and in front of a cluster, where the
configs of everything but groups stay the cluster's (a DescribeConfigs naming a group and a topic is answered by
both)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.java import fetch_jar_set, run_java_tool
from tests.support.members import admin_http

pytestmark = pytest.mark.e2e

TOOL = "kafka.admin.ConfigCommand"


@pytest.fixture(scope="session")
def kafka_server_jars() -> Path:
    return fetch_jar_set("kafka-server")


def configs(jars: Path, server, *args: str, check: bool = True):
    return run_java_tool(
        jars, TOOL, "--bootstrap-server", server.bootstrap, *args, server=server, check=check
    )


def group_configs(jars: Path, server, group: str, check: bool = True, *more: str):
    return configs(jars, server, "--entity-type", "groups", "--entity-name", group, *more, check=check)


def described(stdout: str) -> dict[str, str]:
    """name -> value of the configs `--describe` printed ("  name=value sensitive=... synonyms={...}")."""
    out = {}
    for line in stdout.splitlines():
        line = line.strip()
        if "=" in line and " sensitive=" in line:
            name, rest = line.split("=", 1)
            out[name] = rest.split(" sensitive=", 1)[0]
    return out


def check_group_configs(jars: Path, server, group: str) -> None:
    # A group with no configs of its own: nothing listed (its values are the server's), all of them with --all.
    out = group_configs(jars, server, group, True, "--describe").stdout
    assert described(out) == {}, out
    out = group_configs(jars, server, group, True, "--describe", "--all").stdout
    assert set(described(out)) == {
        "consumer.session.timeout.ms",
        "consumer.heartbeat.interval.ms",
        "group.static.registration.timeout.ms",
        "group.expansion.timeout.ms",
    }, out
    assert "DEFAULT_CONFIG:group.consumer.session.timeout.ms=" in out, out

    group_configs(
        jars,
        server,
        group,
        True,
        "--alter",
        "--add-config",
        "consumer.session.timeout.ms=50000,consumer.heartbeat.interval.ms=6000,group.expansion.timeout.ms=2000",
    )
    out = group_configs(jars, server, group, True, "--describe").stdout
    assert described(out) == {
        "consumer.session.timeout.ms": "50000",
        "consumer.heartbeat.interval.ms": "6000",
        "group.expansion.timeout.ms": "2000",
    }, out
    # the same values as the admin API's per-group settings
    status, body = admin_http(
        server, "PUT", f"/v1/groups/{group}/settings", {"group.expansion.timeout.ms": 2000}
    )
    assert status == 200, body
    assert body["settings"] == {
        "consumer.heartbeat.interval.ms": 6000,
        "consumer.session.timeout.ms": 50000,
        "group.expansion.timeout.ms": 2000,
    }, body

    group_configs(jars, server, group, True, "--alter", "--delete-config", "consumer.heartbeat.interval.ms")
    out = group_configs(jars, server, group, True, "--describe").stdout
    assert "consumer.heartbeat.interval.ms" not in described(out), out

    # refused: below Kafka's bound, and a name that is no group config; nothing changed
    bad = group_configs(
        jars, server, group, False, "--alter", "--add-config", "consumer.session.timeout.ms=1000"
    )
    assert bad.returncode != 0 and "group.consumer.min.session.timeout.ms" in bad.stdout + bad.stderr, bad
    bad = group_configs(jars, server, group, False, "--alter", "--add-config", "no.such.config=1")
    assert bad.returncode != 0 and "Unknown group config name" in bad.stdout + bad.stderr, bad
    out = group_configs(jars, server, group, True, "--describe").stdout
    assert described(out)["consumer.session.timeout.ms"] == "50000", out


def test_kafka_configs_sets_describes_and_deletes_group_configs(server, kafka_server_jars):
    check_group_configs(kafka_server_jars, server, "configs-group")


def test_kafka_configs_through_the_front_keeps_topic_configs_on_the_cluster(
    front, kafka_cluster, kafka_server_jars
):
    from confluent_kafka.admin import AdminClient, ConfigResource

    from tests.support.kafka_cluster import create_replicated_topic

    check_group_configs(kafka_server_jars, front, "front-configs-group")

    topic = "front-configs-topic"
    create_replicated_topic(front.bootstrap, topic, 1)
    configs(
        kafka_server_jars,
        front,
        "--entity-type",
        "topics",
        "--entity-name",
        topic,
        "--alter",
        "--add-config",
        "retention.ms=123456",
    )
    out = configs(
        kafka_server_jars,
        kafka_cluster_direct(kafka_cluster),
        "--entity-type",
        "topics",
        "--entity-name",
        topic,
        "--describe",
    ).stdout
    assert described(out).get("retention.ms") == "123456", out  # the cluster's own topic config

    # One DescribeConfigs naming a group and a topic: the group's configs from here, the topic's from the cluster.
    admin = AdminClient({"bootstrap.servers": front.bootstrap})
    group_resource = ConfigResource(ConfigResource.Type.GROUP, "front-configs-group")
    topic_resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    found = {r: f.result(30) for r, f in admin.describe_configs([group_resource, topic_resource]).items()}
    assert found[group_resource]["consumer.session.timeout.ms"].value == "50000"
    assert found[topic_resource]["retention.ms"].value == "123456"


def kafka_cluster_direct(cluster):
    """The cluster as a tool reaches it without the server (what run_java_tool takes as a server)."""

    class Direct:
        bootstrap = cluster.bootstrap

        @staticmethod
        def output() -> str:
            return ""

    return Direct()
