"""GET /v1/coordinator: what one worker is doing, for the console's coordinator page and for scripts.

One worker's answer is `{"workers": [status]}`; with several workers, worker 0's listener adds the others'
(coordinator.admin.peers). A status holds the worker's shards (index, state, groups), its open connections, the
requests it answered per API (count, errors, mean and 99th-percentile latency from the request histogram, so a
caller that polls gets rates from the differences), its group log (segments, bytes, entries, fsyncs) and how long
loading took. The data plane is named as the server runs it: "embedded" (its own partitions) or "forwarding" (a
worker that forwards to worker 0's).
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from typing import Any

from coordinator.server.group_service import GroupCoordinatorService
from coordinator.server.listener import Server

STARTED_MONOTONIC = time.monotonic()


def worker_status(
    server: Server, groups: GroupCoordinatorService | None, dataplane: Any, worker: int
) -> dict[str, Any]:
    shards: list[dict[str, Any]] = []
    log: dict[str, int] = {}
    load: dict[str, Any] = {}
    if groups is not None:
        for index, shard in sorted(groups.shards.by_index.items()):
            shards.append(
                {
                    "index": index,
                    "state": shard.state.value,
                    "groups": len(shard.machine.groups) if shard.loaded else None,
                }
            )
        for the_log in groups.shards.logs():
            for field in dataclasses.fields(stats := the_log.stats()):
                value = getattr(stats, field.name)
                if isinstance(value, int) and field.name != "next_seq":
                    log[field.name] = log.get(field.name, 0) + value
        load = dict(groups.shards.load_stats)
        if "seconds" in load:
            load["seconds"] = round(load["seconds"], 3)
    return {
        "worker": worker,
        "pid": os.getpid(),
        "uptime_s": round(time.monotonic() - STARTED_MONOTONIC, 1),
        "ready": server.ready,
        "data_plane": _data_plane_kind(dataplane),
        "connections": _gauge_value(server.metrics.connections),
        "shards": shards,
        "groups": sum(s["groups"] or 0 for s in shards),
        "requests": request_stats(server.metrics),
        "log": log,
        "load": load,
    }


def _data_plane_kind(dataplane: Any) -> str | None:
    if dataplane is None:
        return None
    name = type(dataplane).__name__.lower()
    return "forwarding" if "forward" in name else "embedded"


def _gauge_value(gauge: Any) -> int:
    for family in gauge.collect():
        for sample in family.samples:
            return int(sample.value)
    return 0


def request_stats(metrics: Any) -> list[dict[str, Any]]:
    """Per API: requests answered, those answered with an error, mean and p99 latency in ms (the p99 is the upper
    bound of the histogram bucket it falls in, as Prometheus's histogram_quantile would place it at most)."""
    per_api: dict[str, dict[str, Any]] = {}
    for family in metrics.requests.collect():
        for sample in family.samples:
            if not sample.name.endswith("_total"):
                continue
            entry = per_api.setdefault(sample.labels["api"], _empty())
            entry["count"] += int(sample.value)
            if sample.labels["error"] != "NONE":
                entry["errors"] += int(sample.value)
    buckets: dict[str, dict[float, float]] = {}
    for family in metrics.request_duration.collect():
        for sample in family.samples:
            api = sample.labels["api"]
            entry = per_api.setdefault(api, _empty())
            if sample.name.endswith("_sum"):
                entry["seconds"] += sample.value
            elif sample.name.endswith("_bucket"):
                bound = float(sample.labels["le"])
                per_bound = buckets.setdefault(api, {})
                per_bound[bound] = per_bound.get(bound, 0.0) + sample.value
    out = []
    for api, entry in sorted(per_api.items()):
        count = entry["count"]
        out.append(
            {
                "api": api,
                "count": count,
                "errors": entry["errors"],
                "mean_ms": round(entry["seconds"] / count * 1000, 3) if count else None,
                "p99_ms": _quantile_bound(buckets.get(api, {}), 0.99),
            }
        )
    return out


def _empty() -> dict[str, Any]:
    return {"count": 0, "errors": 0, "seconds": 0.0}


def _quantile_bound(cumulative: dict[float, float], q: float) -> float | None:
    """The upper bound (ms) of the bucket holding quantile `q` of cumulative bucket counts; None without data."""
    if not cumulative:
        return None
    total = cumulative.get(math.inf, max(cumulative.values()))
    if total <= 0:
        return None
    for bound in sorted(cumulative):
        if cumulative[bound] >= q * total:
            return None if math.isinf(bound) else round(bound * 1000, 3)
    return None
