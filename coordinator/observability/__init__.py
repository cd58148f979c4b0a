"""Observability: what the group state machine reports, and how it is shown. It reads the state machine and the
data plane; nothing below it imports it.

    history.py    a listener of the state machine's events (coordinator.group.events) that keeps per-group
                  counters, rebalance durations and a bounded timeline of the last rebalances, and writes one
                  structured log line per rebalance. Pure.
    lag.py        lag arithmetic (offsets, sums, uncommitted partitions, no -1 sentinel), the per-partition
                  history of (log-end offset, time) samples and the lag-in-seconds estimate, cardinality
                  filters. Pure.
    view.py       a read-only view of the groups for the admin API and the metrics.
    collector.py  the Prometheus collector: builds every group/coordinator/storage family at scrape time.

The event loop side (the /metrics and /v1 handlers, the sampling task) lives in coordinator.admin.http.
"""
