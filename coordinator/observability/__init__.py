"""Observability: what the group state machine reports, and how it is shown.

    events.py     the events the group state machine emits (rebalance started / join phase done / stable,
                  member removed, member fenced, group removed) and the reason categories. Pure: the state
                  machine imports it.
    history.py    a listener that keeps per-group counters, rebalance durations and a bounded timeline of the
                  last rebalances, and writes one structured log line per rebalance. Pure.
    lag.py        lag arithmetic (offsets, sums, uncommitted partitions, no -1 sentinel), the per-partition
                  history of (log-end offset, time) samples and the lag-in-seconds estimate, cardinality
                  filters. Pure.
    consumer.py   decoding of consumer-protocol subscriptions and assignments.
    collector.py  the Prometheus collector: builds every group/coordinator/storage family at scrape time.
    storage.py    a timing decorator around the group log.

The event loop side (the /metrics and /v1 handlers, the sampling task) lives in coordinator.server.admin.
"""
