"""The contract between the pure state machine and the runtime that runs it: a `CoordinatorResult`."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from coordinator.records import CoordinatorRecord, applied_in_memory_group


@dataclasses.dataclass(slots=True)
class CoordinatorResult:
    """What the state machine hands the runtime: records to append, then responses to release.

    `responses` pairs the opaque token of a request with its answer (a kio entity or a mapping, rebuilt by the
    codec for the request's version). They are released only after `records` are durable; a result may answer
    requests other than the one being handled (parked JoinGroup/SyncGroup answers) and may answer none.

    `on_append_failure`, set on results with records, is called instead of releasing `responses` if appending
    `records` fails, with the Kafka error code the failure maps to (COORDINATOR_NOT_AVAILABLE,
    NOT_COORDINATOR, ...). It undoes what the handler applied in memory and returns the result to deliver
    instead, which answers every token of this result exactly once. Failed records are not replayed.
    """

    records: list[CoordinatorRecord] = dataclasses.field(default_factory=list)
    responses: list[tuple[object, Any]] = dataclasses.field(default_factory=list)
    on_append_failure: Callable[[int], CoordinatorResult] | None = None

    @property
    def barrier_groups(self) -> set[str]:
        """The groups whose state this result applied in memory before its records are durable (group metadata,
        pause, settings): their membership requests wait until the append settles (the runtime's barriers)."""
        return {g for g in map(applied_in_memory_group, self.records) if g is not None}
