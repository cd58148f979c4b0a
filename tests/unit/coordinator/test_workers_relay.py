"""The relay of a worker w > 0 (coordinator.server.forward) against a real worker-0 server, both on 127.0.0.1:
answers come back in request order with the client's correlation ids, Metadata carries the relaying worker's
broker list, Produce acks=0 gets no answer, and the upstream connection follows the client connection."""

from __future__ import annotations

import time

from coordinator.brokers import Broker
from coordinator.cluster.forwarding import ForwardingDataPlane
from coordinator.dataplane.embedded import EmbeddedDataPlane
from protocol.api import request_class
from protocol.build import build
from tests.support.wire import WireClient, encode_request

from .server_thread import run_on, running
from .test_dataplane import batch

METADATA, PRODUCE, LIST_OFFSETS, CREATE_TOPICS = 3, 0, 2, 19
BROKERS = [Broker(1, "127.0.0.1", 9001), Broker(2, "127.0.0.1", 9002)]


def _worker0(server):
    server.add_part(EmbeddedDataPlane(server.config, server.broker))


def _relay_to(upstream):
    def setup(server):
        server.add_part(
            ForwardingDataPlane(
                server.config,
                ("127.0.0.1", upstream.bound[1]),
                brokers=lambda: BROKERS,
                abort_connection=server.abort_connection,
            )
        )

    return setup


def _req(api_key: int, version: int, **values):
    return build(request_class(api_key, version), values)


def _wait(predicate, what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"{what} within {timeout_s:.0f} s"
        time.sleep(0.01)


def test_relayed_requests_are_answered_in_order_with_the_relays_brokers():
    with running(_worker0) as worker0, running(_relay_to(worker0)) as relay:
        relay_part = relay.parts[0]
        with WireClient(*relay.bound) as c:
            create = _req(
                CREATE_TOPICS,
                7,
                topics=[
                    {
                        "name": "t",
                        "num_partitions": 2,
                        "replication_factor": 1,
                        "assignments": [],
                        "configs": [],
                    }
                ],
                timeout=5000,
                validate_only=False,
            )
            produce0 = _req(
                PRODUCE,
                9,
                transactional_id=None,
                acks=0,
                timeout=5000,
                topic_data=[
                    {"name": "t", "partition_data": [{"index": 1, "records": batch(b"a", b"b", b"c")}]}
                ],
            )
            produce1 = _req(
                PRODUCE,
                9,
                transactional_id=None,
                acks=1,
                timeout=5000,
                topic_data=[{"name": "t", "partition_data": [{"index": 1, "records": batch(b"d")}]}],
            )
            offsets = _req(
                LIST_OFFSETS,
                7,
                replica_id=-1,
                isolation_level=0,
                topics=[
                    {
                        "name": "t",
                        "partitions": [{"partition_index": 1, "current_leader_epoch": -1, "timestamp": -1}],
                    }
                ],
            )
            metadata = _req(
                METADATA,
                12,
                topics=None,
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            )
            # All pipelined on one connection; the acks=0 Produce (id 11) has no answer.
            c.sock.sendall(
                encode_request(create, 10)
                + encode_request(produce0, 11)
                + encode_request(produce1, 12)
                + encode_request(offsets, 13)
                + encode_request(metadata, 14)
            )
            cid, created = c.recv(create)
            assert (cid, created.topics[0].error_code) == (10, 0)
            cid, produced = c.recv(produce1)
            assert cid == 12
            partition = produced.responses[0].partition_responses[0]
            assert (partition.error_code, partition.base_offset) == (0, 3)  # after the acks=0 batch, in order
            cid, listed = c.recv(offsets)
            assert (cid, listed.topics[0].partitions[0].offset) == (13, 4)
            cid, meta = c.recv(metadata)
            assert cid == 14
            assert [(b.node_id, b.host, b.port) for b in meta.brokers] == [
                (1, "127.0.0.1", 9001),
                (2, "127.0.0.1", 9002),
            ]
            assert meta.controller_id == worker0.config["node.id"]
            assert {t.name: len(t.partitions) for t in meta.topics} == {"t": 2}
            assert all(p.leader_id == worker0.config["node.id"] for p in meta.topics[0].partitions)

            # The log-end cache the lag metrics read comes from worker 0 too.
            _wait(lambda: relay_part.log_end_offset("t", 1) == 4, "the relay's log-end cache to see offset 4")
            assert relay_part.partition_count("t") == 2
            assert len(relay_part._upstreams) == 2  # this connection's and the cache's
        # The client connection closed: its upstream connection goes with it (the cache keeps its own).
        _wait(lambda: len(relay_part._upstreams) == 1, "the upstream of the closed connection to close")


def test_a_topic_created_on_worker_0_is_known_to_the_relaying_worker_as_soon_as_creation_is_acknowledged():
    """Read-your-writes across workers: the admin API of a worker w > 0 catches up before it reads topics, so a
    topic worker 0 acknowledged is never unknown there (the periodic refresh alone left a window of a second)."""
    with running(_worker0) as worker0, running(_relay_to(worker0)) as relay:
        plane = relay.parts[0]
        with WireClient(*worker0.bound) as c:
            for i in range(20):
                name = f"created-{i}"
                create = _req(
                    CREATE_TOPICS,
                    7,
                    topics=[
                        {
                            "name": name,
                            "num_partitions": 1 + i % 3,
                            "replication_factor": 1,
                            "assignments": [],
                            "configs": [],
                        }
                    ],
                    timeout=5000,
                    validate_only=False,
                )
                c.sock.sendall(encode_request(create, 100 + i))
                _cid, created = c.recv(create)
                assert created.topics[0].error_code == 0
                run_on(relay, plane.catch_up())
                assert plane.partition_count(name) == 1 + i % 3
                assert plane.log_end_offset(name, 0) == 0
