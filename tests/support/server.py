"""Start and stop the server as a subprocess, exactly as a user would run it.

Used by the shared fixtures (tests/support/fixtures.py) and by the benchmarks (bench/).

    .venv/bin/python -m coordinator serve --listen 127.0.0.1:0 --admin-listen 127.0.0.1:0 --data-dir DIR
        [--set NAME=VALUE]...

Once ready, the server prints `listening kafka=HOST:PORT admin=HOST:PORT` on stdout. Its stdout and
stderr go to files in the run directory (never to pipes: a pipe nobody drains can stall the server, and an
unclosed pipe is a ResourceWarning under filterwarnings=error).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
VENV_PYTHON = REPO / ".venv" / "bin" / "python"
PYTHON = str(VENV_PYTHON if VENV_PYTHON.exists() else Path(sys.executable))

READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 20.0  # past shutdown.timeout.ms below and the server's own warning 5 s after it

# Settings every e2e server gets unless the test overrides them.
DEFAULT_SETTINGS: dict[str, str] = {
    "group.initial.rebalance.delay.ms": "0",
    # Well below STOP_TIMEOUT_S: a shutdown that has to drop a connection still busy logs which requests it waited
    # for, and a stuck step where it was stuck (coordinator.server.listener), before the harness kills it.
    "shutdown.timeout.ms": "8000",
}

LISTENING = re.compile(r"^listening kafka=(?P<kafka>\S+:\d+) admin=(?P<admin>\S+:\d+)\s*$")


def readyz(admin_url: str, timeout: float = 2) -> bool:
    """True once the server's admin listener answers /readyz with 200 (503 while the group log loads)."""
    try:
        with urllib.request.urlopen(admin_url + "/readyz", timeout=timeout) as resp:
            resp.read()
            return resp.status == 200
    except urllib.error.HTTPError as exc:
        exc.read()
        exc.close()
        return False
    except OSError:
        return False


class ServerStartError(RuntimeError):
    pass


class ServerStopError(RuntimeError):
    pass


def _tail(path: Path, limit: int = 6000) -> str:
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return "<missing>"
    return text if len(text) <= limit else "...\n" + text[-limit:]


@dataclasses.dataclass
class ServerProcess:
    proc: subprocess.Popen
    bootstrap: str  # "127.0.0.1:PORT"
    admin_url: str  # "http://127.0.0.1:PORT"
    data_dir: Path
    run_dir: Path
    settings: dict[str, str]
    stopped: bool = False  # set once stop() sent SIGTERM: an exit after that is expected

    @property
    def host(self) -> str:
        return self.bootstrap.rsplit(":", 1)[0]

    @property
    def port(self) -> int:
        return int(self.bootstrap.rsplit(":", 1)[1])

    @property
    def workers(self) -> int:
        """How many worker processes (brokers in Metadata) the server runs: its `coordinator.workers`, else one
        per core (`serve`'s default)."""
        from coordinator.cluster.topology import resolve_workers
        from coordinator.config import Config

        config = Config.load(environ={}, overrides=[f"{k}={v}" for k, v in self.settings.items()])
        return resolve_workers(None, config)

    @property
    def node_ids(self) -> list[int]:
        """The brokers' node ids, the bootstrap (worker 0) first."""
        base = int(self.settings.get("node.id", 1))
        return list(range(base, base + self.workers))

    @property
    def stdout_path(self) -> Path:
        return self.run_dir / "server.stdout"

    @property
    def stderr_path(self) -> Path:
        return self.run_dir / "server.stderr"

    def output(self) -> str:
        out, err = _tail(self.stdout_path), _tail(self.stderr_path)
        return f"--- server stdout ---\n{out}\n--- server stderr ---\n{err}"

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int:
        """SIGTERM, then wait up to `timeout` s. Raises ServerStopError (after killing it) if it hangs."""
        if self.proc.poll() is not None:
            return self.proc.returncode
        self.stopped = True
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.send_signal(signal.SIGUSR1)  # every thread's stack on its stderr (faulthandler)
            time.sleep(1)
            self.proc.kill()
            self.proc.wait(timeout=10)
            raise ServerStopError(
                f"server pid {self.proc.pid} did not exit within {timeout:.0f}s of SIGTERM; killed it\n"
                + self.output()
            ) from None


def serve_command(port: int, data_dir: Path, settings: Mapping[str, object]) -> list[str]:
    """`python -m coordinator serve` on 127.0.0.1:`port` (0: the server picks), admin on a free port."""
    cmd = [
        PYTHON,
        "-m",
        "coordinator",
        "serve",
        "--listen",
        f"127.0.0.1:{port}",
        "--admin-listen",
        "127.0.0.1:0",
        "--data-dir",
        str(data_dir),
    ]
    for name, value in settings.items():
        cmd += ["--set", f"{name}={value}"]
    return cmd


def server_env() -> dict[str, str]:
    """This environment, unbuffered, with the repository first on PYTHONPATH."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def start_server(
    run_dir: Path,
    settings: Mapping[str, object] | None = None,
    *,
    data_dir: Path | None = None,
    extra_args: list[str] | None = None,
    ready_timeout: float = READY_TIMEOUT_S,
    prefix: list[str] | None = None,
) -> ServerProcess:
    """Start the server with a fresh data dir under `run_dir` (or the given `data_dir`, e.g. to restart on an
    existing log); return once it printed its listening line. `prefix`: a command that runs it (e.g. setpriv, to
    run it as another user)."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    data_dir = Path(data_dir) if data_dir is not None else run_dir / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    merged = dict(DEFAULT_SETTINGS)
    for name, value in (settings or {}).items():
        if isinstance(value, bool):
            value = "true" if value else "false"
        merged[name] = str(value)
    cmd = (prefix or []) + serve_command(0, data_dir, merged) + (extra_args or [])
    stdout_path = run_dir / "server.stdout"
    stderr_path = run_dir / "server.stderr"
    with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
        proc = subprocess.Popen(
            cmd, cwd=REPO, env=server_env(), stdin=subprocess.DEVNULL, stdout=out, stderr=err
        )
    server = ServerProcess(proc, "", "", data_dir, run_dir, merged)

    deadline = time.monotonic() + ready_timeout
    while True:
        match = None
        try:
            for line in stdout_path.read_text(errors="replace").splitlines():
                match = LISTENING.match(line.strip())
                if match:
                    break
        except FileNotFoundError:
            pass
        if match:
            server.bootstrap = match["kafka"]
            server.admin_url = "http://" + match["admin"]
            return server
        if proc.poll() is not None:
            raise ServerStartError(
                f"server exited with code {proc.returncode} before printing its listening line\n"
                f"command: {' '.join(cmd)}\n{server.output()}"
            )
        if time.monotonic() > deadline:
            proc.kill()
            proc.wait(timeout=10)
            raise ServerStartError(
                f"server printed no listening line within {ready_timeout:.0f}s; killed it\n"
                f"command: {' '.join(cmd)}\n{server.output()}"
            )
        time.sleep(0.05)


# -- the workers of `serve --workers N` ------------------------------------------------------------------------


def worker_pids(supervisor_pid: int) -> list[int]:
    """The live children of the supervisor, from /proc."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == supervisor_pid and fields[0] != "Z":
            pids.append(int(entry))
    return sorted(pids)


def running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def worker_pid(server: ServerProcess, worker: int) -> int:
    """The pid of worker `worker`: its environment carries KGC_WORKER_SPEC={"index": W, ...}."""
    for pid in worker_pids(server.proc.pid):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item)
        except OSError:
            continue
        if b"KGC_WORKER_SPEC" in env and json.loads(env[b"KGC_WORKER_SPEC"])["index"] == worker:
            return pid
    raise AssertionError(f"no worker {worker} among the children of {server.proc.pid}\n{server.output()}")
