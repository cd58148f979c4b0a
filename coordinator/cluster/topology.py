"""How `serve --workers N` divides a machine: N coordinator processes ("workers"), each owning a share of the
group shards, each a broker to the clients.

This is how Kafka spreads group coordinators over brokers, done inside one machine: groups are partitioned into
shards by `coordinator.sharding.shard_of(group_id, offsets.topic.num.partitions)`, and worker w owns the shards p
with p % N == w. Every worker is a broker to the clients: it has its own Kafka listener (with `--listen HOST:PORT`,
worker w listens on PORT+w; with port 0 on the consecutive ports of a free block) and node id (node.id + w),
Metadata from any worker lists all of them, and FindCoordinator answers the worker that owns the group's shard. A
group API sent to a worker that does not own the group is relayed to the owner (coordinator.cluster.relay). The
data plane stays in worker 0; the others forward data-plane requests to it (coordinator.cluster.forwarding).

Light on imports: the supervisor (coordinator.cluster.supervisor) imports this before it starts the workers.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os

from coordinator.brokers import WILDCARDS, Broker, client_address
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


def unsupported_with_workers(config: Config) -> str | None:
    """Why these settings cannot run with several workers yet, or None. Authentication sessions live on a
    connection and the authorizer would have to wrap every worker's APIs with one shared ACL state."""
    names = [
        name
        for name in ("listeners", "authorizer.class.name", "scram.bootstrap.users")
        if name in dict(config.items()) and config[name]
    ]
    if names:
        return f"{', '.join(names)}: not supported with more than one worker yet"
    return None


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
    """How many workers to run: as requested, or one per core for auto (the default). Settings that cannot run
    with several workers (see unsupported_with_workers) make auto one, and a number above one a ValueError."""
    requested = requested_workers(value, config)
    count = requested or cores()
    why = unsupported_with_workers(config) if count > 1 else None
    if why is None:
        return count
    if requested:
        raise ValueError(f"--workers {count}: {why}")
    log.info("one worker instead of one per core: %s", why)
    return 1


# -- what a worker is told ----------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class WorkerSpec:
    """Everything a worker process needs from its supervisor (JSON in the environment variable KGC_WORKER_SPEC)."""

    index: int
    count: int
    host: str  # the Kafka listen host (the same for every worker)
    kafka_ports: tuple[int, ...]  # bound port of every worker's Kafka listener
    internal_admin: tuple[str | None, ...]  # "127.0.0.1:PORT" of each worker's internal admin listener
    kafka_fd: int
    admin_fd: int | None  # worker 0: the public admin socket; others: their internal one
    admin_host: str | None
    notify_fd: int
    supervisor_pid: int

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> WorkerSpec:
        data = json.loads(text)
        data["kafka_ports"] = tuple(data["kafka_ports"])
        data["internal_admin"] = tuple(data["internal_admin"])
        return cls(**data)


class Topology:
    """The workers as clients see them, from inside worker `spec.index`."""

    def __init__(
        self, spec: WorkerSpec, node_id_base: int, shards: int, advertised: tuple[str, int] | None
    ) -> None:
        self.spec = spec
        self.index = spec.index
        self.count = spec.count
        self.node_id_base = node_id_base
        self.shards = shards
        self.advertised = advertised

    def advertised_for(self, worker: int) -> tuple[str, int] | None:
        """Worker `worker`'s advertised address: the advertised host with port + worker (0: its bound port)."""
        if self.advertised is None:
            return None
        host, port = self.advertised
        return host, port + worker if port else 0

    def broker(self, worker: int) -> Broker:
        """Worker `worker` as a client should reach it (coordinator.brokers.client_address)."""
        host, port = client_address(
            self.spec.host, self.spec.kafka_ports[worker], self.advertised_for(worker)
        )
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
        """Where worker 0's Kafka listener is reachable from this machine."""
        return self.address(0)

    def address(self, worker: int) -> tuple[str, int]:
        """Where worker `worker`'s Kafka listener is reachable from this machine."""
        host = self.spec.host
        if host in WILDCARDS:
            host = "::1" if host == "::" else "127.0.0.1"
        return host, self.spec.kafka_ports[worker]

    def peer_admin_urls(self) -> dict[int, str]:
        """The internal admin listeners of the other workers (worker 0 asks them)."""
        return {
            w: f"http://{addr}"
            for w, addr in enumerate(self.spec.internal_admin)
            if addr is not None and w != self.index
        }
