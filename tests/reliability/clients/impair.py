"""A userspace netem for the network-fault tests: two TUN devices joined by this process, which delays and drops
the packets it carries between them.

Usage: impair.py --netns NS --host-dev HDEV --ns-dev NDEV --delay-ms 100 --loss 0.05 [--seed N]

Why: the sandbox kernel has no sch_netem (`tc qdisc add ... netem` answers "Specified qdisc kind is unknown"),
no gact action and no iptables binary, so delay and loss are made here. The process opens the TUN device HDEV in
its own (the host's) network namespace, enters NS (setns) and opens NDEV there; the test then puts addresses
on both (a point-to-point pair). Every IP packet read from one device is dropped with probability --loss, or
written to the other after --delay-ms (so the round trip gets twice the delay). Both devices vanish when this
process exits. Prints "ready" once both devices exist; SIGTERM ends it and prints one JSON line of counts.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import fcntl
import json
import os
import random
import signal
import struct
import sys

TUNSETIFF = 0x400454CA
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000
CLONE_NEWNET = 0x40000000


def open_tun(name: str) -> int:
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
    return fd


def enter_netns(name: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/var/run/netns/{name}", os.O_RDONLY)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), f"setns into {name} failed")
    os.close(fd)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--netns", required=True)
    ap.add_argument("--host-dev", required=True)
    ap.add_argument("--ns-dev", required=True)
    ap.add_argument("--delay-ms", type=float, default=100)
    ap.add_argument("--loss", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=None)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    host_fd = open_tun(args.host_dev)
    enter_netns(args.netns)
    ns_fd = open_tun(args.ns_dev)
    counts = {"to_ns": 0, "to_host": 0, "dropped": 0}
    delay_s = args.delay_ms / 1000

    loop = asyncio.new_event_loop()
    stop = asyncio.Event()

    def forward(src: int, dst: int, direction: str) -> None:
        while True:
            try:
                packet = os.read(src, 65536)
            except BlockingIOError:
                return
            if rng.random() < args.loss:
                counts["dropped"] += 1
                continue
            counts[direction] += 1
            loop.call_later(delay_s, _write, dst, packet)

    def _write(fd: int, packet: bytes) -> None:
        try:
            os.write(fd, packet)
        except OSError:
            pass  # the device is down or its queue is full: the packet is lost, as on a wire

    loop.add_reader(host_fd, forward, host_fd, ns_fd, "to_ns")
    loop.add_reader(ns_fd, forward, ns_fd, host_fd, "to_host")
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    print("ready", flush=True)
    loop.run_until_complete(stop.wait())
    print(json.dumps(counts), flush=True)
    os.close(host_fd)
    os.close(ns_fd)
    sys.exit(0)


if __name__ == "__main__":
    main()
