"""Helpers for the e2e tests: deterministic test messages, running client scripts in their own processes, and
checking that what came back is byte-identical to what went in."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from tests.support.server import PYTHON, REPO, ServerProcess

CLIENTS = Path(__file__).resolve().parents[1] / "e2e" / "clients"
CLIENT_TIMEOUT_S = 90.0


def make_messages(n: int, seed: int, *, partition: int | None = None) -> list[dict[str, Any]]:
    """n messages with distinct binary keys, binary values of varied size (1 B .. 2 KiB), and headers on 3 of
    4 (including a duplicated header name and an empty header value), timestamps 1 ms apart. Hex-encoded."""
    rng = random.Random(seed)
    base_ts = int(time.time() * 1000) - n
    out = []
    for i in range(n):
        key = f"key-{seed}-{i:05d}-".encode() + rng.randbytes(rng.randint(0, 8))
        size = rng.choice([1, 7, 100, 333, 1000, 2048]) if i % 10 else rng.randint(1, 64)
        value = rng.randbytes(size)
        if i % 4 == 0:
            headers = []
        else:
            headers = [["seq", str(i).encode().hex()], ["bin", rng.randbytes(rng.randint(1, 24)).hex()]]
            if i % 4 == 2:
                headers += [["dup", b"first".hex()], ["dup", b"second".hex()], ["empty", ""]]
        out.append(
            {
                "key": key.hex(),
                "value": value.hex(),
                "headers": headers,
                "timestamp": base_ts + i,
                "partition": partition,
            }
        )
    return out


def write_messages(path: Path, messages: list[dict[str, Any]]) -> Path:
    path.write_text(json.dumps(messages))
    return path


def run(
    cmd: list[str],
    server: ServerProcess | None,
    *,
    timeout: float = CLIENT_TIMEOUT_S,
    input: bytes | None = None,
    check: bool = True,
) -> subprocess.CompletedProcess:
    """Run a client process; on failure or time-out, fail the test with its output and the server's."""
    try:
        proc = subprocess.run(
            cmd,
            input=input,
            capture_output=True,
            timeout=timeout,
            cwd=REPO,
            stdin=None if input is not None else subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(
            f"client timed out after {timeout}s: {' '.join(cmd)}\n"
            f"stdout: {(exc.stdout or b'')[-3000:]!r}\nstderr: {(exc.stderr or b'')[-3000:]!r}\n"
            + (server.output() if server else "")
        )
    if check and proc.returncode != 0:
        pytest.fail(
            f"client exited {proc.returncode}: {' '.join(cmd)}\n"
            f"stdout: {proc.stdout[-3000:]!r}\nstderr: {proc.stderr.decode(errors='replace')[-5000:]}\n"
            + (server.output() if server else "")
        )
    return proc


def run_client(
    lib: str,
    command: str,
    server: ServerProcess,
    *args: str,
    output: Path | None = None,
    timeout: float = CLIENT_TIMEOUT_S,
) -> dict[str, Any]:
    """Run tests/e2e/clients/<lib>.py COMMAND --bootstrap ... in its own process; return its JSON result."""
    cmd = [PYTHON, str(CLIENTS / f"{lib}.py"), command, "--bootstrap", server.bootstrap, *args]
    if output is not None:
        cmd += ["--output", str(output)]
    proc = run(cmd, server, timeout=timeout)
    text = output.read_text() if output is not None else proc.stdout.decode()
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pytest.fail(
            f"client printed no JSON: {' '.join(cmd)}\nstdout: {proc.stdout[-3000:]!r}\n"
            f"stderr: {proc.stderr[-3000:]!r}"
        )


def require_kcat() -> str:
    path = shutil.which("kcat")
    if path is None:
        pytest.fail("kcat is not installed: run scripts/install-system-deps.sh (the e2e suite skips nothing)")
    return path


def produce(
    lib: str, server: ServerProcess, topic: str, messages: list[dict[str, Any]], tmp_path: Path, *extra: str
) -> list[dict[str, Any]]:
    src = write_messages(tmp_path / f"{lib}-{topic}-in.json", messages)
    result = run_client(
        lib,
        "produce",
        server,
        "--topic",
        topic,
        "--input",
        str(src),
        "--acks",
        "all",
        *extra,
        output=tmp_path / f"{lib}-{topic}-delivered.json",
    )
    return result["delivered"]


def consume(
    lib: str, server: ServerProcess, topic: str, partitions: int, expect: int, tmp_path: Path, *extra: str
) -> dict[str, Any]:
    return run_client(
        lib,
        "consume",
        server,
        "--topic",
        topic,
        "--partitions",
        str(partitions),
        "--expect",
        str(expect),
        *extra,
        output=tmp_path / f"{lib}-{topic}-consumed.json",
    )


def check_delivered(
    messages: list[dict[str, Any]],
    delivered: list[dict[str, Any] | None],
    partitions: int,
    *,
    spread: bool = True,
) -> dict[tuple[int, int], int]:
    """Every message acknowledged without error; per partition, offsets 0..n-1 in production order.
    Returns {(partition, offset): message index}."""
    assert len(delivered) == len(messages)
    missing = [i for i, d in enumerate(delivered) if d is None]
    assert not missing, f"{len(missing)} messages got no delivery report, first: {missing[:5]}"
    failed = [(i, d["error"]) for i, d in enumerate(delivered) if d["error"] is not None]
    assert not failed, f"{len(failed)} of {len(messages)} deliveries failed, first: {failed[:3]}"
    by_partition: dict[int, list[int]] = defaultdict(list)
    for i, d in enumerate(delivered):
        assert 0 <= d["partition"] < partitions, f"message {i} acknowledged on partition {d['partition']}"
        by_partition[d["partition"]].append(i)
    for p, indexes in by_partition.items():
        offsets = [delivered[i]["offset"] for i in indexes]
        wrong = [(i, o, want) for want, (i, o) in enumerate(zip(indexes, offsets, strict=True)) if o != want]
        assert not wrong, (
            f"partition {p}: acknowledged offsets in production order are not 0..{len(indexes) - 1}; "
            f"first (message, offset, expected): {wrong[:5]}"
        )
    if spread and partitions > 1 and len(messages) >= 100:
        assert len(by_partition) == partitions, (
            f"keyed messages landed on partitions {sorted(by_partition)} only"
        )
    return {(d["partition"], d["offset"]): i for i, d in enumerate(delivered)}


def check_consumed(
    messages: list[dict[str, Any]],
    placed: dict[tuple[int, int], int],
    consumed: dict[str, Any],
    partitions: int,
    *,
    check_timestamps: bool = True,
) -> None:
    """The consumer read back exactly the produced messages: same key, value, headers (and timestamp), at
    the acknowledged partition and offset, each partition in offset order 0..n-1, and the watermarks agree."""
    assert consumed["errors"] == [], f"consumer errors: {consumed['errors'][:5]}"
    records = consumed["records"]
    per_partition: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        per_partition[r["partition"]].append(r)
    expected_counts = defaultdict(int)
    for p, _o in placed:
        expected_counts[p] += 1
    got_counts = {p: len(rs) for p, rs in per_partition.items()}
    assert got_counts == dict(expected_counts), (
        f"records per partition: got {got_counts}, want {dict(expected_counts)}"
    )
    mismatches = []
    for p, rs in per_partition.items():
        offsets = [r["offset"] for r in rs]
        assert offsets == list(range(len(rs))), (
            f"partition {p}: consumed offsets not 0..{len(rs) - 1} in order"
        )
        for r in rs:
            m = messages[placed[(p, r["offset"])]]
            for field in ("key", "value", "headers"):
                if r[field] != m[field]:
                    mismatches.append((p, r["offset"], field, r[field], m[field]))
            if check_timestamps and r["timestamp"] != m["timestamp"]:
                mismatches.append((p, r["offset"], "timestamp", r["timestamp"], m["timestamp"]))
    assert not mismatches, (
        f"{len(mismatches)} field mismatches (partition, offset, field, got, want): "
        + "; ".join(repr(x)[:300] for x in mismatches[:5])
    )
    want_wm = {str(p): [0, expected_counts.get(p, 0)] for p in range(partitions)}
    assert consumed["watermarks"] == want_wm, f"watermarks {consumed['watermarks']} != {want_wm}"


def roundtrip(
    producer_lib: str,
    consumer_lib: str,
    server: ServerProcess,
    topic: str,
    partitions: int,
    n: int,
    seed: int,
    tmp_path: Path,
    producer_args: tuple[str, ...] = (),
) -> None:
    messages = make_messages(n, seed)
    delivered = produce(producer_lib, server, topic, messages, tmp_path, *producer_args)
    placed = check_delivered(messages, delivered, partitions)
    consumed = consume(consumer_lib, server, topic, partitions, n, tmp_path)
    check_consumed(messages, placed, consumed, partitions)


def create_topic(lib: str, server: ServerProcess, topic: str, partitions: int) -> None:
    result = run_client(lib, "create-topic", server, "--topic", topic, "--partitions", str(partitions))
    assert result["error"] is None, f"{lib} create-topic {topic}: {result['error']}"


def check_consumed_in_order(
    messages: list[dict[str, Any]], consumed: dict[str, Any], partitions: int
) -> None:
    """For messages produced to explicit partitions without usable acknowledgements (acks=0): each partition
    holds exactly its messages, in production order, at offsets 0..n-1, byte-identical."""
    assert consumed["errors"] == [], f"consumer errors: {consumed['errors'][:5]}"
    for p in range(partitions):
        want = [m for m in messages if m["partition"] == p]
        got = [r for r in consumed["records"] if r["partition"] == p]
        assert [r["offset"] for r in got] == list(range(len(got))), f"partition {p}: offsets not 0..n-1"
        assert len(got) == len(want), f"partition {p}: {len(got)} records, want {len(want)}"
        for r, m in zip(got, want, strict=True):
            for field in ("key", "value", "headers", "timestamp"):
                assert r[field] == m[field], f"partition {p} offset {r['offset']}: {field} differs"
        assert consumed["watermarks"][str(p)] == [0, len(want)], consumed["watermarks"]
