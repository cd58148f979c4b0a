"""What is paused in each group, and the assignments members get while it is.

A pause is operator intent about a group id, not state of the group: it lives on its own key (a GroupPause
record, coordinator.records), so a group can be paused before it exists (a deployment pauses, then starts the
new code) and the pause outlives the group's expiry by offset retention (an Empty group whose offsets expire is
forgotten, its pause is not: the pause is what keeps a deployment's new code from consuming). DeleteGroups, an
explicit removal of everything the coordinator holds for the group, tombstones the pause too.

Only the "consumer" protocol's assignments can be read, so only such groups can be paused: a group that exists
with another protocol type is refused. A pause recorded before the group exists and a group that then forms
with another protocol type is not applied (logged at delivery).

The leader's assignment is stored as the leader sent it; paused partitions are withheld when assignments are
delivered (SyncGroup answers, DescribeGroups), so resuming needs only a rebalance.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from coordinator.records import CoordinatorRecord, GroupPauseValue, new_group_pause_record
from protocol.consumer import filter_assignment

from .group import ClassicGroup, ClassicGroupMember
from .state import ClassicGroupState

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, slots=True)
class PauseState:
    """What is paused in a group: everything (`group_paused`) but the topics `resumed` since, and/or the
    partitions of `topics`."""

    group_paused: bool = False
    topics: frozenset[str] = frozenset()
    resumed: frozenset[str] = frozenset()  # only while group_paused

    def withholds(self, topic: str) -> bool:
        return (self.group_paused and topic not in self.resumed) or topic in self.topics

    @property
    def is_paused(self) -> bool:
        return self.group_paused or bool(self.topics)

    def to_json(self) -> dict[str, Any]:
        shown: dict[str, Any] = {"group": self.group_paused, "topics": sorted(self.topics)}
        if self.resumed:
            shown["resumed_topics"] = sorted(self.resumed)
        return shown


NOT_PAUSED = PauseState()


class PauseRegistry:
    """The pause state of every group id that has one."""

    def __init__(self) -> None:
        self.by_group: dict[str, PauseState] = {}

    def __contains__(self, group_id: object) -> bool:
        return group_id in self.by_group

    def state(self, group_id: str) -> PauseState:
        return self.by_group.get(group_id, NOT_PAUSED)

    def set(self, group_id: str, state: PauseState) -> None:
        if state.is_paused:
            self.by_group[group_id] = state
        else:
            self.by_group.pop(group_id, None)

    def forget(self, group_id: str) -> list[CoordinatorRecord]:
        """The tombstone of the group's pause, removed from memory now (DeleteGroups)."""
        if self.by_group.pop(group_id, None) is None:
            return []
        return [new_group_pause_record(group_id, False, ())]

    def replay(self, group_id: str, value: GroupPauseValue | None) -> None:
        self.set(
            group_id,
            NOT_PAUSED
            if value is None
            else PauseState(value.group_paused, frozenset(value.topics), frozenset(value.resumed_topics)),
        )

    def deliver(self, group: ClassicGroup, member: ClassicGroupMember) -> bytes:
        """The member's assignment as its SyncGroup answer hands it out; remembers which pause state it was
        filtered by, so that `pending` can tell when a pause or resume is in effect."""
        member.delivered_pause = self.state(group.group_id)
        return self.deliverable(group, member.assignment)

    def unsynced(self, group: ClassicGroup) -> list[ClassicGroupMember]:
        """The members whose last assignment was not filtered by the group's current pause state."""
        state = self.state(group.group_id)
        return [m for m in group.all_members() if m.delivered_pause != state]

    def in_effect(self, group: ClassicGroup, unsynced: list[ClassicGroupMember]) -> bool:
        """Every member has synced an assignment filtered by the current state (the group is Stable: no
        rebalance is still to hand assignments out), or the group has no members."""
        if group.num_members() == 0:
            return True
        return group.is_in_state(ClassicGroupState.STABLE) and not unsynced

    def deliverable(self, group: ClassicGroup, assignment: bytes) -> bytes:
        """A member's assignment as handed out: without the partitions paused in its group."""
        state = self.by_group.get(group.group_id)
        if state is None or not assignment:
            return assignment
        if not group.uses_consumer_protocol():
            log.warning(
                "group %s is paused but uses protocol type %r: its assignments cannot be filtered",
                group.group_id,
                group.protocol_type,
            )
            return assignment
        return filter_assignment(assignment, state.withholds)
