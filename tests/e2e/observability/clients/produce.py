"""Create a topic (if needed) and produce N records to each of its partitions with confluent-kafka.

Usage: produce.py --bootstrap HOST:PORT --topic T --partitions P --per-partition N
Prints one JSON line: {"log_end_offsets": {partition: offset}} as reported by the delivery reports.
"""

from __future__ import annotations

import argparse
import json

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--partitions", type=int, required=True)
    ap.add_argument("--per-partition", type=int, required=True)
    args = ap.parse_args()
    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    for future in admin.create_topics([NewTopic(args.topic, args.partitions, 1)]).values():
        try:
            future.result(30)
        except KafkaException as exc:
            if exc.args[0].name() != "TOPIC_ALREADY_EXISTS":
                raise
    producer = Producer({"bootstrap.servers": args.bootstrap, "linger.ms": 5})
    ends: dict[int, int] = {}

    def delivered(err: object, msg: object) -> None:
        if err is not None:
            raise SystemExit(f"delivery failed: {err}")
        ends[msg.partition()] = max(ends.get(msg.partition(), 0), msg.offset() + 1)  # type: ignore[attr-defined]

    for i in range(args.per_partition):
        for p in range(args.partitions):
            producer.produce(
                args.topic, value=f"{p}-{i}".encode(), key=str(i).encode(), partition=p, on_delivery=delivered
            )
        producer.poll(0)
    if producer.flush(30):
        raise SystemExit("records left undelivered")
    print(json.dumps({"log_end_offsets": {str(p): o for p, o in sorted(ends.items())}}))


if __name__ == "__main__":
    main()
