#!/usr/bin/env python
"""A model of several instances in front of one cluster (coordinator.front.instances) beyond this machine: shard
load, relay share and takeover time for 3 to 30 instances, from figures measured here. A model, not a measurement:
every input is a flag, printed with the table, and the assumptions are below.

Inputs (defaults: measured on this 2-core machine where marked, see bench/README.md; the others are assumptions to
replace with your own):
  --shards             state topic partitions (Kafka's default for __consumer_offsets: 50)
  --brokers            the cluster's brokers: an instance holds shards only while it is the address of one
  --commits-per-core   commits/s one instance sustains in front of the cluster (measured: 127 with 48 commits
                       in flight, bench/front_instances.py --scale; latency-bound, not CPU-bound: the
                       instance used 19% of a core, so the total scales only with commits in flight)
  --detect-s           from an instance's death to its removal from the instances' group (a refused
                       connection; measured: 30-50 ms)
  --rebalance-s        one rebalance of the instances' group (measured: 40-160 ms)
  --lease-s            coordinator.state.lease.ms: a new owner answers a lease after its claim
  --replay-mb-s        replay throughput of one instance reading its new shards (read_committed Fetch + apply;
                       assumed)
  --state-mb           the state topic's size after compaction (assumed)

Assumptions: one instance per machine (core counts do not change the per-instance figure); groups spread evenly
over shards (Kafka's hash); the cluster is not the bottleneck (transactions per partition are: one in flight per
shard); a takeover's shards are replayed side by side by the survivors; clients follow FindCoordinator to the
owner, so only requests that arrive between a move and the client's next lookup are relayed (none today: they get
NOT_COORDINATOR), and with a load balancer in front (one Service address, no FindCoordinator steering) a share
(N-1)/N of group requests would land on a non-owner.

    .venv/bin/python bench/instances_model.py [--brokers 3,6,30] [--shards 50]
"""

from __future__ import annotations

import argparse


def _row(n: int, brokers: int, args: argparse.Namespace) -> str:
    serving = min(n, brokers)
    per = args.shards / serving
    victim_mb = args.state_mb / serving
    survivors = max(serving - 1, 1) if n <= brokers else serving  # with a standby, all serving ones stay
    replay_s = victim_mb / (survivors * args.replay_mb_s)
    takeover = args.detect_s + args.rebalance_s + args.lease_s + replay_s
    capacity = serving * args.commits_per_core
    relay_lb = (serving - 1) / serving
    return (
        f"| {n} | {brokers} | {serving} | {per:.1f} | {capacity:,.0f} | {relay_lb:.0%} | {replay_s:.2f} | "
        f"{takeover:.2f}{' (a restart: nobody to take over)' if n == 1 else ''} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--brokers", default="3,30")
    parser.add_argument("--shards", type=int, default=50)
    parser.add_argument("--commits-per-core", type=float, default=125.0)
    parser.add_argument("--detect-s", type=float, default=0.05)
    parser.add_argument("--rebalance-s", type=float, default=0.1)
    parser.add_argument("--lease-s", type=float, default=2.0)
    parser.add_argument("--replay-mb-s", type=float, default=5.0)
    parser.add_argument("--state-mb", type=float, default=100.0)
    args = parser.parse_args()
    print("inputs:", ", ".join(f"{k}={v}" for k, v in sorted(vars(args).items())))
    for brokers in (int(b) for b in args.brokers.split(",")):
        print()
        print(
            "| instances | brokers | serving | shards each | commits/s (all) | relayed behind one LB | "
            "replay s | takeover s |"
        )
        print("|---|---|---|---|---|---|---|---|")
        for n in (1, 2, 3, 5, 10, 20, 30):
            print(_row(n, brokers, args))


if __name__ == "__main__":
    main()
