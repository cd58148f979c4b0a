"""kafka-python (KafkaAdminClient) and aiokafka (AIOKafkaAdminClient) group admin for the compatibility tests;
prints one JSON object on stdout, in the normalized shape test_client_matrix.py reads:

    py_admin.py list     --lib kp|aio --bootstrap B             {"error", "groups": {group_id: STATE or ""}}
    py_admin.py describe --lib kp|aio --bootstrap B --group G   {"error", "state", "members": [[cid, [p]]]}
    py_admin.py delete   --lib kp     --bootstrap B --group G   {"error": null or an error code}

aiokafka 0.14's admin client has no delete_consumer_groups: `delete` with --lib aio prints
{"unsupported": true}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys


def kp_partitions(a) -> list[int]:
    """Partitions of a decoded ConsumerProtocolAssignment, as object or as its to_dict() form."""
    if a is None or isinstance(a, (bytes, bytearray)):
        return []
    if hasattr(a, "partitions"):
        return sorted(tp.partition for tp in a.partitions())
    out = []
    for t in a.get("assigned_partitions") or []:
        out += t["partitions"] if isinstance(t, dict) else t[1]
    return sorted(out)


def kp(args) -> dict:
    from kafka.admin import KafkaAdminClient
    from kafka.errors import for_code

    admin = KafkaAdminClient(bootstrap_servers=args.bootstrap, client_id="kp-admin")
    try:
        if args.cmd == "list":
            groups = admin.list_groups()
            return {
                "error": None,
                "groups": {g["group_id"]: str(g.get("group_state") or "").upper() for g in groups},
            }
        if args.cmd == "describe":
            d = admin.describe_groups([args.group])[args.group]
            members = []
            for m in d["members"]:
                members.append([m["client_id"], kp_partitions(m.get("member_assignment"))])
            return {
                "error": d.get("error"),
                "state": str(d.get("group_state") or "").upper(),
                "members": sorted(members),
            }
        res = admin.delete_groups([args.group])[args.group]
        if res == "OK":
            return {"error": None}
        code = next((c for c in range(1, 130) if for_code(c).__name__ == res), res)
        return {"error": code}
    finally:
        admin.close()


async def aio(args) -> dict:
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.protocol.group import MemberAssignment

    if args.cmd == "delete":
        return {"unsupported": True}
    admin = AIOKafkaAdminClient(bootstrap_servers=args.bootstrap, client_id="aio-admin")
    await admin.start()
    try:
        if args.cmd == "list":
            groups = await admin.list_consumer_groups()
            return {"error": None, "groups": {g[0]: "" for g in groups}}
        responses = await admin.describe_consumer_groups([args.group])
        for resp in responses:
            for g in resp.groups:
                error_code, group_id, state, _ptype, _protocol, members = g[:6]
                if group_id != args.group:
                    continue
                out = []
                for m in members:
                    client_id, assignment = m[1], m[-1]
                    parts = (
                        sorted(p for _t, ps in MemberAssignment.decode(assignment).assignment for p in ps)
                        if assignment
                        else []
                    )
                    out.append([client_id, parts])
                return {"error": error_code or None, "state": state.upper(), "members": sorted(out)}
        return {"error": "group not in the answer"}
    finally:
        await admin.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cmd", choices=["list", "describe", "delete"])
    ap.add_argument("--lib", choices=["kp", "aio"], required=True)
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--group")
    args = ap.parse_args()
    out = kp(args) if args.lib == "kp" else asyncio.run(aio(args))
    json.dump(out, sys.stdout, default=str)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
