"""Plumbing shared by the group-member scripts (each runs in its own process).

Events: one JSON object per line, appended to the --events file and flushed at once, so the test can follow a
member while it runs:  {"ev": NAME, "t": UNIX_SECONDS, "member": MEMBER_NAME, ...fields}.

    started      pid
    subscribed
    assigned     partitions (this callback's), held (the whole assignment after it), protocol, member_id
    revoked      partitions, held, protocol
    lost         partitions, held, protocol
    records      recs: [[partition, offset, key_hex], ...] (one poll's worth, in poll order)
    commit       offsets: {partition: next_offset} (a synchronous commit that succeeded)
    commit_error offsets, error
    error        source, code, name, str, fatal, retriable
    stalling     seconds (stopped polling on request) / resumed
    closing / closed / exiting

Control: one command per line on stdin.
    close        leave politely: close the consumer (LeaveGroup for a dynamic member) and exit 0
    stall S      stop calling poll for S seconds (the client's background threads keep running)
    exit         os._exit(0) without closing anything (like a crash, but the kernel closes the sockets)
End of stdin counts as `close`.
"""

from __future__ import annotations

import json
import os
import queue
import sys
import threading
import time
from typing import Any


def hx(data: bytes | None) -> str | None:
    return None if data is None else bytes(data).hex()


def kv_pairs(items: list[str] | None) -> dict[str, str]:
    out = {}
    for item in items or []:
        name, _, value = item.partition("=")
        out[name] = value
    return out


def typed(items: dict[str, str]) -> dict[str, Any]:
    """name=value pairs with integers converted, for kafka-python/aiokafka keyword config."""
    out: dict[str, Any] = {}
    for name, value in items.items():
        try:
            out[name] = int(value)
        except ValueError:
            out[name] = {"true": True, "false": False}.get(value.lower(), value)
    return out


class Events:
    def __init__(self, path: str, name: str) -> None:
        self._file = open(path, "a", buffering=1)  # noqa: SIM115 - kept open for the life of the process
        self._lock = threading.Lock()
        self.name = name

    def emit(self, ev: str, **fields: Any) -> None:
        line = json.dumps({"ev": ev, "t": time.time(), "member": self.name, **fields})
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()


class Control:
    """Reads commands from stdin on a daemon thread."""

    def __init__(self) -> None:
        self._queue: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, name="control", daemon=True).start()

    def _read(self) -> None:
        for line in sys.stdin:
            line = line.strip()
            if line:
                self._queue.put(line)
        self._queue.put("close")

    def get(self) -> str | None:
        try:
            return self._queue.get_nowait()
        except queue.Empty:
            return None


class Loop:
    """The command/stall/deadline bookkeeping every member's poll loop does between polls."""

    def __init__(self, events: Events, control: Control, max_runtime: float) -> None:
        self.events = events
        self.control = control
        self.deadline = time.monotonic() + max_runtime
        self.stall_until = 0.0
        self.stalled = False

    def step(self) -> str:
        """-> "close" to leave the loop, "skip" to not poll this round, "poll" to poll."""
        cmd = self.control.get()
        if cmd is not None:
            word, _, arg = cmd.partition(" ")
            if word == "close":
                return "close"
            if word == "exit":
                self.events.emit("exiting")
                os._exit(0)
            if word == "stall":
                self.stall_until = time.monotonic() + float(arg)
                self.stalled = True
                self.events.emit("stalling", seconds=float(arg))
        if time.monotonic() > self.deadline:
            self.events.emit(
                "error",
                source="member",
                code=None,
                name="MAX_RUNTIME",
                str="max runtime reached",
                fatal=False,
                retriable=False,
            )
            return "close"
        if self.stalled:
            if time.monotonic() < self.stall_until:
                return "skip"  # the caller sleeps a little (an asyncio caller must not block its loop)
            self.stalled = False
            self.events.emit("resumed")
        return "poll"


def add_member_args(ap: Any) -> None:
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--events", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--client-id", default=None)
    ap.add_argument("--instance-id", default=None)
    ap.add_argument("--commit", choices=["sync", "none"], default="sync")
    ap.add_argument("--max-runtime", type=float, default=150.0)
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="extra client config")
