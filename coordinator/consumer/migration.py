"""Members of the classic protocol inside a consumer group, and the conversions between a classic group and a
consumer group (Kafka's online migration, KIP-848; GroupMetadataManager's classicGroupJoinToConsumerGroup and
friends, ConsumerGroup.fromClassicGroup, ClassicGroup.fromConsumerGroup).

Pure helpers of `ConsumerGroupManager` (coordinator.consumer.manager): what a classic member's JoinGroup
subscription says (topics, owned partitions, rack), the SyncGroup assignment it is given (the consumer protocol's
Assignment, at the version of the member's own subscription), and whether a classic group may become a consumer
group.

One deliberate difference from Kafka: user data in the classic assignments stops an upgrade only when the
group's assignor is a custom one (BUILTIN_ASSIGNORS).

Policy (`group.consumer.migration.policy`): `upgrade` lets a consumer-protocol member join a classic group with
members (the group becomes a consumer group), `downgrade` turns a consumer group whose last consumer-protocol
member left into a classic group, `bidirectional` (the default) both, `disabled` neither. Empty groups change
type under every policy.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from kio.schema.consumer_protocol_subscription.v0.data import ConsumerProtocolSubscription as SubscriptionV0
from kio.schema.consumer_protocol_subscription.v1.data import ConsumerProtocolSubscription as SubscriptionV1
from kio.schema.consumer_protocol_subscription.v2.data import ConsumerProtocolSubscription as SubscriptionV2
from kio.schema.consumer_protocol_subscription.v3.data import ConsumerProtocolSubscription as SubscriptionV3
from kio.serial import entity_reader
from kio.serial.errors import DecodeError

from coordinator.group.group import CONSUMER_PROTOCOL_TYPE, ClassicGroup
from protocol.consumer import AssignmentDecodeError, ConsumerAssignment, decode_assignment, encode_assignment

MIGRATION_POLICIES = ("bidirectional", "upgrade", "downgrade", "disabled")

BUILTIN_ASSIGNORS = frozenset({"range", "roundrobin", "sticky", "cooperative-sticky"})
"""The client-side assignors of the Kafka clients. Kafka refuses to upgrade a group whose assignments carry user
data; librdkafka echoes every member's subscription user data (the sticky assignors' bookkeeping) into its
assignment, so a librdkafka group of `cooperative-sticky` members could never be upgraded online. Their user
data means nothing once the server assigns, so only a custom assignor's stops an upgrade here."""

_SUBSCRIPTION_READERS = {
    0: entity_reader(SubscriptionV0),
    1: entity_reader(SubscriptionV1),
    2: entity_reader(SubscriptionV2),
    3: entity_reader(SubscriptionV3),
}


def upgrade_allowed(policy: str) -> bool:
    return policy in ("bidirectional", "upgrade")


def downgrade_allowed(policy: str) -> bool:
    return policy in ("bidirectional", "downgrade")


@dataclasses.dataclass(frozen=True, slots=True)
class ClassicSubscription:
    """A consumer-protocol Subscription (JoinGroup metadata of protocol type "consumer")."""

    version: int
    topics: tuple[str, ...]
    owned: dict[str, frozenset[int]]  # topic name -> partitions the member holds (v1+; empty before)
    rack_id: str | None


class SubscriptionError(ValueError):
    """Bytes that are not a consumer-protocol Subscription."""


def parse_subscription(metadata: bytes) -> ClassicSubscription:
    """Any version: a version above 3 is read with the v3 layout, as Kafka's ConsumerProtocol does."""
    if len(metadata) < 2:
        raise SubscriptionError("the subscription is shorter than its version")
    version = subscription_version(metadata)
    if version < 0:
        raise SubscriptionError(f"negative subscription version {version}")
    subscription: Any
    try:
        subscription, _ = _SUBSCRIPTION_READERS[min(version, 3)](metadata, 2)
    except (DecodeError, ValueError, OverflowError, IndexError) as exc:
        raise SubscriptionError(f"the subscription does not parse: {exc}") from None
    owned: dict[str, frozenset[int]] = {}
    for tp in getattr(subscription, "owned_partitions", ()):
        owned[tp.topic] = owned.get(tp.topic, frozenset()) | frozenset(int(p) for p in tp.partitions)
    return ClassicSubscription(
        version, tuple(subscription.topics), owned, getattr(subscription, "rack_id", None)
    )


def subscription_version(metadata: bytes) -> int:
    """The version of a consumer-protocol Subscription (0 for bytes too short to have one)."""
    return int.from_bytes(metadata[:2], "big", signed=True) if len(metadata) >= 2 else 0


def protocol_metadata(protocols: Iterable[tuple[str, bytes]], name: str | None) -> bytes | None:
    """The metadata of the protocol `name` (the first one when None) among a member's protocols."""
    for protocol_name, metadata in protocols:
        if name is None or protocol_name == name:
            return metadata
    return None


def assignment_bytes(version: int, partitions: Mapping[str, Iterable[int]]) -> bytes:
    """The consumer-protocol Assignment a classic member gets in its SyncGroup answer: its partitions, no user
    data, at the version of the member's subscription (at most 3, the newest the layout has)."""
    return encode_assignment(
        ConsumerAssignment(
            min(max(version, 0), 3),
            tuple((topic, tuple(sorted(ps))) for topic, ps in sorted(partitions.items()) if ps),
            None,
        )
    )


def upgrade_refusal(group: ClassicGroup, max_size: int) -> str | None:
    """Why a classic group with members cannot become a consumer group (Kafka's validateOnlineUpgrade and
    ConsumerGroup.fromClassicGroup), None if it can."""
    if group.protocol_type != CONSUMER_PROTOCOL_TYPE:
        return f"its protocol type is {group.protocol_type!r}, not 'consumer'"
    if group.num_members() > max_size:
        return f"it has {group.num_members()} members, more than group.consumer.max.size ({max_size})"
    for member in group.all_members():
        metadata = protocol_metadata(member.protocols, group.protocol_name)
        if metadata is None:
            return f"member {member.member_id} has no metadata for protocol {group.protocol_name}"
        try:
            parse_subscription(metadata)
        except SubscriptionError as exc:
            return f"the subscription of member {member.member_id} does not parse ({exc})"
        if member.assignment:
            try:
                assignment = decode_assignment(member.assignment)
            except AssignmentDecodeError as exc:
                return f"the assignment of member {member.member_id} does not parse ({exc})"
            if assignment.user_data and group.protocol_name not in BUILTIN_ASSIGNORS:
                return (
                    f"the assignment of member {member.member_id} carries user data of the custom assignor "
                    f"{group.protocol_name!r}, which the server-side assignors would lose"
                )
    return None
