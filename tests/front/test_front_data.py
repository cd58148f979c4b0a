"""The server in front of a real 3-node Kafka cluster: the data path. Records produced through the front are in
the cluster and the other way round; every broker address a client learns is the front's, with the cluster's node
ids; what ApiVersions says is what the path serves."""

from __future__ import annotations

import pytest

from tests.support.e2e import check_consumed, check_delivered, consume, make_messages, produce, run_client
from tests.support.kafka_cluster import NODE_IDS
from tests.support.wire import WireClient, make, request_class

pytestmark = pytest.mark.e2e

PARTITIONS = 3


def _brokers(listing):
    return {b["id"]: (b["host"], b["port"]) for b in listing["brokers"]}


def test_brokers_are_the_clusters_nodes_at_the_fronts_addresses(front, direct, kafka_cluster):
    topic = "front-meta"
    created = run_client("ck", "create-topic", front, "--topic", topic, "--partitions", str(PARTITIONS))
    assert created["error"] is None, created  # CreateTopics forwarded to the cluster

    through = run_client("ck", "list-topics", front)
    straight = run_client("ck", "list-topics", direct)
    brokers = _brokers(through)
    assert sorted(brokers) == list(NODE_IDS), through["brokers"]
    front_host, front_port = front.bootstrap.rsplit(":", 1)
    ports = [port for _, port in brokers.values()]
    assert len(set(ports)) == len(NODE_IDS), brokers
    assert not set(ports) & set(kafka_cluster.ports.values()), "a broker address of the cluster leaked"
    assert int(front_port) not in ports
    assert all(host == front_host for host, _ in brokers.values()), brokers
    # The same topic, the same leaders (node ids are the cluster's), as the cluster says it directly.
    assert through["topics"][topic] == straight["topics"][topic]
    # Stable: a second client is told the same addresses.
    assert _brokers(run_client("ck", "list-topics", front)) == brokers


def test_records_flow_both_ways(front, direct, tmp_path):
    for source, sink, topic, seed in ((front, direct, "front-in", 1), (direct, front, "front-out", 2)):
        created = run_client("ck", "create-topic", source, "--topic", topic, "--partitions", str(PARTITIONS))
        assert created["error"] is None, created
        messages = make_messages(400, seed=seed)
        delivered = produce("ck", source, topic, messages, tmp_path)
        placed = check_delivered(messages, delivered, PARTITIONS)
        consumed = consume("ck", sink, topic, PARTITIONS, len(messages), tmp_path)
        check_consumed(messages, placed, consumed, PARTITIONS)


def _api_versions(address: str) -> dict[int, tuple[int, int]]:
    host, port = address.split(",")[0].rsplit(":", 1)
    with WireClient(host, int(port), timeout=10) as c:
        answer = c.request(
            make(request_class(18, 3), {"client_software_name": "t", "client_software_version": "1"})
        )
    assert answer.error_code == 0
    return {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}


def test_api_versions_say_what_the_path_serves(front, direct):
    versions = _api_versions(front.bootstrap)
    theirs = _api_versions(direct.bootstrap)
    # KIP-848's ConsumerGroupHeartbeat and ConsumerGroupDescribe are served here, as the classic group APIs are
    assert versions[68] == (0, 1) and versions[69] == (0, 1), versions
    # Produce and Fetch up to the versions whose NodeEndpoints the front rewrites
    assert versions[0] == (theirs[0][0], min(theirs[0][1], 13)), (versions[0], theirs[0])
    assert versions[1] == (theirs[1][0], min(theirs[1][1], 18)), (versions[1], theirs[1])
    for local in (10, 11, 12, 13, 14, 15, 16, 8, 9):
        assert local in versions, f"group api {local} not advertised"
    for forwarded in (2, 19, 22, 24, 26, 32):  # ListOffsets, CreateTopics, InitProducerId, txn APIs, configs
        assert forwarded in versions, f"api {forwarded} of the cluster not forwarded"


def test_transactions_through_the_front(front, direct):
    """A transactional producer through the front: FindCoordinator(TRANSACTION) answered with the cluster's
    coordinator at the front's address, the transaction APIs forwarded; a read_committed reader of the cluster
    sees the committed records and not the aborted ones."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    topic = "front-txn"
    assert run_client("ck", "create-topic", front, "--topic", topic, "--partitions", "1")["error"] is None
    producer = Producer({"bootstrap.servers": front.bootstrap, "transactional.id": "front-txn-1"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(10):
        producer.produce(topic, value=f"committed-{i}".encode(), partition=0)
    producer.commit_transaction(30)
    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic, value=f"aborted-{i}".encode(), partition=0)
    # Delivered before the abort, so the aborted records are in the log under an abort marker. Without it,
    # librdkafka may send EndTxn(abort) while its AddPartitionsToTxn for this transaction is still being retried
    # (CONCURRENT_TRANSACTIONS right after the commit), which the coordinator refuses: INVALID_TXN_STATE, fatal.
    assert producer.flush(30) == 0
    producer.abort_transaction(30)
    producer.flush(10)

    consumer = Consumer(
        {
            "bootstrap.servers": direct.bootstrap,
            "group.id": "front-txn-reader",
            "isolation.level": "read_committed",
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        values = []
        for _ in range(60):
            for msg in consumer.consume(100, 0.5):
                if not msg.error():
                    values.append(msg.value().decode())
            if len(values) >= 10:
                break
        for msg in consumer.consume(100, 1.0):
            if not msg.error():
                values.append(msg.value().decode())
    finally:
        consumer.close()
    assert values == [f"committed-{i}" for i in range(10)], values


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
def test_the_connection_to_the_cluster_uses_its_own_credentials(
    server_factory, kafka_cluster, tmp_path, mechanism
):
    """The front authenticates to the cluster's SASL listener with its `upstream.` settings; its clients do not
    (they talk PLAINTEXT to the front), and records and groups work through it."""
    from tests.support.kafka_cluster import SASL_USER

    user, password = SASL_USER
    settings = {
        "upstream.bootstrap.servers": kafka_cluster.sasl_bootstrap,
        "upstream.security.protocol": "SASL_PLAINTEXT",
        "upstream.sasl.mechanism": mechanism,
    }
    if mechanism == "PLAIN":
        settings["upstream.sasl.jaas.config"] = (
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="{user}" password="{password}";'
        )
    else:
        settings |= {"upstream.sasl.username": user, "upstream.sasl.password": password}
    front = server_factory(settings)
    topic = f"front-sasl-{mechanism.lower()}"
    assert run_client("ck", "create-topic", front, "--topic", topic, "--partitions", "1")["error"] is None
    messages = make_messages(50, seed=7)
    delivered = produce("ck", front, topic, messages, tmp_path)
    placed = check_delivered(messages, delivered, 1)
    consumed = consume("ck", front, topic, 1, len(messages), tmp_path)
    check_consumed(messages, placed, consumed, 1)


def test_refused_credentials_stop_the_server_with_a_clear_error(kafka_cluster, tmp_path):
    from tests.support.server import ServerStartError, start_server

    with pytest.raises(ServerStartError) as refused:
        start_server(
            tmp_path / "front",
            {
                "upstream.bootstrap.servers": kafka_cluster.sasl_bootstrap,
                "upstream.security.protocol": "SASL_PLAINTEXT",
                "upstream.sasl.mechanism": "SCRAM-SHA-256",
                "upstream.sasl.username": "kgc-front",
                "upstream.sasl.password": "wrong",
            },
            ready_timeout=60,
        )
    assert "refused SASL SCRAM-SHA-256" in str(refused.value), refused.value
