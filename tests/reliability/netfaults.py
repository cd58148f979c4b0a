"""Network namespaces for the network-fault tests: the test's own namespaces, veth pairs and TUN pairs.

    with Netns() as ns:                         # a namespace, a veth pair 10.a.b.1 (host) <-> 10.a.b.2 (ns)
        ns.exec_prefix                          # ["ip", "netns", "exec", NAME]: run a client inside it
        ns.cut(); ns.heal()                     # host end of the veth down / up: packets stop, no RST
    with Netns(link="impaired", delay_ms=100, loss=0.05) as ns:
        ...                                     # a TUN pair joined by clients/impair.py (delay + loss)

Everything is removed on exit, also when the test fails: the namespace (which takes the ns end of a veth and
the veth with it), the impairer process (its TUN devices vanish with it). Names carry the test process's pid, so
parallel runs do not collide; a namespace left over by a killed run with the same pid is removed first.

`tc qdisc ... netem` does not work in this sandbox (the kernel has no sch_netem: "Specified qdisc kind is
unknown"), so delay and loss come from clients/impair.py, a userspace netem between two TUN devices.
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

IMPAIR = Path(__file__).resolve().parent / "clients" / "impair.py"
_counter = itertools.count(1)


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


@functools.cache
def netns_support() -> str | None:
    """None if this process can create namespaces and veth pairs, else why not."""
    if shutil.which("ip") is None:
        return "no `ip` command (iproute2)"
    if os.geteuid() != 0:
        return "not root: network namespaces need CAP_NET_ADMIN"
    if not Path("/dev/net/tun").exists():
        return "no /dev/net/tun"
    name = f"kgcprobe{os.getpid()}"
    made = ip("netns", "add", name, check=False)
    if made.returncode != 0:
        return f"`ip netns add` failed: {made.stderr.strip()}"
    ip("netns", "del", name, check=False)
    return None


class Netns:
    def __init__(self, link: str = "veth", delay_ms: float = 0, loss: float = 0.0, seed: int | None = None):
        assert link in ("veth", "impaired")
        n = next(_counter)
        tag = f"{os.getpid() % 100000}x{n}"
        self.name = f"kgcns{tag}"
        self.host_dev = f"kgh{tag}"[:15]
        self.ns_dev = f"kgn{tag}"[:15]
        subnet = (os.getpid() * 7 + n) % 250 + 1
        self.host_ip = f"10.213.{subnet}.1"
        self.ns_ip = f"10.213.{subnet}.2"
        self.link = link
        self.delay_ms, self.loss, self.seed = delay_ms, loss, seed
        self.impairer: subprocess.Popen | None = None
        self.impairer_counts: dict | None = None
        self.cuts = 0

    @property
    def exec_prefix(self) -> list[str]:
        return ["ip", "netns", "exec", self.name]

    def __enter__(self) -> Netns:
        why = netns_support()
        if why is not None:
            pytest.skip(f"network namespaces unavailable: {why}")
        ip("netns", "del", self.name, check=False)  # a leftover of a killed run
        ip("link", "del", self.host_dev, check=False)
        try:
            ip("netns", "add", self.name)
            ip("-n", self.name, "link", "set", "lo", "up")
            if self.link == "veth":
                ip("link", "add", self.host_dev, "type", "veth", "peer", "name", self.ns_dev)
                ip("link", "set", self.ns_dev, "netns", self.name)
                ip("addr", "add", f"{self.host_ip}/24", "dev", self.host_dev)
                ip("-n", self.name, "addr", "add", f"{self.ns_ip}/24", "dev", self.ns_dev)
            else:
                self._start_impairer()
                ip("addr", "add", self.host_ip, "peer", self.ns_ip, "dev", self.host_dev)
                ip("-n", self.name, "addr", "add", self.ns_ip, "peer", self.host_ip, "dev", self.ns_dev)
            ip("link", "set", self.host_dev, "up")
            ip("-n", self.name, "link", "set", self.ns_dev, "up")
        except BaseException:
            self.close()
            raise
        return self

    def _start_impairer(self) -> None:
        cmd = [
            sys.executable,
            str(IMPAIR),
            "--netns",
            self.name,
            "--host-dev",
            self.host_dev,
            "--ns-dev",
            self.ns_dev,
            "--delay-ms",
            str(self.delay_ms),
            "--loss",
            str(self.loss),
        ]
        if self.seed is not None:
            cmd += ["--seed", str(self.seed)]
        self.impairer = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.impairer.stdout.readline().strip()
        if line != "ready":
            err = self.impairer.stderr.read() if self.impairer.poll() is not None else ""
            raise RuntimeError(f"impairer did not start: {line!r} {err}")

    def cut(self) -> None:
        """Take the host end of the link down: nothing passes either way, and no RST tells anyone."""
        ip("link", "set", self.host_dev, "down")
        self.cuts += 1

    def heal(self) -> None:
        ip("link", "set", self.host_dev, "up")
        if self.link == "veth":
            # A veth that went down lost its connected route on the host; bringing it up restores it.
            pass

    def close(self) -> None:
        if self.impairer is not None and self.impairer.poll() is None:
            self.impairer.send_signal(signal.SIGTERM)
            try:
                out, _ = self.impairer.communicate(timeout=10)
                lines = [x for x in out.splitlines() if x.strip()]
                if lines:
                    self.impairer_counts = json.loads(lines[-1])
            except subprocess.TimeoutExpired:
                self.impairer.kill()
                self.impairer.communicate(timeout=10)
        elif self.impairer is not None:
            self.impairer.communicate(timeout=10)
        ip("netns", "del", self.name, check=False)
        ip("link", "del", self.host_dev, check=False)  # gone with the namespace or the impairer; be sure

    def __exit__(self, *exc: object) -> None:
        self.close()
