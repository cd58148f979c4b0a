"""A kafka-python consumer-group member (no api_version pin: it negotiates): subscribe, process, commit
synchronously after each poll. Default assignors (range, roundrobin).

Usage: kp_member.py --bootstrap HOST:PORT --group G --topic T --events FILE --name NAME [--set name=value]...
Events and stdin commands: see _events.py.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import time

from _events import Control, Events, Loop, add_member_args, hx, kv_pairs, typed
from kafka import ConsumerRebalanceListener, KafkaConsumer, TopicPartition
from kafka.structs import OffsetAndMetadata


def exc_info(exc: BaseException, source: str) -> dict:
    return {
        "source": source,
        "code": getattr(exc, "errno", None),
        "name": type(exc).__name__,
        "str": str(exc),
        "fatal": False,
        "retriable": bool(getattr(exc, "retriable", False)),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    add_member_args(ap)
    args = ap.parse_args()
    if os.environ.get("E2E_CLIENT_DEBUG"):  # client library debug logs into the member's log file
        logging.basicConfig(level=logging.DEBUG, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    events = Events(args.events, args.name)
    conf = dict(
        bootstrap_servers=args.bootstrap,
        group_id=args.group,
        client_id=args.client_id or f"kp-{args.name}",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        **typed(kv_pairs(args.set)),
    )
    if args.instance_id:
        conf["group_instance_id"] = args.instance_id
    consumer = KafkaConsumer(**conf)
    held: set[int] = set()

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked):
            ps = sorted(tp.partition for tp in revoked)
            held.clear()
            events.emit("revoked", partitions=ps, held=[], protocol="EAGER")

        def on_partitions_assigned(self, assigned):
            ps = sorted(tp.partition for tp in assigned)
            held.clear()
            held.update(ps)
            events.emit("assigned", partitions=ps, held=sorted(held), protocol="EAGER", member_id=None)

    events.emit("started", pid=os.getpid())
    # Subscribe by an exact pattern, not by name: only then does kafka-python wait for fresh metadata before its
    # first JoinGroup (KAFKA-3949). By name, the first leader assigns from an empty metadata snapshot and rejoins
    # as soon as the metadata arrives, and kafka-python 3.0.12 can lose that rejoin: when poll()'s timer runs out
    # while the JoinGroup is in flight, the next poll() finds need_rejoin() False (the background join already
    # refreshed the snapshot) and never completes the join: no assignment, heartbeats stay disabled.
    consumer.subscribe(pattern=f"^{re.escape(args.topic)}$", listener=Listener())
    events.emit("subscribed")
    loop = Loop(events, Control(), args.max_runtime)
    try:
        while True:
            step = loop.step()
            if step == "close":
                break
            if step == "skip":
                time.sleep(0.05)
                continue
            try:
                batches = consumer.poll(timeout_ms=200, max_records=500)
            except Exception as exc:  # noqa: BLE001 - reported to the test
                events.emit("error", **exc_info(exc, "poll"))
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
                    consumer.commit(
                        {TopicPartition(args.topic, p): OffsetAndMetadata(o, "", -1) for p, o in nxt.items()}
                    )
                    events.emit("commit", offsets=offsets)
                except Exception as exc:  # noqa: BLE001
                    events.emit("commit_error", offsets=offsets, error=exc_info(exc, "commit"))
    finally:
        events.emit("closing", fatal=False)
        consumer.close()
        events.emit("closed")


if __name__ == "__main__":
    main()
