"""DescribeGroups and ListGroups entries of classic groups: reads over the groups, nothing changes."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from protocol.errors import ErrorCode

from .group import ClassicGroup
from .state import ClassicGroupState

CLASSIC_GROUP_TYPE = "classic"
DESCRIBE_AUTHORIZED_OPERATIONS_OMITTED = -2147483648
DEAD = ClassicGroupState.DEAD
STABLE = ClassicGroupState.STABLE


def describe_group(
    group_id: str,
    group: ClassicGroup | None,
    api_version: int,
    deliverable: Callable[[ClassicGroup, bytes], bytes],
) -> dict[str, Any]:
    """One DescribeGroups v0-v6 entry; `deliverable` is the assignment as members get it (without paused
    partitions)."""
    if group is None or group.is_in_state(DEAD):
        if api_version >= 6:
            return {
                "group_id": group_id,
                "group_state": str(DEAD),
                "error_code": ErrorCode.group_id_not_found,
                "error_message": f"Group {group_id} not found.",
                "protocol_type": "",
                "protocol_data": "",
                "authorized_operations": DESCRIBE_AUTHORIZED_OPERATIONS_OMITTED,
            }
        return {
            "group_id": group_id,
            "group_state": str(DEAD),
            "error_code": ErrorCode.none,
            "protocol_type": "",
            "protocol_data": "",
            "authorized_operations": DESCRIBE_AUTHORIZED_OPERATIONS_OMITTED,
        }
    stable = group.is_in_state(STABLE) and group.protocol_name is not None
    members = [
        {
            "member_id": member.member_id,
            "group_instance_id": member.group_instance_id,
            "client_id": member.client_id,
            "client_host": member.client_host,
            "member_metadata": member.metadata(group.protocol_name)
            if stable and group.protocol_name
            else b"",
            "member_assignment": deliverable(group, member.assignment),
        }
        for member in group.all_members()
    ]
    return {
        "group_id": group_id,
        "error_code": ErrorCode.none,
        "group_state": str(group.state),
        "protocol_type": group.protocol_type or "",
        "protocol_data": group.protocol_name if stable and group.protocol_name else "",
        "members": members,
        "authorized_operations": DESCRIBE_AUTHORIZED_OPERATIONS_OMITTED,
    }


def list_group_entries(groups: Iterable[ClassicGroup], request: Any) -> list[dict[str, Any]]:
    """ListGroups v0-v5 entries: states filter from v4, types filter from v5 (classic groups are "classic")."""
    states = {s.strip().lower() for s in getattr(request, "states_filter", ())}
    types = {t.strip().lower() for t in getattr(request, "types_filter", ())}
    if types and CLASSIC_GROUP_TYPE not in types:
        return []
    return [
        {
            "group_id": group.group_id,
            "protocol_type": group.protocol_type or "",
            "group_state": str(group.state),
            "group_type": CLASSIC_GROUP_TYPE,
        }
        for group in groups
        if not states or str(group.state).lower() in states
    ]
