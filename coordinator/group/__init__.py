"""The classic group state machine: groups, their states, and the group APIs of one shard. Pure: no asyncio,
no system clock, no files (see manager.py for the theory of operation, coordinator.shard for how a shard
composes it with offsets, pause and settings)."""

from .group import ClassicGroup, ClassicGroupMember, Parked
from .manager import GroupMetadataManager
from .settings import GroupCoordinatorSettings
from .state import ClassicGroupState, IllegalStateTransition

__all__ = [
    "ClassicGroup",
    "ClassicGroupMember",
    "ClassicGroupState",
    "GroupCoordinatorSettings",
    "GroupMetadataManager",
    "IllegalStateTransition",
    "Parked",
]
