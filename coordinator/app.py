"""The one assembly: a server built from its parts, for one process and for each worker of `serve --workers N`
alike, and run until SIGTERM/SIGINT.

A server is the Kafka listener (coordinator.server.listener) with these parts, in this order (the security part
wraps every other API, so it comes last):

    data plane      the embedded topic log (coordinator.dataplane), or in a worker other than worker 0 a forwarder
                    to worker 0 (coordinator.cluster.forwarding)
    lookup          FindCoordinator (coordinator.server.lookup): this node, or the worker owning the group
    groups          the group coordinator service over the shards this process owns (coordinator.server)
    security        listeners' sessions, SASL, SCRAM, ACLs (coordinator.security); in every worker, with the
                    durable state in worker 0 and replicas in the others (coordinator.cluster.security_sync)

and beside it the admin HTTP listener (coordinator.admin.http). A worker (`placement`) brings its share of the
shards, every worker's address (Metadata lists them all), the sockets its supervisor bound (its Kafka listeners and
its internal listener, where the other workers' Envelopes arrive: coordinator.cluster.internal), and a relay to
the owners of the groups it does not own (coordinator.cluster.relay).
"""

from __future__ import annotations

import asyncio
import faulthandler
import functools
import gc
import logging
import os
import signal
import socket
from typing import Any

from coordinator.admin.http import AdminListener
from coordinator.admin.peers import AdminPeers
from coordinator.brokers import show_host
from coordinator.cluster.topology import Topology, WorkerSpec, worker_of_shard
from coordinator.config import Config, parse_hostport
from coordinator.security import Security
from coordinator.server.group_service import GroupCoordinatorService
from coordinator.server.listener import KafkaListener, Server
from coordinator.server.lookup import CoordinatorLookup
from coordinator.server.metrics import ServerMetrics, ShardCollector
from coordinator.server.shards import Shards
from coordinator.tasks import stacks
from storage import FS

log = logging.getLogger(__name__)


class App:
    """A built server, its admin listener, and the group service (for those who inspect it: tests, tools)."""

    def __init__(self, server: Server, admin: AdminListener | None, groups: GroupCoordinatorService) -> None:
        self.server = server
        self.admin = admin
        self.groups = groups

    async def start(self) -> None:
        await self.server.start()
        if self.admin is not None:
            await self.admin.start()

    async def close(self) -> None:
        await self.server.close()
        if self.admin is not None:
            await self.admin.close()

    def announce(self) -> str:
        """`listening kafka=HOST:PORT admin=HOST:PORT` (admin=off without an admin listener): scripts wait for it."""
        host, port = self.server.bound
        admin = "off"
        if self.admin is not None and self.admin.bound is not None:
            admin = f"{show_host(self.admin.bound[0])}:{self.admin.bound[1]}"
        return f"listening kafka={show_host(host)}:{port} admin={admin}"

    def listeners_line(self) -> str | None:
        """`listeners NAME=HOST:PORT ...` for every listener of the `listeners` setting, or None without it."""
        listeners = [listener for listener in self.server.listeners if listener.spec is not None]
        if not listeners:
            return None
        return "listeners " + " ".join(
            f"{lst.name}={show_host(lst.host)}:{lst.bound_port}" for lst in listeners
        )


def build(
    config: Config,
    listen: tuple[str, int],
    admin_listen: tuple[str, int] | None,
    advertised: tuple[str, int] | None,
    data_dir: str,
    placement: WorkerSpec | None = None,
    fs: FS | None = None,
) -> App:
    """The server for `serve` in one process (`placement` None) or for worker `placement.index` of a supervisor
    (coordinator.cluster.supervisor). `listen`: one process's --listen (a worker serves on the sockets in its
    placement). `advertised`: the --advertised-listener (a worker adds its index to the port). `fs`: where the group and topic logs live (default: the real filesystem; tests pass a double)."""
    from coordinator.cluster.forwarding import API_VERSIONS as FORWARDED_APIS
    from coordinator.cluster.forwarding import ForwardingDataPlane
    from coordinator.cluster.internal import INTERNAL_LISTENER, INTERNAL_PRINCIPAL, InternalChannel
    from coordinator.cluster.relay import PeerRelay
    from coordinator.cluster.security_sync import SecuritySync
    from coordinator.dataplane.embedded import EmbeddedDataPlane
    from coordinator.security.listeners import parse_advertised, parse_listeners

    topology: Topology | None = None
    channel: InternalChannel | None = None
    # In front of a cluster a worker is an instance like any other (coordinator.front.instances divides the shards),
    # on the primary socket its supervisor shares among the workers, with a data directory of its own.
    instance_worker = placement is not None and bool(config["upstream.bootstrap.servers"])
    if instance_worker and placement is not None and placement.index > 0:
        data_dir = os.path.join(data_dir, f"worker-{placement.index}")
        os.makedirs(data_dir, exist_ok=True)
    if placement is not None and not instance_worker:
        named = parse_listeners(config["listeners"], config["listener.security.protocol.map"])
        topology = Topology(
            placement,
            int(config["node.id"]),
            int(config["offsets.topic.num.partitions"]),
            advertised,
            parse_advertised(config["advertised.listeners"], named),
        )
        config.set("node.id", topology.node_id_base + placement.index)
        protocols = {spec.name: spec.protocol for spec in named}

        def listener_of(name: str | None) -> tuple[str, int, str] | None:
            for i, (lname, host, ports) in enumerate(placement.listeners):
                if name is None and i == 0 or lname == name:
                    return host, ports[placement.index], protocols.get(lname, "PLAINTEXT")
            return None

        channel = InternalChannel(placement.secret, listener_of)
    metrics = ServerMetrics()
    # The parts are built before the server they serve: they reach it through these late-bound callables.
    server: Server

    def broker() -> Any:
        return server.broker()

    def abort_connection(connection_id: int) -> None:
        server.abort_connection(connection_id)

    front: Any = None
    dataplane: Any
    if config["upstream.bootstrap.servers"]:
        from coordinator.front.cluster import UpstreamCluster
        from coordinator.front.dataplane import FrontDataPlane

        def add_listener(listener: Any) -> Any:
            return server.add_listener(listener)

        primary: list[KafkaListener] = []  # known once the listeners are built, below
        dataplane = front = FrontDataPlane(
            config,
            UpstreamCluster(config),
            primary=lambda: primary[0],
            add_listener=add_listener,
            abort_connection=abort_connection,
            worker=(placement.index, placement.count) if placement is not None else (0, 1),
            remembered=placement.broker_ports if placement is not None else None,
            on_bound=functools.partial(_tell_port, placement.notify_fd) if placement is not None else None,
        )
    elif topology is None or topology.index == 0:
        dataplane = EmbeddedDataPlane(
            config,
            broker,
            data_dir=data_dir,
            fs=fs,
            brokers=topology.brokers if topology is not None else None,
        )
    else:
        dataplane = ForwardingDataPlane(
            config,
            topology.upstream(),
            brokers=topology.brokers,
            abort_connection=abort_connection,
            channel=channel,
        )
    security = Security(
        config,
        data_dir,
        dataplane,
        metrics.registry,
        replica=topology is not None and topology.index > 0,
        super_users=(INTERNAL_PRINCIPAL,) if topology is not None else (),
        # A forwarder's APIs are authorized by worker 0, which knows the topics (the forwarder's view lags).
        authorized_elsewhere=frozenset(FORWARDED_APIS)
        if topology is not None and topology.index > 0
        else frozenset(),
    )
    if topology is not None and channel is not None:
        security.sync = SecuritySync(config, topology, channel, security.store)
    if front is not None:
        from coordinator.front.security import TopicSecurity, security_topic_name, served_here

        front.served_here = served_here(security.authorizer_enabled, security.listeners)
        if front.served_here and config["coordinator.state.topic"]:
            # its ACLs and SCRAM credentials in a topic of the cluster, the same on every instance and worker
            security.store.topic = TopicSecurity(
                front.cluster, security_topic_name(config["coordinator.state.topic"])
            )
            front.own_topic_sources.append(security.store.topic.topic)

    if placement is None or instance_worker:
        shared = socket.socket(fileno=placement.listener_fds[0]) if placement is not None else None
        listeners = _kafka_listeners(listen, advertised, security, sock=shared)
    else:
        assert topology is not None and channel is not None
        listeners = _worker_listeners(placement, topology, security, channel)
    if front is not None:
        if len(listeners) > 1:
            raise ValueError(
                "in front of an upstream cluster the server has one listener (the `listeners` setting "
                "names more)"
            )
        primary.append(listeners[0])
    server = Server(
        config,
        listeners,
        metrics=metrics,
        sessions=security.session if security.listeners else None,
    )

    log_opener = None
    if front is not None and config["coordinator.state.topic"]:
        from coordinator.front.state import StateTopic

        log_opener = StateTopic(
            front.cluster,
            config["coordinator.state.topic"],
            int(config["offsets.topic.num.partitions"]),
            config["coordinator.state.lease.ms"],
        )
        front.own_topic_sources.append(log_opener)
    shards = Shards(
        config,
        None if log_opener is not None else data_dir,
        topology.owned_shards() if topology is not None else None,
        fs=fs,
        on_append=metrics.log_append_duration.observe,
        on_compaction=metrics.log_compaction_duration.observe,
        log_opener=log_opener,
        # Consumer groups (KIP-848) are assigned from the data plane's topics: the embedded one's, worker 0's as
        # a worker's forwarder follows them, or the upstream cluster's as the front follows them.
        topics=front.consumer_topics if front is not None else dataplane,
        # in front of a cluster, the instances of one state topic divide its shards (coordinator.front.instances)
        assigned_later=log_opener is not None,
    )
    relay, owner_of_shard = None, None
    if topology is not None and topology.count > 1:
        relay = PeerRelay(config, topology.address, abort_connection, channel)
        owner_of_shard = functools.partial(worker_of_shard, workers=topology.count)
    groups = GroupCoordinatorService(shards, relay=relay, owner_of_shard=owner_of_shard, topics=dataplane)
    server.add_part(dataplane)
    if front is not None:
        from coordinator.front.groups import FrontGroups

        front_groups = FrontGroups(front, groups)
        server.add_part(CoordinatorLookup(broker, owner=front_groups.group_broker))
        server.add_part(groups)
        # inside the authorizer: it wraps the group APIs before the security part does
        server.add_part(front_groups)
        from coordinator.front.metrics import UpstreamCollector

        metrics.registry.register(UpstreamCollector(front, front_groups))
        front.groups = front_groups
        if log_opener is not None:
            from coordinator.front.instances import InstanceGroup

            def me() -> tuple[str, str, dict[int, int]]:
                host, ports = front.announced()
                configured = primary[0].port or min(ports.values(), default=0)
                name = config["coordinator.instance.id"] or f"{host}:{configured}"
                if placement is not None:  # the workers share the primary port: one name each
                    name = f"{name}/worker-{placement.index}"
                return name, host, ports

            open_relay = None
            if config["coordinator.instance.relay.listener"]:

                async def open_relay(secret: str) -> tuple[str, int]:
                    """This instance's relay listener (coordinator.cluster.internal): bound now, its address."""
                    host, port = parse_hostport(config["coordinator.instance.relay.listener"], 0)
                    listener = KafkaListener(
                        INTERNAL_LISTENER,
                        host or primary[0].host,
                        port,
                        internal=InternalChannel(secret, lambda name: None),
                    )
                    await server.add_listener(listener)
                    return host or front.announced()[0], listener.bound_port

            instances = front.instances = InstanceGroup(
                config, front.cluster, shards, config["coordinator.state.topic"], me, open_relay
            )
            server.add_part(instances)
            if open_relay is not None:
                # a group another instance owns: its requests relayed there (coordinator.front.instances)
                groups.relay = PeerRelay(
                    config,
                    instances.relay_address,
                    None,
                    channel_of=instances.channel_to,
                    connect_timeout_s=RELAY_CONNECT_TIMEOUT_S,
                )
                groups.owner_of_shard = instances.owner_of_shard
    else:
        server.add_part(
            CoordinatorLookup(broker, owner=topology.owner_broker if topology is not None else None)
        )
        server.add_part(groups)
    metrics.registry.register(ShardCollector(shards))
    server.add_part(security)

    admin = None
    if placement is not None and placement.admin_fd is not None:
        peers = (
            AdminPeers(topology)
            if topology is not None and topology.index == 0 and topology.count > 1
            else None
        )
        admin = AdminListener(
            config,
            server,
            placement.admin_host or "127.0.0.1",
            0,
            groups=groups,
            dataplane=dataplane,
            security=security if topology is None or topology.index == 0 else None,
            peers=peers,
            sock=socket.socket(fileno=placement.admin_fd),
            worker=placement.index,
        )
    elif placement is None and admin_listen is not None:
        admin = AdminListener(
            config, server, *admin_listen, groups=groups, dataplane=dataplane, security=security
        )
    return App(server, admin, groups)


def _tell_port(notify_fd: int, node: int, port: int) -> None:
    """Tell the supervisor a broker listener's port, for the worker that would replace this one."""
    try:
        os.write(notify_fd, f"port {node} {port}\n".encode())
    except OSError:
        pass  # the supervisor is gone; PR_SET_PDEATHSIG ends us


def _kafka_listeners(
    listen: tuple[str, int],
    advertised: tuple[str, int] | None,
    security: Security,
    sock: socket.socket | None = None,
) -> list[KafkaListener]:
    """--listen, or with the `listeners` setting its listeners (the first one is the primary; --advertised-listener
    applies to it when `advertised.listeners` does not name it). `sock`: the primary's, bound by a supervisor."""
    if not security.listeners:
        return [KafkaListener("PLAINTEXT", listen[0], listen[1], advertised=advertised, sock=sock)]
    listeners = []
    for i, spec in enumerate(security.listeners):
        named = security.advertised.get(spec.name)
        listeners.append(
            KafkaListener(
                spec.name,
                spec.host,
                spec.port,
                advertised=named or (advertised if i == 0 else None),
                ssl=security.ssl_context if spec.tls else None,
                spec=spec,
                sock=sock if i == 0 else None,
            )
        )
    return listeners


def _worker_listeners(
    placement: WorkerSpec, topology: Topology, security: Security, channel: Any
) -> list[KafkaListener]:
    """A worker's Kafka listeners on the sockets its supervisor bound (each listener's port + its index), then
    its internal listener (coordinator.cluster.internal)."""
    specs = {spec.name: spec for spec in security.listeners}
    listeners = []
    for i, (name, host, ports) in enumerate(placement.listeners):
        spec = specs.get(name)
        listeners.append(
            KafkaListener(
                name,
                host,
                ports[placement.index],
                advertised=topology.advertised_for(placement.index, i),
                ssl=security.ssl_context if spec is not None and spec.tls else None,
                spec=spec,
                sock=socket.socket(fileno=placement.listener_fds[i]),
            )
        )
    listeners.append(
        KafkaListener(
            "KGC_INTERNAL",
            "127.0.0.1",
            placement.internal_ports[placement.index],
            sock=socket.socket(fileno=placement.internal_fd),
            internal=channel,
        )
    )
    return listeners


async def serve(app: App, notify_fd: int | None = None) -> None:
    """Run until SIGTERM/SIGINT. One process prints its addresses; a worker tells its supervisor on `notify_fd`
    that it serves (the supervisor prints the one announce line)."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    # A crash prints every thread's stack on stderr, and so does `kill -USR1 <pid>` (a server that seems stuck).
    faulthandler.enable()
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    await app.start()
    if notify_fd is None:
        listeners = app.listeners_line()
        if listeners is not None:
            print(listeners, flush=True)  # before the announce line, which scripts wait for
        print(app.announce(), flush=True)
    else:
        try:
            os.write(notify_fd, b"serving\n")
        except OSError:
            pass  # the supervisor is gone; PR_SET_PDEATHSIG ends us
    log.info("%s", app.announce())
    await stop.wait()
    log.info("shutting down")
    # Each step of the close is bounded (coordinator.server.listener); should it still not end, say where it is.
    late_s = app.server.config["shutdown.timeout.ms"] / 1000 + SHUTDOWN_GRACE_S
    watchdog = loop.call_later(late_s, _still_closing, late_s)
    await app.close()
    watchdog.cancel()
    if notify_fd is not None:
        os.close(notify_fd)
    log.info("stopped")


SHUTDOWN_GRACE_S = 5.0
# Another instance that does not take a relay connection by then: the request is answered NOT_COORDINATOR.
RELAY_CONNECT_TIMEOUT_S = 2.0


def _still_closing(after_s: float) -> None:
    log.warning(
        "shutdown: still closing after %.0f s; every task and thread now:\n%s", after_s, stacks(threads=True)
    )


# The cyclic collector's thresholds while serving (Python's are 700, 10, 10). A request in flight is a few
# coroutines, futures and records that live until its answer, so with thousands in flight (pipelined commits
# waiting for their fsync) most young objects survive a young collection: each one walked them and promoted them
# into older generations that were walked again, and the full collections walked every object made since the
# load. Measured at 1,000 connections x 8 pipelined commits: a third of a worker's CPU in the collector
# (`perf`), 16 full collections of ~110 ms each in a 15 s run; with these, one, and 65% more commits per
# second at the same CPU. Heartbeats did not change. Cyclic garbage waits longer for its collection, but there is
# little of it: ~2,200 objects found by all the collections of that run together (gc.callbacks). A third
# threshold of 10 (full collections ten times as often) measured 15-20% fewer commits per second.
# A young collection walks the young objects still alive, which under that load are the requests in flight
# whatever the first threshold: 50,000 still left a fifth of a worker's CPU in the collector (`perf`, after the
# writes of a loop iteration shared one append). 500,000 with a second threshold of 2 keeps the middle and full
# collections at the same count of allocations as (50,000, 20, 100) and took 20-30% off a commit's CPU at
# 1,000 connections (bench/README.md); heartbeats and the resident memory did not change.
GC_THRESHOLDS = (500_000, 2, 100)


def run(app: App, notify_fd: int | None = None) -> None:
    import uvloop

    gc.set_threshold(*GC_THRESHOLDS)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(serve(app, notify_fd))
