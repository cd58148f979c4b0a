"""Where a read starts and ends, and how a batch is cut: spark-sql-kafka's options, with its names and meanings.

    startingOffsets          "earliest" | "latest" | JSON {"topic": {"0": 23, "1": -2}} (-2 earliest, -1 latest)
    startingOffsetsByTimestamp   JSON {"topic": {"0": 1700000000000}}: the first offset whose timestamp is >= it
    startingTimestamp        one timestamp (ms) for every partition
    startingOffsetsByTimestampStrategy   "error" (default: no such offset fails the query) | "latest"
    endingOffsets            batch reads: "latest" | JSON (-1 latest; -2 is not allowed)
    endingOffsetsByTimestamp, endingTimestamp   batch reads: no offset at or after the timestamp means latest
    maxOffsetsPerTrigger     at most this many offsets per micro-batch, split across partitions by their backlog
    minPartitions            at least this many Spark tasks: large offset ranges are split
    failOnDataLoss           "true" (default): fail when planned offsets are gone (deleted by retention,
                             truncated); "false": warn and go on from what is there

As in Spark, a timestamp option wins over startingOffsets (startingTimestamp over startingOffsetsByTimestamp), and
a partition a JSON document does not name starts at the earliest offset (as Spark's newly discovered partitions
do) and, for endingOffsets, ends at the latest. This module talks to no broker: the lookups are passed in.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

TP = tuple[str, int]
EARLIEST, LATEST = -2, -1

Lookup = Callable[[list[TP]], dict[TP, int]]
TimeLookup = Callable[[dict[TP, int]], dict[TP, int]]  # timestamp per partition -> offset, -1 for none


@dataclass(frozen=True)
class OffsetSpec:
    """One of: earliest, latest, offsets (per partition, with EARLIEST/LATEST sentinels), timestamps (per
    partition), timestamp (one for all)."""

    kind: str
    per_partition: tuple[tuple[TP, int], ...] = ()
    timestamp: int = 0
    strategy: str = "error"  # for timestamps with no offset at or after them: "error" | "latest"

    @property
    def offsets(self) -> dict[TP, int]:
        return dict(self.per_partition)


def _json_offsets(text: str, option: str) -> dict[TP, int]:
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise ValueError(f'{option} must be JSON like {{"topic": {{"0": 23}}}}: {exc}') from None
    if not isinstance(doc, dict):
        raise ValueError(f"{option} must be a JSON object of topics")
    out: dict[TP, int] = {}
    for topic, parts in doc.items():
        if not isinstance(parts, dict):
            raise ValueError(f"{option}: topic {topic!r} must map partitions to offsets")
        for partition, value in parts.items():
            try:
                out[(str(topic), int(partition))] = int(value)
            except (TypeError, ValueError):
                raise ValueError(
                    f"{option}: {topic}[{partition}] = {value!r} is not a whole number"
                ) from None
    return out


def parse_spec(options: Mapping[str, str], prefix: str, default: str) -> OffsetSpec:
    """The starting or ending spec (prefix "starting" or "ending") from Spark's options."""
    if prefix == "ending":
        strategy = "latest"  # Spark: no offset at or after an ending timestamp means the latest offset
    else:
        strategy = str(options.get(f"{prefix}OffsetsByTimestampStrategy", "error")).lower()
        if strategy not in ("error", "latest"):
            raise ValueError(f"{prefix}OffsetsByTimestampStrategy must be error or latest, not {strategy!r}")
    one_time = options.get(f"{prefix}Timestamp")
    if one_time is not None:
        try:
            return OffsetSpec("timestamp", timestamp=int(one_time), strategy=strategy)
        except ValueError:
            raise ValueError(f"{prefix}Timestamp must be a timestamp in ms, not {one_time!r}") from None
    by_time = options.get(f"{prefix}OffsetsByTimestamp")
    if by_time is not None:
        stamps = _json_offsets(str(by_time), f"{prefix}OffsetsByTimestamp")
        return OffsetSpec("timestamps", tuple(sorted(stamps.items())), strategy=strategy)
    text = str(options.get(f"{prefix}Offsets", default)).strip()
    if text.lower() in ("earliest", "latest"):
        return OffsetSpec(text.lower())
    offsets = _json_offsets(text, f"{prefix}Offsets")
    for tp, offset in offsets.items():
        if offset < EARLIEST:
            raise ValueError(
                f"{prefix}Offsets: {tp[0]}[{tp[1]}] = {offset}: use -2 (earliest) or -1 (latest)"
            )
    return OffsetSpec("offsets", tuple(sorted(offsets.items())))


def resolve(
    spec: OffsetSpec,
    partitions: Iterable[TP],
    low: Lookup,
    high: Lookup,
    by_time: TimeLookup,
    *,
    unnamed: int = EARLIEST,
) -> dict[TP, int]:
    """Offsets for these partitions: `low`/`high` give the log-start/log-end offsets, `by_time` the first offset
    at or after a timestamp (-1 when there is none). A partition the spec does not name gets `unnamed`."""
    tps = sorted(set(partitions))
    if not tps:
        return {}
    if spec.kind == "earliest":
        return low(tps)
    if spec.kind == "latest":
        return high(tps)
    if spec.kind == "offsets":
        wanted = {tp: spec.offsets.get(tp, unnamed) for tp in tps}
    else:
        stamps = {tp: spec.timestamp for tp in tps} if spec.kind == "timestamp" else spec.offsets
        named = {tp: stamps[tp] for tp in tps if tp in stamps}
        found = by_time(named) if named else {}
        wanted = {tp: unnamed for tp in tps if tp not in named}
        for tp, offset in found.items():
            if offset >= 0:
                wanted[tp] = offset
            elif spec.strategy == "latest":
                wanted[tp] = LATEST
            else:
                raise ValueError(
                    f"no offset of {tp[0]}[{tp[1]}] has a timestamp at or after {named[tp]} (set "
                    "startingOffsetsByTimestampStrategy=latest to start at the latest offset instead)"
                )
    earliest = low([tp for tp, o in wanted.items() if o == EARLIEST])
    latest = high([tp for tp, o in wanted.items() if o == LATEST])
    return {
        tp: earliest[tp] if o == EARLIEST else latest[tp] if o == LATEST else o for tp, o in wanted.items()
    }


def rate_limit(start: Mapping[TP, int], end: Mapping[TP, int], limit: int | None) -> dict[TP, int]:
    """End offsets that take at most `limit` offsets in all (Spark's maxOffsetsPerTrigger): when the backlog is
    larger, each partition gets its share of the limit in proportion to its backlog (at least 1 offset, so small
    partitions are not starved; shares below 1 rounded up, others down)."""
    if limit is None:
        return dict(end)
    sizes = {tp: max(0, stop - start.get(tp, stop)) for tp, stop in end.items()}
    total = sum(sizes.values())
    if total <= limit:
        return dict(end)
    out: dict[TP, int] = {}
    for tp, stop in end.items():
        begin = start.get(tp, stop)
        share = limit * (sizes[tp] / total)
        take = math.ceil(share) if share < 1 else math.floor(share)
        out[tp] = min(stop, begin + take)
    return out


@dataclass(frozen=True)
class Range:
    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


def split_ranges(ranges: list[Range], min_partitions: int | None) -> list[Range]:
    """Ranges cut so that there are about `min_partitions` when there are fewer, as Spark's
    KafkaOffsetRangeCalculator cuts them: a range gets round(size / total * min_partitions) parts (at least 1);
    ranges left whole are taken out of the proportion given to the others; parts are equal steps, the last
    taking the remainder. Empty ranges are dropped (no task)."""
    nonempty = [r for r in ranges if r.size > 0]
    if min_partitions is None or len(nonempty) >= min_partitions:
        return nonempty
    total = sum(r.size for r in nonempty)

    def part_count(size: int, of_total: int, parts: int) -> int:
        return max(int(math.floor(size / of_total * parts + 0.5)), 1)  # Scala's math.round

    whole = [r for r in nonempty if part_count(r.size, total, min_partitions) == 1]
    split_total = total - sum(r.size for r in whole)
    split_parts = max(min_partitions - len(whole), 1)
    out: list[Range] = []
    for r in nonempty:
        parts = 1 if r in whole or split_total == 0 else part_count(r.size, split_total, split_parts)
        step = int(r.size / parts)
        begin = r.start
        for i in range(parts):
            stop = r.end if i == parts - 1 else begin + step
            out.append(Range(r.topic, r.partition, begin, stop))
            begin = stop
    return out


@dataclass
class DataLoss:
    """What failOnDataLoss decides: raise, or warn (collected here) and go on."""

    fail: bool
    warnings: list[str] = field(default_factory=list)

    def report(self, message: str) -> None:
        if self.fail:
            raise RuntimeError(
                f"{message}. Some data may have been lost because it is no longer available in Kafka (deleted by "
                "retention, or the topic was truncated or recreated). If you want your query to go on anyway, "
                'set the source option "failOnDataLoss" to "false".'
            )
        self.warnings.append(message)


def parse_bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    value = options.get(name)
    if value is None:
        return default
    text = str(value).strip().lower()
    if text not in ("true", "false"):
        raise ValueError(f"{name} must be true or false, not {value!r}")
    return text == "true"


def parse_positive(options: Mapping[str, str], name: str) -> int | None:
    value = options.get(name)
    if value is None:
        return None
    try:
        number = int(str(value))
    except ValueError:
        number = 0
    if number <= 0:
        raise ValueError(f"{name} must be a positive whole number, not {value!r}")
    return number
