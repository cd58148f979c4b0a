"""A raw-wire OffsetCommit streamer for the crash test: simple (generation -1) commits, pipelined.

Usage: committer.py --port PORT --group G --topic T --partitions 0,2 --acked FILE [--depth 32] [--first N]
                    [--step K]

Keeps `--depth` OffsetCommit v8 requests in flight on one connection (the server answers a connection's
requests in order and batches concurrent appends into one fsync, so pipelining is what makes >1,000 durable
commits/s possible). Each request commits ONE partition (round robin over --partitions) at the next offset of
a strictly increasing sequence (--first, --first+--step, ...), so the offsets of every partition strictly
increase in send order. For every response whose partition error is NONE, the line "PARTITION OFFSET" is
appended to --acked and flushed before the response is counted: the file holds exactly the acknowledged
commits. A retriable error (loading, not available) makes it pause 20 ms, as a real client backs off.
Requests whose connection breaks (the server was killed) are never acknowledged; the client
reconnects every 20 ms until the server listens again.

SIGTERM: stop, print one JSON summary line on stdout and exit 0.
"""

from __future__ import annotations

import argparse
import collections
import json
import signal
import socket
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))

from kio.schema.offset_commit.v8.request import (  # noqa: E402
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)

from tests.support.wire import decode_response, encode_request, recv_frame  # noqa: E402

stop = False
RETRIABLE = {14, 15, 16}  # COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR


def _on_term(*_: object) -> None:
    global stop
    stop = True


def build(group: str, topic: str, partition: int, offset: int) -> OffsetCommitRequest:
    return OffsetCommitRequest(
        group_id=group,
        generation_id_or_member_epoch=-1,
        member_id="",
        group_instance_id=None,
        topics=(
            OffsetCommitRequestTopic(
                name=topic,
                partitions=(
                    OffsetCommitRequestPartition(
                        partition_index=partition,
                        committed_offset=offset,
                        committed_leader_epoch=-1,
                        committed_metadata="",
                    ),
                ),
            ),
        ),
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--group", default="committer")
    ap.add_argument("--topic", required=True)
    ap.add_argument("--partitions", required=True)
    ap.add_argument("--acked", required=True)
    ap.add_argument("--depth", type=int, default=32)
    ap.add_argument("--first", type=int, default=1)
    ap.add_argument("--step", type=int, default=1)
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, _on_term)
    partitions = [int(p) for p in args.partitions.split(",")]
    acked_file = open(args.acked, "a")  # noqa: SIM115
    next_offset = args.first
    turn = 0
    correlation = 0
    acked = 0
    errors: collections.Counter[str] = collections.Counter()
    connects = 0
    broken = 0
    started = time.time()

    while not stop:
        try:
            sock = socket.create_connection((args.host, args.port), timeout=5)
        except OSError:
            time.sleep(0.02)
            continue
        connects += 1
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        inflight: collections.deque[tuple[int, int, int]] = (
            collections.deque()
        )  # correlation, partition, offset
        try:
            while not stop:
                while len(inflight) < args.depth:
                    partition = partitions[turn % len(partitions)]
                    turn += 1
                    offset = next_offset
                    next_offset += args.step
                    correlation += 1
                    sock.sendall(
                        encode_request(
                            build(args.group, args.topic, partition, offset),
                            correlation,
                            client_id="crash-committer",
                        )
                    )
                    inflight.append((correlation, partition, offset))
                got, body = decode_response(8, 8, recv_frame(sock))
                want, partition, offset = inflight.popleft()
                assert got == want, (got, want)
                code = body.topics[0].partitions[0].error_code
                if code == 0:
                    acked_file.write(f"{partition} {offset}\n")
                    acked_file.flush()
                    acked += 1
                else:
                    errors[str(code)] += 1
                    if code in RETRIABLE:
                        time.sleep(0.02)  # back off like a real client (loading, not available)
        except (OSError, ConnectionError, EOFError):
            broken += 1  # the server went away: whatever was in flight is not acknowledged
        finally:
            sock.close()
        if not stop:
            time.sleep(0.02)

    acked_file.close()
    elapsed = time.time() - started
    print(
        json.dumps(
            {
                "acked": acked,
                "errors": dict(errors),
                "connects": connects,
                "broken": broken,
                "seconds": elapsed,
                "last_sent": next_offset - args.step,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
