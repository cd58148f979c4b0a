"""A consumer group (KIP-848) and its members, and reconciliation (Kafka's ConsumerGroup,
ConsumerGroupMember and CurrentAssignmentBuilder).

Epochs. The group epoch moves when what the assignment depends on changes (members, subscriptions, the
subscribed topics' metadata); the assignment epoch is the group epoch the target assignment was computed at;
a member's epoch is the target epoch it has reconciled to.

Reconciliation (`reconcile`, 4.3's CurrentAssignmentBuilder, with the fixes Kafka made after 4.1). A member
moves towards its target one heartbeat at a time: partitions it must give up are first withheld from its
assignment (`pending_revocation`, state UNREVOKED_PARTITIONS, its epoch unchanged) until a heartbeat no longer
lists them; only then does it move to the target epoch and take the partitions that are free. A partition still
held or being revoked by another member is not handed out (state UNRELEASED_PARTITIONS) until that member lets
go of it, so a partition never has two owners. `owner` is the group's map of partition -> member holding it
(assigned or pending revocation).
"""

from __future__ import annotations

import dataclasses
import enum
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

from .records import ClassicMemberMetadata

Assignment = Mapping[uuid.UUID, frozenset[int]]
EMPTY_ASSIGNMENT: Assignment = {}

LEAVE_GROUP_EPOCH = -1
LEAVE_GROUP_STATIC_EPOCH = -2


class MemberState(enum.IntEnum):
    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127


class ConsumerGroupState(enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"

    def __str__(self) -> str:
        return self.value


@dataclasses.dataclass(frozen=True, slots=True)
class ConsumerMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned: Assignment = dataclasses.field(default_factory=dict)
    pending_revocation: Assignment = dataclasses.field(default_factory=dict)
    # set while the member uses the classic protocol (JoinGroup/SyncGroup/Heartbeat) inside the consumer group
    classic: ClassicMemberMetadata | None = None
    # the member epoch at which it was given each assigned partition, where older than its epoch (KIP-1251);
    # not durable: a partition missing here counts as given at the member's epoch
    assigned_since: Mapping[tuple[uuid.UUID, int], int] = dataclasses.field(default_factory=dict)

    @property
    def uses_classic_protocol(self) -> bool:
        return self.classic is not None

    def partitions(self) -> Iterable[tuple[uuid.UUID, int]]:
        """Every partition the member holds: assigned and pending revocation."""
        for assignment in (self.assigned, self.pending_revocation):
            for t, ps in assignment.items():
                for p in ps:
                    yield t, p


def _clean(assignment: Mapping[uuid.UUID, Iterable[int]]) -> dict[uuid.UUID, frozenset[int]]:
    return {t: frozenset(ps) for t, ps in assignment.items() if ps}


def owns_any(owned: Mapping[uuid.UUID, Iterable[int]] | None, partitions: Assignment) -> bool:
    """Whether the member still lists any of `partitions` (None, "unchanged", counts as still owning)."""
    if owned is None:
        return True
    for t, ps in partitions.items():
        if ps and not frozenset(owned.get(t, ())).isdisjoint(ps):
            return True
    return False


def is_subset(owned: Mapping[uuid.UUID, Iterable[int]] | None, assignment: Assignment) -> bool:
    if owned is None:
        return False
    return all(frozenset(ps) <= assignment.get(t, frozenset()) for t, ps in owned.items())


def reconcile(
    member: ConsumerMember,
    target_epoch: int,
    target: Assignment,
    owned: Mapping[uuid.UUID, Iterable[int]] | None,
    owner: Callable[[uuid.UUID, int], str | None],
) -> ConsumerMember:
    """The member's next state towards `target` (see the module doc). `owned`: the partitions its heartbeat
    lists (None: not sent). Returns `member` itself when nothing changes."""
    state = member.state
    if state == MemberState.STABLE and member.member_epoch == target_epoch:
        return member
    if state == MemberState.UNREVOKED_PARTITIONS and owns_any(owned, member.pending_revocation):
        return member  # still revoking: nothing moves until it lets go
    if state == MemberState.UNKNOWN and (owned is None or any(owned.values())):
        raise MemberFenced(f"member {member.member_id} is in an unknown state and owns partitions")
    # UNRELEASED_PARTITIONS: picks up what was freed since; UNKNOWN owning nothing: starts again from its target
    return _next(member, target_epoch, target, owned, owner)


class MemberFenced(Exception):
    """The member must give up everything and rejoin (FENCED_MEMBER_EPOCH)."""


def _next(
    member: ConsumerMember,
    target_epoch: int,
    target: Assignment,
    owned: Mapping[uuid.UUID, Iterable[int]] | None,
    owner: Callable[[uuid.UUID, int], str | None],
) -> ConsumerMember:
    keep: dict[uuid.UUID, set[int]] = {}
    revoke: dict[uuid.UUID, set[int]] = {}
    added: dict[uuid.UUID, set[int]] = {}
    unreleased = False
    for t in set(member.assigned) | set(target):
        current = member.assigned.get(t, frozenset())
        wanted = target.get(t, frozenset())
        kept = current & wanted
        if kept:
            keep[t] = set(kept)
        gone = current - wanted
        if gone:
            revoke[t] = set(gone)
        for p in wanted - current:
            holder = owner(t, p)
            # A partition held by no one, or by this member's own pending revocation (KAFKA-19449), is free.
            if holder is None or holder == member.member_id:
                added.setdefault(t, set()).add(p)
            else:
                unreleased = True
    if revoke and owns_any(owned, _clean(revoke)):
        return dataclasses.replace(
            member,
            state=MemberState.UNREVOKED_PARTITIONS,
            assigned=_clean(keep),
            pending_revocation=_clean(revoke),
        )
    assigned = {t: set(ps) for t, ps in keep.items()}
    for t, ps in added.items():
        assigned.setdefault(t, set()).update(ps)
    since = member.assigned_since
    if member.member_epoch != target_epoch:
        # partitions kept are held since the epoch they were held at; those added, since the target epoch
        since = {(t, p): since.get((t, p), member.member_epoch) for t, ps in keep.items() for p in ps}
    return dataclasses.replace(
        member,
        state=MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE,
        member_epoch=target_epoch,
        # Unchanged when the epoch is: a heartbeat retried after a lost answer must still be accepted.
        previous_member_epoch=member.member_epoch
        if member.member_epoch != target_epoch
        else member.previous_member_epoch,
        assigned=_clean(assigned),
        pending_revocation={},
        assigned_since=since,
    )


def held_since(member: ConsumerMember, topic_id: uuid.UUID, partition: int) -> int | None:
    """The member epoch from which the member holds an assigned partition; None if it is not assigned."""
    if partition not in member.assigned.get(topic_id, ()):
        return None
    return member.assigned_since.get((topic_id, partition), member.member_epoch)


class ConsumerGroup:
    """A consumer group: its epochs, members, target assignment and the partition owners (see the module doc)."""

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.metadata_hash = 0
        self.members: dict[str, ConsumerMember] = {}
        self.static_members: dict[str, str] = {}  # instance id -> member id
        self.target: dict[str, Assignment] = {}  # member id -> target assignment
        self.owners: dict[tuple[uuid.UUID, int], str] = {}  # partition -> member holding it
        # partitions that lost their owner since the manager last looked (for the answers it holds)
        self.freed: set[tuple[uuid.UUID, int]] = set()
        # members sent an assignment that no heartbeat of theirs has listed since (the manager sends it again;
        # not durable: at worst an assignment goes once more)
        self.unacked: set[str] = set()
        self.image_version = -1  # the topic image version the subscription metadata was computed at
        # (monotonic) when the target was last computed here, when a held-back target will be, and when a join to
        # a group whose target was current opened the expansion window; whether only joins bumped the group epoch
        # since the last target; static members offline in the registration window -> since when
        self.assigned_at_ms: int | None = None
        self.assignment_due_ms: int | None = None
        self.expansion_from_ms: int | None = None
        # the first join of a group whose members hold nothing (the join window), and after its first target the
        # end of the window's limit (later joins until then are still batched)
        self.forming_from_ms: int | None = None
        self.young_until_ms: int | None = None
        self.last_join_ms: int | None = None  # (monotonic) the last join that bumped the group epoch
        self.joins_only = True
        self.offline: dict[str, int] = {}
        self.resolved: dict[str, frozenset[str]] = {}  # regex -> topic names, at image_version
        self._stable_at: dict[int, int] = {}  # member epoch -> members STABLE at it (state in O(1))
        # topic name / regex -> members subscribing with it (the group's subscription in O(topics), not members)
        self._topic_refs: dict[str, int] = {}
        self._regex_refs: dict[str, int] = {}
        # writes in flight (coordinator.consumer.manager): their records not yet durable, and the state before
        # the oldest of them
        self.inflight = 0
        self.base: tuple[object, ...] | None = None
        self.base_absent = False  # the oldest write in flight created the group

    # -- state ----------------------------------------------------------------------------------------------

    @property
    def state(self) -> ConsumerGroupState:
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        if self._stable_at.get(self.assignment_epoch, 0) != len(self.members):
            return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def _count(self, member: ConsumerMember, delta: int) -> None:
        if member.state == MemberState.STABLE:
            _add(self._stable_at, member.member_epoch, delta)
        for name in member.subscribed_topic_names:
            _add(self._topic_refs, name, delta)
        if member.subscribed_topic_regex is not None:
            _add(self._regex_refs, member.subscribed_topic_regex, delta)

    def is_empty(self) -> bool:
        return not self.members

    def owner(self, topic_id: uuid.UUID, partition: int) -> str | None:
        return self.owners.get((topic_id, partition))

    # -- members --------------------------------------------------------------------------------------------

    def update_member(self, member: ConsumerMember) -> None:
        """Put `member` in place of the member with its id (if any), keeping the owner map and the static
        member map in step."""
        old = self.members.get(member.member_id)
        if old is not None:
            self._release(old)
            self._count(old, -1)
            if old.instance_id is not None and self.static_members.get(old.instance_id) == old.member_id:
                del self.static_members[old.instance_id]
        self.members[member.member_id] = member
        self._count(member, 1)
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id
        freed = self.freed
        for tp in member.partitions():
            self.owners[tp] = member.member_id
            freed.discard(tp)

    def remove_member(self, member_id: str) -> ConsumerMember | None:
        self.offline.pop(member_id, None)
        self.unacked.discard(member_id)
        old = self.members.pop(member_id, None)
        if old is not None:
            self._release(old)
            self._count(old, -1)
            if old.instance_id is not None and self.static_members.get(old.instance_id) == member_id:
                del self.static_members[old.instance_id]
        self.target.pop(member_id, None)
        return old

    def _release(self, member: ConsumerMember) -> None:
        for tp in member.partitions():
            if self.owners.get(tp) == member.member_id:
                del self.owners[tp]
                self.freed.add(tp)

    def static_member(self, instance_id: str) -> ConsumerMember | None:
        member_id = self.static_members.get(instance_id)
        return None if member_id is None else self.members.get(member_id)

    def rebuild_owners(self) -> None:
        """Owners, static members and state counts from `members` (after a load or a restore)."""
        self.owners = {}
        self.static_members = {}
        self._stable_at = {}
        self._topic_refs = {}
        self._regex_refs = {}
        for member in self.members.values():
            self._count(member, 1)
            if member.instance_id is not None:
                self.static_members[member.instance_id] = member.member_id
            for tp in member.partitions():
                self.owners[tp] = member.member_id

    # -- subscriptions --------------------------------------------------------------------------------------

    def subscribed_topic_names(self, member: ConsumerMember | None = None) -> set[str]:
        """The topics the members (or one member) subscribe to: names and what their regexes resolved to."""
        if member is not None:
            names = set(member.subscribed_topic_names)
            if member.subscribed_topic_regex is not None:
                names.update(self.resolved.get(member.subscribed_topic_regex, ()))
            return names
        names = set(self._topic_refs)
        for regex in self._regex_refs:
            names.update(self.resolved.get(regex, ()))
        return names

    def subscribed_regexes(self) -> set[str]:
        """The regular expressions the members subscribe with."""
        return set(self._regex_refs)

    def preferred_assignor(self) -> str | None:
        """The assignor most members ask for (ties: the first name in order), None if none asks."""
        counts: dict[str, int] = {}
        for m in self.members.values():
            if m.server_assignor:
                counts[m.server_assignor] = counts.get(m.server_assignor, 0) + 1
        if not counts:
            return None
        return min(counts, key=lambda name: (-counts[name], name))

    # -- undo -----------------------------------------------------------------------------------------------

    def snapshot(self) -> tuple[object, ...]:
        return (
            self.group_epoch,
            self.assignment_epoch,
            self.metadata_hash,
            dict(self.members),
            dict(self.target),
            self.image_version,
            dict(self.resolved),
            dict(self.offline),
        )

    def restore(self, snapshot: tuple[object, ...]) -> None:
        (
            self.group_epoch,
            self.assignment_epoch,
            self.metadata_hash,
            members,
            target,
            self.image_version,
            resolved,
            offline,
        ) = snapshot  # type: ignore[assignment]
        self.offline = dict(offline)  # type: ignore[call-overload]
        self.members = dict(members)  # type: ignore[call-overload]
        self.target = dict(target)  # type: ignore[call-overload]
        self.resolved = dict(resolved)  # type: ignore[call-overload]
        self.rebuild_owners()


_K = TypeVar("_K")


def _add(counts: dict[_K, int], key: _K, delta: int) -> None:
    count = counts.get(key, 0) + delta
    if count:
        counts[key] = count
    else:
        counts.pop(key, None)
