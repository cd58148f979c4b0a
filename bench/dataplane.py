#!/usr/bin/env python
"""Data-plane benchmark: starts the server the way the e2e tests do, then measures

  * produce throughput (MB/s, msgs/s) with confluent-kafka, acks=all, linger.ms=5:
    200,000 messages of 100 B and 20,000 of 10 KiB by default;
  * consume throughput (MB/s, msgs/s) of the same data with an assign()-only confluent-kafka consumer;
  * ApiVersions (v3) and Metadata (v12) round-trip latency, p50/p99 in microseconds over 5,000 sequential
    requests each, from a raw-socket client that encodes requests with kio (tests/support/wire.py).

MB are 10^6 bytes of message value. Run: .venv/bin/python bench/dataplane.py [--quick] [--set NAME=VALUE]...
Each phase has a deadline (--phase-timeout) so a run stays within ~2 minutes even on a slow server.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from kio.schema.api_versions.v3.request import ApiVersionsRequest  # noqa: E402
from kio.schema.metadata.v12.request import MetadataRequest  # noqa: E402

from tests.support.server import start_server  # noqa: E402
from tests.support.wire import WireClient, decode_response, encode_request, recv_frame  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")


def server_cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime
    except (OSError, IndexError, ValueError):
        return float("nan")


def server_peak_rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def create_topic(admin: AdminClient, name: str, partitions: int) -> None:
    admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])[name].result(
        timeout=30
    )


def produce(bootstrap: str, topic: str, count: int, size: int, deadline_s: float) -> dict:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 5,
            "queue.buffering.max.messages": 500000,
            "queue.buffering.max.kbytes": 1048576,
            "message.timeout.ms": int(deadline_s * 1000) + 30000,
        }
    )
    payload = os.urandom(size)
    failures = [0]
    first_error: list[str] = []

    def on_delivery(err, _msg):
        if err is not None:
            failures[0] += 1
            if not first_error:
                first_error.append(str(err))

    start = time.perf_counter()
    deadline = start + deadline_s
    sent = 0
    for i in range(count):
        while True:
            try:
                producer.produce(topic, payload, key=b"%d" % i, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.01)
        sent += 1
        if i % 1000 == 0:
            producer.poll(0)
            if time.perf_counter() > deadline:
                break
    remaining = producer.flush(max(1.0, deadline + 30 - time.perf_counter()))
    elapsed = time.perf_counter() - start
    acked = sent - remaining - failures[0]
    return {
        "sent": sent,
        "acked": acked,
        "failed": failures[0],
        "unflushed": remaining,
        "first_error": first_error[0] if first_error else None,
        "seconds": elapsed,
        "bytes": acked * size,
        "truncated": sent < count,
    }


def consume(bootstrap: str, topic: str, partitions: int, expect: int, deadline_s: float) -> dict:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-assign-only",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 100,
            # librdkafka pauses fetching for fetch.queue.backoff.ms (1 s) whenever its local queue is past
            # queued.min.messages (100k): raise the one, shorten the other, so the bench measures the server
            "queued.min.messages": 1_000_000,
            "fetch.queue.backoff.ms": 10,
        }
    )
    # Learn the partition leaders first: assigning before librdkafka knows them parks the offset lookup on a
    # 500 ms retry timer, a client start-up cost that is no measure of the server.
    consumer.list_topics(topic, timeout=10)
    got = nbytes = errors = 0
    first = None
    start = time.perf_counter()
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        deadline = start + deadline_s
        while got < expect and time.perf_counter() < deadline:
            for msg in consumer.consume(num_messages=10000, timeout=0.5):
                if msg.error():
                    errors += 1
                    continue
                if first is None:
                    first = time.perf_counter()
                got += 1
                nbytes += len(msg.value())
        elapsed = time.perf_counter() - start
    finally:
        consumer.close()
    return {
        "messages": got,
        "bytes": nbytes,
        "errors": errors,
        "seconds": elapsed,
        "first_message_s": (first - start) if first is not None else None,
        "truncated": got < expect,
    }


def measured(pid: int, fn, *args) -> dict:
    """Run one phase; add the server's and this process's CPU seconds spent during it."""
    srv0, own0 = server_cpu_seconds(pid), time.process_time()
    result = fn(*args)
    result["server_cpu_s"] = server_cpu_seconds(pid) - srv0
    result["bench_cpu_s"] = time.process_time() - own0
    return result


def latency(host: str, port: int, body, n: int, warmup: int = 200) -> dict:
    samples = []
    api_key, version = body.__api_key__, body.__version__
    with WireClient(host, port, timeout=10) as client:
        sock = client.sock
        for i in range(warmup + n):
            frame = encode_request(body, i + 1, "bench")
            t0 = time.perf_counter_ns()
            sock.sendall(frame)
            response = recv_frame(sock)
            t1 = time.perf_counter_ns()
            if i == 0 or i == warmup + n - 1:  # decode a couple fully; check correlation ids on all
                cid, entity = decode_response(api_key, version, response)
                top_error = getattr(entity, "error_code", 0)
                if top_error:
                    raise RuntimeError(f"{type(entity).__name__} error_code {top_error}")
            else:
                cid = int.from_bytes(response[:4], "big", signed=True)
            if cid != i + 1:
                raise RuntimeError(f"correlation id {cid} in answer to {i + 1}")
            if i >= warmup:
                samples.append((t1 - t0) / 1000)
    samples.sort()
    return {
        "n": len(samples),
        "p50_us": samples[len(samples) // 2],
        "p99_us": samples[min(len(samples) - 1, int(len(samples) * 0.99))],
        "mean_us": statistics.fmean(samples),
        "max_us": samples[-1],
        "response_bytes": len(response),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--small-count", type=int, default=200_000)
    ap.add_argument("--small-size", type=int, default=100)
    ap.add_argument("--large-count", type=int, default=20_000)
    ap.add_argument("--large-size", type=int, default=10_240)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--latency-requests", type=int, default=5000)
    ap.add_argument("--phase-timeout", type=float, default=25.0, help="seconds per produce/consume phase")
    ap.add_argument("--quick", action="store_true", help="a tenth of the messages and requests")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="server setting")
    ap.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = ap.parse_args()
    if args.quick:
        args.small_count //= 10
        args.large_count //= 10
        args.latency_requests //= 10

    settings = dict(item.split("=", 1) for item in args.set)
    results: dict = {"settings": settings, "phases": {}}
    with tempfile.TemporaryDirectory(prefix="kgc-bench-") as tmp:
        t0 = time.perf_counter()
        server = start_server(Path(tmp), settings)
        results["startup_s"] = time.perf_counter() - t0
        pid = server.proc.pid
        print(f"server pid {pid} at {server.bootstrap} (ready in {results['startup_s']:.2f}s)", flush=True)
        admin = AdminClient({"bootstrap.servers": server.bootstrap})
        try:
            rows = []
            for label, count, size in (
                ("small", args.small_count, args.small_size),
                ("large", args.large_count, args.large_size),
            ):
                topic = f"bench-{label}"
                create_topic(admin, topic, args.partitions)
                p = measured(pid, produce, server.bootstrap, topic, count, size, args.phase_timeout)
                if p["failed"] or p["unflushed"]:
                    print(
                        f"  produce {label}: {p['failed']} failed, {p['unflushed']} unflushed, "
                        f"first error: {p['first_error']}",
                        flush=True,
                    )
                c = measured(
                    pid, consume, server.bootstrap, topic, args.partitions, p["acked"], args.phase_timeout
                )
                results["phases"][f"produce-{label}"] = p
                results["phases"][f"consume-{label}"] = c
                cut = " (cut short)"
                rows.append((f"produce {count:,} x {size:,} B{cut if p['truncated'] else ''}", p["acked"], p))
                rows.append(
                    (
                        f"consume {c['messages']:,} x {size:,} B{cut if c['truncated'] else ''}",
                        c["messages"],
                        c,
                    )
                )
                print(f"  {label}: done", flush=True)

            md_body = MetadataRequest(
                topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
            )
            av_body = ApiVersionsRequest(client_software_name="kgc-bench", client_software_version="1")
            lat = {
                "ApiVersions v3": latency(server.host, server.port, av_body, args.latency_requests),
                "Metadata v12 (all topics)": latency(
                    server.host, server.port, md_body, args.latency_requests
                ),
            }
            results["latency"] = lat
            results["server_peak_rss_mb"] = server_peak_rss_mb(pid)
        finally:
            del admin
            code = server.stop()
            results["server_exit_code"] = code

    print()
    print(
        f"{'throughput (acks=all, linger.ms=5, ' + str(args.partitions) + ' partitions)':<40}"
        f"{'msgs':>9}{'MB':>8}{'s':>7}{'MB/s':>8}{'msgs/s':>10}{'1st ms':>8}"
        f"{'srv cpu s':>11}{'bench cpu s':>13}"
    )
    print("-" * 114)
    for name, msgs, r in rows:
        nbytes, secs = r["bytes"], r["seconds"]
        first = r.get("first_message_s")
        steady = f"{first * 1000:>8.0f}" if first is not None else f"{'-':>8}"
        print(
            f"{name:<40}{msgs:>9,}{nbytes / 1e6:>8.1f}{secs:>7.2f}{nbytes / 1e6 / secs:>8.1f}"
            f"{msgs / secs:>10,.0f}{steady}{r['server_cpu_s']:>11.2f}{r['bench_cpu_s']:>13.2f}"
        )
    print(
        "  s: wall time of the phase (produce: first send to flush done; consume: assign to last message);"
        " 1st ms: assign to first message;\n  srv/bench cpu s: CPU seconds the server / this client process"
        " used in the phase. MB = 10^6 bytes of message value."
    )
    print()
    print(
        f"{'round trip (sequential, one connection)':<44}{'n':>8}{'p50 us':>10}{'p99 us':>10}{'mean us':>10}"
        f"{'max us':>10}{'resp B':>8}"
    )
    print("-" * 100)
    for name, r in lat.items():
        print(
            f"{name:<44}{r['n']:>8}{r['p50_us']:>10.0f}{r['p99_us']:>10.0f}{r['mean_us']:>10.0f}"
            f"{r['max_us']:>10.0f}{r['response_bytes']:>8}"
        )
    print()
    print(
        f"server: startup {results['startup_s']:.2f}s, peak RSS {results['server_peak_rss_mb']:.0f} MB, "
        f"exit code {results['server_exit_code']} after SIGTERM"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
