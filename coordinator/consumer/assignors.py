"""The server-side assignors of consumer groups (KIP-848): `uniform` (Kafka's default) and `range`.

An assignor maps the members' subscriptions (topic ids) to a target assignment. Both are pure and
deterministic (members and partitions are visited in sorted order, save `uniform`'s member named `first`): the
same inputs give the same target anywhere.

`uniform` balances the number of partitions per member and, within that, keeps each member's current target
(sticky). With identical subscriptions (homogeneous, the common case) every member gets `P // M` partitions and
`P % M` members one more; a member keeps what it holds up to its quota, and whoever holds an extra partition
may keep it (Kafka's KAFKA-18688), so a join or a leave moves only what balance needs. Partitions nobody keeps
(a leaver's, say) go first to the member named `first`: the member whose heartbeat the target is computed in,
which learns of them in that heartbeat's answer instead of its next one. With different
subscriptions (heterogeneous) partitions a member holds and may still have are kept, the rest go to the least
loaded member subscribed to their topic, and partitions then move from the most to the least loaded member
that can take them until no move narrows the gap.

`range` gives each member a contiguous range of every topic it subscribes to, `n // k` partitions and `n % k`
members one more, members ordered with static members first (by instance id), then by member id. Kafka gives the
extras to the first members, so a member leaving shifts every range after it; here the extras go where members
keep the most of what they held (a dynamic programme over the members in order), so a leave moves only the
leaver's partitions. A new group gets Kafka's layout. Co-partitioned topics (same subscribers, same partition count, same
history) still get the same ranges.
"""

from __future__ import annotations

import bisect
import dataclasses
import uuid
from collections.abc import Callable, Mapping
from typing import Any

Assignment = dict[uuid.UUID, frozenset[int]]


@dataclasses.dataclass(frozen=True, slots=True)
class MemberSpec:
    member_id: str
    instance_id: str | None
    subscribed: frozenset[uuid.UUID]  # the ids of the existing topics the member subscribes to
    current: Mapping[uuid.UUID, frozenset[int]]  # its current target


class PartitionAssignorError(Exception):
    """An assignor that cannot assign (Kafka's PartitionAssignorException)."""


def _as_assignment(owned: Mapping[str, set[tuple[Any, int]]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for member_id, partitions in owned.items():
        by_topic: dict[Any, set[int]] = {}
        for topic_id, p in partitions:
            by_topic.setdefault(topic_id, set()).add(p)
        result[member_id] = {t: frozenset(ps) for t, ps in by_topic.items()}
    return result


def _indexed(
    assign: Callable[[Mapping[str, MemberSpec], Mapping[Any, int]], dict[str, Any]],
) -> Callable[[Mapping[str, MemberSpec], Mapping[uuid.UUID, int]], dict[str, Assignment]]:
    """Run an assignor on topic indexes (ints, in topic id order) instead of UUIDs, whose hash is a Python-level
    call: a group of 500 members hashes topic ids millions of times per assignment otherwise."""

    def run(members: Mapping[str, MemberSpec], topics: Mapping[uuid.UUID, int]) -> dict[str, Assignment]:
        ids = sorted(topics)
        index = {t: i for i, t in enumerate(ids)}
        cache: dict[frozenset[uuid.UUID], frozenset[int]] = {}

        def subscribed(spec: MemberSpec) -> frozenset[int]:
            found = cache.get(spec.subscribed)
            if found is None:
                found = cache[spec.subscribed] = frozenset(index[t] for t in spec.subscribed if t in index)
            return found

        specs = {
            member_id: MemberSpec(
                spec.member_id,
                spec.instance_id,
                subscribed(spec),  # type: ignore[arg-type]
                {index[t]: ps for t, ps in spec.current.items() if t in index},  # type: ignore[misc]
            )
            for member_id, spec in members.items()
        }
        out = assign(specs, {i: topics[t] for i, t in enumerate(ids)})
        return {m: {ids[i]: ps for i, ps in a.items()} for m, a in out.items()}

    return run


def _uniform(members: Mapping[str, MemberSpec], topics: Mapping[Any, int]) -> dict[str, Any]:
    if not members:
        return {}
    subscriptions = {m.subscribed for m in members.values()}
    if len(subscriptions) == 1:
        return _uniform_homogeneous(members, topics, next(iter(subscriptions)))
    return _uniform_heterogeneous(members, topics)


_uniform_indexed = _indexed(_uniform)


def uniform(
    members: Mapping[str, MemberSpec], topics: Mapping[uuid.UUID, int], first: str | None = None
) -> dict[str, Assignment]:
    """The `uniform` assignor (see the module doc). `topics`: partition count by topic id; `first`: the member
    handed the partitions nobody keeps before the others (identical subscriptions only)."""
    if not members:
        return {}
    subscribed = next(iter(members.values())).subscribed
    if all(m.subscribed == subscribed for m in members.values()):
        return _uniform_homogeneous_flat(members, topics, subscribed, first)
    return _uniform_indexed(members, topics)


def _handing_order(order: list[str], first: str | None) -> list[str]:
    """The members in the order free partitions are handed out: `first` (if a member), then the rest sorted."""
    if first is None or first not in order:
        return order
    return [first, *(m for m in order if m != first)]


def _uniform_homogeneous_flat(
    members: Mapping[str, MemberSpec],
    topics: Mapping[uuid.UUID, int],
    subscribed: frozenset[uuid.UUID],
    first: str | None = None,
) -> dict[str, Assignment]:
    """`_uniform_homogeneous` (the same result with no `first`) on partitions numbered 0..P-1 across the
    subscribed topics in topic id order: one int per partition instead of (topic, partition) tuples, the assignor
    of a group of hundreds of members being computed at every join."""
    ids = sorted(t for t in subscribed if t in topics)
    offsets: dict[uuid.UUID, int] = {}
    total = 0
    for t in ids:
        offsets[t] = total
        total += topics[t]
    order = sorted(members)
    quota, extra = divmod(total, len(order))
    taken = bytearray(total)
    owned: dict[str, list[int]] = {}
    for member_id in order:  # keep what is held, up to the quota (+1 while extras last)
        held: list[int] = []
        for t, ps in members[member_id].current.items():
            base = offsets.get(t)
            if base is not None:
                count = topics[t]
                held.extend(base + p for p in ps if 0 <= p < count and not taken[base + p])
        held.sort()
        keep = held[:quota]
        if len(held) > quota and extra > 0:
            keep = held[: quota + 1]
            extra -= 1
        for g in keep:
            taken[g] = 1
        owned[member_id] = keep
    free = [g for g in range(total) if not taken[g]]
    position = 0
    order = _handing_order(order, first)
    for member_id in order:  # every member to the quota, then the extras left to members at the quota
        need = quota - len(owned[member_id])
        if need > 0:
            owned[member_id] = owned[member_id] + free[position : position + need]
            position += need
    for member_id in order:
        if position >= len(free) or extra <= 0:
            break
        if len(owned[member_id]) == quota:
            owned[member_id] = [*owned[member_id], free[position]]
            position += 1
            extra -= 1
    if position < len(free):  # cannot happen with consistent quotas; never lose a partition
        raise PartitionAssignorError(f"{len(free) - position} partitions left unassigned")
    if len(ids) == 1:
        (only,) = ids
        return {m: ({only: frozenset(gs)} if gs else {}) for m, gs in owned.items()}
    starts = [offsets[t] for t in ids]
    result: dict[str, Assignment] = {}
    for member_id, gs in owned.items():
        by_topic: dict[uuid.UUID, list[int]] = {}
        for g in gs:
            t = ids[bisect.bisect_right(starts, g) - 1]
            by_topic.setdefault(t, []).append(g - offsets[t])
        result[member_id] = {t: frozenset(ps) for t, ps in by_topic.items()}
    return result


def _uniform_homogeneous(
    members: Mapping[str, MemberSpec], topics: Mapping[Any, int], subscribed: frozenset[Any]
) -> dict[str, Any]:
    partitions = [(t, p) for t in sorted(subscribed) if t in topics for p in range(topics[t])]
    order = sorted(members)
    quota, extra = divmod(len(partitions), len(order))
    valid = set(partitions)
    owned: dict[str, set[tuple[Any, int]]] = {m: set() for m in order}
    taken: set[tuple[Any, int]] = set()
    for member_id in order:  # keep what is held, up to the quota (+1 while extras last)
        held = sorted(
            (t, p)
            for t, ps in members[member_id].current.items()
            for p in ps
            if (t, p) in valid and (t, p) not in taken
        )
        keep = held[:quota]
        if len(held) > quota and extra > 0:
            keep = held[: quota + 1]
            extra -= 1
        owned[member_id].update(keep)
        taken.update(keep)
    free = [tp for tp in partitions if tp not in taken]
    # Fill every member to the quota, then hand out the extras left to members at the quota.
    position = 0
    for member_id in order:
        need = quota - len(owned[member_id])
        if need > 0:
            owned[member_id].update(free[position : position + need])
            position += need
    for member_id in order:
        if position >= len(free) or extra <= 0:
            break
        if len(owned[member_id]) == quota:
            owned[member_id].add(free[position])
            position += 1
            extra -= 1
    if position < len(free):  # cannot happen with consistent quotas; never lose a partition
        raise PartitionAssignorError(f"{len(free) - position} partitions left unassigned")
    return _as_assignment(owned)


def _uniform_heterogeneous(members: Mapping[str, MemberSpec], topics: Mapping[Any, int]) -> dict[str, Any]:
    order = sorted(members)
    owned: dict[str, set[tuple[Any, int]]] = {m: set() for m in order}
    owner: dict[tuple[Any, int], str] = {}
    subscribers: dict[Any, list[str]] = {}
    for member_id in order:
        for t in sorted(members[member_id].subscribed):
            if t in topics:
                subscribers.setdefault(t, []).append(member_id)
    for member_id in order:
        spec = members[member_id]
        for t, ps in sorted(spec.current.items()):
            if t not in spec.subscribed or t not in topics:
                continue
            for p in sorted(ps):
                if p < topics[t] and (t, p) not in owner:
                    owner[(t, p)] = member_id
                    owned[member_id].add((t, p))
    for t in sorted(subscribers):
        for p in range(topics[t]):
            if (t, p) not in owner:
                target = min(subscribers[t], key=lambda m: (len(owned[m]), m))
                owner[(t, p)] = target
                owned[target].add((t, p))
    # Move partitions from the most to the least loaded member able to take them, while that narrows the gap.
    moved = True
    while moved:
        moved = False
        for giver in sorted(order, key=lambda m: (-len(owned[m]), m)):
            load = len(owned[giver])
            for t, p in sorted(owned[giver], reverse=True):
                takers = [m for m in subscribers.get(t, ()) if len(owned[m]) <= load - 2]
                if takers:
                    taker = min(takers, key=lambda m: (len(owned[m]), m))
                    owned[giver].discard((t, p))
                    owned[taker].add((t, p))
                    moved = True
                    break
            if moved:
                break
    return _as_assignment(owned)


def _range(members: Mapping[str, MemberSpec], topics: Mapping[Any, int]) -> dict[str, Any]:
    order = sorted(
        members.values(),
        key=lambda m: (m.instance_id is None, m.instance_id or "", m.member_id),
    )
    result: dict[str, Assignment] = {m.member_id: {} for m in order}
    for t in sorted(topics):
        subscribed = [m for m in order if t in m.subscribed]
        if not subscribed:
            continue
        n = topics[t]
        quota, extra = divmod(n, len(subscribed))
        held = [sorted(p for p in m.current.get(t, ()) if 0 <= p < n) for m in subscribed]
        start = 0
        for member, count in zip(subscribed, _range_counts(held, quota, extra), strict=True):
            if count:
                result[member.member_id][t] = frozenset(range(start, start + count))
            start += count
    return result


STICKY_RANGE_MAX_STATES = 5_000
"""Above this many (member, extras used) states (a few ms of work) a greedy pass places the extras instead. A
member leaving a group with about as many partitions as members (N-1 members on N partitions: one extra) is well
within it; the middle of a burst of joins to a large group may not be."""


def _range_fit(held: list[int], start: int, size: int) -> tuple[int, int]:
    """How well the range of `size` from `start` fits what a member held: partitions kept, then how close its end
    is to where the held ones ended."""
    end = start + size
    return bisect.bisect_left(held, end) - bisect.bisect_left(held, start), -abs(end - 1 - held[-1])


def _range_counts_greedy(held: list[list[int]], quota: int, extra: int) -> list[int]:
    """Member by member: the extra where it keeps more of what the member held (then where its range ends closer
    to where it ended), unless every member left must take one."""
    counts = []
    start = 0
    for i, h in enumerate(held):
        count = quota
        if extra > 0:
            if extra >= len(held) - i or not h:
                count = quota + 1
            elif _range_fit(h, start, quota + 1) > _range_fit(h, start, quota):
                count = quota + 1
            extra -= count - quota
        counts.append(count)
        start += count
    return counts


def _range_counts(held: list[list[int]], quota: int, extra: int) -> list[int]:
    """How many partitions each member (in order) gets, `quota` or `quota + 1` with `extra` of them one more,
    ranges being contiguous in member order: the choice that keeps the most partitions where they are (a dynamic
    programme over members and extras used), and among equals the extras as early as possible, which is Kafka's
    layout for a group without history."""
    count = len(held)
    if extra == 0 or not any(held):
        return [quota + 1 if i < extra else quota for i in range(count)]
    if count * (extra + 1) > STICKY_RANGE_MAX_STATES:
        return _range_counts_greedy(held, quota, extra)

    def kept(i: int, start: int, size: int) -> int:
        h = held[i]
        return bisect.bisect_left(h, start + size) - bisect.bisect_left(h, start)

    # best[i][e]: the most partitions members i.. keep when e extras went to members before i (-1: impossible)
    best = [[-1] * (extra + 1) for _ in range(count + 1)]
    best[count][extra] = 0
    for i in range(count - 1, -1, -1):
        row, following = best[i], best[i + 1]
        for e in range(max(0, extra - (count - i)), min(i, extra) + 1):
            start = i * quota + e
            value = -1
            if e < extra and following[e + 1] >= 0:
                value = kept(i, start, quota + 1) + following[e + 1]
            if following[e] >= 0:
                value = max(value, kept(i, start, quota) + following[e])
            row[e] = value
    counts = []
    e = 0
    for i in range(count):
        start = i * quota + e
        if (
            e < extra
            and best[i + 1][e + 1] >= 0
            and kept(i, start, quota + 1) + best[i + 1][e + 1] == best[i][e]
        ):
            counts.append(quota + 1)
            e += 1
        else:
            counts.append(quota)
    return counts


_range_indexed = _indexed(_range)


def range_(
    members: Mapping[str, MemberSpec], topics: Mapping[uuid.UUID, int], first: str | None = None
) -> dict[str, Assignment]:
    """The `range` assignor (see the module doc). `first` is not used: where a range goes is not a choice."""
    return _range_indexed(members, topics)


ASSIGNORS = {"uniform": uniform, "range": range_}
