"""Java for the compatibility and security tests: jar sets (scripts/fetch-jars.sh), Java group members
(tests/compat/java/GroupMember.java) followed through the same tests.support.members.Member machinery as the
Python members, and running Kafka's own command-line tools."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.members import Member, Members
from tests.support.server import REPO, ServerProcess

FETCH_JARS = REPO / "scripts" / "fetch-jars.sh"
JAVA_SOURCES = REPO / "tests" / "compat" / "java"
CLIENT_SETS = ["kafka-clients-3.9", "kafka-clients-4"]


def jars_dir() -> Path:
    return Path(os.environ.get("KGC_JARS_DIR", REPO / ".deps" / "jars"))


def need_tools(*tools: str) -> None:
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        pytest.skip(f"the Java compatibility tests need {', '.join(missing)} on PATH")


_fetched: dict[str, Path] = {}


def fetch_jar_set(name: str) -> Path:
    """DIR of the jar set NAME (scripts/fetch-jars.sh, a no-op when cached)."""
    if name in _fetched:
        return _fetched[name]
    need_tools("java")
    base = jars_dir()
    if not (base / name / ".complete").exists():
        need_tools("mvn")
        proc = subprocess.run(
            ["bash", str(FETCH_JARS), str(base), name],
            capture_output=True,
            text=True,
            timeout=600,
            stdin=subprocess.DEVNULL,
        )
        if proc.returncode != 0:
            pytest.fail(
                f"scripts/fetch-jars.sh {base} {name} failed ({proc.returncode}):\n"
                f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}",
                pytrace=False,
            )
    _fetched[name] = base / name
    return base / name


def classpath(*parts: Path) -> str:
    """A java -cp value: directories of classes as is, jar directories as DIR/*."""
    out = []
    for p in parts:
        out.append(str(p) if not any(p.glob("*.jar")) else str(p / "*"))
    return ":".join(out)


@dataclasses.dataclass
class JavaClients:
    set_name: str
    jars: Path
    classes: Path
    version: str  # kafka-clients version, e.g. "3.9.1"

    @property
    def classpath(self) -> str:
        return classpath(self.classes, self.jars)


JAVA_OPTS = [
    "-Xss1m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-Xshare:auto",
    "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
]


class JavaMember(Member):
    """A GroupMember.java process: its JSON-lines events go to stdout (redirected to the events file), its
    client logging (stderr) to the log file."""

    def start(self) -> JavaMember:
        with open(self.events_path, "wb") as out, open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(self.cmd, cwd=REPO, stdin=subprocess.PIPE, stdout=out, stderr=log)
        self.started_at = time.time()
        return self


def start_java_member(
    pool: Members,
    java_clients,
    name: str,
    server: ServerProcess,
    group: str,
    topic: str,
    *,
    instance_id: str | None = None,
    assignor: str = "range",
    settings: dict[str, object] | None = None,
    max_runtime: float = 150.0,
    regex: bool = False,
) -> JavaMember:
    """`regex`: `topic` is a regular expression, subscribed as a SubscriptionPattern (kafka-clients 4.x)."""
    pool.server = server
    cmd = [
        "java",
        *JAVA_OPTS,
        "-cp",
        java_clients.classpath,
        "GroupMember",
        "--bootstrap",
        server.bootstrap,
        "--topic",
        topic,
        "--group",
        group,
        "--assignor",
        assignor,
        "--name",
        name,
        "--max-runtime",
        str(max_runtime),
    ]
    if instance_id:
        cmd += ["--instance-id", instance_id]
    if regex:
        cmd.append("--regex")
    for k, v in (settings or {}).items():
        cmd += ["--set", f"{k}={v}"]
    member = JavaMember(f"java-{java_clients.version}", name, cmd, pool.run_dir)
    pool.all.append(member)
    return member.start()


def run_java_tool(
    jars: Path,
    main_class: str,
    *args: str,
    server: ServerProcess | None = None,
    timeout: float = 60.0,
    check: bool = True,
) -> subprocess.CompletedProcess:
    cmd = ["java", *JAVA_OPTS, "-cp", str(jars / "*"), main_class, *args]
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(
            f"timed out after {timeout}s: {' '.join(cmd)}\nstdout: {exc.stdout!r}\nstderr: {exc.stderr!r}\n"
            + (server.output() if server else ""),
            pytrace=False,
        )
    if check and proc.returncode != 0:
        pytest.fail(
            f"exit code {proc.returncode}: {' '.join(cmd)}\nstdout: {proc.stdout[-4000:]}\n"
            f"stderr: {proc.stderr[-4000:]}\n" + (server.output() if server else ""),
            pytrace=False,
        )
    return proc
