"""A confluent-kafka (librdkafka) consumer-group member: subscribe, process, commit synchronously after each poll.

Usage: ck_member.py --bootstrap HOST:PORT --group G --topic T --events FILE --name NAME [--instance-id ID]
                    [--set librdkafka.property=value]...
Events and stdin commands: see _events.py.
"""

from __future__ import annotations

import argparse
import os
import time

from _events import Control, Events, Loop, add_member_args, hx, kv_pairs
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition


def kerr(err: KafkaError, source: str) -> dict:
    return {
        "source": source,
        "code": err.code(),
        "name": err.name(),
        "str": err.str(),
        "fatal": err.fatal(),
        "retriable": err.retriable(),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    add_member_args(ap)
    args = ap.parse_args()
    events = Events(args.events, args.name)
    conf = {
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "client.id": args.client_id or f"ck-{args.name}",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "error_cb": lambda err: events.emit("error", **kerr(err, "error_cb")),
        **kv_pairs(args.set),
    }
    if args.instance_id:
        conf["group.instance.id"] = args.instance_id
    consumer = Consumer(conf)
    # confluent-kafka has no rebalance_protocol(): librdkafka uses COOPERATIVE for cooperative-sticky and KIP-848.
    protocol = (
        "COOPERATIVE"
        if "cooperative" in str(conf.get("partition.assignment.strategy", ""))
        or conf.get("group.protocol") == "consumer"  # KIP-848: incremental assign and revoke only
        else "EAGER"
    )
    held: set[int] = set()

    def on_assign(c: Consumer, parts: list[TopicPartition]) -> None:
        ps = sorted(p.partition for p in parts)
        if protocol == "COOPERATIVE":
            held.update(ps)
        else:
            held.clear()
            held.update(ps)
        events.emit(
            "assigned",
            partitions=ps,
            held=sorted(held),
            protocol=protocol,
            member_id=c.memberid(),
            topics=sorted({p.topic for p in parts}),
        )

    def on_revoke_or_lost(ev: str):
        def cb(c: Consumer, parts: list[TopicPartition]) -> None:
            ps = sorted(p.partition for p in parts)
            if protocol == "COOPERATIVE":
                held.difference_update(ps)
            else:
                held.clear()
            events.emit(ev, partitions=ps, held=sorted(held), protocol=protocol)

        return cb

    events.emit("started", pid=os.getpid())
    consumer.subscribe(
        [args.topic],
        on_assign=on_assign,
        on_revoke=on_revoke_or_lost("revoked"),
        on_lost=on_revoke_or_lost("lost"),
    )
    events.emit("subscribed")
    loop = Loop(events, Control(), args.max_runtime)
    fatal = False
    try:
        while not fatal:
            step = loop.step()
            if step == "close":
                break
            if step == "skip":
                time.sleep(0.05)
                continue
            msgs = consumer.consume(num_messages=500, timeout=0.2)
            recs, nxt = [], {}
            for m in msgs:
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        continue
                    events.emit("error", partition=m.partition(), **kerr(err, "consume"))
                    # A fatal error reaches a consumer as code _FATAL (the underlying error in its text);
                    # confluent-kafka's KafkaError.fatal() is not set on it, so treat the code as fatal too.
                    fatal = fatal or err.fatal() or err.code() == KafkaError._FATAL
                    continue
                recs.append([m.partition(), m.offset(), hx(m.key())])
                nxt[(m.topic(), m.partition())] = m.offset() + 1
            if not recs:
                continue
            events.emit("records", recs=recs, topics=sorted({t for t, _p in nxt}))
            if args.commit == "sync":
                # by partition, as one topic is the common case; a regex subscription commits every topic's
                offsets = {str(p): o for (_t, p), o in sorted(nxt.items())}
                try:
                    result = consumer.commit(
                        offsets=[TopicPartition(t, p, o) for (t, p), o in sorted(nxt.items())],
                        asynchronous=False,
                    )
                    failed = [(tp.partition, tp.error.name()) for tp in result or [] if tp.error is not None]
                    if failed:
                        events.emit("commit_error", offsets=offsets, error={"partitions": failed})
                    else:
                        events.emit("commit", offsets=offsets)
                except KafkaException as exc:
                    events.emit("commit_error", offsets=offsets, error=kerr(exc.args[0], "commit"))
    finally:
        events.emit("closing", fatal=fatal)
        consumer.close()
        events.emit("closed")


if __name__ == "__main__":
    main()
