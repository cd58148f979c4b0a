"""The client-facing side's security in front of a cluster: which of the cluster's security APIs this server answers
itself, and where it keeps what they write.

* With an authorizer of its own (`authorizer.class.name`), this server answers the ACL APIs (DescribeAcls,
  CreateAcls, DeleteAcls) itself: its ACLs decide who may use its groups, so `kafka-acls` through it manages them.
  With a SASL listener it answers the SCRAM APIs itself: its users log in here. Without either, those APIs go to
  the cluster, as every other API this server does not serve.
* What they write (and `scram.bootstrap.users`) is kept in a compacted topic of the cluster,
  `<coordinator.state.topic>-security`, one partition, so that every instance on the state topic (and every worker
  of `serve --workers N`) has the same ACLs and credentials, and an instance keeps none of them on its disk.

The records are the security store's (coordinator.security.store: an ACL binding or a SCRAM credential per key,
a tombstone to remove one). Every instance reads the partition from its start when it starts, before its listeners
open (a client is never served without them), then follows it every FOLLOW_S. A write (CreateAcls, DeleteAcls,
AlterUserScramCredentials, scram.bootstrap.users) is produced with acks=all, then the instance
reads the partition up to it and applies what it read in the partition's order, so a write is answered once it is
in the cluster and in force on the instance that made it; the other instances apply it at their next read, as
Kafka's brokers apply an ACL change when its metadata reaches them. Writes of several instances need no fencing:
each record is a whole value for its key, and every instance applies them in one order, the partition's.

An instance that kept its security state on its disk (DATA_DIR/security) before this version moves it into the
topic at its first start here, when the topic is still empty.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from typing import Any

from protocol.api_keys import ApiKey

from .state import Follower, StateTopic, StateTopicError

log = logging.getLogger(__name__)

FOLLOW_S = 0.5
PARTITION = 0


ACL_APIS = frozenset({ApiKey.DESCRIBE_ACLS, ApiKey.CREATE_ACLS, ApiKey.DELETE_ACLS})
SCRAM_APIS = frozenset({ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, ApiKey.ALTER_USER_SCRAM_CREDENTIALS})


def served_here(authorizer: bool, listeners: Sequence[Any]) -> frozenset[int]:
    """The cluster's security APIs this server answers itself: the ACL APIs when it has an authorizer (its ACLs
    decide who may use its groups), the SCRAM APIs when a listener takes SASL (its users log in here)."""
    return (ACL_APIS if authorizer else frozenset()) | (
        SCRAM_APIS if any(spec.sasl for spec in listeners) else frozenset()
    )


def security_topic_name(state_topic: str) -> str:
    return f"{state_topic}-security"


class TopicSecurity:
    """What coordinator.security.store.SecurityStore writes through and reads from in front of a cluster."""

    def __init__(self, cluster: Any, name: str) -> None:
        self.name = name
        self.topic = StateTopic(cluster, name, 1, role="security topic")
        self._follower = Follower(PARTITION)
        self._read = asyncio.Lock()  # one read of the partition at a time: each record applied once, in order
        self._task: asyncio.Task[None] | None = None
        self._store: Any = None

    async def load(self, store: Any) -> int:
        """Create the topic when missing, read it whole and apply each record to `store` (its `replay(key,
        value)`), asked again until the cluster answers (no client is served without them); then follow it.
        Returns the records applied. Raises StateTopicError when the topic is not usable (it stops the start)."""
        self._store = store
        while True:
            try:
                await self.topic.ensure_once()
                count = await self._catch_up()
                break
            except StateTopicError:
                raise
            except Exception as exc:  # noqa: BLE001 - the cluster out of reach now: asked again
                log.warning("security topic %s: cannot read it now (%r); trying again", self.name, exc)
                await asyncio.sleep(1.0)
        self._task = asyncio.create_task(self._follow())
        return count

    async def write(self, records: Sequence[tuple[bytes, bytes | None]]) -> None:
        """Produce `records` (acks=all), then read up to them: in the cluster, and applied here."""
        last = await self.topic.produce(PARTITION, records)
        async with asyncio.timeout(self.topic.cluster.timeout_s):
            while self._follower.position <= last:
                before = self._follower.position
                await self._catch_up()
                if self._follower.position == before:
                    await asyncio.sleep(0.01)  # (the leader's end not yet past our write on this read)

    async def _catch_up(self) -> int:
        async with self._read:
            records = await self.topic.read_on(self._follower)
            for _, key, value, _ in records:
                self._store.replay(key, value)
            return len(records)

    async def _reread(self) -> None:
        """The partition read whole again, in place of what is applied (the records after our position are
        gone: someone deleted records of the topic)."""
        async with self._read:
            self._follower = Follower(PARTITION)
            records = await self.topic.read_on(self._follower)
            self._store.replace((key, value) for _, key, value, _ in records)

    async def _follow(self) -> None:
        warned = False
        while True:
            await asyncio.sleep(FOLLOW_S)
            try:
                await self._catch_up()
                warned = False
            except asyncio.CancelledError:
                raise
            except StateTopicError as exc:  # our position is gone, or the cluster refuses the read
                if not warned:
                    log.error("security topic %s: %s; reading it again from its start", self.name, exc)
                    warned = True
                with contextlib.suppress(Exception):
                    await self._reread()
            except Exception as exc:  # noqa: BLE001 - read again at the next round
                if not warned:
                    log.warning("security topic %s: cannot read it now (%r); trying again", self.name, exc)
                    warned = True

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.topic.close()
