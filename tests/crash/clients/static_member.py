"""A static confluent-kafka group member for the crash test: subscribe, poll, log every rebalance callback.

Usage: static_member.py --bootstrap HOST:PORT --group G --topic T --instance-id ID --events FILE
                        [--librdkafka-log FILE] [--set name=value]...

Events (one JSON object per line, flushed at once): started, assigned {partitions, member_id}, revoked
{partitions}, lost {partitions}, error {code, name, str, fatal}, closing, closed. It does not need to consume
anything; it only has to stay in its group. librdkafka's own log (debug=cgrp) goes to --librdkafka-log, so a
rejoin can be traced to its reason.

Stops (closing the consumer, which for a static member sends no LeaveGroup) when stdin reaches EOF.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import threading
import time

from confluent_kafka import Consumer, KafkaError


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--instance-id", required=True)
    ap.add_argument("--events", required=True)
    ap.add_argument("--librdkafka-log")
    ap.add_argument("--set", action="append", default=[])
    args = ap.parse_args()

    out = open(args.events, "a", buffering=1)  # noqa: SIM115
    lock = threading.Lock()

    def emit(ev: str, **fields: object) -> None:
        with lock:
            out.write(json.dumps({"ev": ev, "t": time.time(), "name": args.instance_id, **fields}) + "\n")
            out.flush()

    conf: dict[str, object] = {
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "group.instance.id": args.instance_id,
        "client.id": f"static-{args.instance_id}",
        "session.timeout.ms": 30000,
        "heartbeat.interval.ms": 1000,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "partition.assignment.strategy": "range",
        # The topic is not durable across server restarts yet: if a metadata refresh arrives before the test
        # re-creates it, let the Metadata request create it (the server creates num.partitions partitions,
        # which the test sets to the topic's count), so the subscription never sees the topic vanish.
        "allow.auto.create.topics": True,
        "reconnect.backoff.ms": 50,
        "reconnect.backoff.max.ms": 500,
        "error_cb": lambda err: emit(
            "error", code=err.code(), name=err.name(), str=err.str(), fatal=err.fatal()
        ),
    }
    if args.librdkafka_log:
        logger = logging.getLogger("librdkafka")
        handler = logging.FileHandler(args.librdkafka_log)
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
        conf["logger"] = logger
        conf["debug"] = "cgrp"
    for item in args.set:
        name, _, value = item.partition("=")
        conf[name] = value

    consumer = Consumer(conf)
    emit("started", pid=os.getpid())

    def on_assign(c: Consumer, parts: list) -> None:
        emit("assigned", partitions=sorted(p.partition for p in parts), member_id=c.memberid())

    def on_revoke(c: Consumer, parts: list) -> None:
        emit("revoked", partitions=sorted(p.partition for p in parts))

    def on_lost(c: Consumer, parts: list) -> None:
        emit("lost", partitions=sorted(p.partition for p in parts))

    consumer.subscribe([args.topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
    done = threading.Event()

    def watch_stdin() -> None:
        sys.stdin.read()
        done.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    try:
        while not done.is_set():
            msg = consumer.poll(0.2)
            if (
                msg is not None
                and msg.error() is not None
                and msg.error().code() != KafkaError._PARTITION_EOF
            ):
                emit(
                    "error",
                    code=msg.error().code(),
                    name=msg.error().name(),
                    str=msg.error().str(),
                    fatal=msg.error().fatal(),
                    source="poll",
                )
    finally:
        emit("closing")
        consumer.close()
        emit("closed")


if __name__ == "__main__":
    main()
