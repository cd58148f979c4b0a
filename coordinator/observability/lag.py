"""Consumer lag: offsets, log-end offsets and lag in seconds, and which series are exported.

Lag in offsets (kafka_exporter's arithmetic, without its -1 sentinel): for every partition a group has a commit
for, `lag = log-end offset - committed offset`, floored at 0 (a commit past the log end, after a topic was
recreated, is not negative lag). A partition the group consumes but never committed has no lag value at all — it
is counted in `uncommitted` per topic instead, so sums stay honest (user-needs §E.22). "Consumes" means: the
topics the group has commits for, plus the topics a consumer-protocol group subscribes to. A committed offset
below 0 is not a position and counts as uncommitted. A partition the data plane does not know (a deleted topic)
has a committed offset but no lag.

Lag in seconds (kafka-lag-exporter's method, user-needs §E.23): a per-partition history of (log-end offset, time)
samples, taken every `metrics.lag.sample.interval.ms`, tells roughly when each offset was written. The lag of a
committed offset C is how long ago the first record not yet consumed (offset C) was appended: interpolated
linearly between the last sample that had not yet seen it (offset <= C) and the first that had (offset > C),
assuming records arrived evenly in between. A record older than every sample is placed by extrapolating the
average rate over the whole history backwards from the oldest sample (or at the oldest sample's time, a lower
bound, if the log did not grow). Flat stretches are stored as their first and last sample only, so the history
spans as long a time as possible within its bound.

Lag history (the console's charts): per group and partition, the lag in offsets at each sample, with the wall-clock
time of the sample, bounded like the offset history, for the groups someone is looking at (LagHistory).
"""

from __future__ import annotations

import bisect
import dataclasses
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

# -- lag in offsets ------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class PartitionLag:
    topic: str
    partition: int
    committed_offset: int
    log_end_offset: int | None  # None: the partition does not exist in the data plane
    lag: int | None
    commit_timestamp_ms: int
    metadata: str


@dataclasses.dataclass(slots=True)
class GroupLag:
    partitions: list[PartitionLag]
    uncommitted: dict[str, int]  # topic -> partitions consumed but without a commit

    def topics(self) -> list[str]:
        return sorted({p.topic for p in self.partitions} | set(self.uncommitted))

    def lag_sum(self, topic: str | None = None) -> int:
        return sum(
            p.lag for p in self.partitions if p.lag is not None and (topic is None or p.topic == topic)
        )

    def current_offset_sum(self, topic: str) -> int:
        return sum(p.committed_offset for p in self.partitions if p.topic == topic)

    def has_lag(self, topic: str | None = None) -> bool:
        return any(p.lag is not None and (topic is None or p.topic == topic) for p in self.partitions)


def group_lag(
    offsets: Mapping[str, Mapping[int, Any]],
    log_end_offset: Callable[[str, int], int | None],
    partition_count: Callable[[str], int | None],
    subscribed_topics: Iterable[str] = (),
) -> GroupLag:
    """Lag of one group. `offsets` is topic -> partition -> committed offset (an int, or anything with
    `committed_offset`, `commit_timestamp_ms` and `metadata`, like coordinator.offsets.store.OffsetAndMetadata)."""
    partitions: list[PartitionLag] = []
    committed_by_topic: dict[str, set[int]] = {}
    for topic in sorted(offsets):
        for partition in sorted(offsets[topic]):
            value = offsets[topic][partition]
            committed = int(getattr(value, "committed_offset", value))
            if committed < 0:
                continue  # not a position: counted as uncommitted below
            committed_by_topic.setdefault(topic, set()).add(partition)
            leo = log_end_offset(topic, partition)
            lag = None if leo is None else max(leo - committed, 0)
            partitions.append(
                PartitionLag(
                    topic,
                    partition,
                    committed,
                    leo,
                    lag,
                    int(getattr(value, "commit_timestamp_ms", -1)),
                    str(getattr(value, "metadata", "")),
                )
            )
    uncommitted: dict[str, int] = {}
    for topic in sorted(set(offsets) | set(subscribed_topics)):
        count = partition_count(topic)
        if count is None:
            continue
        have = committed_by_topic.get(topic, set())
        uncommitted[topic] = sum(1 for p in range(count) if p not in have)
    return GroupLag(partitions, uncommitted)


# -- lag in seconds ------------------------------------------------------------------------------------------

Sample = tuple[int, float]  # (log-end offset, seconds)


def estimate_lag_seconds(samples: list[Sample], committed: int, now_s: float) -> float | None:
    """How long ago the record at offset `committed` (the first not consumed) was appended, from samples of the
    log-end offset in time order, the last of which is the current log-end offset at `now_s`. None without
    samples."""
    if not samples:
        return None
    leo_now = samples[-1][0]
    if committed >= leo_now:
        return 0.0
    offsets = [o for o, _ in samples]
    j = bisect.bisect_right(offsets, committed)  # first sample that had seen the record at `committed`
    if j == 0:
        o0, t0 = samples[0]
        o_last, t_last = samples[-1]
        if o_last > o0 and t_last > t0:
            rate = (o_last - o0) / (t_last - t0)
            appended = t0 - (o0 - (committed + 1)) / rate
        else:
            appended = t0
    else:
        o_i, t_i = samples[j - 1]
        o_j, t_j = samples[j]
        appended = t_i + (committed + 1 - o_i) / (o_j - o_i) * (t_j - t_i)
    return max(now_s - appended, 0.0)


class OffsetHistory:
    """Per-partition samples of the log-end offset, bounded, with flat stretches compressed."""

    def __init__(self, max_samples: int = 120) -> None:
        if max_samples < 2:
            raise ValueError("the history needs at least 2 samples")
        self.max_samples = max_samples
        self._samples: dict[tuple[str, int], list[Sample]] = {}

    def record(self, topic: str, partition: int, log_end_offset: int, now_s: float) -> None:
        samples = self._samples.setdefault((topic, partition), [])
        if samples and (log_end_offset < samples[-1][0] or now_s < samples[-1][1]):
            samples.clear()  # the log was truncated or recreated (or time went back): start again
        if len(samples) >= 2 and samples[-1][0] == log_end_offset and samples[-2][0] == log_end_offset:
            samples[-1] = (log_end_offset, now_s)  # extend the flat stretch
            return
        samples.append((log_end_offset, now_s))
        if len(samples) > self.max_samples:
            del samples[0]

    def samples(self, topic: str, partition: int) -> list[Sample]:
        return list(self._samples.get((topic, partition), ()))

    def lag_seconds(
        self, topic: str, partition: int, committed: int, log_end_offset: int, now_s: float
    ) -> float | None:
        """The estimate with the current log-end offset as the newest point."""
        points = [s for s in self._samples.get((topic, partition), ()) if s[1] <= now_s]
        if points and (log_end_offset < points[-1][0]):
            points = []
        if not points or points[-1] != (log_end_offset, now_s):
            points.append((log_end_offset, now_s))
        if len(points) == 1 and committed < log_end_offset:
            return None  # nothing to say when the unconsumed records were written
        return estimate_lag_seconds(points, committed, now_s)

    def retain(self, keys: Iterable[tuple[str, int]]) -> None:
        """Forget partitions nobody consumes any more."""
        keep = set(keys)
        for key in [k for k in self._samples if k not in keep]:
            del self._samples[key]

    def __len__(self) -> int:
        return len(self._samples)


WATCH_MS = 600_000  # a group's lag is followed this long after the last time someone asked for its history


class LagHistory:
    """Per watched group and partition, (wall-clock ms, lag in offsets) at each sample, the last `max_samples`.

    Only groups someone looks at are followed (`watch`: the console's group page asks every few seconds): a
    history of every group and partition would cost memory and a pass over every committed offset per sample
    (1,000,000 offsets: a second of CPU every few seconds). A group is forgotten WATCH_MS after the last look."""

    def __init__(self, max_samples: int = 120) -> None:
        if max_samples < 2:
            raise ValueError("the history needs at least 2 samples")
        self.max_samples = max_samples
        self._points: dict[str, dict[tuple[str, int], list[tuple[int, int]]]] = {}
        self._watched: dict[str, int] = {}  # group -> wall ms of the last look

    def watch(self, group_id: str, wall_ms: int) -> bool:
        """Follow this group (again); True if it was not followed before."""
        new = group_id not in self._watched
        self._watched[group_id] = wall_ms
        return new

    def watched(self, wall_ms: int) -> list[str]:
        """The groups still followed at `wall_ms` (the others are forgotten now)."""
        for group_id in [g for g, seen in self._watched.items() if wall_ms - seen > WATCH_MS]:
            del self._watched[group_id]
            self._points.pop(group_id, None)
        return list(self._watched)

    def record(self, group_id: str, topic: str, partition: int, wall_ms: int, lag: int) -> None:
        points = self._points.setdefault(group_id, {}).setdefault((topic, partition), [])
        if points and wall_ms < points[-1][0]:
            points.clear()  # the wall clock went back: the old points would draw backwards
        points.append((wall_ms, lag))
        if len(points) > self.max_samples:
            del points[0]

    def series(self, group_id: str) -> dict[tuple[str, int], list[tuple[int, int]]]:
        """(topic, partition) -> its points, oldest first."""
        return {key: list(points) for key, points in sorted(self._points.get(group_id, {}).items())}

    def retain(self, group_id: str, keys: Iterable[tuple[str, int]]) -> None:
        """Keep only these (topic, partition) series of the group."""
        series = self._points.get(group_id)
        if series is None:
            return
        wanted = set(keys)
        for key in [k for k in series if k not in wanted]:
            del series[key]


# -- what is exported ----------------------------------------------------------------------------------------


def compile_pattern(text: str) -> re.Pattern[str] | None:
    """A filter regex (matched against the whole name); None for an empty setting."""
    return re.compile(text) if text else None


@dataclasses.dataclass(frozen=True)
class MetricsFilter:
    """Cardinality controls: a group or topic is exported when it matches `include` (or include is empty) and
    does not match `exclude`, both as whole-name regexes; `per_partition` False keeps only per-topic and
    per-group series."""

    group_include: re.Pattern[str] | None = None
    group_exclude: re.Pattern[str] | None = None
    topic_include: re.Pattern[str] | None = None
    topic_exclude: re.Pattern[str] | None = None
    per_partition: bool = True

    @classmethod
    def from_config(cls, config: Any) -> MetricsFilter:
        return cls(
            compile_pattern(config["metrics.groups.include"]),
            compile_pattern(config["metrics.groups.exclude"]),
            compile_pattern(config["metrics.topics.include"]),
            compile_pattern(config["metrics.topics.exclude"]),
            bool(config["metrics.partition.series.enable"]),
        )

    def group(self, group_id: str) -> bool:
        return _allowed(group_id, self.group_include, self.group_exclude)

    def topic(self, topic: str) -> bool:
        return _allowed(topic, self.topic_include, self.topic_exclude)


def _allowed(name: str, include: re.Pattern[str] | None, exclude: re.Pattern[str] | None) -> bool:
    if include is not None and include.fullmatch(name) is None:
        return False
    return exclude is None or exclude.fullmatch(name) is None
