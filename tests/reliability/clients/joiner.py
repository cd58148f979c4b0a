"""Raw-wire JoinGroup flood for the group.max.size test: N members join one group from this process.

Usage: joiner.py --host H --port P --group G --members N --connections C --session-ms S --prefix NAME

Opens C connections and pipelines N/C JoinGroup v3 requests on each (empty member id: the server assigns one;
v3 needs no MEMBER_ID_REQUIRED round trip). Every answer is read (a parked join answers when the rebalance
completes, a refused one at once but in request order behind it). Prints one JSON line: counts by error code,
the admitted member ids and their generation ids.
"""

from __future__ import annotations

import argparse
import datetime
import json
import selectors
import socket
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))

from kio.schema.join_group.v3.request import JoinGroupRequest, JoinGroupRequestProtocol  # noqa: E402

from tests.support.wire import decode_response, encode_request  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--members", type=int, required=True)
    ap.add_argument("--connections", type=int, default=10)
    ap.add_argument("--session-ms", type=int, default=60000)
    ap.add_argument("--timeout", type=float, default=120)
    args = ap.parse_args()

    sel = selectors.DefaultSelector()
    per_conn = [
        args.members // args.connections + (1 if i < args.members % args.connections else 0)
        for i in range(args.connections)
    ]
    pending: dict[socket.socket, dict] = {}
    for count in per_conn:
        sock = socket.create_connection((args.host, args.port), timeout=30)
        payload = b""
        for i in range(count):
            request = JoinGroupRequest(
                group_id=args.group,
                session_timeout=datetime.timedelta(milliseconds=args.session_ms),
                rebalance_timeout=datetime.timedelta(milliseconds=args.session_ms),
                member_id="",
                protocol_type="consumer",
                protocols=(
                    JoinGroupRequestProtocol(
                        name="range", metadata=b"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
                    ),
                ),
            )
            payload += encode_request(request, i + 1, client_id="joiner")
        sock.sendall(payload)
        sock.setblocking(False)
        sel.register(sock, selectors.EVENT_READ)
        pending[sock] = {"buf": b"", "left": count}

    codes: Counter[int] = Counter()
    admitted: list[tuple[str, int]] = []
    import time

    deadline = time.monotonic() + args.timeout
    while any(p["left"] for p in pending.values()):
        if time.monotonic() > deadline:
            break
        for key, _ in sel.select(timeout=1.0):
            sock = key.fileobj
            state = pending[sock]
            try:
                chunk = sock.recv(1 << 16)
            except BlockingIOError:
                continue
            if not chunk:
                codes[-999] += state["left"]  # closed with answers outstanding (never 0: see below)
                state["left"] = 0
                sel.unregister(sock)
                continue
            state["buf"] += chunk
            buf = state["buf"]
            while len(buf) >= 4:
                size = int.from_bytes(buf[:4], "big", signed=True)
                if len(buf) < 4 + size:
                    break
                _, body = decode_response(11, 3, buf[4 : 4 + size])
                buf = buf[4 + size :]
                state["left"] -= 1
                codes[int(body.error_code)] += 1
                if int(body.error_code) == 0:
                    admitted.append((body.member_id, body.generation_id))
            state["buf"] = buf
            if not state["left"]:
                sel.unregister(
                    sock
                )  # all answered: what the server does with it now (idle expiry) is no concern
    for sock in pending:
        sock.close()
    unanswered = sum(p["left"] for p in pending.values())
    print(
        json.dumps(
            {"codes": {str(k): v for k, v in codes.items()}, "unanswered": unanswered, "admitted": admitted}
        )
    )


if __name__ == "__main__":
    main()
