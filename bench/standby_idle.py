#!/usr/bin/env python
"""What hot standbys cost an idle coordinator: --instances instances in front of a 3-node Apache Kafka cluster
(tests/support/kafka_cluster.py, the tests' JVM flags) on one state topic of --shards partitions, standbys on, no
load. After they have divided the shards, for --windows windows of --seconds each: every instance's own requests to
the brokers per second (its kafka_group_coordinator_upstream_requests) and its CPU seconds per second (user +
system, from /proc), then how many "following it failed" warnings the instances logged.

The figure is the code's as checked out: run it at two commits to compare them (bench/README.md).

    .venv/bin/python bench/standby_idle.py [--instances 2] [--shards 12] [--seconds 60] [--windows 2]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from front_instances import _cpu_s, _upstream_requests, wait_formed  # noqa: E402

from tests.support.kafka_cluster import KafkaCluster  # noqa: E402
from tests.support.server import start_server  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--instances", type=int, default=2)
    parser.add_argument("--shards", type=int, default=12)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--windows", type=int, default=2)
    args = parser.parse_args()
    run = Path(tempfile.mkdtemp(prefix="kgc-standby-idle-"))
    (run / "kafka").mkdir()
    cluster = KafkaCluster(run / "kafka")
    try:
        settings = {
            "upstream.bootstrap.servers": cluster.bootstrap,
            "coordinator.state.topic": f"bench-idle-{uuid.uuid4().hex[:6]}",
            "offsets.topic.num.partitions": args.shards,
            "coordinator.instance.standby": True,
        }
        servers = [start_server(run / f"instance-{i}", settings) for i in range(args.instances)]
        try:
            wait_formed(servers, args.instances)
            time.sleep(8.0)  # the standbys' first (whole-shard) reads are done
            for window in range(args.windows):
                requests = [_upstream_requests(s.admin_url) for s in servers]
                cpu = [_cpu_s(s.proc.pid) for s in servers]
                started = time.monotonic()
                time.sleep(args.seconds)
                elapsed = time.monotonic() - started
                print(
                    f"window {window}: "
                    + " | ".join(
                        f"instance {i}: {(_upstream_requests(s.admin_url) - requests[i]) / elapsed:.1f} "
                        f"requests/s, {(_cpu_s(s.proc.pid) - cpu[i]) / elapsed:.4f} CPU-s/s"
                        for i, s in enumerate(servers)
                    ),
                    flush=True,
                )
        finally:
            for s in servers:
                s.proc.terminate()
            for s in servers:
                s.proc.wait(30)
        warnings = sum(s.stderr_path.read_text().count("following it failed") for s in servers)
        print(f"'following it failed' warnings: {warnings}")
    finally:
        cluster.close()


if __name__ == "__main__":
    main()
