"""Group requests for a group another worker owns, relayed to that worker (any worker answers any group).

FindCoordinator sends stock clients straight to a group's owner, so they never come here. A client that skips it
(a raw client written against one broker, a tool that sends everything to its bootstrap address) still gets the
owner's answer instead of NOT_COORDINATOR. One upstream connection per client connection and owner
(coordinator.cluster.upstream), written before the first await (so a client's requests reach the owner in the
order it sent them), closed with the client connection; a broken upstream with requests in flight closes the
client connection. The request goes to the owner's internal listener in an Envelope with the client's principal,
address and listener (coordinator.cluster.internal): the owner authorizes the client, and DescribeGroups shows the
client's own host and client id.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from coordinator.config import Config
from protocol.api import RequestContext, decode_response

from .internal import InternalChannel, origin_of
from .upstream import Upstream

log = logging.getLogger(__name__)


class PeerRelay:
    """See the module doc; implements coordinator.server.group_service.Relay."""

    def __init__(
        self,
        config: Config,
        address_of: Callable[[int], tuple[str, int]],
        abort_connection: Callable[[int], None],
        channel: InternalChannel | None = None,
    ) -> None:
        """`address_of(worker)`: where that worker's internal listener is; `abort_connection(id)`: drop a client
        connection whose relay broke with requests in flight."""
        self._channel = channel
        self._max_bytes = config["socket.request.max.bytes"]
        self._abort_connection = abort_connection
        self._address_of = address_of
        self._upstreams: dict[tuple[int, int], Upstream] = {}

    async def call(self, worker: int, ctx: RequestContext, request: Any) -> Any:
        key = (ctx.connection_id, worker)
        upstream = self._upstreams.get(key)
        if upstream is None:
            upstream = Upstream(
                self._address_of(worker),
                self._max_bytes,
                functools.partial(self._broken, key),
                name=f"worker {worker}",
                channel=self._channel,
            )
            self._upstreams[key] = upstream
        future = upstream.send(ctx.api_key, ctx.api_version, ctx.client_id, request, origin=origin_of(ctx))
        assert future is not None
        return decode_response(ctx.api_key, ctx.api_version, await future)

    def _broken(self, key: tuple[int, int], upstream: Upstream, lost: bool) -> None:
        if self._upstreams.get(key) is upstream:
            del self._upstreams[key]
        if lost:
            log.info("closing connection %d: its relay to worker %d failed", key[0], key[1])
            self._abort_connection(key[0])

    def connection_closed(self, connection_id: int) -> None:
        for key in [k for k in self._upstreams if k[0] == connection_id]:
            self._upstreams.pop(key).close()

    def close(self) -> None:
        for upstream in self._upstreams.values():
            upstream.close()
        self._upstreams.clear()
