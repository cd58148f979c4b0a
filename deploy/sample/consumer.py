"""Sample consumer group member for deploy/compose.yaml (GROUP, TOPIC, BOOTSTRAP). Run several replicas to see
the group rebalance: `kafka-group-coordinator groups describe billing` or the Grafana dashboard."""

import os
import signal
import socket
import sys
import time

from confluent_kafka import Consumer, KafkaException

BOOTSTRAP = os.environ.get("BOOTSTRAP", "coordinator:9092")
TOPIC = os.environ.get("TOPIC", "orders")
GROUP = os.environ.get("GROUP", "billing")
WORK_MS = float(os.environ.get("WORK_MS", "40"))  # per record: slower than the producer, so lag is visible

running = True


def stop(*_):
    global running
    running = False


def main() -> int:
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    consumer = Consumer(
        {
            "bootstrap.servers": BOOTSTRAP,
            "group.id": GROUP,
            "client.id": f"{GROUP}-{socket.gethostname()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": True,
            "auto.commit.interval.ms": 1000,
            "partition.assignment.strategy": "range",
        }
    )
    consumer.subscribe(
        [TOPIC],
        on_assign=lambda _c, parts: print(
            "assigned", [f"{p.topic}:{p.partition}" for p in parts], flush=True
        ),
    )
    consumed = 0
    try:
        while running:
            message = consumer.poll(1.0)
            if message is None:
                continue
            if message.error():
                print(f"error: {message.error()}", flush=True)
                if isinstance(message.error(), KafkaException):
                    break
                continue
            consumed += 1
            time.sleep(WORK_MS / 1000)
            if consumed % 500 == 0:
                print(f"consumed {consumed} records", flush=True)
    finally:
        consumer.close()  # LeaveGroup: the group rebalances at once instead of after the session timeout
    print(f"stopped after {consumed} records", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
