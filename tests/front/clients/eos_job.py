"""A transactional read-process-write job (confluent-kafka): reads --input in group --group, writes each record's
value upper-cased to --output, and commits its input offsets in the same transaction
(send_offsets_to_transaction with the consumer's group metadata, KIP-447). Exits once it has seen --idle seconds
without input; prints how many records it committed."""

from __future__ import annotations

import argparse
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--input", required=True)
    p.add_argument("--output", required=True)
    p.add_argument("--transactional-id", required=True)
    p.add_argument("--idle", type=float, default=5.0)
    p.add_argument("--batch", type=int, default=20)
    args = p.parse_args()
    consumer = Consumer(
        {
            "bootstrap.servers": args.bootstrap,
            "group.id": args.group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "session.timeout.ms": 6000,
        }
    )
    producer = Producer({"bootstrap.servers": args.bootstrap, "transactional.id": args.transactional_id})
    producer.init_transactions(60)
    consumer.subscribe([args.input])
    committed = 0
    last_input = time.monotonic()
    while time.monotonic() - last_input < args.idle:
        messages = [m for m in consumer.consume(args.batch, 0.5) if not m.error()]
        if not messages:
            continue
        last_input = time.monotonic()
        producer.begin_transaction()
        for m in messages:
            producer.produce(args.output, key=m.key(), value=m.value().upper(), partition=m.partition())
        positions: dict[tuple[str, int], int] = {}
        firsts: dict[tuple[str, int], int] = {}
        for m in messages:
            positions[(m.topic(), m.partition())] = m.offset() + 1
            firsts.setdefault((m.topic(), m.partition()), m.offset())
        offsets = [TopicPartition(t, part, o) for (t, part), o in positions.items()]
        try:
            producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 60)
            producer.commit_transaction(60)
            committed += len(messages)
        except KafkaException as exc:
            print(f"transaction failed: {exc}", flush=True)
            producer.abort_transaction(60)
            for (t, part), first in firsts.items():  # the batch again, in the next transaction
                consumer.seek(TopicPartition(t, part, first))
    print(f"committed {committed}", flush=True)
    consumer.close()


if __name__ == "__main__":
    main()
