"""A confluent-kafka (librdkafka) group member for the observability tests, in its own process.

Usage: member.py --bootstrap HOST:PORT --group G --topic T --events FILE [--quota N] [--instance-id ID]
                 [--revoke-stall S] [--set librdkafka.property=value]...

It polls continuously, processes at most --quota records in total (records past the quota are ignored, not
committed) and commits the offsets after the processed records synchronously after every poll that processed
something. Events, one JSON object per line appended to --events:
    started {pid} | assigned {member_id, partitions} | revoked {partitions} | commit {offsets: {p: next}}
    | commit_error {error} | error {name, str} | stalling {seconds} | resumed | closed
Commands on stdin, one per line: `quota N` (raise the quota), `stall S` (stop polling for S seconds),
`close` (leave the group and exit; end of stdin does the same). With --revoke-stall S the revocation callback
sleeps S seconds once (a member stuck in user code during a rebalance).
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import sys
import threading
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--events", required=True)
    ap.add_argument("--client-id", default="obs-member")
    ap.add_argument("--instance-id", default=None)
    ap.add_argument("--quota", type=int, default=1 << 62)
    ap.add_argument("--revoke-stall", type=float, default=0.0)
    ap.add_argument("--max-runtime", type=float, default=120.0)
    ap.add_argument("--set", action="append", default=[])
    args = ap.parse_args()

    out = open(args.events, "a", buffering=1)  # noqa: SIM115 - open for the life of the process
    lock = threading.Lock()

    def emit(ev: str, **fields: object) -> None:
        with lock:
            out.write(json.dumps({"ev": ev, "t": time.time(), **fields}) + "\n")
            out.flush()

    commands: queue.Queue[str] = queue.Queue()

    def read_stdin() -> None:
        for line in sys.stdin:
            if line.strip():
                commands.put(line.strip())
        commands.put("close")

    threading.Thread(target=read_stdin, daemon=True).start()

    conf: dict[str, object] = {
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "client.id": args.client_id,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "error_cb": lambda err: emit("error", name=err.name(), str=err.str()),
    }
    for item in args.set:
        name, _, value = item.partition("=")
        conf[name] = value
    if args.instance_id:
        conf["group.instance.id"] = args.instance_id
    consumer = Consumer(conf)
    revoke_stall = [args.revoke_stall]

    def on_assign(c: Consumer, parts: list[TopicPartition]) -> None:
        emit("assigned", member_id=c.memberid(), partitions=sorted(p.partition for p in parts))

    def on_revoke(c: Consumer, parts: list[TopicPartition]) -> None:
        emit("revoked", partitions=sorted(p.partition for p in parts))
        if revoke_stall[0] > 0:
            seconds, revoke_stall[0] = revoke_stall[0], 0.0
            emit("stalling", seconds=seconds, where="revoke")
            time.sleep(seconds)
            emit("resumed", where="revoke")

    emit("started", pid=os.getpid())
    consumer.subscribe([args.topic], on_assign=on_assign, on_revoke=on_revoke)
    quota = args.quota
    processed = 0
    deadline = time.monotonic() + args.max_runtime
    try:
        while time.monotonic() < deadline:
            try:
                command = commands.get_nowait()
            except queue.Empty:
                command = None
            if command == "close":
                break
            if command and command.startswith("quota "):
                quota = int(command.split()[1])
            if command and command.startswith("stall "):
                seconds = float(command.split()[1])
                emit("stalling", seconds=seconds, where="poll")
                time.sleep(seconds)
                emit("resumed", where="poll")
            next_offsets: dict[int, int] = {}
            for msg in consumer.consume(num_messages=100, timeout=0.2):
                err = msg.error()
                if err is not None:
                    if err.code() != KafkaError._PARTITION_EOF:
                        emit("error", name=err.name(), str=err.str())
                    continue
                if processed >= quota:
                    continue
                processed += 1
                next_offsets[msg.partition()] = msg.offset() + 1
            if not next_offsets:
                continue
            offsets = [TopicPartition(args.topic, p, o) for p, o in sorted(next_offsets.items())]
            try:
                consumer.commit(offsets=offsets, asynchronous=False)
                emit(
                    "commit",
                    offsets={str(p): o for p, o in sorted(next_offsets.items())},
                    processed=processed,
                )
            except KafkaException as exc:
                emit("commit_error", error=str(exc.args[0]))
    finally:
        consumer.close()
        emit("closed")


if __name__ == "__main__":
    main()
