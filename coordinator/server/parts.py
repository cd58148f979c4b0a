"""What a server is made of: parts that register APIs and live as long as the server (coordinator.server.listener).

A part is any object with `register(table)`, `async start()` and `async close()`. It may also have:

* `ready` (a bool property): False while it loads state; /readyz and the server's `ready` wait for it;
* `connection_closed(connection_id)`: a client connection ended (drop what was kept for it);
* `stop_waiting()`: shutdown began; answer long polls and parked requests now instead of holding the shutdown.

Parts are started in the order they were added (the security part, which wraps every other API, comes last) and
closed in the reverse order.
"""

from __future__ import annotations

from typing import Protocol

from protocol.api import ApiTable


class Part(Protocol):
    def register(self, table: ApiTable) -> None: ...

    async def start(self) -> None: ...

    async def close(self) -> None: ...
