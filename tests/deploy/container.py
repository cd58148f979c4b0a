"""The container engine for tests/deploy/test_container.py: podman as a new user runs it on this kind of machine
(rootful, `--isolation chroot` builds, the runc runtime, cgroupfs, host networking), the stand-in base image and
the wheelhouse that let the Dockerfile build with no registry and no index."""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import sys
import time
import tomllib
from pathlib import Path

from .deploy_support import REPO

BASE_IMAGE = "localhost/kgc-python-base:3.11-bookworm"
IMAGE = "localhost/kafka-group-coordinator:test"

# No systemd here: cgroupfs; no rlimits podman could not raise in a nested sandbox; runc, Debian's runtime.
CONTAINERS_CONF = """\
[containers]
default_ulimits = []

[engine]
cgroup_manager = "cgroupfs"
runtime = "runc"
events_logger = "file"
"""


def unavailable() -> str | None:
    """Why containers cannot run here, or None."""
    if sys.platform != "linux":
        return "containers need Linux"
    if os.geteuid() != 0:
        return "the container tests run podman as root (rootful), and this is not root"
    missing = [tool for tool in ("podman", "runc", "debootstrap") if shutil.which(tool) is None]
    if missing:
        return f"{', '.join(missing)} not installed (scripts/install-system-deps.sh installs them)"
    return None


class Podman:
    def __init__(self, workdir: Path) -> None:
        conf = workdir / "containers.conf"
        conf.write_text(CONTAINERS_CONF)
        self.env = {**os.environ, "CONTAINERS_CONF": str(conf)}

    def __call__(
        self, *args: str, timeout: float = 120, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            ["podman", *args], env=self.env, capture_output=True, text=True, timeout=timeout
        )
        if check and done.returncode != 0:
            raise AssertionError(
                f"podman {' '.join(args)} exited {done.returncode}\n{done.stdout}\n{done.stderr}"
            )
        return done

    def probe(self) -> str | None:
        """Why podman cannot work here, or None."""
        info = self("info", timeout=60, check=False)
        if info.returncode != 0:
            return f"podman info failed: {info.stderr.strip()[-500:]}"
        return None

    def image_size(self, image: str) -> int:
        return int(self("image", "inspect", "--format", "{{.Size}}", image).stdout.strip())

    def ensure_base(self) -> tuple[float, str | None]:
        """The stand-in for python:3.11-slim, built once per machine (kept in podman's store), and a container
        run from it: (seconds taken, why this machine cannot make or run it, or None)."""
        started = time.monotonic()
        done = subprocess.run(
            ["bash", str(REPO / "scripts" / "build-python-base.sh"), BASE_IMAGE],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        if done.returncode != 0:
            return 0.0, f"no base image (scripts/build-python-base.sh failed): {done.stderr.strip()[-800:]}"
        seconds = time.monotonic() - started
        ran = self(
            "run",
            "--rm",
            "--network",
            "host",
            "--entrypoint",
            "python3",
            BASE_IMAGE,
            "-c",
            "print('ok')",
            check=False,
        )
        if ran.returncode != 0 or ran.stdout.strip() != "ok":
            return seconds, f"podman cannot run a container here: {ran.stderr.strip()[-800:]}"
        return seconds, None

    def build(self, wheels: Path) -> float:
        """The project's Dockerfile on the stand-in base, pip reading only the wheelhouse. Seconds taken."""
        started = time.monotonic()
        self(
            "build",
            "--quiet",
            "--format",
            "docker",  # HEALTHCHECK is a Docker image-format field
            "--isolation",
            "chroot",
            "--build-arg",
            f"PYTHON_IMAGE={BASE_IMAGE}",
            "--build-arg",
            "PIP_NO_INDEX=1",
            "--build-arg",
            "PIP_FIND_LINKS=/wheels",
            "--volume",
            f"{wheels}:/wheels:ro",
            "--tag",
            IMAGE,
            str(REPO),
            timeout=900,
        )
        return time.monotonic() - started


def build_wheelhouse(target: Path) -> None:
    """Wheels of the project's runtime dependencies and its build backend, built on the host (PyPI or pip's
    cache), so that the image build needs no network."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    requirements = [*project["project"]["dependencies"], *project["build-system"]["requires"]]
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir", str(target), *requirements],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        raise AssertionError(f"pip wheel failed\n{done.stdout}\n{done.stderr}")


def admin_port() -> int:
    """A port for the admin listener. The HEALTHCHECK reads its number from KGC_ADMIN_LISTEN, so it cannot be 0
    (the Kafka listener is, and the test reads the port it got from the log): one that is free now, below the
    kernel's ephemeral range, so that no port-0 bind elsewhere is handed it before the container binds it."""
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        low = int(f.read().split()[0])
    for port in random.sample(range(max(1024, low - 8000), low), 200):
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError("no free port below the ephemeral range")
