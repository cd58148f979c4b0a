"""Sample producer for deploy/compose.yaml: a steady stream of orders (BOOTSTRAP, TOPIC, RATE per second)."""

import json
import os
import random
import signal
import sys
import time

from confluent_kafka import Producer

BOOTSTRAP = os.environ.get("BOOTSTRAP", "coordinator:9092")
TOPIC = os.environ.get("TOPIC", "orders")
RATE = float(os.environ.get("RATE", "20"))

running = True


def stop(*_):
    global running
    running = False


def main() -> int:
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    producer = Producer(
        {
            "bootstrap.servers": BOOTSTRAP,
            "client.id": "sample-producer",
            "linger.ms": 20,
            "enable.idempotence": True,
        }
    )
    sent = 0
    while running:
        order = {
            "id": sent,
            "customer": f"c{random.randrange(100)}",
            "amount": round(random.uniform(1, 500), 2),
            "ts": time.time(),
        }
        producer.produce(TOPIC, key=order["customer"].encode(), value=json.dumps(order).encode())
        producer.poll(0)
        sent += 1
        if sent % 500 == 0:
            print(f"produced {sent} records to {TOPIC}", flush=True)
        time.sleep(1 / RATE)
    producer.flush(10)
    print(f"stopped after {sent} records", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
