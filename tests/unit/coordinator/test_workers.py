"""Coordinator workers (coordinator.cluster: topology, forwarding, and admin.peers): the owner rule, the worker layout as clients see it,
the merged metrics exposition, and the relay's request/response codec."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from coordinator.admin.peers import merge_expositions
from coordinator.brokers import Broker, local_address
from coordinator.cluster import topology as workers
from coordinator.cluster.topology import (
    Topology,
    WorkerSpec,
    owned_shards,
    owner_of,
    requested_workers,
    resolve_workers,
)
from coordinator.config import Config
from coordinator.sharding import shard_of
from protocol.api import (
    ApiTable,
    RequestContext,
    decode_response,
    encode_request,
    request_class,
    response_class,
)
from protocol.build import build


def spec(
    index: int = 0, count: int = 3, host: str = "127.0.0.1", ports: tuple[int, ...] = (9092, 9093, 9094)
) -> WorkerSpec:
    return WorkerSpec(
        index=index,
        count=count,
        listeners=(("PLAINTEXT", host, ports[:count]),),
        listener_fds=(3,),
        internal_ports=(7000, 7001, 7002)[:count],
        internal_fd=6,
        secret="s3cret",
        internal_admin=(None, "127.0.0.1:4001", "127.0.0.1:4002")[:count],
        admin_fd=4,
        admin_host="127.0.0.1",
        notify_fd=5,
        supervisor_pid=1,
    )


# -- the owner rule -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shards,count", [(50, 1), (50, 2), (50, 3), (7, 4), (3, 8)])
def test_the_workers_own_every_shard_exactly_once(shards, count):
    owned = [owned_shards(w, shards, count) for w in range(count)]
    assert sum(len(o) for o in owned) == shards
    assert frozenset().union(*owned) == frozenset(range(shards))
    for w, shares in enumerate(owned):
        assert all(p % count == w for p in shares)


def test_more_workers_than_shards_leaves_some_without_shards():
    assert [len(owned_shards(w, 3, 5)) for w in range(5)] == [1, 1, 1, 0, 0]


@given(st.text(min_size=1, max_size=40), st.integers(1, 64), st.integers(1, 16))
def test_a_group_belongs_to_the_worker_owning_its_shard(group_id, shards, count):
    owner = owner_of(group_id, shards, count)
    assert 0 <= owner < count
    assert shard_of(group_id, shards) in owned_shards(owner, shards, count)


def test_owner_follows_kafkas_partition_rule():
    # Java: "foo".hashCode() == 101574; 101574 % 50 == 24, and shard 24 is worker 0 of 2, worker 0 of 3.
    assert shard_of("foo", 50) == 24
    assert owner_of("foo", 50, 2) == 0
    assert owner_of("foo", 50, 5) == 4


def test_worker_count_from_flag_setting_and_auto(monkeypatch):
    monkeypatch.setattr(workers.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3, 4, 5})
    config = Config()
    assert resolve_workers(None, config) == 6  # the default: one per core
    assert requested_workers(None, config) == 0
    assert resolve_workers("3", config) == 3
    assert resolve_workers("auto", config) == 6
    assert resolve_workers(None, Config.load(environ={"KGC_COORDINATOR_WORKERS": "auto"})) == 6
    assert resolve_workers(None, Config.load(environ={}, overrides=["coordinator.workers=4"])) == 4
    assert resolve_workers(None, Config.load(environ={}, overrides=["coordinator.workers=auto"])) == 6
    with pytest.raises(ValueError):
        resolve_workers("0", config)


# -- the layout as clients see it -------------------------------------------------------------------------------


def test_worker_spec_round_trips_through_json():
    original = spec(index=2)
    assert WorkerSpec.from_json(original.to_json()) == original


def test_every_worker_is_a_broker_with_its_own_node_id_and_port():
    topology = Topology(spec(index=1), node_id_base=10, shards=50, advertised=None)
    assert topology.brokers() == [
        Broker(10, "127.0.0.1", 9092),
        Broker(11, "127.0.0.1", 9093),
        Broker(12, "127.0.0.1", 9094),
    ]
    assert topology.owner_broker("foo") == topology.broker(owner_of("foo", 50, 3))
    assert topology.owned_shards() == owned_shards(1, 50, 3)
    assert topology.upstream() == ("127.0.0.1", 7000)
    assert topology.address(2) == ("127.0.0.1", 7002)
    assert topology.peer_admin_urls() == {2: "http://127.0.0.1:4002"}


def test_advertised_ports_follow_the_worker_index():
    topology = Topology(spec(), node_id_base=1, shards=50, advertised=("kafka.example", 19092))
    assert [(b.host, b.port) for b in topology.brokers()] == [
        ("kafka.example", 19092),
        ("kafka.example", 19093),
        ("kafka.example", 19094),
    ]
    # An advertised port of 0 means each worker's bound port.
    topology = Topology(spec(), node_id_base=1, shards=50, advertised=("kafka.example", 0))
    assert [b.port for b in topology.brokers()] == [9092, 9093, 9094]


def test_a_wildcard_listener_advertises_the_address_the_client_reached():
    topology = Topology(spec(host="0.0.0.0"), node_id_base=1, shards=50, advertised=None)
    token = local_address.set(("10.1.2.3", 9093))
    try:
        assert [(b.host, b.port) for b in topology.brokers()] == [
            ("10.1.2.3", 9092),
            ("10.1.2.3", 9093),
            ("10.1.2.3", 9094),
        ]
    finally:
        local_address.reset(token)


# -- metrics of several workers as one exposition -----------------------------------------------------------------


def test_merged_exposition_labels_every_sample_with_its_worker():
    worker0 = (
        "# HELP kafka_consumergroup_members Members of the group.\n"
        "# TYPE kafka_consumergroup_members gauge\n"
        'kafka_consumergroup_members{consumergroup="a"} 2.0\n'
        "# HELP requests_total Requests.\n"
        "# TYPE requests_total counter\n"
        'requests_total{api="Heartbeat"} 5.0\n'
    )
    worker1 = (
        "# HELP kafka_consumergroup_members Members of the group.\n"
        "# TYPE kafka_consumergroup_members gauge\n"
        'kafka_consumergroup_members{consumergroup="b"} 3.0\n'
        "# HELP requests_total Requests.\n"
        "# TYPE requests_total counter\n"
        'requests_total{api="Heartbeat"} 7.0\n'
    )
    text = merge_expositions({0: worker0, 1: worker1}).decode()
    assert text.count("# TYPE kafka_consumergroup_members gauge") == 1
    assert text.count("# TYPE requests_total counter") == 1
    families = {f.name: f for f in text_string_to_metric_families(text)}
    members = {
        (s.labels["consumergroup"], s.labels["worker"]): s.value
        for s in families["kafka_consumergroup_members"].samples
    }
    assert members == {("a", "0"): 2.0, ("b", "1"): 3.0}
    requests = {s.labels["worker"]: s.value for s in families["requests"].samples}
    assert requests == {"0": 5.0, "1": 7.0}


# -- the relay's codec ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("api_key,version", [(3, 0), (3, 8), (3, 12), (0, 3), (0, 9), (2, 7), (1, 12)])
def test_a_relayed_request_decodes_to_the_same_entity(api_key, version):
    from coordinator.dataplane.embedded import EmbeddedDataPlane

    table = ApiTable()
    EmbeddedDataPlane(Config(), lambda: Broker(1, "h", 1)).register(table)
    body = build(request_class(api_key, version), {"topics": [], "acks": -1, "timeout": 1000})
    frame = encode_request(body, 77, "client-x")
    decoded = table.decode(frame[4:])
    assert decoded.context.correlation_id == 77
    assert decoded.context.client_id == "client-x"
    assert decoded.body == body


def metadata_response(version: int) -> object:
    """A Metadata answer naming one broker and no topics."""
    return build(
        response_class(3, version),
        {
            "brokers": [{"node_id": 1, "host": "h", "port": 9092, "rack": None}],
            "cluster_id": "c",
            "controller_id": 1,
            "topics": [],
        },
    )


@pytest.mark.parametrize("version", [0, 9, 12])
def test_a_relayed_response_decodes_after_its_correlation_id(version):
    response = metadata_response(version)
    payload = ApiTable().encode_response(RequestContext(3, version, 5, "c"), response)
    assert decode_response(3, version, payload[4:]) == response


def test_other_workers_advertise_the_same_data_plane_and_security_apis_as_worker_0():
    from coordinator.cluster.forwarding import ForwardingDataPlane
    from coordinator.dataplane.embedded import EmbeddedDataPlane
    from coordinator.security import Security

    config = Config()
    worker0 = ApiTable()
    EmbeddedDataPlane(config, lambda: Broker(1, "h", 1)).register(worker0)
    Security(config, None).register(worker0)
    relay = ApiTable()
    ForwardingDataPlane(config, ("127.0.0.1", 1), brokers=list, abort_connection=print).register(relay)
    Security(config, None, replica=True).register(relay)
    ranges = [(s.api_key, s.min_version, s.max_version) for s in worker0.specs()]
    assert [(s.api_key, s.min_version, s.max_version) for s in relay.specs()] == ranges


def test_each_listener_lists_every_worker_on_that_listener():
    """With the `listeners` setting every worker has each listener at its port + index; Metadata answers with the
    listener the client came in on, advertised.listeners applying per listener."""
    two = WorkerSpec.from_json(
        dataclasses.replace(
            spec(index=1, count=2),
            listeners=(("SASL_SSL", "127.0.0.1", (9093, 9094)), ("PLAINTEXT", "0.0.0.0", (9192, 9193))),
            listener_fds=(3, 4),
        ).to_json()
    )
    topology = Topology(
        two, node_id_base=1, shards=50, advertised=None, advertised_listeners={"SASL_SSL": ("sec.example", 0)}
    )
    assert [(b.node_id, b.host, b.port) for b in topology.brokers()] == [
        (1, "sec.example", 9093),
        (2, "sec.example", 9094),
    ]
    token = local_address.set(("10.0.0.5", 9193))  # this worker's PLAINTEXT socket
    try:
        assert [(b.host, b.port) for b in topology.brokers()] == [("10.0.0.5", 9192), ("10.0.0.5", 9193)]
    finally:
        local_address.reset(token)


def test_auto_is_one_worker_per_core_whatever_the_security_settings(monkeypatch):
    monkeypatch.setattr(workers.os, "sched_getaffinity", lambda pid: {0, 1})
    secured = Config.load(environ={}, overrides=["listeners=SASL_PLAINTEXT://127.0.0.1:0"])
    assert resolve_workers(None, secured) == 2
    assert resolve_workers("auto", secured) == 2
    assert resolve_workers("1", secured) == 1
    assert resolve_workers(None, Config()) == 2


def test_metadata_that_creates_nothing_goes_on_the_shared_upstream_until_a_client_has_its_own():
    import asyncio

    from coordinator.cluster.forwarding import SHARED_CONNECTION, ForwardingDataPlane
    from protocol.api_keys import ApiKey

    def payload(version: int) -> bytes:  # (after the correlation id, as the upstream hands it over)
        return ApiTable().encode_response(RequestContext(3, version, 5, "c"), metadata_response(version))[4:]

    sent: list[tuple[int, int]] = []

    class Recorder:
        def __init__(self, key: int) -> None:
            self.key = key

        def send(self, api_key, version, client_id, request, *, expect_answer, origin):
            sent.append((self.key, api_key))
            if api_key != ApiKey.METADATA:
                return None  # (as for an answer that does not come: this test looks at the routing only)
            future = asyncio.get_running_loop().create_future()
            future.set_result(payload(version))
            return future

    plane = ForwardingDataPlane(Config(), ("127.0.0.1", 1), brokers=list, abort_connection=print)
    plane._upstream = lambda key: plane._upstreams.setdefault(key, Recorder(key))  # type: ignore[method-assign]
    forward = plane._handler(ApiKey.METADATA)
    list_offsets = plane._handler(ApiKey.LIST_OFFSETS)

    def metadata(version: int, names: list[str] | None, create: bool) -> object:
        topics = None if names is None else [{"name": n, "topic_id": None} for n in names]
        return build(request_class(3, version), {"topics": topics, "allow_auto_topic_creation": create})

    def ctx(version: int, connection: int) -> RequestContext:
        return RequestContext(3, version, 1, "c", connection_id=connection)

    async def scenario() -> None:
        await forward(ctx(12, 1), metadata(12, ["t"], False))  # creates nothing: shared
        await forward(ctx(12, 2), metadata(12, None, True))  # every topic: creates nothing, shared
        await forward(ctx(12, 3), metadata(12, ["t"], True))  # may create "t": its own upstream
        await forward(ctx(3, 4), metadata(3, ["t"], False))  # v0-v3 create what they name: its own
        await list_offsets(RequestContext(2, 7, 1, "c", connection_id=1), None)  # client 1 now has its own...
        await forward(ctx(12, 1), metadata(12, ["t"], False))  # ...and its Metadata follows it there

    asyncio.run(scenario())
    metadata_key = int(ApiKey.METADATA)
    assert sent == [
        (SHARED_CONNECTION, metadata_key),
        (SHARED_CONNECTION, metadata_key),
        (3, metadata_key),
        (4, metadata_key),
        (1, int(ApiKey.LIST_OFFSETS)),
        (1, metadata_key),
    ]


# -- in front of a cluster: the workers are instances -------------------------------------------------------------


def test_in_front_of_a_cluster_the_workers_asked_for_are_instances_and_auto_is_one(monkeypatch):
    monkeypatch.setattr(workers.os, "sched_getaffinity", lambda pid: {0, 1})
    front = ["upstream.bootstrap.servers=127.0.0.1:9092"]
    assert resolve_workers(None, Config.load(environ={}, overrides=front)) == 1
    assert resolve_workers("auto", Config.load(environ={}, overrides=front)) == 1
    assert resolve_workers("2", Config.load(environ={}, overrides=front)) == 2
    # several instances share their state only through the cluster
    local = Config.load(environ={}, overrides=[*front, "coordinator.state.topic="])
    assert resolve_workers("1", local) == 1
    with pytest.raises(ValueError, match="coordinator.state.topic"):
        resolve_workers("2", local)


def test_workers_in_front_of_a_cluster_share_the_bootstrap_socket_and_interleave_their_broker_ports():
    from coordinator.cluster.supervisor import Supervisor
    from coordinator.front.dataplane import FrontDataPlane
    from coordinator.server.listener import KafkaListener

    supervisor = Supervisor(3, [], ("127.0.0.1", 0), ("127.0.0.1", 0), 1.0, shared=True)
    supervisor.bind()
    try:
        (sockets,) = supervisor.listener_sockets
        assert len({id(s) for s in sockets}) == 1  # every worker accepts on the one socket
        specs = [supervisor.spec(w, notify_fd=99) for w in range(3)]
        assert {s.listener_fds for s in specs} == {(sockets[0].fileno(),)}
        assert all(s.internal_fd == -1 and s.internal_ports == () for s in specs)
        admin_ports = [s.getsockname()[1] for s in supervisor.admin_sockets if s is not None]
        assert admin_ports == list(range(admin_ports[0], admin_ports[0] + 3))  # worker w: the admin port + w
        assert all(s.admin_host == "127.0.0.1" and s.internal_admin == (None, None, None) for s in specs)
    finally:
        for sock in [*supervisor.listener_sockets[0], *supervisor.admin_sockets]:
            if sock is not None:
                sock.close()

    primary = KafkaListener("PLAINTEXT", "127.0.0.1", 9092)
    ports = {
        (node, w): FrontDataPlane(Config(), None, lambda: primary, None, None, worker=(w, 2))._port_for(node)
        for node in (0, 1, 2)
        for w in (0, 1)
    }
    assert sorted(ports.values()) == list(range(9093, 9099))  # one port per broker and worker, none shared
    assert ports[(0, 0)] == 9093 and ports[(0, 1)] == 9094 and ports[(2, 1)] == 9098
    one = FrontDataPlane(Config(), None, lambda: primary, None, None)
    assert [one._port_for(node) for node in (0, 1, 2)] == [9093, 9094, 9095]  # one worker: as before


@pytest.mark.parametrize(
    "settings",
    [
        ["coordinator.state.topic="],  # the state on the local disk
        # one listener, whose socket the supervisor shares (SASL and an authorizer are fine: their state is in the
        # security topic, coordinator.front.security)
        ["listeners=PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0"],
    ],
)
def test_workers_in_front_of_a_cluster_refuse_what_they_would_not_share(settings, tmp_path, capsys):
    from coordinator.cli import main

    overrides = [f"--set={s}" for s in ["upstream.bootstrap.servers=127.0.0.1:9", *settings]]
    code = main(["serve", "--workers", "2", "--data-dir", str(tmp_path), "--admin-listen", "off", *overrides])
    assert code == 2
    assert "several workers" in capsys.readouterr().err


def test_the_supervisor_hands_a_workers_broker_ports_to_the_worker_that_replaces_it():
    from coordinator.cluster.supervisor import Supervisor, _Child

    child = _Child(1)
    Supervisor._told(child, b"port 1 4100")  # a line may arrive in pieces
    assert child.broker_ports == {} and not child.ready
    Supervisor._told(child, b"1\nport 3 4103\nport x 1\nserv")
    assert child.broker_ports == {1: 41001, 3: 4103} and not child.ready
    Supervisor._told(child, b"ing\n")
    assert child.ready

    supervisor = Supervisor(2, [], ("127.0.0.1", 0), None, 1.0, shared=True)
    supervisor.children[1] = child
    supervisor.admin_sockets = [None, None]
    supervisor.listener_sockets = [[_Fake(), _Fake()]]  # the shared one, as bind() leaves it
    told = supervisor.spec(1, notify_fd=9)
    assert WorkerSpec.from_json(told.to_json()).broker_ports == {1: 41001, 3: 4103}
    assert supervisor.spec(0, notify_fd=9).broker_ports == {}


class _Fake:
    def fileno(self) -> int:
        return 7

    def getsockname(self) -> tuple[str, int]:
        return "127.0.0.1", 9092


def test_a_restarted_worker_listens_on_its_predecessors_free_broker_ports_else_new_ones():
    import asyncio
    import socket

    from coordinator.front.dataplane import FrontDataPlane
    from coordinator.server.listener import KafkaListener

    async def scenario():
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            free = probe.getsockname()[1]
        taken = socket.create_server(("127.0.0.1", 0))
        primary = KafkaListener("PLAINTEXT", "127.0.0.1", 0)
        added, told = [], []

        async def add(listener):
            listener.sock = listener.sock or socket.create_server((listener.host, listener.port))
            listener.bound_port = listener.sock.getsockname()[1]
            added.append(listener)

        plane = FrontDataPlane(
            Config(),
            None,
            lambda: primary,
            add,
            None,
            worker=(1, 2),
            remembered={1: free, 2: taken.getsockname()[1]},
            on_bound=lambda node, port: told.append((node, port)),
        )
        try:
            one, two, three = [await plane._ensure_listener(node) for node in (1, 2, 3)]
            assert one.bound_port == free  # its predecessor's
            assert two.bound_port not in (0, taken.getsockname()[1])  # taken meanwhile: a new free one
            assert three.bound_port != 0  # none remembered
            assert told == [(1, free), (2, two.bound_port), (3, three.bound_port)]
        finally:
            taken.close()
            for listener in added:
                listener.sock.close()

    asyncio.run(scenario())
