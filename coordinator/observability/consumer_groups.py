"""Consumer groups (KIP-848) as the view and the metrics read groups: a `ConsumerGroupFacade` answers what they
ask of a classic group (coordinator.group.group.ClassicGroup), so that the admin API, the `groups` CLI and the
metrics show both types through one code path.

The mapping: the group epoch stands for the generation, the assignor for the protocol, the protocol type is
"consumer"; a member's current assignment (with the partitions it is still revoking) and its subscription are
handed out as consumer-protocol Assignment and Subscription bytes, with topic names from the topic image. What
only consumer groups have (epochs, member states, target assignments) is in `extra_json()` and
`member_extra_json()`.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from coordinator.consumer.group import ConsumerGroup, ConsumerMember
from protocol.consumer import ConsumerAssignment, encode_assignment

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
TopicName = Callable[[uuid.UUID], "str | None"]


def _names(assignment: Mapping[uuid.UUID, frozenset[int]], topic_name: TopicName) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for topic_id, partitions in assignment.items():
        if partitions:
            out[topic_name(topic_id) or str(topic_id)] = sorted(partitions)
    return dict(sorted(out.items()))


def _subscription(topics: list[str]) -> bytes:
    """A consumer-protocol Subscription v0 of `topics` (no user data)."""
    out = bytearray(_I16.pack(0)) + _I32.pack(len(topics))
    for topic in topics:
        name = topic.encode("utf-8")
        out += _I16.pack(len(name)) + name
    out += _I32.pack(-1)
    return bytes(out)


class ConsumerMemberFacade:
    def __init__(
        self, group: ConsumerGroup, member: ConsumerMember, topic_name: TopicName, session_ms: int
    ) -> None:
        self._group = group
        self._member = member
        self._topic_name = topic_name
        self.member_id = member.member_id
        self.group_instance_id = member.instance_id
        self.client_id = member.client_id
        self.client_host = member.client_host
        self.session_timeout_ms = session_ms
        self.rebalance_timeout_ms = member.rebalance_timeout_ms

    def current(self) -> dict[str, list[int]]:
        held = dict(self._member.assigned)
        for t, ps in self._member.pending_revocation.items():
            held[t] = held.get(t, frozenset()) | ps
        return _names(held, self._topic_name)

    @property
    def assignment(self) -> bytes:
        partitions = tuple((topic, tuple(ps)) for topic, ps in self.current().items())
        return encode_assignment(ConsumerAssignment(0, partitions, None))

    def metadata(self, protocol_name: str) -> bytes:
        return _subscription(sorted(self._group.subscribed_topic_names(self._member)))

    def extra_json(self) -> dict[str, Any]:
        m = self._member
        target = self._group.target.get(m.member_id, {})
        return {
            "member_epoch": m.member_epoch,
            "member_state": m.state.name,
            "subscribed_topic_regex": m.subscribed_topic_regex,
            "server_assignor": m.server_assignor,
            "rack_id": m.rack_id,
            "target_assignment": [
                {"topic": t, "partitions": ps} for t, ps in _names(target, self._topic_name).items()
            ],
            "revoking": [
                {"topic": t, "partitions": ps}
                for t, ps in _names(m.pending_revocation, self._topic_name).items()
            ],
        }


class ConsumerGroupFacade:
    """A ConsumerGroup read as the view reads a ClassicGroup (see the module doc)."""

    group_type = "consumer"
    protocol_type = "consumer"
    leader_id = None
    current_state_timestamp_ms = -1

    def __init__(
        self, group: ConsumerGroup, topic_name: TopicName, default_assignor: str, session_timeout_ms: int
    ) -> None:
        self.group = group
        self.group_id = group.group_id
        self._topic_name = topic_name
        self._session_timeout_ms = session_timeout_ms
        self.state = str(group.state)
        self.protocol_name = group.preferred_assignor() or default_assignor
        self.generation_id = group.group_epoch
        self.subscribed_topics = frozenset(group.subscribed_topic_names())

    def uses_consumer_protocol(self) -> bool:
        return True

    def is_in_state(self, state: object) -> bool:
        """Compared by name with a classic group state (the admin API asks for Empty)."""
        return str(state) == self.state

    def num_members(self) -> int:
        return len(self.group.members)

    def all_members(self) -> Iterator[ConsumerMemberFacade]:
        for member_id in sorted(self.group.members):
            yield ConsumerMemberFacade(
                self.group, self.group.members[member_id], self._topic_name, self._session_timeout_ms
            )

    def is_leader(self, member_id: str) -> bool:
        return False  # the coordinator assigns: no member leads

    def num_pending_join_members(self) -> int:
        return 0

    def extra_json(self) -> dict[str, Any]:
        return {"group_epoch": self.group.group_epoch, "assignment_epoch": self.group.assignment_epoch}
