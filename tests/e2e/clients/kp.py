"""kafka-python 3.x client for the e2e tests, with its own version negotiation (no api_version pin).

Usage: kp.py COMMAND --bootstrap HOST:PORT ...
"""

from __future__ import annotations

import time

from _clientlib import add_common, kv_pairs, load_messages, parser, record, unhx, write_json
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition


def exc_info(exc: BaseException) -> dict:
    return {"name": type(exc).__name__, "str": str(exc)}


def extra(args) -> dict:
    """--set name=value with ints converted, for kafka-python's keyword config."""
    out = {}
    for name, value in kv_pairs(args.set).items():
        try:
            out[name] = int(value)
        except ValueError:
            out[name] = value
    return out


def cmd_create_topic(args) -> None:
    client = KafkaAdminClient(bootstrap_servers=args.bootstrap, client_id="e2e-kp-admin", **extra(args))
    try:
        try:
            client.create_topics(
                {args.topic: {"num_partitions": args.partitions, "replication_factor": 1}},
                timeout_ms=int(args.timeout * 1000),
            )
            error = None
        except Exception as exc:  # noqa: BLE001 - reported to the test
            error = exc_info(exc)
        topics = sorted(client.list_topics())
    finally:
        client.close()
    write_json(args.output, {"error": error, "topics": topics})


def cmd_list_topics(args) -> None:
    client = KafkaAdminClient(bootstrap_servers=args.bootstrap, client_id="e2e-kp-admin", **extra(args))
    try:
        topics = sorted(client.list_topics())
    finally:
        client.close()
    write_json(args.output, {"topics": topics})


def cmd_produce(args) -> None:
    producer = KafkaProducer(
        bootstrap_servers=args.bootstrap,
        acks="all" if args.acks in ("all", "-1") else int(args.acks),
        linger_ms=5,
        client_id="e2e-kp-producer",
        **extra(args),
    )
    messages = load_messages(args.input)
    delivered: list[dict | None] = [None] * len(messages)
    futures = []
    try:
        for i, m in enumerate(messages):
            try:
                fut = producer.send(
                    args.topic,
                    value=unhx(m["value"]),
                    key=unhx(m["key"]),
                    headers=[(name, unhx(value)) for name, value in m.get("headers") or []],
                    partition=m.get("partition"),
                    timestamp_ms=m.get("timestamp"),
                )
                futures.append((i, fut))
            except Exception as exc:  # noqa: BLE001 - e.g. KafkaTimeoutError: metadata never arrived
                delivered[i] = {"partition": None, "offset": None, "error": exc_info(exc)}
        producer.flush(timeout=args.timeout)
        for i, fut in futures:
            try:
                md = fut.get(timeout=args.timeout)
                delivered[i] = {"partition": md.partition, "offset": md.offset, "error": None}
            except Exception as exc:  # noqa: BLE001
                delivered[i] = {"partition": None, "offset": None, "error": exc_info(exc)}
    finally:
        producer.close(timeout=10)
    write_json(args.output, {"delivered": delivered, "not_flushed": 0})


def cmd_consume(args) -> None:
    consumer = KafkaConsumer(
        bootstrap_servers=args.bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        client_id="e2e-kp-consumer",
        **extra(args),
    )
    try:
        tps = [TopicPartition(args.topic, p) for p in range(args.partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        records = []
        deadline = time.monotonic() + args.timeout
        drain_until = None
        while time.monotonic() < deadline:
            if drain_until is None and len(records) >= args.expect:
                drain_until = time.monotonic() + args.drain
            if drain_until is not None and time.monotonic() >= drain_until:
                break
            batches = consumer.poll(timeout_ms=200, max_records=2000)
            for tp in sorted(batches, key=lambda t: t.partition):
                for r in batches[tp]:
                    records.append(record(r.partition, r.offset, r.key, r.value, r.headers, r.timestamp))
        begin = consumer.beginning_offsets(tps)
        end = consumer.end_offsets(tps)
        watermarks = {str(tp.partition): [begin[tp], end[tp]] for tp in tps}
    finally:
        consumer.close()
    write_json(args.output, {"records": records, "errors": [], "watermarks": watermarks})


def main() -> None:
    p, sub = parser(__doc__)
    sp = add_common(sub.add_parser("create-topic"))
    sp.add_argument("--topic", required=True)
    sp.add_argument("--partitions", type=int, default=1)
    sp.set_defaults(fn=cmd_create_topic)
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
    sp.set_defaults(fn=cmd_consume)
    args = p.parse_args()
    args.fn(args)


if __name__ == "__main__":
    main()
