"""A confluent-kafka producer that keeps producing until SIGTERM (the "producer that continues producing new
messages throughout the test" of Kafka's consumer system tests).

Usage: steady_producer.py --bootstrap HOST:PORT --topic T --partitions N --rate PER_SECOND --output FILE

Message i has key "steady-i" and goes to partition i % N; acks=all, idempotent, so a server restart delays
deliveries but neither loses nor duplicates an acknowledged one. On SIGTERM it flushes (up to 60 s) and writes
{"delivered": [[partition, offset, key_hex], ...], "failed": n} to --output.
"""

from __future__ import annotations

import argparse
import json
import signal
import time

from confluent_kafka import Producer

stop = False


def _on_term(*_: object) -> None:
    global stop
    stop = True


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--partitions", type=int, required=True)
    ap.add_argument("--rate", type=float, default=100)
    ap.add_argument("--output", required=True)
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, _on_term)
    delivered: list[list] = []
    failed = [0]

    def report(err, msg) -> None:
        if err is None:
            delivered.append([msg.partition(), msg.offset(), msg.key().hex()])
        else:
            failed[0] += 1

    producer = Producer(
        {
            "bootstrap.servers": args.bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "reconnect.backoff.ms": 50,
            "reconnect.backoff.max.ms": 500,
            "message.timeout.ms": 120000,
            "log_level": 2,
        }
    )
    i = 0
    started = time.monotonic()
    while not stop:
        due = int((time.monotonic() - started) * args.rate)
        while i < due and not stop:
            try:
                producer.produce(
                    args.topic,
                    key=f"steady-{i}".encode(),
                    value=b"v" * 32,
                    partition=i % args.partitions,
                    on_delivery=report,
                )
                i += 1
            except BufferError:
                break
        producer.poll(0.02)
    producer.flush(60)
    with open(args.output, "w") as fh:
        json.dump({"delivered": delivered, "failed": failed[0], "produced": i}, fh)


if __name__ == "__main__":
    main()
