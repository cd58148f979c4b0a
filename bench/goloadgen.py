"""The compiled load generator (bench/loadgen, Go with franz-go's kmsg): its build, shared by the benchmarks that
drive it (compare.py's throughput, front_instances.py --scale --op heartbeat)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
GO_LOADGEN = REPO / ".deps" / "go" / "bin" / "bench-loadgen"


def build_go_loadgen() -> str | None:
    """Build bench/loadgen (Go, franz-go's kmsg; module cache in .deps/go). None when built, else why not."""
    env = dict(
        os.environ,
        GOMODCACHE=str(REPO / ".deps" / "go" / "mod"),
        GOCACHE=str(REPO / ".deps" / "go" / "cache"),
        GOFLAGS="-mod=mod",
    )
    try:
        out = subprocess.run(
            ["go", "build", "-o", str(GO_LOADGEN), "."],
            cwd=BENCH / "loadgen",
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"go build: {exc}"
    return None if out.returncode == 0 else f"go build: {(out.stderr or out.stdout).strip()[-300:]}"
