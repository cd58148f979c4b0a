"""Pieces of coordinator.front that need no cluster: the SCRAM client against our SCRAM server, Produce's acks read
from a raw frame, undecoded (raw) requests in the API table, and the `upstream.` settings."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from coordinator.config import Config, ConfigError
from coordinator.front.connect import Connector, unused_settings
from coordinator.front.endpoints import produce_acks
from coordinator.security.scram import AuthenticationFailed, ScramClient, ScramCredential, ScramServer
from protocol.api import ApiTable, encode_request, request_class
from protocol.build import build


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_client_and_server_agree(mechanism):
    credential = ScramCredential.from_password(mechanism, "s3cret", iterations=4096)
    server = ScramServer(mechanism, lambda user: credential if user == "alice" else None)
    client = ScramClient(mechanism, "alice", "s3cret")
    server_first = server.step(client.first())
    server_final = server.step(client.final(server_first))
    client.verify(server_final)
    assert server.complete and server.username == "alice"


def test_scram_client_refuses_a_wrong_server_signature():
    credential = ScramCredential.from_password("SCRAM-SHA-256", "right", iterations=4096)
    server = ScramServer("SCRAM-SHA-256", lambda user: credential)
    client = ScramClient("SCRAM-SHA-256", "bob", "right")
    client.final(server.step(client.first()))
    with pytest.raises(AuthenticationFailed):
        client.verify(b"v=AAAA")


def _produce_frame(version: int, acks: int, transactional_id: str | None = None) -> bytes:
    body = build(
        request_class(0, version),
        {"transactional_id": transactional_id, "acks": acks, "timeout_ms": 1000, "topic_data": []},
    )
    return encode_request(body, 7, "client-x")[4:]


@pytest.mark.parametrize("version", [3, 8, 9, 11])
@pytest.mark.parametrize("acks", [0, 1, -1])
def test_produce_acks_from_the_raw_frame(version, acks):
    assert produce_acks(_produce_frame(version, acks), version) == acks
    assert produce_acks(_produce_frame(version, acks, "txn-1"), version) == acks


def test_raw_api_is_not_decoded():
    table = ApiTable()
    seen = []

    async def handler(ctx, frame):
        seen.append(frame)

    table.register_raw(0, 3, 9, handler)
    frame = _produce_frame(9, 1)
    decoded = table.decode(frame, "10.0.0.1", 5)
    assert decoded.body is frame and decoded.spec.raw
    assert decoded.context.client_id == "client-x" and decoded.context.correlation_id == 7
    assert table.decode(_produce_frame(11, 1)).body is None  # outside the range: UNSUPPORTED_VERSION


def test_upstream_settings():
    config = Config({"upstream.bootstrap.servers": "a:9092,b:9093", "upstream.client.id": "x"})
    assert config["upstream.bootstrap.servers"] == ("a:9092", "b:9093")
    assert unused_settings(config) == ["upstream.client.id"]
    with pytest.raises(ConfigError):
        Config({"upstreamish": "1"})
    jaas = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="u1" password="p\\"w";'
    connector = Connector(
        Config({"upstream.security.protocol": "SASL_PLAINTEXT", "upstream.sasl.jaas.config": jaas})
    )
    assert (connector._username, connector._password) == ("u1", 'p"w')
    with pytest.raises(ValueError):
        Connector(
            Config({"upstream.security.protocol": "SASL_PLAINTEXT", "upstream.sasl.mechanism": "GSSAPI"})
        )


def test_record_batches_round_trip():
    from coordinator.dataplane.batches import validate_batches
    from coordinator.front.records import decode_batches, encode_batch

    entries = [(b"k1", b"v1"), (b"k2", None), (b"", b"x" * 300)]
    batch = encode_batch(entries, 1_700_000_000_000)
    validate_batches(batch, max_batch_bytes=1 << 20)  # what the embedded data plane accepts from producers
    shifted = bytearray(batch)
    shifted[0:8] = (41).to_bytes(8, "big")  # as a broker stores it, at base offset 41
    decoded = list(decode_batches(bytes(shifted) + batch[:20]))  # a partial batch at the end is left out
    assert decoded == [(41 + i, k, v, 1_700_000_000_000) for i, (k, v) in enumerate(entries)]
    corrupt = bytearray(shifted)
    corrupt[-1] ^= 0xFF
    with pytest.raises(ValueError):
        list(decode_batches(bytes(corrupt)))


def _answer(api_key: int, version: int, endpoints: list[dict]) -> bytes:
    """An answer as a broker sends it (from after the correlation id): header tags, then the body."""
    import uuid

    from protocol.api import encode_body
    from protocol.errors import ErrorCode

    if api_key == 0:
        body = {
            "responses": [
                {
                    "name": "t",
                    "topic_id": uuid.uuid4(),
                    "partition_responses": [
                        {
                            "index": 0,
                            "error_code": ErrorCode.not_leader_or_follower,
                            "base_offset": -1,
                            "log_start_offset": -1,
                            "record_errors": [{"batch_index": 0, "batch_index_error_message": "no"}],
                            "error_message": "moved",
                            "current_leader": {"leader_id": 2, "leader_epoch": 5},
                        },
                        {
                            "index": 1,
                            "error_code": ErrorCode.none,
                            "base_offset": 7,
                            "log_start_offset": 0,
                        },
                    ],
                }
            ],
            "throttle_time": 0,
            "node_endpoints": endpoints,
        }
    else:
        body = {
            "throttle_time": 0,
            "error_code": ErrorCode.none,
            "session_id": 9,
            "responses": [
                {
                    "topic_id": uuid.uuid4(),
                    "partitions": [
                        {
                            "partition_index": 0,
                            "error_code": ErrorCode.not_leader_or_follower,
                            "high_watermark": 10,
                            "last_stable_offset": 10,
                            "log_start_offset": 0,
                            "current_leader": {"leader_id": 2, "leader_epoch": 5},
                            "aborted_transactions": [{"producer_id": 3, "first_offset": 1}],
                            "preferred_read_replica": -1,
                            "records": b"\x01" * 300,
                        },
                        {
                            "partition_index": 1,
                            "error_code": ErrorCode.none,
                            "high_watermark": 4,
                            "records": None,
                            "aborted_transactions": None,
                        },
                    ],
                }
            ],
            "node_endpoints": endpoints,
        }
    return b"\x00" + encode_body(api_key, version, body).body


@pytest.mark.parametrize("api_key,version", [(0, 10), (0, 11), (0, 12), (0, 13), (1, 16), (1, 17), (1, 18)])
def test_node_endpoints_are_found_without_decoding(api_key, version):
    from coordinator.front.endpoints import has_endpoints

    assert not has_endpoints(api_key, version, _answer(api_key, version, []))
    moved = _answer(
        api_key, version, [{"node_id": 2, "host": "broker-2.internal", "port": 9092, "rack": None}]
    )
    assert has_endpoints(api_key, version, moved)


@pytest.mark.parametrize("api_key,version", [(0, 10), (0, 13), (1, 16), (1, 18)])
def test_node_endpoints_get_the_fronts_addresses(api_key, version):
    import asyncio
    import struct
    import types

    from coordinator.front.dataplane import FrontDataPlane
    from coordinator.server.listener import KafkaListener
    from protocol.api import RequestContext, decode_response

    async def scenario():
        cluster = types.SimpleNamespace(nodes={2: ("10.9.9.2", 9092)}, stats={}, timeout_s=1.0)
        front = FrontDataPlane(Config(), cluster, lambda: None, None, lambda _c: None)
        front.listeners[2] = KafkaListener("PLAINTEXT", "127.0.0.1", 0, bound_port=40002)
        moved = _answer(api_key, version, [{"node_id": 2, "host": "10.9.9.2", "port": 9092, "rack": "r1"}])
        ctx = RequestContext(api_key, version, 77, "c")
        payload = await front._rewrite_endpoints(ctx, moved)
        (cid,) = struct.unpack_from(">i", payload)
        assert cid == 77
        answer = decode_response(api_key, version, payload[4:])
        assert [(e.node_id, e.host, e.port, e.rack) for e in answer.node_endpoints] == [
            (2, "127.0.0.1", 40002, "r1")
        ]
        original = decode_response(api_key, version, moved)
        assert answer.responses == original.responses  # nothing else changed

    asyncio.run(scenario())


class _Cluster:
    """What FrontDataPlane.route asks of the upstream cluster: its live nodes and new connections."""

    def __init__(self, nodes):
        self.nodes = {n: ("127.0.0.1", 9000 + n) for n in nodes}
        self.opened = []

    def live_nodes(self):
        return sorted(self.nodes)

    def connection(self, node, on_broken):
        upstream = _Upstream(node)
        self.opened.append(upstream)
        return upstream


class _Upstream:
    def __init__(self, node):
        self.node = node
        self.idle = True
        self.closed = False

    def close(self):
        self.closed = True


def test_a_connection_goes_back_to_its_broker_once_that_broker_is_back():
    import types

    from coordinator.front.dataplane import FrontDataPlane

    cluster = _Cluster([1, 3])  # node 2 is down
    plane = FrontDataPlane(Config({}), cluster, None, None, None)
    plane.node_of_request = lambda: 2  # the client connection came in on node 2's port here
    ctx = types.SimpleNamespace(connection_id=7)
    stand_in = plane.route(ctx)
    assert stand_in.node == 1 and plane.route(ctx) is stand_in

    cluster.nodes[2] = ("127.0.0.1", 9002)  # node 2 is back, but a request is still in flight on the stand-in
    stand_in.idle = False
    assert plane.route(ctx) is stand_in
    stand_in.idle = True  # answered: the next request goes to node 2 itself
    own = plane.route(ctx)
    assert own.node == 2 and stand_in.closed and plane.route(ctx) is own


def _control_batch(base: int, producer_id: int, abort: bool) -> bytes:
    """A transaction marker as a broker writes it: a control batch of one record whose key is version 0 and
    type 0 (abort) or 1 (commit)."""
    import struct

    from crc32c import crc32c

    from coordinator.front.records import Producer, encode_batch

    key = struct.pack(">hh", 0, 0 if abort else 1)
    batch = bytearray(encode_batch([(key, b"\x00\x00\x00\x00\x00\x00")], 0, Producer(producer_id, 0, -1)))
    batch[0:8] = base.to_bytes(8, "big")
    struct.pack_into(">h", batch, 21, 0x30)  # transactional, control
    struct.pack_into(">I", batch, 17, crc32c(memoryview(batch)[21:]))
    return bytes(batch)


def _at(batch: bytes, base: int) -> bytes:
    return base.to_bytes(8, "big") + batch[8:]


def test_a_read_committed_read_leaves_out_aborted_transactions():
    """Records of aborted transactions are left out from the transaction's first offset to its producer's abort
    marker (as listed by Fetch answers, across several), committed ones are kept, markers give no record, and
    batches_end steps past all of them."""
    from coordinator.front.records import Aborted, Producer, batches_end, decode_batches, encode_batch

    def txn(base: int, pid: int, key: bytes) -> bytes:
        return _at(encode_batch([(key, b"v")], 5, Producer(pid, 0, 0)), base)

    first = txn(0, 7, b"committed") + _control_batch(1, 7, abort=False) + txn(2, 8, b"aborted")
    second = (
        txn(3, 7, b"committed-2")
        + _control_batch(4, 8, abort=True)
        + _control_batch(5, 7, abort=False)
        + txn(6, 8, b"after-abort")
    )
    aborted = Aborted()
    aborted.add([(8, 2)])
    keys = [r[1] for r in decode_batches(first, aborted)]
    aborted.add([(8, 2)])  # listed again by the next Fetch: not twice
    keys += [r[1] for r in decode_batches(second, aborted)]
    assert keys == [b"committed", b"committed-2", b"after-abort"]
    assert batches_end(first) == 3 and batches_end(second) == 7
    assert batches_end(first[:20]) is None
    # A transaction compacted down to its marker ends there: the producer's next one is not left out.
    aborted = Aborted()
    aborted.add([(8, 0)])
    compacted = _control_batch(1, 8, abort=True) + txn(2, 8, b"next")
    assert [r[1] for r in decode_batches(compacted, aborted)] == [b"next"]


def test_a_follower_reads_what_the_owner_commits_while_its_read_is_under_way():
    """A hot standby's read asks for the last stable offset, then fetches up to it. Records the owner commits
    between the two come in the Fetch's answer past that end: they are left for the next read, never skipped."""
    import types

    from coordinator.front.records import Producer, encode_batch
    from coordinator.front.state import EARLIEST, Follower, StateTopic

    def committed(base: int, key: bytes) -> bytes:
        return _at(encode_batch([(key, b"v")], 5, Producer(7, 0, base)), base) + _control_batch(
            base + 1, 7, abort=False
        )

    log = [committed(0, b"g1")]  # the partition's batches, as the leader holds them
    fetches = []

    class Topic(StateTopic):
        async def ensure_once(self) -> None:
            pass

        async def offset(self, partition: int, timestamp: int) -> int:
            return 0 if timestamp == EARLIEST else 2 * len(log)

        async def _to_leader(self, partition: int, api_key: int, newest: int, body: dict[str, Any]) -> Any:
            at = body["topics"][0]["partitions"][0]["fetch_offset"]
            fetches.append(at)
            log.append(committed(2 * len(log), b"g%d" % (len(log) + 1)))  # committed since the ListOffsets
            data = b"".join(batch for i, batch in enumerate(log) if 2 * i + 1 >= at)
            return types.SimpleNamespace(aborted_transactions=[], records=data)

    async def scenario() -> None:
        topic = Topic(None, "state", 1)  # type: ignore[arg-type]
        follower = Follower(0)
        first = await topic.read_on(follower)
        assert [r[1] for r in first] == [b"g1"] and follower.position == 2
        second = await topic.read_on(follower)
        assert [r[1] for r in second] == [b"g2"] and follower.position == 4
        third = await topic.read_on(follower)
        assert [r[1] for r in third] == [b"g3"] and follower.position == 6
        assert fetches == [0, 2, 4]

    asyncio.run(scenario())


def test_describe_transactions_answer_with_no_transaction_open():
    """DescribeTransactions v0 as a broker answers it for an idle id (start time -1, which kio refuses)."""
    import struct

    from coordinator.front.endpoints import transaction_states

    def string(text: str) -> bytes:
        return bytes([len(text) + 1]) + text.encode()

    state = (
        struct.pack(">h", 0)
        + string("state-3")
        + string("Empty")
        + struct.pack(">iqqh", 60000, -1, 1004, 7)
        + bytes([2])  # one topic
        + string("t")
        + bytes([3])
        + struct.pack(">ii", 0, 1)
        + b"\x00"  # topic's tags
        + b"\x00"  # state's tags
    )
    fenced = struct.pack(">h", 105) + string("state-4") + string("") + struct.pack(">iqqh", 0, -1, -1, -1)
    payload = b"\x00" + struct.pack(">i", 0) + bytes([3]) + state + fenced + b"\x01\x00" + b"\x00"
    assert transaction_states(payload) == {"state-3": (0, 1004, 7), "state-4": (105, -1, -1)}


def test_the_fronts_own_requests_to_a_broker_are_spread_over_several_connections():
    """A broker answers one request of a connection at a time (here: after 50 ms each), so requests of the
    front's own that wait at the same time go out on up to OWN_CONNECTIONS connections, and one at a time reuse
    the one that is free."""
    import asyncio
    import struct
    import time

    from coordinator.front.cluster import OWN_CONNECTIONS, UpstreamCluster

    connections = []

    async def broker(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(writer)
        try:
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                frame = await reader.readexactly(size)
                await asyncio.sleep(0.05)  # one request after the other, as a broker does per connection
                writer.write(struct.pack(">ii", 4, struct.unpack_from(">i", frame, 4)[0]))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass

    async def scenario() -> None:
        server = await asyncio.start_server(broker, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        cluster = UpstreamCluster(Config({"upstream.bootstrap.servers": f"127.0.0.1:{port}"}))
        cluster.nodes = {1: ("127.0.0.1", port)}
        body = {"client_software_name": "t", "client_software_version": "1"}

        def ask() -> Any:
            return cluster.ask_node(1, 18, 3, body, decode=bytes)

        started = time.monotonic()
        answers = await asyncio.gather(*(ask() for _ in range(2 * OWN_CONNECTIONS)))
        elapsed = time.monotonic() - started
        assert answers == [b""] * (2 * OWN_CONNECTIONS)
        assert len(connections) == OWN_CONNECTIONS
        assert elapsed < 0.05 * 2 * OWN_CONNECTIONS / 2  # side by side, not one after the other
        for _ in range(3):
            await ask()
        assert len(connections) == OWN_CONNECTIONS  # a free connection is used again
        cluster.close()
        await asyncio.sleep(0.05)  # the connections' tasks end
        for writer in connections:
            writer.close()
        server.close()
        await server.wait_closed()

    asyncio.run(scenario())


def test_requests_naming_the_servers_own_topics_are_told_apart_from_ones_that_carry_their_bytes():
    """The front never passes on a client's request about its state topic or its security topic (by name or topic
    id) or the shards' transactional ids; record data or a client id holding the same bytes goes through."""
    import uuid
    from types import SimpleNamespace

    from coordinator.front.dataplane import FrontDataPlane
    from coordinator.front.records import encode_batch

    state = "kgc-state"
    front = FrontDataPlane(Config({"coordinator.state.topic": state}), None, lambda: None, None, None)
    state_id, security_id = uuid.uuid4(), uuid.uuid4()
    front.own_topic_sources = [SimpleNamespace(topic_id=state_id), SimpleNamespace(topic_id=None)]

    def frame(api_key: int, version: int, body: dict, client_id: str = "client-x") -> bytes:
        return encode_request(build(request_class(api_key, version), body), 7, client_id)[4:]

    def produce(topic: str, records: bytes) -> bytes:
        data = [{"name": topic, "partition_data": [{"index": 0, "records": records}]}]
        return frame(0, 9, {"transactional_id": None, "acks": -1, "timeout_ms": 1000, "topic_data": data})

    def fetch(version: int, topic: str = "", topic_id: uuid.UUID | None = None) -> bytes:
        part = {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}
        wanted = {"topic": topic, "topic_id": topic_id or uuid.UUID(int=0), "partitions": [part]}
        return frame(1, version, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "topics": [wanted]})

    def init_producer_id(transactional_id: str) -> bytes:
        body = {"transactional_id": transactional_id, "transaction_timeout_ms": 60000}
        return frame(22, 4, {**body, "producer_id": -1, "producer_epoch": -1})

    mentions = encode_batch([(b"k", f"{state}-security is where the users live".encode())], 0)
    assert front._touches_own(produce(f"{state}-security", encode_batch([(b"scram\x00x", b"{}")], 0)))
    assert front._touches_own(produce(state, mentions))
    assert not front._touches_own(produce("orders", mentions))  # the bytes are in the records only
    assert not front._touches_own(frame(3, 12, {"topics": []}, client_id=state))  # in the client id only
    assert front._touches_own(fetch(12, topic=f"{state}-security"))
    assert front._touches_own(fetch(13, topic_id=state_id))  # Fetch v13+: by topic id
    assert not front._touches_own(fetch(13, topic_id=security_id))  # (an id not known: not ours)
    assert not front._touches_own(fetch(12, topic="orders"))
    assert front._touches_own(init_producer_id(f"{state}-7"))  # a shard's writer: fenced by the client
    assert not front._touches_own(init_producer_id(f"{state}-app"))
    assert not front._touches_own(init_producer_id("payments"))


def test_a_slow_transaction_keeps_its_shards_lease_at_each_step_the_cluster_takes():
    """The lease keeper leaves a writer with a transaction in flight alone; the transaction's own requests confirm
    the lease instead. AddPartitionsToTxn and EndTxn, taken by the transaction coordinator at the writer's epoch,
    each confirm it from when they were sent, so a transaction about as slow as the lease (a loaded cluster) does
    not leave the shard refusing to answer (COORDINATOR_NOT_AVAILABLE) while it runs or after it."""
    import time
    import types
    import unittest.mock

    from coordinator.front.state import StateTopic, Writer

    clock = [100.0]
    refused: dict[str, Any] = {}  # whether the shard could answer when each request was sent

    class Topic(StateTopic):
        async def _add_partition(self, writer: Writer, partition: int, deadline: float) -> None:
            refused["add"] = writer.refusal(clock[0])
            clock[0] += 0.9

        async def _to_leader(self, partition: int, api_key: int, newest: int, body: dict[str, Any]) -> Any:
            refused["produce"] = writer.refusal(clock[0])
            clock[0] += 0.9
            return types.SimpleNamespace(base_offset=41)

        async def _end(self, writer: Writer, deadline: float) -> None:
            refused["end"] = writer.refusal(clock[0])
            clock[0] += 0.9

    writer = Writer("state-0", 7, 3, lease_s=2.0)
    writer.confirm(99.0)  # the keeper's last confirmation: the lease holds until 101

    async def scenario() -> int:
        topic = Topic(types.SimpleNamespace(timeout_s=30.0), "state", 1, lease_ms=2000)  # type: ignore[arg-type]
        return await topic._transaction(0, [(b"k", b"v")], writer, deadline=200.0)

    fake_time = types.SimpleNamespace(monotonic=lambda: clock[0], time=time.time)
    with unittest.mock.patch("coordinator.front.state.time", fake_time):
        assert asyncio.run(scenario()) == 41
    # AddPartitionsToTxn sent at 100 holds the lease to 102, past EndTxn's send at 101.8; EndTxn holds it to 103.8.
    assert refused == {"add": None, "produce": None, "end": None}
    assert writer.owned_until == pytest.approx(103.8) and writer.refusal(clock[0]) is None


async def test_last_stable_offsets_asked_for_together_go_out_in_one_list_offsets_per_leader():
    """A server's hot standbys read every shard they follow in the same turn: the last stable offsets they ask for
    within END_BATCH_S go out as one ListOffsets per leader. A partition the batch cannot answer for (no leader
    known, an error in its entry) is asked alone, as before; a reader that gives up does not spoil the others."""
    import types

    from coordinator.front.state import LATEST, READ_COMMITTED, StateTopic

    asked: list[tuple[int, list[int]]] = []
    alone: list[int] = []

    class Cluster:
        nodes = {1: None, 2: None}

        def version(self, api_key: int, newest: int) -> int:
            return newest

        async def ask_node(self, node: int, api_key: int, version: int, body: dict[str, Any]) -> Any:
            assert body["isolation_level"] == READ_COMMITTED
            wanted = [p["partition_index"] for p in body["topics"][0]["partitions"]]
            assert all(p["timestamp"] == LATEST for p in body["topics"][0]["partitions"])
            asked.append((node, wanted))
            await asyncio.sleep(0.01)
            entries = [
                types.SimpleNamespace(partition_index=p, error_code=6 if p == 2 else 0, offset=100 + p)
                for p in wanted
            ]
            return types.SimpleNamespace(topics=[types.SimpleNamespace(partitions=entries)])

    class Topic(StateTopic):
        async def offset(self, partition: int, timestamp: int) -> int:
            assert timestamp == LATEST
            alone.append(partition)
            return 900 + partition

    topic = Topic(Cluster(), "state", 6)  # type: ignore[arg-type]
    topic._leaders = {0: 1, 1: 1, 2: 2, 4: 1, 5: 7}  # 3: no leader known; 5: a node no longer in the cluster
    readers = [asyncio.create_task(topic.last_stable(p)) for p in (*range(6), 4)]
    await asyncio.sleep(0)
    readers[4].cancel()  # one of partition 4's two readers
    done = await asyncio.gather(*readers, return_exceptions=True)
    assert done[:4] == [100, 101, 902, 903] and isinstance(done[4], asyncio.CancelledError)
    assert done[5:] == [905, 104]
    assert sorted(asked) == [(1, [0, 1, 4]), (2, [2])]
    assert sorted(alone) == [2, 3, 5]
    # Asked for later: a batch of its own.
    assert await topic.last_stable(1) == 101
    assert asked[-1] == (1, [1])
    await topic.close()
