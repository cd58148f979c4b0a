"""aiokafka client for the e2e tests. Usage: aio.py COMMAND --bootstrap HOST:PORT ..."""

from __future__ import annotations

import asyncio
import time

from _clientlib import add_common, kv_pairs, load_messages, parser, record, unhx, write_json
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition


def exc_info(exc: BaseException) -> dict:
    return {"name": type(exc).__name__, "str": str(exc)}


def extra(args) -> dict:
    out = {}
    for name, value in kv_pairs(args.set).items():
        try:
            out[name] = int(value)
        except ValueError:
            out[name] = value
    return out


async def produce(args) -> None:
    producer = AIOKafkaProducer(
        bootstrap_servers=args.bootstrap,
        acks="all" if args.acks in ("all", "-1") else int(args.acks),
        linger_ms=5,
        client_id="e2e-aio-producer",
        **extra(args),
    )
    messages = load_messages(args.input)
    delivered: list[dict | None] = [None] * len(messages)
    await producer.start()
    try:
        futures = []
        for i, m in enumerate(messages):
            fut = await producer.send(
                args.topic,
                value=unhx(m["value"]),
                key=unhx(m["key"]),
                headers=[(name, unhx(value)) for name, value in m.get("headers") or []],
                partition=m.get("partition"),
                timestamp_ms=m.get("timestamp"),
            )
            futures.append((i, fut))
        for i, fut in futures:
            try:
                md = await asyncio.wait_for(fut, timeout=args.timeout)
                delivered[i] = {"partition": md.partition, "offset": md.offset, "error": None}
            except Exception as exc:  # noqa: BLE001
                delivered[i] = {"partition": None, "offset": None, "error": exc_info(exc)}
    finally:
        await producer.stop()
    write_json(args.output, {"delivered": delivered, "not_flushed": 0})


async def consume(args) -> None:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=args.bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        client_id="e2e-aio-consumer",
        **extra(args),
    )
    await consumer.start()
    try:
        tps = [TopicPartition(args.topic, p) for p in range(args.partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        records = []
        deadline = time.monotonic() + args.timeout
        drain_until = None
        while time.monotonic() < deadline:
            if drain_until is None and len(records) >= args.expect:
                drain_until = time.monotonic() + args.drain
            if drain_until is not None and time.monotonic() >= drain_until:
                break
            batches = await consumer.getmany(timeout_ms=200, max_records=2000)
            for tp in sorted(batches, key=lambda t: t.partition):
                for r in batches[tp]:
                    records.append(record(r.partition, r.offset, r.key, r.value, r.headers, r.timestamp))
        begin = await consumer.beginning_offsets(tps)
        end = await consumer.end_offsets(tps)
        watermarks = {str(tp.partition): [begin[tp], end[tp]] for tp in tps}
    finally:
        await consumer.stop()
    write_json(args.output, {"records": records, "errors": [], "watermarks": watermarks})


def main() -> None:
    p, sub = parser(__doc__)
    sp = add_common(sub.add_parser("produce"))
    sp.add_argument("--topic", required=True)
    sp.add_argument("--input", required=True)
    sp.add_argument("--acks", default="all")
    sp.set_defaults(fn=produce)
    sp = add_common(sub.add_parser("consume"))
    sp.add_argument("--topic", required=True)
    sp.add_argument("--partitions", type=int, required=True)
    sp.add_argument("--expect", type=int, required=True)
    sp.add_argument("--drain", type=float, default=0.5)
    sp.set_defaults(fn=consume)
    args = p.parse_args()
    asyncio.run(args.fn(args))


if __name__ == "__main__":
    main()
