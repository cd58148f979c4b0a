"""Helpers for the observability e2e tests: group members in their own processes, a producer, and readers for
/metrics and the /v1 API."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.members import admin_http
from tests.support.server import PYTHON, REPO, ServerProcess

CLIENTS = Path(__file__).resolve().parent / "clients"


def produce(server: ServerProcess, topic: str, partitions: int, per_partition: int) -> dict[int, int]:
    """Create `topic` and write `per_partition` records to each partition; returns partition -> log-end offset."""
    proc = subprocess.run(
        [
            PYTHON,
            str(CLIENTS / "produce.py"),
            "--bootstrap",
            server.bootstrap,
            "--topic",
            topic,
            "--partitions",
            str(partitions),
            "--per-partition",
            str(per_partition),
        ],
        capture_output=True,
        timeout=60,
        cwd=REPO,
        stdin=subprocess.DEVNULL,
    )
    if proc.returncode != 0:
        pytest.fail(f"producer failed: {proc.stderr.decode()[-3000:]}\n{server.output()}")
    ends = json.loads(proc.stdout.decode().strip().splitlines()[-1])["log_end_offsets"]
    return {int(p): o for p, o in ends.items()}


class Member:
    """One member process (clients/member.py); see that file for events and commands."""

    def __init__(
        self, base: Path, name: str, server: ServerProcess, group: str, topic: str, *extra: str
    ) -> None:
        self.name = name
        self.events_path = base / f"{name}.events"
        self.stderr_path = base / f"{name}.stderr"
        cmd = [
            PYTHON,
            str(CLIENTS / "member.py"),
            "--bootstrap",
            server.bootstrap,
            "--group",
            group,
            "--topic",
            topic,
            "--events",
            str(self.events_path),
            "--client-id",
            name,
            *extra,
        ]
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(
                cmd, cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=err
            )

    def events(self, ev: str | None = None) -> list[dict[str, Any]]:
        try:
            lines = self.events_path.read_text().splitlines()
        except FileNotFoundError:
            return []
        out = [json.loads(line) for line in lines if line.strip()]
        return [e for e in out if ev is None or e["ev"] == ev]

    def committed(self) -> dict[int, int]:
        """partition -> the last offset this member committed successfully."""
        out: dict[int, int] = {}
        for e in self.events("commit"):
            out.update({int(p): o for p, o in e["offsets"].items()})
        return out

    def member_id(self) -> str | None:
        assigned = self.events("assigned")
        return assigned[-1]["member_id"] if assigned else None

    def send(self, command: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((command + "\n").encode())
        self.proc.stdin.flush()

    def close(self, timeout: float = 30) -> None:
        """Leave politely (LeaveGroup) and wait for the process."""
        if self.proc.poll() is None:
            try:
                self.send("close")
            except (BrokenPipeError, OSError):
                pass
        self._reap(timeout)

    def kill(self) -> None:
        """SIGKILL: no LeaveGroup, the session has to expire."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self._reap(10)

    def _reap(self, timeout: float) -> None:
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        if self.proc.stdin is not None:
            try:
                self.proc.stdin.close()
            except (BrokenPipeError, OSError):
                pass

    def describe(self) -> str:
        return (
            f"--- {self.name} events ---\n"
            + "\n".join(json.dumps(e) for e in self.events()[-30:])
            + f"\n--- {self.name} stderr ---\n"
            + _tail(self.stderr_path)
        )


def _tail(path: Path, limit: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-limit:]
    except FileNotFoundError:
        return "<missing>"


class Members:
    def __init__(self, base: Path) -> None:
        self.base = base
        self.started: list[Member] = []

    def start(self, name: str, server: ServerProcess, group: str, topic: str, *extra: str) -> Member:
        member = Member(self.base, name, server, group, topic, *extra)
        self.started.append(member)
        return member

    def describe(self) -> str:
        return "\n".join(m.describe() for m in self.started)

    def cleanup(self) -> None:
        for member in self.started:
            member.kill()


def get_json(server: ServerProcess, path: str, method: str = "GET", body: Any = None) -> tuple[int, Any]:
    return admin_http(server, method, path, body)


def metrics_text(server: ServerProcess) -> str:
    with urllib.request.urlopen(server.admin_url + "/metrics", timeout=30) as resp:
        return resp.read().decode()


Samples = dict[str, list[tuple[dict[str, str], float]]]


def metrics(server: ServerProcess) -> Samples:
    """sample name -> [(labels, value)]."""
    out: Samples = {}
    for family in text_string_to_metric_families(metrics_text(server)):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return out


def value(samples: Samples, name: str, **labels: str) -> float | None:
    for sample_labels, v in samples.get(name, []):
        if all(sample_labels.get(k) == want for k, want in labels.items()):
            return v
    return None


def wait_until(check: Callable[[], Any], timeout: float, what: str, explain: Callable[[], str] = str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}\n{explain()}", pytrace=False)
        time.sleep(0.2)
