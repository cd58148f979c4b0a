"""FindCoordinator v0-v6: group keys are coordinated by this node (with several workers, by the worker owning the
group's shard); we coordinate no transactions or share groups.

Key types: 0 group, 1 transaction, 2 share (v6). Batched keys from v4 (KIP-699) get one entry each.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from coordinator.brokers import Broker
from protocol.api import ApiTable, RequestContext
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode

GROUP, TRANSACTION, SHARE = 0, 1, 2


class CoordinatorLookup:
    def __init__(self, broker: Callable[[], Broker], owner: Callable[[str], Broker] | None = None) -> None:
        """`owner(group_id)`: the node coordinating a group when it may be another worker of this server
        (coordinator.cluster.topology); default: this node."""
        self._broker = broker
        self._owner = owner

    def register(self, table: ApiTable) -> None:
        table.register(ApiKey.FIND_COORDINATOR, 0, 6, self.find_coordinator)

    async def start(self) -> None:
        pass

    async def close(self) -> None:
        pass

    def _answer(self, key: str, key_type: int) -> dict[str, Any]:
        if key_type == GROUP:
            if not key:
                return _error(key, ErrorCode.invalid_request, "The group id must not be empty.")
            b = self._owner(key) if self._owner is not None else self._broker()
            return {
                "key": key,
                "node_id": b.node_id,
                "host": b.host,
                "port": b.port,
                "error_code": ErrorCode.none,
                "error_message": None,
            }
        if key_type in (TRANSACTION, SHARE):
            kind = "transactions" if key_type == TRANSACTION else "share groups"
            return _error(
                key, ErrorCode.coordinator_not_available, f"This server does not coordinate {kind}."
            )
        return _error(key, ErrorCode.invalid_request, f"Unknown coordinator key type {key_type}.")

    async def find_coordinator(self, ctx: RequestContext, request: Any) -> dict[str, Any]:
        key_type = int(getattr(request, "key_type", GROUP))
        if ctx.api_version >= 4:
            return {
                "throttle_time": 0,
                "coordinators": [self._answer(k, key_type) for k in request.coordinator_keys],
            }
        answer = self._answer(request.key, key_type)
        answer["throttle_time"] = 0
        return answer


def _error(key: str, code: ErrorCode, message: str) -> dict[str, Any]:
    return {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": code, "error_message": message}
