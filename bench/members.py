#!/usr/bin/env python
"""confluent-kafka group members for bench/compare.py: one process hosts several consumers, one thread each.

    members.py --bootstrap B --group G --topic T --indices 0,1,2
               [--strategy range|cooperative-sticky|consumer/uniform|consumer/range] [--session-ms 6000] [--static]

A strategy `consumer/<assignor>` uses the consumer group protocol of KIP-848 (group.protocol=consumer) with that
server-side assignor; the session timeout and heartbeat interval are then the broker's.

Each consumer has client.id bench-member-<i> (and group.instance.id bench-static-<i> with --static). Commands on
stdin: `go` (every consumer subscribes), `close I` (consumer I closes: LeaveGroup unless static), `restart I`
(consumer I closes and a new consumer with the same settings subscribes: a new instance), `stop`.
Events on stdout, JSON lines with wall-clock `t`: ready, subscribed {m, inst}, assign/revoke/lost {m, inst,
parts} (incremental with cooperative-sticky, whole sets with eager strategies), closing/closed {m, inst}, error.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time

from confluent_kafka import Consumer

_out = threading.Lock()


def say(ev: str, **fields) -> None:
    line = json.dumps({"ev": ev, "t": time.time(), **fields}) + "\n"
    with _out:
        sys.stdout.write(line)
        sys.stdout.flush()


class Member(threading.Thread):
    def __init__(self, args: argparse.Namespace, index: int, instance: int) -> None:
        super().__init__(daemon=True)
        self.args, self.index, self.instance = args, index, instance
        self.stop_flag = threading.Event()
        conf = {
            "bootstrap.servers": args.bootstrap,
            "group.id": args.group,
            "client.id": f"bench-member-{index}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "log_level": 3,
        }
        if args.strategy.startswith("consumer/"):
            # KIP-848: the broker assigns with the named assignor; its own session and heartbeat settings apply
            conf["group.protocol"] = "consumer"
            conf["group.remote.assignor"] = args.strategy.split("/", 1)[1]
        else:
            conf["partition.assignment.strategy"] = args.strategy
            conf["session.timeout.ms"] = args.session_ms
            conf["heartbeat.interval.ms"] = args.heartbeat_ms
        if args.static:
            conf["group.instance.id"] = f"bench-static-{index}"
        debug = os.environ.get("KGC_BENCH_MEMBER_DEBUG")  # librdkafka debug contexts, to the member's log
        if debug:
            conf["debug"], conf["log_level"] = debug, 7
        self.consumer = Consumer(conf)

    def _event(self, ev: str, parts) -> None:
        say(ev, m=self.index, inst=self.instance, parts=sorted(p.partition for p in parts))

    def run(self) -> None:
        c = self.consumer
        c.subscribe(
            [self.args.topic],
            on_assign=lambda _c, p: self._event("assign", p),
            on_revoke=lambda _c, p: self._event("revoke", p),
            on_lost=lambda _c, p: self._event("lost", p),
        )
        say("subscribed", m=self.index, inst=self.instance)
        while not self.stop_flag.is_set():
            msg = c.poll(0.05)
            if msg is not None and msg.error() is not None:
                say("error", m=self.index, str=msg.error().str())
        say("closing", m=self.index, inst=self.instance)
        c.close()
        say("closed", m=self.index, inst=self.instance)

    def close(self) -> None:
        self.stop_flag.set()
        self.join(60)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--indices", required=True)
    ap.add_argument("--strategy", default="range")
    ap.add_argument("--session-ms", type=int, default=6000)
    ap.add_argument("--heartbeat-ms", type=int, default=500)
    ap.add_argument("--static", action="store_true")
    args = ap.parse_args()
    indices = [int(i) for i in args.indices.split(",")]
    members = {i: Member(args, i, 0) for i in indices}
    say("ready", members=indices)
    for line in sys.stdin:
        cmd = line.split()
        if not cmd:
            continue
        if cmd[0] == "go":
            for m in members.values():
                m.start()
        elif cmd[0] == "close":
            members[int(cmd[1])].close()
        elif cmd[0] == "restart":
            i = int(cmd[1])
            old = members[i]
            old.close()
            members[i] = Member(args, i, old.instance + 1)
            members[i].start()
        elif cmd[0] == "stop":
            break
    threads = [m for m in members.values() if m.is_alive()]
    for m in threads:
        m.stop_flag.set()
    for m in threads:
        m.join(60)
    say("stopped")


if __name__ == "__main__":
    main()
