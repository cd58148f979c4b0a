"""The security part of a server: its listeners' sessions, the SASL / ACL / SCRAM APIs and the authorization layer.

Built by coordinator.app for every server (the SASL and ACL APIs are always registered, so clients and
tools get Kafka's answers: ILLEGAL_SASL_STATE on a PLAINTEXT listener, SECURITY_DISABLED for ACLs without an
authorizer). `start()` opens and replays the security log, creates the bootstrap SCRAM users, and, when
`authorizer.class.name` is set, wraps every other registered API with the Enforcer; it runs after the other parts
have registered their APIs (this part is added last).
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
import time
from typing import Any

from prometheus_client import Counter

from protocol.api_keys import api_name

from .acl import Authorizer, parse_principals
from .apis import SecurityApis
from .enforce import Enforcer
from .listeners import (
    ListenerSpec,
    certificate_principal,
    parse_advertised,
    parse_listeners,
    server_ssl_context,
)
from .sasl import SaslApis, SecuritySession
from .scram import MECHANISM_CODES, ScramCredential
from .store import SecurityStore

log = logging.getLogger(__name__)


class Security:
    def __init__(
        self,
        config: Any,
        data_dir: str | None,
        dataplane: Any = None,
        registry: Any = None,
        *,
        replica: bool = False,
        super_users: tuple[str, ...] = (),
        authorized_elsewhere: frozenset[int] = frozenset(),
    ) -> None:
        """`replica`: a worker other than worker 0 of `serve --workers N`, whose state comes from worker 0
        through `sync` (coordinator.cluster.security_sync) and which forwards the ACL and SCRAM APIs to it;
        `super_users`: besides super.users (the workers' own principal); `authorized_elsewhere`: the APIs this
        process forwards with the caller's principal to one that authorizes them (a replica's data plane)."""
        self.config = config
        self.replica = replica
        self.authorized_elsewhere = authorized_elsewhere
        self.sync: Any = None  # coordinator.cluster.security_sync.SecuritySync, with several workers
        self.listeners: list[ListenerSpec] = parse_listeners(
            config["listeners"], config["listener.security.protocol.map"]
        )
        self.advertised = parse_advertised(config["advertised.listeners"], self.listeners)
        self.authorizer_enabled = bool(str(config["authorizer.class.name"]).strip())
        self.authorizer = Authorizer(
            parse_principals(config["super.users"]) | set(super_users),
            config["allow.everyone.if.no.acl.found"],
        )
        self.store = SecurityStore(
            self.authorizer, None if replica else data_dir, config["offsets.commit.timeout.ms"]
        )
        self.dataplane = dataplane
        self.ssl_context: ssl.SSLContext | None = None
        if any(spec.tls for spec in self.listeners):
            self.ssl_context = server_ssl_context(config)
        self.auth_failures = Counter(
            "kafka_group_coordinator_authorization_failures",
            "Requests (or parts of them) refused by the authorizer, by API and ACL operation.",
            ["api", "operation"],
            registry=registry,
        )
        self.sasl_failures = Counter(
            "kafka_group_coordinator_sasl_authentication_failures",
            "Failed SASL authentications, by mechanism.",
            ["mechanism"],
            registry=registry,
        )
        self.sasl = SaslApis(
            tuple(config["sasl.enabled.mechanisms"]),
            self.store.credential,
            self.store.check_password,
            lambda m: self.sasl_failures.labels(m).inc(),
        )
        self.apis = SecurityApis(self.store, self.authorizer_enabled, self._denied)
        self.enforcer = Enforcer(
            self.authorizer,
            dataplane,
            self._denied,
            auto_create=lambda: bool(config["auto.create.topics.enable"]),
        )
        self._table: Any = None
        self._compaction: asyncio.Task[None] | None = None

    @property
    def configured(self) -> bool:
        """Security is on: a listener other than PLAINTEXT, or an authorizer."""
        return self.authorizer_enabled or any(spec.protocol != "PLAINTEXT" for spec in self.listeners)

    def _denied(self, api_key: int, operation: str) -> None:
        self.auth_failures.labels(api_name(api_key), operation).inc()

    # -- part lifecycle -----------------------------------------------------------------------------

    def register(self, table: Any) -> None:
        self.sasl.register(table)
        if not self.replica:
            self.apis.register(table)
        self._table = table

    async def start(self) -> None:
        if self.replica:
            if self.sync is not None:
                await self.sync.initial_sync()  # before the listeners open: never serve without the ACLs
            if self.authorizer_enabled and self._table is not None:
                self.enforcer.install(self._table, self.authorized_elsewhere)
            return
        if self.store.topic is not None:
            count = await self._load_topic()
        else:
            count = await asyncio.to_thread(self.store.open)
        log.info(
            "security: %d records replayed%s, %d ACLs, %d SCRAM credentials",
            count,
            f" from the topic {self.store.topic.name}" if self.store.topic is not None else "",
            len(self.authorizer.acls()),
            len(self.store.credentials),
        )
        await self._bootstrap_users()
        if self.sync is not None:
            self.sync.start_publishing()
        if self.authorizer_enabled and self._table is not None:
            self.enforcer.install(self._table)
        if self.store.log is not None:
            self._compaction = asyncio.create_task(self._compact_periodically())

    async def _load_topic(self) -> int:
        """In front of a cluster: the security topic read whole (coordinator.front.security). What an earlier
        version kept in DATA_DIR/security moves into the topic while the topic is empty."""
        topic = self.store.topic
        count = int(await topic.load(self.store))
        if count == 0 and self.store.directory is not None and os.path.isdir(self.store.directory):
            local = SecurityStore(Authorizer(set(), False), os.path.dirname(self.store.directory))
            await asyncio.to_thread(local.open)
            records = local.snapshot()
            await asyncio.to_thread(local.close)
            if records:
                await self.store.write(records)
                log.warning(
                    "security: moved %d ACLs and SCRAM credentials from %s into the topic %s (the directory is no "
                    "longer read)",
                    len(records),
                    self.store.directory,
                    topic.name,
                )
                count = len(records)
        return count

    async def close(self) -> None:
        if self.store.topic is not None:
            await self.store.topic.close()
        if self.sync is not None:
            await self.sync.close()
        if self._compaction is not None:
            self._compaction.cancel()
            try:
                await self._compaction
            except asyncio.CancelledError:
                pass
        await asyncio.to_thread(self.store.close)

    async def _compact_periodically(self) -> None:
        """Keep the security log to the live ACLs and credentials (the group log's interval and tombstone
        retention)."""
        interval_s = self.config["offsets.topic.compaction.interval.ms"] / 1000
        retention_ms = self.config["log.cleaner.delete.retention.ms"]
        while True:
            await asyncio.sleep(interval_s)
            assert self.store.log is not None
            try:
                await asyncio.wrap_future(self.store.log.compact(int(time.time() * 1000), retention_ms))
            except Exception:
                log.exception("security log compaction failed; will retry")

    async def _bootstrap_users(self) -> None:
        records = []
        for item in self.config["scram.bootstrap.users"]:
            user, sep, password = item.partition(":")
            if not sep or not user or not password:
                raise ValueError("scram.bootstrap.users: expected NAME:PASSWORD entries")
            for mechanism in MECHANISM_CODES:
                if self.store.credential(mechanism, user) is None:
                    credential = await asyncio.to_thread(ScramCredential.from_password, mechanism, password)
                    records.append(self.store.credential_record(user, mechanism, credential))
        await self.store.write(records)

    # -- connections --------------------------------------------------------------------------------

    def session(self, spec: ListenerSpec, ssl_object: Any = None) -> SecuritySession:
        principal = certificate_principal(ssl_object) if spec.tls else None
        return SecuritySession(spec.name, spec.protocol, principal)
