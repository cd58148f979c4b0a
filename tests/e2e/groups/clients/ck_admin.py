"""confluent-kafka AdminClient group operations; prints one JSON object on stdout.

ck_admin.py list     --bootstrap B
ck_admin.py describe --bootstrap B --group G
ck_admin.py offsets  --bootstrap B --group G [--topic T --partitions N]
ck_admin.py alter    --bootstrap B --group G --topic T --offset PARTITION=OFFSET...
ck_admin.py delete   --bootstrap B --group G
"""

from __future__ import annotations

import argparse
import json
import sys

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient


def kerr(err: KafkaError | None) -> dict | None:
    if err is None:
        return None
    return {"code": err.code(), "name": err.name(), "str": err.str()}


def exc_err(exc: BaseException) -> dict:
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return kerr(exc.args[0])
    return {"code": None, "name": type(exc).__name__, "str": str(exc)}


def name_of(value) -> str | None:
    return None if value is None else getattr(value, "name", str(value))


def cmd_list(admin: AdminClient, args) -> dict:
    try:
        result = admin.list_consumer_groups(request_timeout=args.timeout).result(timeout=args.timeout)
    except Exception as exc:  # noqa: BLE001 - reported to the test
        return {"error": exc_err(exc), "groups": [], "errors": []}
    groups = [
        {
            "group_id": g.group_id,
            "state": name_of(g.state),
            "simple": g.is_simple_consumer_group,
            "type": name_of(getattr(g, "type", None)),
        }
        for g in result.valid
    ]
    return {
        "error": None,
        "groups": sorted(groups, key=lambda g: g["group_id"]),
        "errors": [exc_err(e) if isinstance(e, BaseException) else kerr(e) for e in result.errors],
    }


def cmd_describe(admin: AdminClient, args) -> dict:
    fut = admin.describe_consumer_groups([args.group], request_timeout=args.timeout)[args.group]
    try:
        d = fut.result(timeout=args.timeout)
    except Exception as exc:  # noqa: BLE001
        return {"error": exc_err(exc)}
    members = []
    for m in d.members:
        tps = m.assignment.topic_partitions if m.assignment is not None else []
        members.append(
            {
                "member_id": m.member_id,
                "client_id": m.client_id,
                "host": m.host,
                "instance_id": m.group_instance_id,
                "assignment": sorted([tp.topic, tp.partition] for tp in tps),
            }
        )
    coord = d.coordinator
    return {
        "error": None,
        "group_id": d.group_id,
        "state": name_of(d.state),
        "assignor": d.partition_assignor,
        "simple": d.is_simple_consumer_group,
        "type": name_of(getattr(d, "type", None)),
        "coordinator": None if coord is None else {"id": coord.id, "host": coord.host, "port": coord.port},
        "members": sorted(members, key=lambda m: m["client_id"]),
    }


def cmd_offsets(admin: AdminClient, args) -> dict:
    tps = None
    if args.topic:
        tps = [TopicPartition(args.topic, p) for p in range(args.partitions)]
    req = ConsumerGroupTopicPartitions(args.group, tps)
    fut = admin.list_consumer_group_offsets([req], request_timeout=args.timeout)[args.group]
    try:
        res = fut.result(timeout=args.timeout)
    except Exception as exc:  # noqa: BLE001
        return {"error": exc_err(exc), "offsets": {}}
    return {
        "error": None,
        "offsets": {f"{tp.topic}:{tp.partition}": tp.offset for tp in res.topic_partitions or []},
        "partition_errors": {
            f"{tp.topic}:{tp.partition}": kerr(tp.error)
            for tp in res.topic_partitions or []
            if tp.error is not None
        },
    }


def cmd_alter(admin: AdminClient, args) -> dict:
    tps = []
    for item in args.offset:
        p, _, o = item.partition("=")
        tps.append(TopicPartition(args.topic, int(p), int(o)))
    fut = admin.alter_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(args.group, tps)], request_timeout=args.timeout
    )[args.group]
    try:
        res = fut.result(timeout=args.timeout)
    except Exception as exc:  # noqa: BLE001
        return {"error": exc_err(exc)}
    return {
        "error": None,
        "offsets": {f"{tp.topic}:{tp.partition}": tp.offset for tp in res.topic_partitions or []},
        "partition_errors": {
            f"{tp.topic}:{tp.partition}": kerr(tp.error)
            for tp in res.topic_partitions or []
            if tp.error is not None
        },
    }


def cmd_delete(admin: AdminClient, args) -> dict:
    fut = admin.delete_consumer_groups([args.group], request_timeout=args.timeout)[args.group]
    try:
        fut.result(timeout=args.timeout)
    except Exception as exc:  # noqa: BLE001
        return {"error": exc_err(exc)}
    return {"error": None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cmd", choices=["list", "describe", "offsets", "alter", "delete"])
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--group")
    ap.add_argument("--topic")
    ap.add_argument("--partitions", type=int, default=0)
    ap.add_argument("--offset", action="append", default=[], metavar="PARTITION=OFFSET")
    ap.add_argument("--timeout", type=float, default=15.0)
    args = ap.parse_args()
    admin = AdminClient({"bootstrap.servers": args.bootstrap, "client.id": "e2e-ck-group-admin"})
    out = {
        "list": cmd_list,
        "describe": cmd_describe,
        "offsets": cmd_offsets,
        "alter": cmd_alter,
        "delete": cmd_delete,
    }[args.cmd](admin, args)
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
