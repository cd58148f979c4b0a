"""An aiokafka consumer-group member: subscribe, process, commit after each getmany(). Default assignors.

Usage: aio_member.py --bootstrap HOST:PORT --group G --topic T --events FILE --name NAME [--set name=value]...
Events and stdin commands: see _events.py.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os

from _events import Control, Events, Loop, add_member_args, hx, kv_pairs, typed
from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition


def exc_info(exc: BaseException, source: str) -> dict:
    return {
        "source": source,
        "code": getattr(exc, "errno", None),
        "name": type(exc).__name__,
        "str": str(exc),
        "fatal": False,
        "retriable": bool(getattr(exc, "retriable", False)),
    }


async def run(args) -> None:
    events = Events(args.events, args.name)
    conf = dict(
        bootstrap_servers=args.bootstrap,
        group_id=args.group,
        client_id=args.client_id or f"aio-{args.name}",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        **typed(kv_pairs(args.set)),
    )
    if args.instance_id:
        conf["group_instance_id"] = args.instance_id
    consumer = AIOKafkaConsumer(**conf)
    held: set[int] = set()

    class Listener(ConsumerRebalanceListener):
        async def on_partitions_revoked(self, revoked):
            ps = sorted(tp.partition for tp in revoked)
            held.clear()
            events.emit("revoked", partitions=ps, held=[], protocol="EAGER")

        async def on_partitions_assigned(self, assigned):
            ps = sorted(tp.partition for tp in assigned)
            held.clear()
            held.update(ps)
            events.emit("assigned", partitions=ps, held=sorted(held), protocol="EAGER", member_id=None)

    events.emit("started", pid=os.getpid())
    await consumer.start()
    try:
        consumer.subscribe([args.topic], listener=Listener())
        events.emit("subscribed")
        loop = Loop(events, Control(), args.max_runtime)
        while True:
            step = loop.step()
            if step == "close":
                break
            if step == "skip":
                await asyncio.sleep(0.05)
                continue
            try:
                batches = await consumer.getmany(timeout_ms=200, max_records=500)
            except Exception as exc:  # noqa: BLE001 - reported to the test
                events.emit("error", **exc_info(exc, "getmany"))
                await asyncio.sleep(0.1)
                continue
            recs, nxt = [], {}
            for tp in sorted(batches, key=lambda t: t.partition):
                for r in batches[tp]:
                    recs.append([r.partition, r.offset, hx(r.key)])
                    nxt[r.partition] = r.offset + 1
            if not recs:
                continue
            events.emit("records", recs=recs)
            if args.commit == "sync":
                offsets = {str(p): o for p, o in sorted(nxt.items())}
                try:
                    await consumer.commit({TopicPartition(args.topic, p): o for p, o in nxt.items()})
                    events.emit("commit", offsets=offsets)
                except Exception as exc:  # noqa: BLE001
                    events.emit("commit_error", offsets=offsets, error=exc_info(exc, "commit"))
    finally:
        events.emit("closing", fatal=False)
        await consumer.stop()
        events.emit("closed")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    add_member_args(ap)
    args = ap.parse_args()
    if os.environ.get("E2E_CLIENT_DEBUG"):  # client library debug logs into the member's log file
        logging.basicConfig(level=logging.DEBUG, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
