"""Answers of the group APIs, built once as entities of the newest version.

The codec rebuilds an answer for the version the client asked for, dropping fields that version lacks. What it
cannot do is change a value's meaning, so the few version-dependent values are decided here: JoinGroup's
ProtocolName is "" before v7 and null from v7 when no protocol is chosen (Kafka's JoinGroupResponse
constructor), and LeaveGroup v0-v2 has no member list, so the first member error is lifted to the top level.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import Any

from kio.schema.heartbeat.v4.response import HeartbeatResponse
from kio.schema.join_group.v9.response import JoinGroupResponse
from kio.schema.leave_group.v5.response import LeaveGroupResponse
from kio.schema.sync_group.v5.response import SyncGroupResponse

from protocol.build import build
from protocol.errors import ErrorCode

UNKNOWN_MEMBER_ID = ""
NO_LEADER = ""
NO_GENERATION = -1


def join_response(
    api_version: int,
    *,
    error: ErrorCode = ErrorCode.none,
    member_id: str = UNKNOWN_MEMBER_ID,
    generation_id: int = NO_GENERATION,
    protocol_type: str | None = None,
    protocol_name: str | None = None,
    leader: str | None = NO_LEADER,
    members: Iterable[Mapping[str, Any]] = (),
    skip_assignment: bool = False,
) -> JoinGroupResponse:
    if api_version < 7 and protocol_name is None:
        protocol_name = ""
    elif api_version >= 7 and protocol_name == "":
        protocol_name = None
    return build(
        JoinGroupResponse,
        {
            "error_code": error,
            "generation_id": generation_id,
            "protocol_type": protocol_type,
            "protocol_name": protocol_name,
            "leader": leader if leader is not None else NO_LEADER,
            "skip_assignment": skip_assignment,
            "member_id": member_id,
            "members": list(members),
        },
    )


def sync_response(
    *,
    error: ErrorCode = ErrorCode.none,
    protocol_type: str | None = None,
    protocol_name: str | None = None,
    assignment: bytes = b"",
) -> SyncGroupResponse:
    return build(
        SyncGroupResponse,
        {
            "error_code": error,
            "protocol_type": protocol_type,
            "protocol_name": protocol_name,
            "assignment": assignment,
        },
    )


@functools.cache
def heartbeat_response(error: ErrorCode = ErrorCode.none) -> HeartbeatResponse:
    """One (immutable) answer per error code: heartbeats are the most frequent request there is."""
    return build(HeartbeatResponse, {"error_code": error})


def leave_response(
    api_version: int,
    *,
    error: ErrorCode = ErrorCode.none,
    members: Iterable[Mapping[str, Any]] = (),
) -> LeaveGroupResponse:
    members = list(members)
    if api_version < 3:
        # v0-v2 name a single member and carry a single error (Kafka's LeaveGroupResponse(version <= 2)).
        if error == ErrorCode.none:
            error = next(
                (m["error_code"] for m in members if m["error_code"] != ErrorCode.none), ErrorCode.none
            )
        members = []
    return build(LeaveGroupResponse, {"error_code": error, "members": members})
