"""The durable security state: ACL bindings and SCRAM credentials in one storage.Log under DATA_DIR/security.

Records (key -> value, a None value is a tombstone, compaction keeps the last value per key):

    b"acl\\x00" + JSON [resource_type, resource_name, pattern_type, principal, host, operation, permission]
        -> b"{}"                                   the binding exists
    b"scram\\x00" + mechanism + b"\\x00" + user (UTF-8)
        -> JSON {mechanism, salt, iterations, stored_key, server_key} (base64)   never a password

`replay(key, value)` is the only code that changes the in-memory state, both while loading at start and after
each write; a change is applied (and answered) only once its records are fsynced, as Kafka answers CreateAcls only
once the ACL records are committed. With no data dir (tests) the state is in memory only.

In front of a cluster with a state topic, the records are in a topic of the cluster instead (`topic`,
coordinator.front.security), written and followed by every instance.

With several workers (coordinator.cluster.security_sync) worker 0's store is the durable one and `on_written`
pushes each write to the other workers before it is answered; theirs are replicas without a log, changed only by
`replace` and `replay` from what worker 0 sends.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from storage import Log

from .acl import AclBinding, Authorizer, Operation, PatternType, Permission, ResourceType
from .scram import ScramCredential

log = logging.getLogger(__name__)

ACL_PREFIX = b"acl\x00"
SCRAM_PREFIX = b"scram\x00"


def acl_key(acl: AclBinding) -> bytes:
    fields = [
        int(acl.resource_type),
        acl.resource_name,
        int(acl.pattern_type),
        acl.principal,
        acl.host,
        int(acl.operation),
        int(acl.permission),
    ]
    return ACL_PREFIX + json.dumps(fields, separators=(",", ":")).encode()


def scram_key(mechanism: str, user: str) -> bytes:
    return SCRAM_PREFIX + mechanism.encode() + b"\x00" + user.encode("utf-8")


class SecurityStore:
    def __init__(self, authorizer: Authorizer, data_dir: str | None, timeout_ms: int = 5000) -> None:
        self.authorizer = authorizer
        self.timeout_s = timeout_ms / 1000  # the time budget of one write (offsets.commit.timeout.ms)
        self.directory = os.path.join(data_dir, "security") if data_dir else None
        self.credentials: dict[tuple[str, str], ScramCredential] = {}  # (user, mechanism) -> credential
        self.log: Log | None = None
        # In front of a cluster (coordinator.front.security): the topic every instance writes its records to and
        # applies them from, in place of the log (`write(records)`: in the cluster and applied here when it returns).
        self.topic: Any = None
        # Awaited with each write's records once they are durable and applied here, before the write returns.
        self.on_written: Callable[[list[tuple[bytes, bytes | None]]], Awaitable[None]] | None = None

    def open(self) -> int:
        """Open the log and replay it (blocking: run it in a thread). Returns the records replayed."""
        if self.directory is None:
            return 0
        os.makedirs(self.directory, exist_ok=True)
        self.log = Log.open(self.directory, segment_bytes=16 * 1024 * 1024, linger_ms=0)
        count = 0
        for entry in self.log.replay():
            self.replay(entry.key, entry.value)
            count += 1
        return count

    def close(self) -> None:
        if self.log is not None:
            self.log.close()
            self.log = None

    # -- replay: the only mutation ------------------------------------------------------------------

    def replay(self, key: bytes, value: bytes | None) -> None:
        if key.startswith(ACL_PREFIX):
            f = json.loads(key[len(ACL_PREFIX) :])
            acl = AclBinding(
                ResourceType(f[0]), f[1], PatternType(f[2]), f[3], f[4], Operation(f[5]), Permission(f[6])
            )
            if value is None:
                self.authorizer.remove(acl)
            else:
                self.authorizer.add(acl)
        elif key.startswith(SCRAM_PREFIX):
            mechanism, _, user = key[len(SCRAM_PREFIX) :].partition(b"\x00")
            ident = (user.decode("utf-8"), mechanism.decode())
            if value is None:
                self.credentials.pop(ident, None)
            else:
                self.credentials[ident] = ScramCredential.from_json(json.loads(value))
        else:
            log.warning("security log: unknown record key %r, skipped", key[:40])

    async def write(self, records: Iterable[tuple[bytes, bytes | None]]) -> None:
        """Persist records (durably, when there is a log), then replay them."""
        batch = list(records)
        if not batch:
            return
        if self.topic is not None:
            # applied here in the topic's order, with the other instances' writes
            await self.topic.write(batch)
        else:
            if self.log is not None:
                # Under a time budget, like every wait on a log: a hung disk fails the request (its handler
                # answers an error), it does not hold it forever.
                async with asyncio.timeout(self.timeout_s):
                    await asyncio.wrap_future(self.log.append(batch))
            for key, value in batch:
                self.replay(key, value)
        if self.on_written is not None:
            await self.on_written(batch)

    def snapshot(self) -> list[tuple[bytes, bytes | None]]:
        """The whole state as records (what `replace` takes)."""
        records = [self.acl_record(acl, True) for acl in self.authorizer.acls()]
        records += [
            self.credential_record(user, mechanism, credential)
            for (user, mechanism), credential in sorted(self.credentials.items())
        ]
        return records

    def replace(self, records: Iterable[tuple[bytes, bytes | None]]) -> None:
        """Drop the state and replay `records` (a replica taking worker 0's snapshot)."""
        self.authorizer.clear()
        self.credentials.clear()
        for key, value in records:
            self.replay(key, value)

    # -- typed writes -------------------------------------------------------------------------------

    @staticmethod
    def acl_record(acl: AclBinding, present: bool) -> tuple[bytes, bytes | None]:
        return acl_key(acl), (b"{}" if present else None)

    @staticmethod
    def credential_record(
        user: str, mechanism: str, credential: ScramCredential | None
    ) -> tuple[bytes, bytes | None]:
        value = None if credential is None else json.dumps(credential.to_json()).encode()
        return scram_key(mechanism, user), value

    def credential(self, mechanism: str, user: str) -> ScramCredential | None:
        return self.credentials.get((user, mechanism))

    def users(self) -> dict[str, list[ScramCredential]]:
        out: dict[str, list[ScramCredential]] = {}
        for (user, _), cred in sorted(self.credentials.items()):
            out.setdefault(user, []).append(cred)
        return out

    def check_password(self, user: str, password: str) -> bool:
        """PLAIN: the password is right if it derives the StoredKey of any of the user's SCRAM credentials."""
        creds = [c for (u, _), c in self.credentials.items() if u == user]
        return any(c.check_password(password) for c in creds)
