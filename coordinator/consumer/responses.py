"""The answers of ConsumerGroupHeartbeat and ConsumerGroupDescribe, as the consumer group manager, the group
service (a shard that cannot take the request) and the authorizer give them: one shape for each, so an error
answer carries every field a client reads."""

from __future__ import annotations

import datetime
import functools
from typing import Any

from kio.schema.consumer_group_heartbeat.v1.response import Assignment, ConsumerGroupHeartbeatResponse
from kio.static.primitive import i32Timedelta

from protocol.build import build
from protocol.errors import ErrorCode

NO_AUTHORIZED_OPERATIONS = -(2**31)


def heartbeat_response(
    error: ErrorCode = ErrorCode.none,
    message: str | None = None,
    *,
    member_id: str | None = None,
    member_epoch: int = 0,
    heartbeat_interval_ms: int = 0,
    assignment: dict[str, Any] | None = None,
) -> ConsumerGroupHeartbeatResponse:
    """A ConsumerGroupHeartbeat answer (v1's entity; the codec writes it at the request's version). An error
    answer names no member and carries epoch 0, as Kafka's."""
    # made directly, not through protocol.build: every heartbeat is answered with one
    return ConsumerGroupHeartbeatResponse(
        throttle_time=_NO_THROTTLE,
        error_code=error,
        error_message=message,
        member_id=member_id,
        member_epoch=member_epoch,  # type: ignore[arg-type]  # an int is what i32 is at run time
        heartbeat_interval=_interval(heartbeat_interval_ms),
        assignment=None if assignment is None else build(Assignment, assignment),
    )


_NO_THROTTLE = i32Timedelta.parse(datetime.timedelta(0))


@functools.lru_cache(maxsize=64)
def _interval(interval_ms: int) -> i32Timedelta:
    return i32Timedelta.parse(datetime.timedelta(milliseconds=interval_ms))


def described_group_error(group_id: str, error: ErrorCode, message: str | None = None) -> dict[str, Any]:
    """A ConsumerGroupDescribe entry for a group that is not described: no state, no epochs, no members."""
    return {
        "error_code": error,
        "error_message": message,
        "group_id": group_id,
        "group_state": "",
        "group_epoch": -1,
        "assignment_epoch": -1,
        "assignor_name": "",
        "members": (),
        "authorized_operations": NO_AUTHORIZED_OPERATIONS,
    }
