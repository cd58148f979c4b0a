"""How `serve --workers N` divides a machine: N coordinator processes ("workers"), each owning a share of the
group shards, each a broker to the clients.

This is how Kafka spreads group coordinators over brokers, done inside one machine: groups are partitioned into
shards by `coordinator.sharding.shard_of(group_id, offsets.topic.num.partitions)`, and worker w owns the shards p
with p % N == w. Every worker is a broker to the clients: it has its own Kafka listeners (with `--listen HOST:PORT`,
worker w listens on PORT+w; with port 0 on the consecutive ports of a free block; with the `listeners` setting,
each listener's PORT+w the same way) and node id (node.id + w), Metadata from any worker lists all of them on the
listener the client came in on, and FindCoordinator answers the worker that owns the group's shard. A group API
sent to a worker that does not own the group is relayed to the owner (coordinator.cluster.relay). The data plane
stays in worker 0; the others forward data-plane requests to it (coordinator.cluster.forwarding). Both go to the
peer's internal listener with the client's principal (coordinator.cluster.internal). Every worker terminates TLS
and SASL on its own listeners and authorizes with the same ACLs (coordinator.cluster.security_sync).

Light on imports: the supervisor (coordinator.cluster.supervisor) imports this before it starts the workers.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os

from coordinator.brokers import Broker, client_address, local_address
from coordinator.config import Config
from coordinator.sharding import shard_of

log = logging.getLogger(__name__)


def worker_of_shard(shard: int, workers: int) -> int:
    return shard % workers


def owned_shards(index: int, shards: int, workers: int) -> frozenset[int]:
    """The shards worker `index` of `workers` loads and serves."""
    return frozenset(p for p in range(shards) if worker_of_shard(p, workers) == index)


def owner_of(group_id: str, shards: int, workers: int) -> int:
    """The worker that coordinates `group_id`."""
    return worker_of_shard(shard_of(group_id, shards), workers)


def cores() -> int:
    """The cores this process may run on (its CPU affinity, which containers and taskset narrow)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def requested_workers(value: int | str | None, config: Config) -> int:
    """`--workers` (a number or `auto`), else the setting coordinator.workers; 0 means auto."""
    if value is None:
        return int(config["coordinator.workers"])
    if str(value).strip().lower() == "auto":
        return 0
    count = int(value)
    if count < 1:
        raise ValueError(f"--workers must be at least 1 or auto, got {value}")
    return count


def resolve_workers(value: int | str | None, config: Config) -> int:
    """How many workers to run: as requested, or one per core for auto (the default). In front of an upstream
    cluster (coordinator.front) the workers are instances of one coordinator that happen to share a machine
    (coordinator.front.instances divides the shards among them): as many as asked for, with the state in the
    cluster (coordinator.state.topic); auto is one there."""
    requested = requested_workers(value, config)
    if config["upstream.bootstrap.servers"]:
        if requested > 1 and not config["coordinator.state.topic"]:
            raise ValueError(
                "in front of an upstream cluster, several workers keep their state in the cluster: "
                "coordinator.state.topic must not be empty"
            )
        return requested or 1
    return requested or cores()


# -- what a worker is told ----------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class WorkerSpec:
    """Everything a worker process needs from its supervisor (JSON in the environment variable KGC_WORKER_SPEC)."""

    index: int
    count: int
    # Every Kafka listener, the primary one first: (name, host, the bound port of each worker's socket). Without
    # the `listeners` setting, one: ("PLAINTEXT", the --listen host, ports).
    listeners: tuple[tuple[str, str, tuple[int, ...]], ...]
    listener_fds: tuple[int, ...]  # this worker's socket of each listener
    internal_ports: tuple[
        int, ...
    ]  # each worker's internal listener on 127.0.0.1 (coordinator.cluster.internal); none in front of a cluster
    internal_fd: int  # -1: none
    secret: str  # the internal channel's token, the same for every worker of this supervisor
    internal_admin: tuple[str | None, ...]  # "127.0.0.1:PORT" of each worker's internal admin listener
    admin_fd: int | None  # worker 0: the public admin socket; others: their internal one
    admin_host: str | None
    notify_fd: int
    supervisor_pid: int
    # In front of a cluster: the broker ports (upstream node id -> port) of this worker's predecessor, which it
    # told the supervisor on its notify pipe (`port NODE PORT` lines; coordinator.front.dataplane)
    broker_ports: dict[int, int] = dataclasses.field(default_factory=dict)

    @property
    def host(self) -> str:
        """The primary listener's host."""
        return self.listeners[0][1]

    @property
    def kafka_ports(self) -> tuple[int, ...]:
        """Every worker's port of the primary listener."""
        return self.listeners[0][2]

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> WorkerSpec:
        data = json.loads(text)
        data["listeners"] = tuple((name, host, tuple(ports)) for name, host, ports in data["listeners"])
        for name in ("listener_fds", "internal_ports", "internal_admin"):
            data[name] = tuple(data[name])
        data["broker_ports"] = {int(node): int(port) for node, port in data.get("broker_ports", {}).items()}
        return cls(**data)


class Topology:
    """The workers as clients see them, from inside worker `spec.index`."""

    def __init__(
        self,
        spec: WorkerSpec,
        node_id_base: int,
        shards: int,
        advertised: tuple[str, int] | None,
        advertised_listeners: dict[str, tuple[str, int]] | None = None,
    ) -> None:
        """`advertised`: --advertised-listener (for the primary listener unless `advertised_listeners`, the
        advertised.listeners setting by listener name, names it)."""
        self.spec = spec
        self.index = spec.index
        self.count = spec.count
        self.node_id_base = node_id_base
        self.shards = shards
        self.advertised: list[tuple[str, int] | None] = [
            (advertised_listeners or {}).get(name) for name, _host, _ports in spec.listeners
        ]
        if self.advertised[0] is None:
            self.advertised[0] = advertised

    def advertised_for(self, worker: int, listener: int = 0) -> tuple[str, int] | None:
        """Worker `worker`'s advertised address on a listener: the advertised host with port + worker (0: its
        bound port)."""
        advertised = self.advertised[listener]
        if advertised is None:
            return None
        host, port = advertised
        return host, port + worker if port else 0

    def listener_index(self) -> int:
        """The listener the current request came in on (coordinator.brokers.local_address), else the primary."""
        local = local_address.get(None)
        if local is not None:
            for i, (_name, _host, ports) in enumerate(self.spec.listeners):
                if ports[self.index] == local[1]:
                    return i
        return 0

    def broker(self, worker: int) -> Broker:
        """Worker `worker` as the client of the current request should reach it, on the listener it came in on
        (coordinator.brokers.client_address)."""
        listener = self.listener_index()
        _name, host, ports = self.spec.listeners[listener]
        host, port = client_address(host, ports[worker], self.advertised_for(worker, listener))
        return Broker(self.node_id_base + worker, host, port)

    def brokers(self) -> list[Broker]:
        return [self.broker(w) for w in range(self.count)]

    def owner(self, group_id: str) -> int:
        return owner_of(group_id, self.shards, self.count)

    def owner_broker(self, group_id: str) -> Broker:
        return self.broker(self.owner(group_id))

    def owned_shards(self) -> frozenset[int]:
        return owned_shards(self.index, self.shards, self.count)

    def upstream(self) -> tuple[str, int]:
        """Where worker 0's internal listener is."""
        return self.address(0)

    def address(self, worker: int) -> tuple[str, int]:
        """Where worker `worker`'s internal listener is (coordinator.cluster.internal)."""
        return "127.0.0.1", self.spec.internal_ports[worker]

    def peer_admin_urls(self) -> dict[int, str]:
        """The internal admin listeners of the other workers (worker 0 asks them)."""
        return {
            w: f"http://{addr}"
            for w, addr in enumerate(self.spec.internal_admin)
            if addr is not None and w != self.index
        }
