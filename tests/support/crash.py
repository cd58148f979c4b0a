"""The server as the crash and reliability tests drive it: on one port and data dir across SIGKILLs and restarts
(CrashServer), and the checks they share (what was acknowledged, what is committed)."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

from tests.support.server import LISTENING, REPO, readyz, serve_command, server_env

CRASH_CLIENTS = REPO / "tests" / "crash" / "clients"
PARTITIONS = 8  # of every topic create_topics makes, and what committed_offsets reads


class CrashServer:
    """The server subprocess on one port and data dir; stderr of every run appended to one file. The first start
    binds port 0 (the server picks free ports for all its workers and announces the first); every restart asks for
    that same port again (the server retries a port still held by its SIGKILLed predecessor)."""

    def __init__(self, run_dir: Path, settings: dict[str, object]) -> None:
        self.run_dir = run_dir
        self.port = 0
        self.data_dir = run_dir / "data"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.settings = settings
        self.stderr_path = run_dir / "server.stderr"
        self.proc: subprocess.Popen | None = None
        self.admin_url = ""
        self.runs = 0

    def start(self, timeout: float = 30) -> None:
        self.runs += 1
        cmd = serve_command(self.port, self.data_dir, self.settings)
        env = server_env()
        stdout_path = self.run_dir / f"server-{self.runs}.stdout"
        with open(self.stderr_path, "ab") as err:
            err.write(f"===== run {self.runs} started at {time.time():.3f} =====\n".encode())
            err.flush()
            with open(stdout_path, "wb") as out:
                self.proc = subprocess.Popen(
                    cmd, cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err
                )
        deadline = time.monotonic() + timeout
        while True:
            for line in stdout_path.read_text(errors="replace").splitlines():
                match = LISTENING.match(line.strip())
                if match:
                    self.admin_url = "http://" + match["admin"]
                    self.port = int(match["kafka"].rsplit(":", 1)[1])
                    return
            if self.proc.poll() is not None:
                raise AssertionError(f"server exited with {self.proc.returncode}:\n{self.stderr_tail()}")
            if time.monotonic() > deadline:
                self.kill()
                raise AssertionError(f"no listening line within {timeout}s:\n{self.stderr_tail()}")
            time.sleep(0.005)

    @property
    def bootstrap(self) -> str:
        assert self.port, "start() first: the port is the one the first start announced"
        return f"127.0.0.1:{self.port}"

    def ready(self) -> bool:
        return readyz(self.admin_url)

    def wait_ready(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while not self.ready():
            assert time.monotonic() < deadline, f"not ready within {timeout}s:\n{self.stderr_tail()}"
            time.sleep(0.005)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(10)

    def stop(self) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
                raise
        return self.proc.returncode

    def stderr_tail(self, limit: int = 8000) -> str:
        text = self.stderr_path.read_text(errors="replace")
        return text[-limit:]


def create_topics(admin, names: list[str], timeout: float = 20) -> None:
    """CreateTopics, ignoring TOPIC_ALREADY_EXISTS; retried while the server is coming back."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import NewTopic

    deadline = time.monotonic() + timeout
    pending = list(names)
    while pending:
        futures = admin.create_topics(
            [NewTopic(n, PARTITIONS, 1) for n in pending], operation_timeout=5, request_timeout=5
        )
        retry = []
        for name, future in futures.items():
            try:
                future.result()
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    retry.append(name)
        if retry:
            assert time.monotonic() < deadline, f"could not create {retry}"
            time.sleep(0.05)
        pending = retry


def committed_offsets(admin, group: str, topic: str) -> dict[int, int]:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(PARTITIONS)])
    result = admin.list_consumer_group_offsets([request], request_timeout=20)[group].result()
    out = {}
    for tp in result.topic_partitions:
        assert tp.error is None, tp
        out[tp.partition] = tp.offset
    return out


def read_events(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def rebalance_events(path: Path) -> list[dict]:
    events = []
    for ev in read_events(path):
        if ev["ev"] == "closing":
            break
        if ev["ev"] in ("assigned", "revoked", "lost"):
            events.append(ev)
    return events


def last_acked(paths: list[Path]) -> tuple[dict[int, int], int]:
    last: dict[int, int] = {}
    count = 0
    for path in paths:
        for line in path.read_text().splitlines():
            partition, offset = map(int, line.split())
            assert offset > last.get(partition, -1), f"{path}: offsets of partition {partition} must increase"
            last[partition] = offset
            count += 1
    return last, count
