"""The real image: the project's Dockerfile built with podman (on a stand-in for python:3.11-slim made from Debian's
packages, pip reading a wheelhouse built on the host, so no registry and no index) and run: the entrypoint as uid
10001, the HEALTHCHECK command, a confluent-kafka consumer group against the container, the group's offsets kept on
the volume across a replaced container, a clean stop on SIGTERM within the shutdown timeout. The image holds the
runtime dependencies only; what it adds above the base is printed (and held under 50 MB).

Where the machine cannot run containers (not root, no podman/runc/debootstrap, podman itself failing, no base
image to be made from the Debian mirror, or no container running from it) the tests skip and say why; a failure
to build or run the project's image is a failure. The build and run figures are printed (pytest -s, or the captured output of a failure)."""

from __future__ import annotations

import json
import re
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.support.server import readyz

from .container import BASE_IMAGE, IMAGE, Podman, admin_port, build_wheelhouse, unavailable

pytestmark = pytest.mark.e2e

MB = 1_000_000
SHUTDOWN_TIMEOUT_S = 10  # shutdown.timeout.ms's default
ADDED_SIZE_GOAL = 50 * MB
LISTENING = re.compile(r"^listening kafka=\S+:(?P<port>\d+) ", re.M)


@dataclass
class Built:
    podman: Podman
    base_seconds: float
    build_seconds: float
    added_bytes: int


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Built]:
    reason = unavailable()
    if reason:
        pytest.skip(reason)
    work = tmp_path_factory.mktemp("container")
    podman = Podman(work)
    reason = podman.probe()
    if reason:
        pytest.skip(reason)
    base_seconds, reason = podman.ensure_base()
    if reason:
        pytest.skip(reason)
    wheels = work / "wheels"
    build_wheelhouse(wheels)
    build_seconds = podman.build(wheels)
    added = podman.image_size(IMAGE) - podman.image_size(BASE_IMAGE)
    print(
        f"\nimage {IMAGE}: built in {build_seconds:.1f}s (stand-in base ready in {base_seconds:.1f}s); "
        f"adds {added / MB:.1f} MB to the base"
    )
    yield Built(podman, base_seconds, build_seconds, added)
    podman("image", "prune", "--force", check=False)


class Container:
    """One `podman run -d` of the image on the host network, its Kafka and admin listeners on free ports."""

    def __init__(self, podman: Podman, volume: str, **env: str) -> None:
        self.podman = podman
        self.name = f"kgc-test-{uuid.uuid4().hex[:8]}"
        self.kafka_port = 0  # bound by the server: read from its listening line
        self.admin_port = admin_port()
        settings = {
            "KGC_LISTEN": f"127.0.0.1:{self.kafka_port}",
            "KGC_ADMIN_LISTEN": f"127.0.0.1:{self.admin_port}",
            "KGC_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
            **env,
        }
        started = time.monotonic()
        podman(
            "run",
            "--detach",
            "--name",
            self.name,
            "--network",
            "host",
            "--health-interval",
            "disable",  # no systemd here to time it; the test runs the check itself
            "--volume",
            f"{volume}:/var/lib/kgc",
            *(arg for name, value in settings.items() for arg in ("--env", f"{name}={value}")),
            IMAGE,
        )
        self.ready_seconds = self._wait_ready(started)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.kafka_port}"

    def _wait_ready(self, started: float, timeout: float = 60) -> float:
        deadline = started + timeout
        while time.monotonic() < deadline:
            listening = LISTENING.search(self.logs())
            if listening and readyz(f"http://127.0.0.1:{self.admin_port}"):
                self.kafka_port = int(listening["port"])
                return time.monotonic() - started
            if self.state()["Status"] == "exited":
                break
            time.sleep(0.05)
        raise AssertionError(f"container {self.name} not ready\n{self.logs()}")

    def state(self) -> dict:
        return json.loads(self.podman("inspect", "--format", "{{json .State}}", self.name).stdout)

    def logs(self) -> str:
        done = self.podman("logs", self.name, check=False)
        return done.stdout + done.stderr

    def exec(self, *argv: str) -> subprocess.CompletedProcess[str]:
        return self.podman("exec", self.name, *argv, check=False)

    def stop(self) -> tuple[float, int]:
        """SIGTERM (the image's STOPSIGNAL), SIGKILL only after twice the shutdown timeout: (seconds, exit code)."""
        started = time.monotonic()
        self.podman("stop", "--time", str(2 * SHUTDOWN_TIMEOUT_S), self.name, timeout=60)
        return time.monotonic() - started, self.state()["ExitCode"]

    def remove(self) -> None:
        self.podman("rm", "--force", self.name, check=False)


@pytest.fixture
def volume(built: Built) -> Iterator[str]:
    name = f"kgc-test-{uuid.uuid4().hex[:8]}"
    built.podman("volume", "create", name)
    yield name
    built.podman("volume", "rm", "--force", name, check=False)


def test_image_holds_the_runtime_only(built: Built):
    listing = built.podman(
        "run",
        "--rm",
        "--network",
        "none",
        "--entrypoint",
        "python",
        IMAGE,
        "-c",
        "import importlib.metadata as m, json, os, shutil; print(json.dumps({"
        "'dists': sorted(d.metadata['Name'].lower() for d in m.distributions()),"
        "'tools': [t for t in ('gcc', 'cc', 'make', 'pip', 'pip3', 'apt-get') if shutil.which(t)],"
        "'caches': [p for p in ('/root/.cache', '/var/lib/kgc/.cache', '/var/cache/apt/archives/partial')"
        " if os.path.exists(p) and os.listdir(p)],"
        "'uid': os.getuid()}))",
    ).stdout
    found = json.loads(listing)
    assert "kafka-group-coordinator" in found["dists"]
    for not_runtime in ("pip", "setuptools", "pytest", "confluent-kafka", "pyspark", "hypothesis", "mypy"):
        assert not_runtime not in found["dists"], f"{not_runtime} is in the image"
    # apt-get stays: it is the base image's. No compilers, no pip.
    assert [t for t in found["tools"] if t != "apt-get"] == [], found["tools"]
    assert found["caches"] == []
    assert found["uid"] == 10001
    print(f"\nimage adds {built.added_bytes / MB:.1f} MB above {BASE_IMAGE}")
    assert built.added_bytes < ADDED_SIZE_GOAL, f"the image adds {built.added_bytes / MB:.1f} MB"


def test_container_serves_a_group_keeps_its_offsets_on_the_volume_and_stops_on_sigterm(
    built: Built, volume: str
):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    topic, group, messages = "orders", "billing", 30

    first = Container(built.podman, volume, KGC_NUM_PARTITIONS="3")
    try:
        # The server is PID 1 (exec-form ENTRYPOINT, so SIGTERM reaches it), running as uid 10001.
        proc1 = first.exec(
            "python", "-c", "import os; print(os.stat('/proc/1').st_uid, open('/proc/1/cmdline').read())"
        )
        uid, cmdline = proc1.stdout.split(" ", 1)
        assert uid == "10001", proc1.stdout + proc1.stderr
        assert "kafka-group-coordinator" in cmdline and "serve" in cmdline

        # The HEALTHCHECK command, as the engine runs it.
        health = built.podman("healthcheck", "run", first.name, check=False)
        assert health.returncode == 0, health.stdout + health.stderr

        producer = confluent_kafka.Producer({"bootstrap.servers": first.bootstrap})
        for i in range(messages):
            producer.produce(topic, key=str(i).encode(), value=f"order {i}".encode())
        assert producer.flush(30) == 0

        consumer = confluent_kafka.Consumer(
            {
                "bootstrap.servers": first.bootstrap,
                "group.id": group,
                "group.instance.id": "billing-1",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        consumer.subscribe([topic])
        seen = set()
        deadline = time.monotonic() + 60
        while len(seen) < messages and time.monotonic() < deadline:
            message = consumer.poll(1)
            if message is not None and message.error() is None:
                seen.add(message.value())
        assert len(seen) == messages
        consumer.commit(asynchronous=False)
        consumer.close()
        del producer  # before the server goes away: a client left connected only logs reconnects

        # The admin CLI inside the container sees the group and its committed offsets.
        described = first.exec(
            "kafka-group-coordinator",
            "groups",
            "--admin",
            f"http://127.0.0.1:{first.admin_port}",
            "--json",
            "describe",
            group,
        )
        assert described.returncode == 0, described.stdout + described.stderr
        assert group in described.stdout

        stop_seconds, code = first.stop()
        assert code == 0, f"exit {code} after SIGTERM\n{first.logs()}"
        assert stop_seconds < SHUTDOWN_TIMEOUT_S, f"stopped after {stop_seconds:.1f}s"
        assert "stopped" in first.logs()
    finally:
        first.remove()

    # A new container on the same volume: the records and the group's offsets are still there.
    second = Container(built.podman, volume)
    try:
        consumer = confluent_kafka.Consumer(
            {
                "bootstrap.servers": second.bootstrap,
                "group.id": group,
                "group.instance.id": "billing-1",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        partitions = [confluent_kafka.TopicPartition(topic, p) for p in range(3)]
        committed = consumer.committed(partitions, timeout=30)
        assert sum(tp.offset for tp in committed) == messages, committed
        producer = confluent_kafka.Producer({"bootstrap.servers": second.bootstrap})
        producer.produce(topic, key=b"late", value=b"order late")
        assert producer.flush(30) == 0
        consumer.subscribe([topic])
        got = []
        deadline = time.monotonic() + 60
        while not got and time.monotonic() < deadline:
            message = consumer.poll(1)
            if message is not None and message.error() is None:
                got.append(message.value())
        # Only the new record: the group resumed from the offsets the first container acknowledged.
        assert got == [b"order late"]
        consumer.close()
        del producer
        stop_seconds, code = second.stop()
        assert code == 0, f"exit {code} after SIGTERM\n{second.logs()}"
    finally:
        second.remove()
    print(
        f"\nstart to ready: {first.ready_seconds:.2f}s (fresh volume), {second.ready_seconds:.2f}s (replaced "
        f"container, same volume); stop on SIGTERM: {stop_seconds:.2f}s"
    )
