"""confluent-kafka (librdkafka) client for the e2e tests. Usage: ck.py COMMAND --bootstrap HOST:PORT ..."""

from __future__ import annotations

import time

from _clientlib import add_common, kv_pairs, load_messages, parser, record, unhx, write_json
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def kerr(err: KafkaError | None) -> dict | None:
    if err is None:
        return None
    return {"code": err.code(), "name": err.name(), "str": err.str()}


def future_error(fut, timeout: float) -> dict | None:
    try:
        fut.result(timeout=timeout)
    except KafkaException as exc:
        return kerr(exc.args[0])
    return None


def admin(args) -> AdminClient:
    return AdminClient({"bootstrap.servers": args.bootstrap, **kv_pairs(args.set)})


def cmd_create_topic(args) -> None:
    client = admin(args)  # keep a reference: a collected AdminClient fails its futures with _DESTROY
    fs = client.create_topics(
        [NewTopic(args.topic, num_partitions=args.partitions, replication_factor=1)],
        operation_timeout=args.timeout,
        request_timeout=args.timeout,
    )
    write_json(args.output, {"error": future_error(fs[args.topic], args.timeout)})


def cmd_delete_topic(args) -> None:
    client = admin(args)
    fs = client.delete_topics([args.topic], operation_timeout=args.timeout, request_timeout=args.timeout)
    write_json(args.output, {"error": future_error(fs[args.topic], args.timeout)})


def cmd_list_topics(args) -> None:
    md = admin(args).list_topics(timeout=args.timeout)
    write_json(
        args.output,
        {
            "cluster_id": md.cluster_id,
            "controller_id": md.controller_id,
            "brokers": sorted(
                [{"id": b.id, "host": b.host, "port": b.port} for b in md.brokers.values()],
                key=lambda b: b["id"],
            ),
            "topics": {
                name: {
                    "error": kerr(t.error),
                    "partitions": {
                        str(p.id): {
                            "leader": p.leader,
                            "replicas": list(p.replicas),
                            "isrs": list(p.isrs),
                            "error": kerr(p.error),
                        }
                        for p in t.partitions.values()
                    },
                }
                for name, t in md.topics.items()
            },
        },
    )


def cmd_produce(args) -> None:
    conf = {"bootstrap.servers": args.bootstrap, "acks": args.acks, "linger.ms": 5, **kv_pairs(args.set)}
    producer = Producer(conf)
    messages = load_messages(args.input)
    delivered: list[dict | None] = [None] * len(messages)

    def on_delivery(i):
        def cb(err, msg):
            delivered[i] = {"partition": msg.partition(), "offset": msg.offset(), "error": kerr(err)}

        return cb

    for i, m in enumerate(messages):
        kwargs = {"value": unhx(m["value"]), "key": unhx(m["key"]), "on_delivery": on_delivery(i)}
        if m.get("headers"):
            kwargs["headers"] = [(name, unhx(value)) for name, value in m["headers"]]
        if m.get("timestamp") is not None:
            kwargs["timestamp"] = m["timestamp"]
        if m.get("partition") is not None:
            kwargs["partition"] = m["partition"]
        while True:
            try:
                producer.produce(args.topic, **kwargs)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    remaining = producer.flush(args.timeout)
    write_json(args.output, {"delivered": delivered, "not_flushed": remaining})


def cmd_consume(args) -> None:
    conf = {
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        **kv_pairs(args.set),
    }
    consumer = Consumer(conf)
    try:
        start = OFFSET_BEGINNING if args.start_offset is None else args.start_offset
        consumer.assign([TopicPartition(args.topic, p, start) for p in range(args.partitions)])
        records, errors = [], []
        deadline = time.monotonic() + args.timeout
        drain_until = None
        while time.monotonic() < deadline:
            if drain_until is None and len(records) >= args.expect:
                drain_until = time.monotonic() + args.drain  # keep polling briefly: nothing more may arrive
            if drain_until is not None and time.monotonic() >= drain_until:
                break
            for msg in consumer.consume(num_messages=1000, timeout=0.2):
                if msg.error():
                    errors.append({"partition": msg.partition(), **kerr(msg.error())})
                    continue
                ts_type, ts = msg.timestamp()
                records.append(
                    record(msg.partition(), msg.offset(), msg.key(), msg.value(), msg.headers(), ts)
                )
        watermarks = {}
        for p in range(args.partitions):
            lo, hi = consumer.get_watermark_offsets(TopicPartition(args.topic, p), timeout=10)
            watermarks[str(p)] = [lo, hi]
    finally:
        consumer.close()
    write_json(args.output, {"records": records, "errors": errors, "watermarks": watermarks})


def main() -> None:
    p, sub = parser(__doc__)
    sp = add_common(sub.add_parser("create-topic"))
    sp.add_argument("--topic", required=True)
    sp.add_argument("--partitions", type=int, default=1)
    sp.set_defaults(fn=cmd_create_topic)
    sp = add_common(sub.add_parser("delete-topic"))
    sp.add_argument("--topic", required=True)
    sp.set_defaults(fn=cmd_delete_topic)
    sp = add_common(sub.add_parser("list-topics"))
    sp.set_defaults(fn=cmd_list_topics)
    sp = add_common(sub.add_parser("produce"))
    sp.add_argument("--topic", required=True)
    sp.add_argument("--input", required=True)
    sp.add_argument("--acks", default="all")
    sp.set_defaults(fn=cmd_produce)
    sp = add_common(sub.add_parser("consume"))
    sp.add_argument("--topic", required=True)
    sp.add_argument("--partitions", type=int, required=True)
    sp.add_argument("--expect", type=int, required=True)
    sp.add_argument("--drain", type=float, default=0.5)
    sp.add_argument("--group", default="e2e-assign-only")
    sp.add_argument("--start-offset", type=int, default=None, help="default: the beginning")
    sp.set_defaults(fn=cmd_consume)
    args = p.parse_args()
    args.fn(args)


if __name__ == "__main__":
    main()
