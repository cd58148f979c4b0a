"""Group requests for a group another worker owns, relayed to that worker (any worker answers any group).

FindCoordinator sends stock clients straight to a group's owner, so they never come here. A client that skips it
(a raw client written against one broker, a tool that sends everything to its bootstrap address) still gets the
owner's answer instead of NOT_COORDINATOR. One upstream connection per client connection and owner
(coordinator.cluster.upstream), written before the first await (so a client's requests reach the owner in the
order it sent them), closed with the client connection; a broken upstream with requests in flight closes the
client connection. The request goes to the owner's internal listener in an Envelope with the client's principal,
address and listener (coordinator.cluster.internal): the owner authorizes the client, and DescribeGroups shows the
client's own host and client id.

The instances in front of one cluster (coordinator.front.instances) relay the same way across machines, to each
other's relay listeners: each owner with its own secret (`channel_of`), a connection that must open within
`connect_timeout_s`, and an owner that cannot be reached (gone from the group, refusing, closing) answered
NOT_COORDINATOR (RelayUnavailable) instead of closing the client's connection: the client looks its coordinator up
again, and the survivors' answers name the group's new owner.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from typing import Any

from coordinator.config import Config
from coordinator.server.group_service import RelayUnavailable
from protocol.api import RequestContext, decode_response

from .internal import InternalChannel, origin_of
from .upstream import Upstream, UpstreamError

log = logging.getLogger(__name__)


class PeerRelay:
    """See the module doc; implements coordinator.server.group_service.Relay."""

    def __init__(
        self,
        config: Config,
        address_of: Callable[[int], tuple[str, int]],
        abort_connection: Callable[[int], None] | None,
        channel: InternalChannel | None = None,
        *,
        channel_of: Callable[[int], InternalChannel] | None = None,
        connect_timeout_s: float | None = None,
    ) -> None:
        """`address_of(owner)`: where that owner's internal listener is (LookupError: no longer known);
        `abort_connection(id)`: drop a client connection whose relay broke with requests in flight (None: the
        request is answered NOT_COORDINATOR instead, RelayUnavailable). `channel_of(owner)`: the channel to that
        owner when it differs by owner (another instance's secret), else `channel`. `connect_timeout_s`: how
        long a connection to an owner may take to open (None: the system's)."""
        self._channel = channel
        self._channel_of = channel_of
        self._max_bytes = config["socket.request.max.bytes"]
        self._abort_connection = abort_connection
        self._address_of = address_of
        self._connect_timeout_s = connect_timeout_s
        self._upstreams: dict[tuple[int, int], Upstream] = {}

    async def call(self, worker: int, ctx: RequestContext, request: Any) -> Any:
        key = (ctx.connection_id, worker)
        upstream = self._upstreams.get(key)
        if upstream is None:
            try:
                address = self._address_of(worker)
            except LookupError as exc:
                raise RelayUnavailable(f"coordinator {worker} is no longer known") from exc
            opener = None
            if self._connect_timeout_s is not None:
                opener = functools.partial(_open, *address, self._connect_timeout_s)
            upstream = Upstream(
                address,
                self._max_bytes,
                functools.partial(self._broken, key),
                name=f"worker {worker}"
                if self._channel_of is None
                else f"coordinator {address[0]}:{address[1]}",
                channel=self._channel if self._channel_of is None else self._channel_of(worker),
                opener=opener,
            )
            self._upstreams[key] = upstream
        future = upstream.send(ctx.api_key, ctx.api_version, ctx.client_id, request, origin=origin_of(ctx))
        assert future is not None
        try:
            payload = await future
        except UpstreamError as exc:
            if self._abort_connection is not None:
                raise
            raise RelayUnavailable(str(exc)) from exc
        return decode_response(ctx.api_key, ctx.api_version, payload)

    def _broken(self, key: tuple[int, int], upstream: Upstream, lost: bool) -> None:
        if self._upstreams.get(key) is upstream:
            del self._upstreams[key]
        if lost and self._abort_connection is not None:
            log.info("closing connection %d: its relay to worker %d failed", key[0], key[1])
            self._abort_connection(key[0])

    def connection_closed(self, connection_id: int) -> None:
        for key in [k for k in self._upstreams if k[0] == connection_id]:
            self._upstreams.pop(key).close()

    def close(self) -> None:
        for upstream in self._upstreams.values():
            upstream.close()
        self._upstreams.clear()


async def _open(host: str, port: int, timeout_s: float) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    async with asyncio.timeout(timeout_s):
        return await asyncio.open_connection(host, port, limit=2**20)
