"""Per-group rebalance history: counters, durations and a timeline, kept from the state machine's events.

`GroupHistory` is a coordinator.group.events listener. For every group it keeps

* counters: rebalances by reason, member expirations by cause, fenced requests by error, completed rebalances
  (Kafka's CompletedRebalances: the leader's assignment made the group Stable);
* a histogram of rebalance durations: from PreparingRebalance to Stable, or to Empty when everyone left;
* when each of its recent rebalances started (for "rebalances in the last hour");
* the last `timeline_size` rebalances, each with its generation, reason category, the client's KIP-800 text,
  the member that triggered it, duration, outcome and the members that came in and went out (a static member is
  the same member across restarts: it is matched by group instance id).

A rebalance that starts again before it completed (a member joins while the leader assigns) ends as
`superseded` and the new one starts at that moment. Every rebalance writes two structured log lines (logfmt on
the `coordinator.rebalance` logger, and the same fields as a dict in the record's `rebalance` attribute): one
when it starts and one when it ends. Everything about a group is forgotten when the group is removed, so deleted
groups leave no series behind. Timestamps come from the events (the state machine's clock); nothing here reads
a clock, so it is as testable as the state machine.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
import logging
from collections.abc import Iterable
from typing import Any

from coordinator.group.events import (
    GroupEvent,
    GroupLoaded,
    GroupRemoved,
    JoinPhaseCompleted,
    MemberFenced,
    MemberInfo,
    MemberRemoved,
    OffsetsWritten,
    RebalanceCompleted,
    RebalanceReason,
    RebalanceStarted,
    RemovalCause,
    StaticMemberReplaced,
)

rebalance_log = logging.getLogger("coordinator.rebalance")

DURATION_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)

RECENT_STARTS_KEPT = 10_000  # start times kept per group for rebalances_since (a storm of more is "10000+")

IN_PROGRESS, STABLE, EMPTY, SUPERSEDED = "in_progress", "stable", "empty", "superseded"


def _iso(wall_ms: int | None) -> str | None:
    if wall_ms is None:
        return None
    return datetime.datetime.fromtimestamp(wall_ms / 1000, datetime.UTC).isoformat(timespec="milliseconds")


def member_json(member: MemberInfo, **extra: Any) -> dict[str, Any]:
    return {
        "member_id": member.member_id,
        "group_instance_id": member.group_instance_id,
        "client_id": member.client_id,
        "client_host": member.client_host,
        **extra,
    }


@dataclasses.dataclass(slots=True)
class Histogram:
    """Cumulative bucket counts in Prometheus's layout (the last bucket is +Inf)."""

    bounds: tuple[float, ...] = DURATION_BUCKETS_S
    counts: list[int] = dataclasses.field(default_factory=list)
    total: float = 0.0
    count: int = 0

    def observe(self, value: float) -> None:
        if not self.counts:
            self.counts = [0] * (len(self.bounds) + 1)
        for i, bound in enumerate(self.bounds):
            if value <= bound:
                self.counts[i] += 1
        self.counts[-1] += 1
        self.total += value
        self.count += 1

    def buckets(self) -> list[tuple[str, int]]:
        counts = self.counts or [0] * (len(self.bounds) + 1)
        return [(_le(b), c) for b, c in zip(self.bounds, counts, strict=False)] + [("+Inf", counts[-1])]


def _le(bound: float) -> str:
    return repr(float(bound))


@dataclasses.dataclass(slots=True)
class Rebalance:
    """One rebalance of one group, open until it ends."""

    group_id: str
    from_generation: int
    previous_state: str
    reason: RebalanceReason
    client_reason: str | None
    detail: str
    member: MemberInfo | None
    started_wall_ms: int
    started_monotonic_ms: int
    generation: int | None = None
    leader_id: str | None = None
    protocol_name: str | None = None
    members: tuple[MemberInfo, ...] = ()
    members_in: list[MemberInfo] = dataclasses.field(default_factory=list)
    members_out: list[tuple[MemberInfo, RemovalCause | None]] = dataclasses.field(default_factory=list)
    join_completed_wall_ms: int | None = None
    ended_wall_ms: int | None = None
    duration_ms: int | None = None
    outcome: str = IN_PROGRESS

    def to_json(self, now_wall_ms: int | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "generation": self.generation,
            "from_generation": self.from_generation,
            "previous_state": self.previous_state,
            "reason": self.reason.value,
            "client_reason": self.client_reason,
            "detail": self.detail,
            "triggered_by": member_json(self.member) if self.member is not None else None,
            "started_at": _iso(self.started_wall_ms),
            "started_at_ms": self.started_wall_ms,
            "ended_at": _iso(self.ended_wall_ms),
            "duration_ms": self.duration_ms,
            "outcome": self.outcome,
            "leader": self.leader_id,
            "protocol": self.protocol_name,
            "members": len(self.members),
            "members_in": [member_json(m) for m in self.members_in],
            "members_out": [member_json(m, cause=c.value if c else None) for m, c in self.members_out],
        }
        if self.outcome == IN_PROGRESS and now_wall_ms is not None:
            out["elapsed_ms"] = max(now_wall_ms - self.started_wall_ms, 0)
        return out

    def log_fields(self, with_members: bool = True) -> dict[str, Any]:
        fields = {
            "group": self.group_id,
            "generation": self.generation,
            "from_generation": self.from_generation,
            "outcome": self.outcome,
            "reason": self.reason.value,
            "client_reason": self.client_reason,
            "member": self.member.member_id if self.member else None,
            "instance_id": self.member.group_instance_id if self.member else None,
            "client_id": self.member.client_id if self.member else None,
            "client_host": self.member.client_host if self.member else None,
            "duration_ms": self.duration_ms,
            "members": len(self.members),
            "members_in": None,
            "members_out": None,
            "detail": self.detail,
        }
        if with_members:
            fields["members_in"] = ",".join(m.member_id for m in self.members_in)
            fields["members_out"] = ",".join(
                f"{m.member_id}:{c.value if c else 'gone'}" for m, c in self.members_out
            )
        return fields


class _GroupStats:
    __slots__ = (
        "rebalances",
        "expirations",
        "fenced",
        "durations",
        "timeline",
        "open",
        "members",
        "removed",
        "listed",
        "completed",
        "started_ms",
    )

    def __init__(self, timeline_size: int) -> None:
        self.rebalances: collections.Counter[str] = collections.Counter()
        self.expirations: collections.Counter[str] = collections.Counter()
        self.fenced: collections.Counter[str] = collections.Counter()
        self.durations = Histogram()
        self.timeline: collections.deque[Rebalance] = collections.deque(maxlen=timeline_size)
        self.open: Rebalance | None = None
        self.members: dict[str, MemberInfo] = {}  # identity -> member, as of the last generation
        self.removed: dict[str, RemovalCause] = {}  # identity -> why, since the last join phase ended
        # those of `removed` already listed as out by a rebalance that started since: a consumer group bumps its
        # epoch (a rebalance here) at every join and removal, and ends a join phase only when stable, so a
        # member listed once is not listed again by each of the rebalances that follow
        self.listed: dict[str, RemovalCause] = {}
        self.completed = 0
        # When each recent rebalance started (wall ms), for "rebalances in the last hour"; bounded.
        self.started_ms: collections.deque[int] = collections.deque(maxlen=RECENT_STARTS_KEPT)


class GroupHistory:
    """See the module doc. `on_group_event` is the listener entry point."""

    def __init__(self, timeline_size: int = 25) -> None:
        self.timeline_size = timeline_size
        self._groups: dict[str, _GroupStats] = {}
        self.completed_rebalances = 0  # all groups, ever (a deleted group's count stays in the total)
        self.offsets_committed = 0
        self.offsets_expired = 0
        self.offsets_deleted = 0

    # -- reading ---------------------------------------------------------------------------------------------

    def group_ids(self) -> list[str]:
        return list(self._groups)

    def rebalances(self, group_id: str) -> dict[str, int]:
        stats = self._groups.get(group_id)
        return dict(stats.rebalances) if stats else {}

    def expirations(self, group_id: str) -> dict[str, int]:
        stats = self._groups.get(group_id)
        return dict(stats.expirations) if stats else {}

    def fenced(self, group_id: str) -> dict[str, int]:
        stats = self._groups.get(group_id)
        return dict(stats.fenced) if stats else {}

    def rebalances_since(self, group_id: str, since_wall_ms: int) -> int:
        """How many rebalances of the group started at or after `since_wall_ms` (the last RECENT_STARTS_KEPT)."""
        stats = self._groups.get(group_id)
        if stats is None:
            return 0
        return sum(1 for started in stats.started_ms if started >= since_wall_ms)

    def durations(self, group_id: str) -> Histogram | None:
        stats = self._groups.get(group_id)
        return stats.durations if stats and stats.durations.count else None

    def timeline(self, group_id: str, limit: int | None = None) -> list[Rebalance]:
        """The last rebalances, oldest first (the one in progress, if any, last)."""
        stats = self._groups.get(group_id)
        if stats is None:
            return []
        items = list(stats.timeline)
        return items[-limit:] if limit else items

    def last(self, group_id: str) -> Rebalance | None:
        stats = self._groups.get(group_id)
        return stats.timeline[-1] if stats and stats.timeline else None

    # -- the listener ----------------------------------------------------------------------------------------

    def on_group_event(self, event: GroupEvent) -> None:
        if isinstance(event, OffsetsWritten):
            self.offsets_committed += event.committed
            self.offsets_expired += event.expired
            self.offsets_deleted += event.deleted
        elif isinstance(event, RebalanceStarted):
            self._started(event)
        elif isinstance(event, JoinPhaseCompleted):
            self._join_completed(event)
        elif isinstance(event, RebalanceCompleted):
            self._completed(event)
        elif isinstance(event, MemberRemoved):
            stats = self._stats(event.group_id)
            stats.removed[event.member.identity] = event.cause
            if stats.open is not None and event.member.identity in stats.members:
                stats.open.members_out.append((stats.members[event.member.identity], event.cause))
            if event.cause.is_expiration:
                stats.expirations[event.cause.value] += 1
        elif isinstance(event, MemberFenced):
            self._stats(event.group_id).fenced["FENCED_INSTANCE_ID"] += 1
        elif isinstance(event, StaticMemberReplaced):
            stats = self._stats(event.group_id)
            old = stats.members.get(event.group_instance_id)
            if old is not None:
                new = dataclasses.replace(old, member_id=event.new_member_id)
                stats.members[event.group_instance_id] = new
        elif isinstance(event, GroupLoaded):
            self._stats(event.group_id).members = _by_identity(event.members)
        elif isinstance(event, GroupRemoved):
            self._groups.pop(event.group_id, None)

    def _stats(self, group_id: str) -> _GroupStats:
        stats = self._groups.get(group_id)
        if stats is None:
            stats = self._groups[group_id] = _GroupStats(self.timeline_size)
        return stats

    def _started(self, event: RebalanceStarted) -> None:
        stats = self._stats(event.group_id)
        if stats.open is not None:
            self._end(stats, stats.open, SUPERSEDED, event.wall_ms, event.monotonic_ms)
        rebalance = Rebalance(
            event.group_id,
            event.generation_id,
            event.previous_state,
            event.reason,
            event.client_reason,
            event.detail,
            event.member,
            event.wall_ms,
            event.monotonic_ms,
        )
        # Members removed since the last generation (the one whose departure started this, say) are out already,
        # unless an earlier rebalance of this generation listed them.
        if stats.removed:
            rebalance.members_out = [
                (stats.members[key], cause) for key, cause in stats.removed.items() if key in stats.members
            ]
            stats.listed.update(stats.removed)
            stats.removed = {}
        stats.open = rebalance
        stats.timeline.append(rebalance)
        stats.rebalances[event.reason.value] += 1
        stats.started_ms.append(event.wall_ms)
        fields = {
            k: v
            for k, v in rebalance.log_fields(with_members=False).items()
            if k not in ("generation", "outcome", "duration_ms", "members_in", "members_out")
        }
        fields["members"] = event.member_count
        rebalance_log.info("rebalance started %s", logfmt(fields), extra={"rebalance": fields})

    def _join_completed(self, event: JoinPhaseCompleted) -> None:
        stats = self._stats(event.group_id)
        after = _by_identity(event.members)
        rebalance = stats.open
        if rebalance is not None:
            rebalance.generation = event.generation_id
            rebalance.leader_id = event.leader_id
            rebalance.protocol_name = event.protocol_name
            rebalance.members = event.members
            rebalance.join_completed_wall_ms = event.wall_ms
            rebalance.members_in = [m for key, m in after.items() if key not in stats.members]
            rebalance.members_out = [
                (m, stats.removed.get(key) or stats.listed.get(key))
                for key, m in stats.members.items()
                if key not in after
            ]
        stats.members = after
        stats.removed = {}
        stats.listed = {}
        if rebalance is not None and not event.members:
            self._end(stats, rebalance, EMPTY, event.wall_ms, event.monotonic_ms)

    def _completed(self, event: RebalanceCompleted) -> None:
        stats = self._stats(event.group_id)
        stats.completed += 1
        self.completed_rebalances += 1
        if stats.open is not None:
            self._end(stats, stats.open, STABLE, event.wall_ms, event.monotonic_ms)

    def _end(
        self, stats: _GroupStats, rebalance: Rebalance, outcome: str, wall_ms: int, monotonic_ms: int
    ) -> None:
        rebalance.outcome = outcome
        rebalance.ended_wall_ms = wall_ms
        rebalance.duration_ms = max(monotonic_ms - rebalance.started_monotonic_ms, 0)
        if outcome != SUPERSEDED:
            stats.durations.observe(rebalance.duration_ms / 1000)
        stats.open = None
        fields = rebalance.log_fields()
        rebalance_log.info("rebalance ended %s", logfmt(fields), extra={"rebalance": fields})


def _by_identity(members: Iterable[MemberInfo]) -> dict[str, MemberInfo]:
    return {m.identity: m for m in members}


def logfmt(fields: dict[str, Any]) -> str:
    """key=value pairs; values with spaces, quotes or '=' are quoted; None is left out."""
    parts = []
    for key, value in fields.items():
        if value is None or value == "":
            continue
        text = str(value)
        if any(c in text for c in ' "=\n'):
            text = '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
        parts.append(f"{key}={text}")
    return " ".join(parts)
