"""Settings: Kafka's broker config names and defaults wherever a Kafka setting exists.

Sources, lowest first: the defaults below, a Java-style properties file (`--config FILE`), environment variables
(`KGC_` + the name upper-cased with dots as underscores: `KGC_GROUP_INITIAL_REBALANCE_DELAY_MS=0`), and
`--set NAME=VALUE`. Unknown names are rejected so a typo does not pass silently.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

ENV_PREFIX = "KGC_"
UPSTREAM_PREFIX = "upstream."


def _bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise ValueError(f"not a boolean: {text!r}")


def _regex(text: str) -> str:
    try:
        re.compile(text)
    except re.error as exc:
        raise ValueError(f"not a regular expression: {text!r} ({exc})") from None
    return text


def parse_hostport(text: str, default_port: int) -> tuple[str, int]:
    """`HOST:PORT`, `[v6]:PORT` or `HOST` (the default port) as (host, port)."""
    host, sep, port = text.rpartition(":")
    if not sep:
        return text, default_port
    host = host.strip("[]")
    return host, int(port)


def _workers(text: str) -> int:
    if text.strip().lower() == "auto":
        return 0
    return int(text)


def _list(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def _count_overrides(text: str) -> tuple[tuple[str, int], ...]:
    """Kafka's `max.connections.per.ip.overrides`: `host:count,ip:count` (the count after the last colon)."""
    pairs = []
    for part in _list(text):
        host, sep, count = part.rpartition(":")
        if not sep or not host.strip():
            raise ValueError(f"expected HOST:COUNT, got {part!r}")
        value = int(count)
        if value < 0:
            raise ValueError(f"negative connection count in {part!r}")
        pairs.append((host.strip().strip("[]"), value))
    return tuple(pairs)


@dataclasses.dataclass(frozen=True)
class Setting:
    name: str
    default: Any
    parse: Callable[[str], Any]
    doc: str
    unit: str = ""
    kafka: bool = True  # the name is Apache Kafka's own setting
    minimum: int | None = None


SETTINGS: tuple[Setting, ...] = (
    # -- server ------------------------------------------------------------------------------------
    Setting("node.id", 1, int, "The broker id this server announces in Metadata and FindCoordinator."),
    Setting("cluster.id", "kgc-standalone-cluster", str, "The cluster id announced in Metadata."),
    Setting(
        "socket.request.max.bytes", 104857600, int, "Largest request frame accepted.", "bytes", minimum=1
    ),
    Setting(
        "queued.max.requests.per.connection",
        100,
        int,
        "Requests in flight on one connection before reading from it pauses (backpressure).",
        kafka=False,
        minimum=1,
    ),
    Setting(
        "queued.max.request.bytes",
        -1,
        int,
        "Bytes of requests read but not yet handled, across all connections, before the server stops reading "
        "requests until handlers finish; -1: no bound (memory is then bounded only by connections times "
        "socket.request.max.bytes).",
        "bytes",
        minimum=-1,
    ),
    Setting(
        "connections.max.idle.ms",
        600000,
        int,
        "Close a connection that has had no complete request and no answer for this long and has nothing "
        "in flight (a peer trickling a partial request counts as idle); -1: never.",
        "ms",
        minimum=-1,
    ),
    Setting(
        "max.connections",
        2147483647,
        int,
        "Connections the listener holds at once; as Kafka, a connection beyond it waits, unanswered, until one "
        "closes (first come, first served), and is closed only when as many wait as a listen backlog holds.",
        minimum=0,
    ),
    Setting(
        "max.connections.per.ip",
        2147483647,
        int,
        "Connections from one IP address at once; a connection beyond it is closed at accept.",
        minimum=0,
    ),
    Setting(
        "max.connections.per.ip.overrides",
        (),
        _count_overrides,
        "Per-IP or per-hostname exceptions to max.connections.per.ip: `host:count,ip:count`.",
    ),
    Setting(
        "shutdown.timeout.ms",
        10000,
        int,
        "How long a graceful shutdown waits for in-flight requests; then it drops what is left, and each "
        "remaining step (closing the listeners, the logs, the parts) gets at least 1 s more.",
        "ms",
        kafka=False,
        minimum=0,
    ),
    Setting(
        "coordinator.workers",
        0,
        _workers,
        "Worker processes, each owning a share of the group shards behind its own listeners (each listener's "
        "port + worker index) and node id (node.id + index); 0 or `auto`: one per core. In front of a "
        "cluster (upstream.bootstrap.servers) the workers are instances sharing the --listen socket and "
        "dividing the shards through the cluster; `auto` is one there. `serve --workers` overrides it.",
        kafka=False,
        minimum=0,
    ),
    # -- security (coordinator.security) -----------------------------------------------------------
    Setting(
        "listeners",
        (),
        _list,
        "Kafka listeners, `NAME://HOST:PORT,...` (names mapped by listener.security.protocol.map; port 0 picks "
        "a free port; with several workers, worker w listens on PORT+w). Empty: the one PLAINTEXT listener of "
        "--listen. The first is announced as kafka=.",
    ),
    Setting(
        "advertised.listeners",
        (),
        _list,
        "`NAME://HOST:PORT,...`: the address Metadata and FindCoordinator give clients that came in on listener "
        "NAME (default: the address they reached). Port 0: the bound port. With several workers, worker w "
        "advertises PORT+w.",
    ),
    Setting(
        "listener.security.protocol.map",
        ("PLAINTEXT:PLAINTEXT", "SSL:SSL", "SASL_PLAINTEXT:SASL_PLAINTEXT", "SASL_SSL:SASL_SSL"),
        _list,
        "Listener name to security protocol (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL): `NAME:PROTOCOL,...`.",
    ),
    Setting(
        "sasl.enabled.mechanisms",
        ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"),
        _list,
        "SASL mechanisms offered on SASL listeners (Kafka's default, GSSAPI, is not implemented). PLAIN "
        "passwords are checked against the user's SCRAM credentials.",
    ),
    Setting("ssl.keystore.type", "PEM", str, "Only PEM is supported."),
    Setting(
        "ssl.keystore.location", "", str, "PEM file with the server's private key and certificate chain."
    ),
    Setting(
        "ssl.keystore.certificate.chain",
        "",
        str,
        "The server's certificate chain as PEM text (instead of ssl.keystore.location).",
    ),
    Setting(
        "ssl.keystore.key",
        "",
        str,
        "The server's private key as PEM text (with ssl.keystore.certificate.chain).",
    ),
    Setting("ssl.key.password", "", str, "Password of an encrypted private key."),
    Setting("ssl.truststore.type", "PEM", str, "Only PEM is supported."),
    Setting(
        "ssl.truststore.location",
        "",
        str,
        "PEM file of the CA certificates that client certificates are checked against.",
    ),
    Setting(
        "ssl.truststore.certificates",
        "",
        str,
        "CA certificates as PEM text (instead of ssl.truststore.location).",
    ),
    Setting(
        "ssl.client.auth",
        "none",
        str,
        "Client certificates on SSL listeners: none, requested or required. "
        "A verified certificate makes the principal `User:` + its subject DN (RFC 2253, as Kafka).",
    ),
    Setting(
        "authorizer.class.name",
        "",
        str,
        "Any non-empty value (e.g. org.apache.kafka.metadata.authorizer."
        "StandardAuthorizer) turns on ACL authorization with Kafka's rules.",
    ),
    Setting(
        "super.users",
        "",
        str,
        "Principals allowed everything, separated by semicolons: `User:admin;User:ops`.",
    ),
    Setting(
        "allow.everyone.if.no.acl.found",
        False,
        _bool,
        "Allow an operation on a resource that no ACL matches at all.",
    ),
    Setting(
        "scram.bootstrap.users",
        (),
        _list,
        "`NAME:PASSWORD,...`: SCRAM-SHA-256 and -512 credentials created at start for users that have none "
        "(like `kafka-storage format --add-scram`); only salted hashes are stored.",
        kafka=False,
    ),
    Setting(
        "admin.auth.token",
        "",
        str,
        "Bearer token the admin HTTP API's POST/PUT/DELETE require once security is configured (a "
        "non-PLAINTEXT listener or an authorizer); empty: those endpoints are refused then.",
        kafka=False,
    ),
    Setting(
        "admin.ssl.enabled",
        False,
        _bool,
        "Serve the admin HTTP API over TLS with the ssl.* keystore; a client certificate verified against the "
        "truststore may then stand in for admin.auth.token.",
        kafka=False,
    ),
    # -- observability (admin listener) ------------------------------------------------------------
    Setting(
        "metrics.groups.include",
        "",
        _regex,
        "Export per-group series only for groups whose whole id matches this regex (empty: all).",
        kafka=False,
    ),
    Setting(
        "metrics.groups.exclude",
        "",
        _regex,
        "Export no series for groups whose whole id matches this regex (empty: none excluded).",
        kafka=False,
    ),
    Setting(
        "metrics.topics.include",
        "",
        _regex,
        "Export per-topic and per-partition series only for topics matching this regex (empty: all).",
        kafka=False,
    ),
    Setting(
        "metrics.topics.exclude",
        "",
        _regex,
        "Export no series for topics whose whole name matches this regex (empty: none excluded).",
        kafka=False,
    ),
    Setting(
        "metrics.partition.series.enable",
        True,
        _bool,
        "Export per-partition series (offsets, lag, lag seconds); off keeps per-topic and per-group sums.",
        kafka=False,
    ),
    Setting(
        "metrics.lag.sample.interval.ms",
        5000,
        int,
        "How often the log-end offsets of consumed partitions are sampled for the lag-in-seconds estimate.",
        "ms",
        kafka=False,
        minimum=100,
    ),
    Setting(
        "metrics.lag.history.samples",
        120,
        int,
        "Samples of (log-end offset, time) kept per partition (flat stretches take two).",
        kafka=False,
        minimum=2,
    ),
    Setting(
        "admin.rebalance.timeline.size",
        25,
        int,
        "Rebalances kept per group for the /v1 timeline.",
        kafka=False,
        minimum=1,
    ),
    # -- data plane (standalone) -------------------------------------------------------------------
    Setting("auto.create.topics.enable", True, _bool, "Create a topic on first Metadata request for it."),
    Setting("num.partitions", 1, int, "Partitions of an auto-created topic.", minimum=1),
    Setting("default.replication.factor", 1, int, "Replication factor reported for topics.", minimum=1),
    Setting(
        "message.max.bytes", 1048588, int, "Largest record batch accepted by Produce.", "bytes", minimum=1
    ),
    # -- group coordinator ---------------------------------------------------------------------------
    Setting(
        "group.min.session.timeout.ms", 6000, int, "Smallest session timeout a member may ask for.", "ms"
    ),
    Setting(
        "group.max.session.timeout.ms", 1800000, int, "Largest session timeout a member may ask for.", "ms"
    ),
    Setting(
        "group.initial.rebalance.delay.ms",
        3000,
        int,
        "Delay before the first rebalance of an empty group completes (KIP-134).",
        "ms",
        minimum=0,
    ),
    Setting(
        "group.max.size",
        2147483647,
        int,
        "Largest number of members in a classic group (KIP-389).",
        minimum=1,
    ),
    Setting(
        "group.coordinator.rebalance.protocols",
        ("classic", "consumer"),
        _list,
        "The group protocols served: `classic` (JoinGroup/SyncGroup) and `consumer` (KIP-848, "
        "ConsumerGroupHeartbeat). Without `consumer`, ConsumerGroupHeartbeat answers UNSUPPORTED_VERSION (as "
        "Kafka does; franz-go then falls back to the classic protocol).",
    ),
    Setting(
        "group.consumer.session.timeout.ms",
        45000,
        int,
        "Session timeout of consumer-protocol members: a member without a heartbeat for this long is removed.",
        "ms",
        minimum=1,
    ),
    Setting(
        "group.consumer.min.session.timeout.ms",
        45000,
        int,
        "Lower bound of group.consumer.session.timeout.ms.",
        "ms",
        minimum=1,
    ),
    Setting(
        "group.consumer.max.session.timeout.ms",
        60000,
        int,
        "Upper bound of group.consumer.session.timeout.ms.",
        "ms",
        minimum=1,
    ),
    Setting(
        "group.consumer.heartbeat.interval.ms",
        5000,
        int,
        "How often consumer-protocol members heartbeat (sent to them in every heartbeat answer); below the "
        "session timeout.",
        "ms",
        minimum=1,
    ),
    Setting(
        "group.consumer.min.heartbeat.interval.ms",
        5000,
        int,
        "Lower bound of group.consumer.heartbeat.interval.ms.",
        "ms",
        minimum=1,
    ),
    Setting(
        "group.consumer.max.heartbeat.interval.ms",
        15000,
        int,
        "Upper bound of group.consumer.heartbeat.interval.ms.",
        "ms",
        minimum=1,
    ),
    Setting(
        "group.consumer.max.size",
        2147483647,
        int,
        "Largest number of members in a consumer group; a new member beyond it gets GROUP_MAX_SIZE_REACHED.",
        minimum=1,
    ),
    Setting(
        "group.consumer.assignment.interval.ms",
        100,
        int,
        "Shortest time between two target assignments of a consumer group (Kafka 4.3's KIP-1263 setting, whose "
        "default there is 1000), for groups of 250 members or more, reached at 500 (1 ms per 5 members): a "
        "change after a quiet spell is assigned at once, a burst of joins (hundreds of consumers starting) "
        "within one computation per interval, which matters because the computation is O(members). Smaller "
        "groups, and 0: at every group epoch, as Kafka 4.1.",
        minimum=0,
    ),
    Setting(
        "group.consumer.join.window.ms",
        100,
        int,
        "A consumer group whose members hold no partitions (a new group) computes its first target assignment "
        "once no member has joined for this long (at most 20 windows, or three quarters of the heartbeat "
        "interval if that is longer, after the first join), with the joiners' answers held until then: consumers "
        "starting together are assigned once, and none is given partitions only to give them up to the one "
        "behind it. Joins after its first target, up to that limit, are batched too, until they pause for three "
        "windows. 0, or no hold: Kafka's behaviour (a target at every join).",
        "ms",
        kafka=False,
        minimum=0,
    ),
    Setting(
        "group.consumer.heartbeat.hold.ms",
        200,
        int,
        "A ConsumerGroupHeartbeat whose answer would bring the member nothing new while it waits for partitions "
        "another member is giving up, or for a target assignment held back for a moment, is answered when "
        "that changes, at most this long later (and at most a quarter of the heartbeat interval; a joiner of a "
        "new group: until its join window ends; any other joiner, and a member waiting for the target a join "
        "window holds back: up to the window's limit, and at most half the interval): the member gets its "
        "partitions, or learns what to give up, at once instead of at its next heartbeat. Answers that ask for "
        "revocations or hand out partitions are never held. 0: Kafka's behaviour (answered at once).",
        "ms",
        kafka=False,
        minimum=0,
    ),
    Setting(
        "group.consumer.assignors",
        ("uniform", "range"),
        _list,
        "Server-side assignors consumer-protocol members may ask for (`group.remote.assignor`); the first is "
        "used when none asks. Known: uniform, range.",
    ),
    Setting(
        "group.consumer.migration.policy",
        "bidirectional",
        str,
        "Online migration between the classic and the consumer protocol (Kafka's setting): `upgrade` lets a "
        "consumer-protocol member join a classic group that has members (it becomes a consumer group, its "
        "classic members stay and keep their partitions), `downgrade` turns a consumer group whose last "
        "consumer-protocol member left into a classic group, `bidirectional` both, `disabled` neither. Empty "
        "groups change type under every policy.",
    ),
    Setting(
        "group.static.registration.timeout.ms",
        0,
        int,
        "How long a static member whose session expired keeps its place and partitions, counted from when "
        "the earliest member still offline went offline; then one rebalance removes every offline member "
        "(KIP-345's registration timeout). 0: Kafka's behaviour. Overridable per group (admin API).",
        "ms",
        kafka=False,
        minimum=0,
    ),
    Setting(
        "group.expansion.timeout.ms",
        0,
        int,
        "When a new member joins a Stable group, how long to collect further joiners before the one "
        "rebalance that admits them all (KIP-345's expansion timeout); capped at half the smallest "
        "rebalance timeout of the waiting joiners. 0: Kafka's behaviour. Overridable per group.",
        "ms",
        kafka=False,
        minimum=0,
    ),
    Setting(
        "group.coordinator.append.linger.ms",
        10,
        int,
        "How long a write waits to be batched with others before it is flushed.",
        "ms",
        minimum=0,
    ),
    Setting(
        "offset.metadata.max.bytes", 4096, int, "Largest metadata string of a committed offset.", "bytes"
    ),
    Setting(
        "offsets.retention.minutes",
        10080,
        int,
        "How long offsets of an empty group are kept (KIP-211).",
        "minutes",
        minimum=1,
    ),
    Setting(
        "offsets.retention.check.interval.ms",
        600000,
        int,
        "How often expired offsets are removed.",
        "ms",
        minimum=1,
    ),
    Setting("offsets.commit.timeout.ms", 5000, int, "Bound on every wait for the log.", "ms", minimum=1),
    Setting(
        "offsets.topic.segment.bytes",
        104857600,
        int,
        "Size at which the group log rolls a segment.",
        "bytes",
        minimum=1024,
    ),
    Setting(
        "log.cleaner.delete.retention.ms",
        86400000,
        int,
        "How long compaction keeps tombstones before dropping them.",
        "ms",
        minimum=0,
    ),
    Setting(
        "offsets.topic.compaction.interval.ms",
        300000,
        int,
        "How often the group log's closed segments are compacted.",
        "ms",
        kafka=False,
        minimum=1000,
    ),
    Setting(
        "offsets.topic.num.partitions",
        50,
        int,
        "Number of group shards (Kafka: partitions of __consumer_offsets). A group belongs to shard "
        "abs(hashCode(group id)) % this, as in Kafka; each shard has its own state machine and log under "
        "DATA_DIR/groups/shard-N. Fixed once a data directory has been written.",
        minimum=1,
    ),
    Setting(
        "coordinator.shard.failure.timeout.ms",
        30000,
        int,
        "How long a shard may go on failing or stalling on its log before it is marked failed and reloaded "
        "from its log (meanwhile its requests get a retriable error within offsets.commit.timeout.ms).",
        "ms",
        kafka=False,
        minimum=100,
    ),
    Setting(
        "group.coordinator.compaction.timeout.ms",
        600000,
        int,
        "Time budget of one compaction of a shard's log; past it the shard stops waiting and logs it.",
        "ms",
        kafka=False,
        minimum=1000,
    ),
    Setting(
        "log.segment.bytes",
        1073741824,
        int,
        "Size at which a partition's segment file is rolled (topic config segment.bytes).",
        "bytes",
        minimum=14,
    ),
    Setting(
        "log.retention.ms",
        604800000,
        int,
        "How long a closed segment is kept after its newest record (topic config retention.ms); -1: forever.",
        "ms",
        minimum=-1,
    ),
    Setting(
        "log.retention.bytes",
        -1,
        int,
        "Partition size above which its oldest closed segments are deleted (topic config "
        "retention.bytes); -1: no limit.",
        "bytes",
        minimum=-1,
    ),
    Setting(
        "log.retention.check.interval.ms",
        300000,
        int,
        "How often retention deletes old segments.",
        "ms",
        minimum=1,
    ),
    # -- in front of an existing cluster (coordinator.front) --
    Setting(
        "upstream.bootstrap.servers",
        (),
        _list,
        "`HOST:PORT,...` of an existing Kafka cluster: this server runs in front of it (records stay there, "
        "groups are coordinated here) instead of keeping topics itself. Empty: the embedded data plane.",
        kafka=False,
    ),
    Setting(
        "upstream.security.protocol",
        "PLAINTEXT",
        str,
        "How this server connects to the upstream cluster: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL.",
        kafka=False,
    ),
    Setting(
        "upstream.sasl.mechanism",
        "PLAIN",
        str,
        "SASL mechanism towards the upstream cluster: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.",
        kafka=False,
    ),
    Setting("upstream.sasl.username", "", str, "SASL user name towards the upstream cluster.", kafka=False),
    Setting("upstream.sasl.password", "", str, "SASL password towards the upstream cluster.", kafka=False),
    Setting(
        "upstream.sasl.jaas.config",
        "",
        str,
        'A Kafka client JAAS line (`... required username="U" password="P";`): the upstream SASL user and '
        "password, when upstream.sasl.username is not set.",
        kafka=False,
    ),
    Setting(
        "upstream.ssl.truststore.location",
        "",
        str,
        "PEM file of the CA certificates the upstream brokers' certificates are checked against (default: the "
        "system's).",
        kafka=False,
    ),
    Setting(
        "upstream.ssl.keystore.location",
        "",
        str,
        "PEM file with this server's client certificate and key, for upstream brokers that require one.",
        kafka=False,
    ),
    Setting(
        "upstream.ssl.endpoint.identification.algorithm",
        "https",
        str,
        "`https`: check the upstream broker's host name against its certificate; empty: do not.",
        kafka=False,
    ),
    Setting(
        "upstream.request.timeout.ms",
        30000,
        int,
        "How long a request forwarded to the upstream cluster may wait for its answer. Past it the client's "
        "connection is closed (clients retry, as after losing a broker); the front's own requests fail with a "
        "retriable error.",
        "ms",
        kafka=False,
        minimum=1,
    ),
    Setting(
        "coordinator.state.topic",
        "__group_coordinator_state",
        str,
        "In front of an upstream cluster: the compacted topic there that keeps the group coordinator's state "
        "(groups, static members, assignments, offsets, pause and window settings), one partition per shard, "
        "so the server keeps none of it on disk. Empty: DATA_DIR/groups, as standalone.",
        kafka=False,
    ),
    Setting(
        "coordinator.state.lease.ms",
        2000,
        int,
        "In front of an upstream cluster: how long a shard may answer after the cluster last confirmed that this "
        "server still holds its writer (the shard's transactional id on the state topic, at the epoch this server "
        "has). Confirmed by every write and, when there is none, by a DescribeTransactions; a shard that goes "
        "unconfirmed this long answers COORDINATOR_NOT_AVAILABLE, and one whose writer another server claimed "
        "answers NOT_COORDINATOR. A server that claims a shard answers for it only this long after its claim, so "
        "two servers never answer for one shard at once.",
        "ms",
        kafka=False,
        minimum=100,
    ),
    Setting(
        "coordinator.instance.id",
        "",
        str,
        "In front of an upstream cluster: this instance's name in the group the instances of one state topic form "
        "on the cluster to divide its shards (the order of the leader's plan, and what the logs call it). Empty: "
        "its address.",
        kafka=False,
    ),
    Setting(
        "coordinator.instance.session.timeout.ms",
        10000,
        int,
        "In front of an upstream cluster: the session timeout of this instance in the instances' group on the "
        "cluster (at least the cluster's group.min.session.timeout.ms). An instance that dies is noticed at once "
        "by the others when its process is gone (its connections close); one whose machine or network went away, "
        "after this long. Its shards then go to the others.",
        "ms",
        kafka=False,
        minimum=1000,
    ),
    Setting(
        "coordinator.instance.standby",
        True,
        _bool,
        "In front of an upstream cluster, with a state topic: this instance is the hot standby of the shards the "
        "instances' plan gives it (each shard has one, another instance than its owner): it keeps their state "
        "replayed from the state topic as their owners write (every 0.5 s), so that when an owner dies its shards "
        "go to their standbys, which read and replay only what they had not, instead of the whole shard. Costs "
        "the memory of those shards' state and a read of each every 0.5 s. false: takeovers replay whole shards.",
        kafka=False,
    ),
    Setting(
        "coordinator.instance.relay.listener",
        ":0",
        str,
        "In front of an upstream cluster, with a state topic: where this instance takes the group requests other "
        "instances relay to it (for groups it owns that a client asked another instance about), as host:port. An "
        "empty host: the primary listener's bind address, announced to the other instances as this instance's "
        "advertised host; port 0: a free port. The other instances must reach it at that address. Relayed requests "
        "carry a secret the instances exchange through their group on the cluster, so grant Describe on that group "
        "(named after the state topic) to the instances alone. Empty: none (a request about a group another "
        "instance owns is answered NOT_COORDINATOR).",
        kafka=False,
    ),
    Setting(
        "upstream.offsets.recommit.interval.ms",
        86400000,
        int,
        "In front of an upstream cluster: how often the offsets of a group with members are written to the "
        "cluster again, so that its offsets.retention.minutes cannot expire them while the group is alive but has "
        "nothing new to commit.",
        "ms",
        kafka=False,
        minimum=1000,
    ),
    Setting(
        "upstream.node.port.base",
        -1,
        int,
        "Upstream broker N is reached through this server's port BASE+N (on the --listen host); with W "
        "workers, worker w's at BASE + N*W + w. -1: the --listen port + 1; with --listen port 0, every node's "
        "port is a free one.",
        kafka=False,
        minimum=-1,
    ),
)

_BY_NAME = {s.name: s for s in SETTINGS}


class ConfigError(ValueError):
    pass


class Config:
    """Resolved settings, read by Kafka name: `config["group.max.size"]`."""

    def __init__(self, values: Mapping[str, Any] | None = None) -> None:
        self._values = {s.name: s.default for s in SETTINGS}
        for name, value in (values or {}).items():
            self.set(name, value)

    def set(self, name: str, value: Any) -> None:
        setting = _BY_NAME.get(name)
        if setting is None and name.startswith(UPSTREAM_PREFIX) and len(name) > len(UPSTREAM_PREFIX):
            # Any other Kafka client setting for the upstream connection is taken (users copy their client
            # config); coordinator.front says at start which of those it does not use.
            self._values[name] = str(value)
            return
        if setting is None:
            raise ConfigError(f"unknown setting {name!r}")
        if isinstance(value, str):
            try:
                value = setting.parse(value)
            except ValueError as exc:
                raise ConfigError(f"bad value for {name}: {exc}") from None
        if setting.minimum is not None and value < setting.minimum:
            raise ConfigError(f"{name} must be at least {setting.minimum}, got {value}")
        self._values[name] = value

    def __getitem__(self, name: str) -> Any:
        return self._values[name]

    def items(self) -> Iterable[tuple[str, Any]]:
        return self._values.items()

    @classmethod
    def load(
        cls,
        properties_file: str | None = None,
        environ: Mapping[str, str] | None = None,
        overrides: Iterable[str] = (),
    ) -> Config:
        config = cls()
        if properties_file:
            for name, value in read_properties(properties_file).items():
                config.set(name, value)
        env = os.environ if environ is None else environ
        for setting in SETTINGS:
            key = ENV_PREFIX + setting.name.upper().replace(".", "_")
            if key in env:
                config.set(setting.name, env[key])
        for item in overrides:
            name, sep, value = item.partition("=")
            if not sep:
                raise ConfigError(f"--set expects NAME=VALUE, got {item!r}")
            config.set(name.strip(), value.strip())
        config.check()
        return config

    def check(self) -> None:
        """Relations between settings (Kafka's GroupCoordinatorConfig checks): raises ConfigError."""
        for what in ("session.timeout", "heartbeat.interval"):
            low = self[f"group.consumer.min.{what}.ms"]
            value = self[f"group.consumer.{what}.ms"]
            high = self[f"group.consumer.max.{what}.ms"]
            if not low <= value <= high:
                raise ConfigError(
                    f"group.consumer.{what}.ms ({value}) must be between group.consumer.min.{what}.ms ({low}) "
                    f"and group.consumer.max.{what}.ms ({high})"
                )
        if self["group.consumer.heartbeat.interval.ms"] >= self["group.consumer.session.timeout.ms"]:
            raise ConfigError(
                "group.consumer.heartbeat.interval.ms must be below group.consumer.session.timeout.ms"
            )
        unknown = set(self["group.consumer.assignors"]) - {"uniform", "range"}
        if unknown or not self["group.consumer.assignors"]:
            raise ConfigError(
                f"group.consumer.assignors: unknown assignors {sorted(unknown)} (known: uniform, range)"
                if unknown
                else "group.consumer.assignors must name at least one assignor"
            )
        if self["group.consumer.migration.policy"].strip().lower() not in (
            "bidirectional",
            "upgrade",
            "downgrade",
            "disabled",
        ):
            raise ConfigError(
                f"group.consumer.migration.policy: {self['group.consumer.migration.policy']!r} is not one of "
                "bidirectional, upgrade, downgrade, disabled"
            )
        unknown = set(self["group.coordinator.rebalance.protocols"]) - {"classic", "consumer"}
        if unknown:
            raise ConfigError(f"group.coordinator.rebalance.protocols: unknown protocols {sorted(unknown)}")


def read_properties(path: str) -> dict[str, str]:
    """Java .properties, the common subset: `name=value` or `name: value`, `#`/`!` comments."""
    values: dict[str, str] = {}
    with open(path, encoding="utf-8") as fh:
        for raw in fh:
            line = raw.strip()
            if not line or line[0] in "#!":
                continue
            for sep_index, ch in enumerate(line):  # noqa: B007 - sep_index is read after the loop
                if ch in "=:":
                    break
            else:
                raise ConfigError(f"{path}: no '=' in line {raw.rstrip()!r}")
            values[line[:sep_index].strip()] = line[sep_index + 1 :].strip()
    return values
