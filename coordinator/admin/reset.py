"""Planning an offset reset (POST /v1/groups/{group}/reset-offsets): which partitions, and to which offsets.

Pure: what the data plane says (partition counts, earliest / latest / by-timestamp offsets) and the group's
committed offsets come in as arguments, so the HTTP handler (coordinator.admin.http) asks for them in the order
its answers depend on and writes nothing until the plan is whole. Offsets outside [earliest, latest] are clamped
into it, as Kafka's kafka-consumer-groups tool does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .errors import ApiError

TARGETS = ("earliest", "latest", "timestamp", "offset", "explicit")

PartitionCount = Callable[[str], "int | None"]
TopicPartition = tuple[str, int]


def reset_target(body: Mapping[str, Any]) -> str:
    to = body.get("to")
    if to not in TARGETS:
        raise ApiError(
            400, "INVALID_REQUEST", "`to` must be one of earliest, latest, timestamp, offset, explicit"
        )
    return str(to)


def explicit_offsets(body: Mapping[str, Any]) -> dict[TopicPartition, int]:
    """`offsets`: [{topic, partition, offset}] of a to=explicit reset."""
    entries = body.get("offsets")
    if not isinstance(entries, list) or not entries:
        raise ApiError(400, "INVALID_REQUEST", "`offsets` must be a list of {topic, partition, offset}")
    explicit: dict[TopicPartition, int] = {}
    for entry in entries:
        try:
            explicit[(str(entry["topic"]), int(entry["partition"]))] = int(entry["offset"])
        except (KeyError, TypeError, ValueError):
            raise ApiError(400, "INVALID_REQUEST", f"bad offsets entry {entry!r}") from None
    return explicit


def select_partitions(
    topics: Any, committed: Mapping[str, Mapping[int, Any]], partition_count: PartitionCount
) -> list[TopicPartition]:
    """The partitions a reset selects: `topics` (["t", "t:0,2"]: every partition of t, or the listed ones),
    default the topics the group has commits for."""
    if topics is None:
        if not committed:
            raise ApiError(
                400, "INVALID_REQUEST", "the group has no committed offsets: name the topics to reset"
            )
        return sorted((t, p) for t, parts in committed.items() for p in parts)
    if not isinstance(topics, list) or not topics:
        raise ApiError(400, "INVALID_REQUEST", '`topics` must be a list like ["t", "t:0,2"]')
    selected: set[TopicPartition] = set()
    for spec in topics:
        topic, sep, parts = str(spec).partition(":")
        if sep:
            try:
                selected.update((topic, int(p)) for p in parts.split(",") if p.strip())
            except ValueError:
                raise ApiError(400, "INVALID_REQUEST", f"bad topic selector {spec!r}") from None
        else:
            count = partition_count(topic)
            if count is None:
                raise ApiError(404, "UNKNOWN_TOPIC_OR_PARTITION", f"topic {topic} does not exist")
            selected.update((topic, p) for p in range(count))
    return sorted(selected)


def check_partitions(partitions: list[TopicPartition], partition_count: PartitionCount) -> None:
    for topic, partition in partitions:
        count = partition_count(topic)
        if count is None or not 0 <= partition < count:
            raise ApiError(404, "UNKNOWN_TOPIC_OR_PARTITION", f"{topic}-{partition} does not exist")


def required_int(body: Mapping[str, Any], name: str, to: str) -> int:
    try:
        return int(body[name])
    except (KeyError, TypeError, ValueError):
        raise ApiError(400, "INVALID_REQUEST", f"`{name}` is required with to={to}") from None


def plan(
    partitions: list[TopicPartition],
    targets: Mapping[TopicPartition, int],
    earliest: Mapping[TopicPartition, int],
    latest: Mapping[TopicPartition, int],
    committed: Mapping[str, Mapping[int, Any]],
) -> list[dict[str, Any]]:
    """Each partition's new offset (the target clamped into [earliest, latest]) with what it was and why."""
    result = []
    for tp in partitions:
        target = min(max(targets[tp], earliest[tp]), latest[tp])
        previous = committed.get(tp[0], {}).get(tp[1])
        result.append(
            {
                "topic": tp[0],
                "partition": tp[1],
                "previous": previous.committed_offset if previous is not None else None,
                "offset": target,
                "requested": targets[tp],
                "log_start_offset": earliest[tp],
                "log_end_offset": latest[tp],
            }
        )
    return result
