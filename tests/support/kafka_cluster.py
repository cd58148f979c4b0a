"""A real Apache Kafka 4.x cluster of three KRaft nodes (each broker and controller), from Maven Central's jars
(scripts/fetch-jars.sh kafka-server), on 127.0.0.1: the cluster the server runs in front of
(`upstream.bootstrap.servers`, tests/front/). Started once per test run (the `kafka_cluster` fixture).

Nodes have ids 1, 2, 3. Besides PLAINTEXT each node has a SASL_PLAINTEXT listener (`sasl_bootstrap`) taking PLAIN
and SCRAM-SHA-256 for SASL_USER, for the server's authenticated connection to the cluster. `__consumer_offsets` and the transaction log are replicated three ways with
min.insync.replicas 2, as in production, so one node can be SIGKILLed (`kill`) and restarted (`start`) while
clients keep going.
"""

from __future__ import annotations

import base64
import contextlib
import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

from tests.support.java import fetch_jar_set, need_tools
from tests.support.wire import WireClient, make, request_class

NODE_IDS = (1, 2, 3)
SASL_USER = ("kgc-front", "front-secret")  # user and password on the cluster's SASL listener
HEAP = "384m"
# The JVM flags of Kafka's bin/kafka-server-start.sh (its KAFKA_HEAP_OPTS and KAFKA_JVM_PERFORMANCE_OPTS defaults):
# how a user's cluster runs. Benchmarks ask for them (KafkaCluster(production_jvm=True)); tests keep the flags that
# start fastest (C1 only, a small heap).
PRODUCTION_JVM = [
    "-Xmx1G",
    "-Xms1G",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
]


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class KafkaCluster:
    def __init__(self, run_dir: Path, production_jvm: bool = False) -> None:
        need_tools("java")
        self.production_jvm = production_jvm
        self.jars = fetch_jar_set("kafka-server")
        self.version = (self.jars / ".complete").read_text().strip().rsplit(":", 1)[1]
        self.run_dir = run_dir
        self.ports = {n: _free_port() for n in NODE_IDS}
        self.controller_ports = {n: _free_port() for n in NODE_IDS}
        self.sasl_ports = {n: _free_port() for n in NODE_IDS}
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        voters = ",".join(f"{n}@127.0.0.1:{self.controller_ports[n]}" for n in NODE_IDS)
        # As Kafka's Uuid.randomUuid: never one that begins with '-', which the format tool reads as an option.
        cluster_id = "-"
        while cluster_id.startswith("-"):
            cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        self.cluster_id = cluster_id
        for n in NODE_IDS:
            node_dir = run_dir / f"node{n}"
            node_dir.mkdir(parents=True, exist_ok=True)
            props = node_dir / "server.properties"
            props.write_text(
                "\n".join(
                    [
                        "process.roles=broker,controller",
                        f"node.id={n}",
                        f"controller.quorum.voters={voters}",
                        f"listeners=PLAINTEXT://127.0.0.1:{self.ports[n]},"
                        f"CONTROLLER://127.0.0.1:{self.controller_ports[n]},"
                        f"SASL://127.0.0.1:{self.sasl_ports[n]}",
                        f"advertised.listeners=PLAINTEXT://127.0.0.1:{self.ports[n]},"
                        f"SASL://127.0.0.1:{self.sasl_ports[n]}",
                        "controller.listener.names=CONTROLLER",
                        "inter.broker.listener.name=PLAINTEXT",
                        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL:SASL_PLAINTEXT",
                        # The SASL listener: PLAIN and SCRAM-SHA-256 for the user of SASL_USER (made by `format`).
                        "listener.name.sasl.sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256",
                        "listener.name.sasl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain."
                        f'PlainLoginModule required user_{SASL_USER[0]}="{SASL_USER[1]}";',
                        "listener.name.sasl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram."
                        "ScramLoginModule required;",
                        f"log.dirs={node_dir / 'data'}",
                        "num.partitions=3",
                        "default.replication.factor=3",
                        "min.insync.replicas=2",
                        "offsets.topic.replication.factor=3",
                        "offsets.topic.num.partitions=10",
                        "transaction.state.log.replication.factor=3",
                        "transaction.state.log.min.isr=2",
                        "transaction.state.log.num.partitions=5",
                        "group.initial.rebalance.delay.ms=0",
                        "auto.create.topics.enable=true",
                        # Tests produce records with timestamps of the past (examples/pipeline.py's fixed minutes):
                        # time-based retention would delete them at its next check, mid-test.
                        "log.retention.ms=-1",
                        "",
                    ]
                )
            )
            fmt = subprocess.run(
                self._java(
                    "kafka.tools.StorageTool",
                    "format",
                    "-t",
                    cluster_id,
                    "-c",
                    str(props),
                    "--add-scram",
                    f"SCRAM-SHA-256=[name={SASL_USER[0]},password={SASL_USER[1]}]",
                ),
                capture_output=True,
                text=True,
                timeout=180,
            )
            if fmt.returncode != 0:
                raise RuntimeError(f"kafka-storage format failed: {(fmt.stderr or fmt.stdout)[-1500:]}")
        for n in NODE_IDS:
            self.start(n, wait=False)
        for n in NODE_IDS:
            self.wait_ready(n)
        self._warm_up_transactions()

    def _warm_up_transactions(self) -> None:
        """Have the cluster create its transaction log now (a transactional producer's first InitProducerId), as a
        cluster in use has it: otherwise the first server in front of it, whose state writers are transactional,
        starts several seconds later than every other."""
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": "kgc-tests-warm-up"})
        try:
            producer.init_transactions(120)
        except Exception as exc:  # noqa: BLE001 - say which step of the start failed
            raise RuntimeError(f"the cluster's transaction log did not come up: {exc}") from exc

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{self.ports[n]}" for n in NODE_IDS)

    @property
    def sasl_bootstrap(self) -> str:
        """The SASL_PLAINTEXT listeners (PLAIN or SCRAM-SHA-256 as SASL_USER)."""
        return ",".join(f"127.0.0.1:{self.sasl_ports[n]}" for n in NODE_IDS)

    def address(self, node: int) -> str:
        return f"127.0.0.1:{self.ports[node]}"

    def _java(self, main: str, *args: str, heap: str | None = None) -> list[str]:
        cmd = ["java"]
        if heap:
            if self.production_jvm:
                cmd += PRODUCTION_JVM
            else:
                cmd += [f"-Xmx{heap}", f"-Xms{heap}", "-XX:+UseG1GC", "-XX:TieredStopAtLevel=1"]
                cmd += ["-XX:ActiveProcessorCount=2"]
            cmd += ["-Djava.awt.headless=true"]
            cmd += [
                "-Dorg.slf4j.simpleLogger.showDateTime=true",
                "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
            ]
        return cmd + ["-cp", str(self.jars / "*"), main, *args]

    def start(self, node: int, wait: bool = True) -> None:
        node_dir = self.run_dir / f"node{node}"
        with open(node_dir / "kafka.log", "ab") as out:
            self.procs[node] = subprocess.Popen(
                self._java("kafka.Kafka", str(node_dir / "server.properties"), heap=HEAP),
                cwd=node_dir,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        if wait:
            self.wait_ready(node)

    def wait_ready(self, node: int, timeout: float = 180.0) -> None:
        """Until node `node` answers Metadata listing every live node as a broker."""
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            proc = self.procs[node]
            if proc.poll() is not None:
                raise RuntimeError(f"Kafka node {node} exited with {proc.returncode}: {self.log_tail(node)}")
            try:
                with WireClient("127.0.0.1", self.ports[node], timeout=5) as c:
                    answer = c.request(make(request_class(3, 1), {"topics": None}))
                    live = {n for n, p in self.procs.items() if p.poll() is None}
                    if {b.node_id for b in answer.brokers} >= live:
                        return
            except (OSError, ValueError, EOFError) as exc:
                last = exc
            time.sleep(0.3)
        raise RuntimeError(
            f"Kafka node {node} not ready within {timeout:.0f}s: {last}\n{self.log_tail(node)}"
        )

    def log_tail(self, node: int) -> str:
        path = self.run_dir / f"node{node}" / "kafka.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def kill(self, node: int) -> None:
        """SIGKILL node `node` (its data stays: `start` brings it back)."""
        proc = self.procs[node]
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)

    def pause(self, on: bool) -> None:
        """SIGSTOP (on) or SIGCONT every node: the cluster stops answering without closing a connection."""
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGSTOP if on else signal.SIGCONT)

    def close(self) -> None:
        """SIGKILL every node: the cluster's data is thrown away with the run, and three combined KRaft nodes
        stopped together can spend minutes in controlled shutdown once the quorum is gone (a session teardown
        that long would run past the last test's pytest timeout)."""
        for proc in self.procs.values():
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
        for proc in self.procs.values():
            proc.wait(30)


def create_replicated_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """A topic replicated on all three nodes (min.insync.replicas 2), created through `bootstrap` (the front's
    CreateTopics is the cluster's)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics(
        [NewTopic(topic, partitions, replication_factor=len(NODE_IDS))]
    ).values():
        future.result(60)


def elect_preferred_leaders(bootstrap: str, topic: str, partitions: int) -> None:
    """Each partition's leadership back to its preferred replica (Kafka's `kafka-leader-election --election-type
    preferred`); a partition already led by it is fine."""
    from confluent_kafka import ElectionType, KafkaError, KafkaException, TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    wanted = [TopicPartition(topic, p) for p in range(partitions)]
    deadline = time.monotonic() + 60
    while True:
        try:
            result = admin.elect_leaders(ElectionType.PREFERRED, wanted).result(30)
        except KafkaException:
            if time.monotonic() > deadline:
                raise
        else:
            # ELECTION_NOT_NEEDED: already led by the preferred replica
            failed = {
                tp: err
                for tp, err in result.items()
                if err is not None and err.code() != KafkaError.ELECTION_NOT_NEEDED
            }
            if not failed:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"preferred leader election of {topic}: {failed}")
        time.sleep(1)


def cluster_committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets as a consumer of the cluster reads them (-1: none), in this process."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        for attempt in range(5):
            try:
                found = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=20)
                return {tp.partition: (tp.offset if tp.offset >= 0 else -1) for tp in found}
            except KafkaException:
                if attempt == 4:
                    raise
                time.sleep(1)
    finally:
        consumer.close()
    raise AssertionError("unreachable")
