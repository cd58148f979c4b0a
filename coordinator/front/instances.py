"""Several instances in front of one cluster: the instances of one state topic divide its shards by forming a group
on the cluster, as Kafka Connect's workers do.

The group. Every instance is a member of the classic group named after the state topic (protocol type
`kgc-coordinator`), a dynamic member whose metadata says who it is: its name (`coordinator.instance.id`, or its
address), the address of each of its broker listeners, and the shards it serves now. The leader of each generation
writes the plan every member gets whole (`plan`):
* the broker addresses: each of the cluster's brokers is reached at one instance's listener for it, the same in
  every answer of every instance (Metadata, FindCoordinator), as the brokers are spread over the instances;
* the shards: spread evenly over the instances that hold a broker address (a group's FindCoordinator answer must
  name a broker at its owner), each instance keeping what it serves (sticky), so a join or a leave moves only the
  shards it must.

What an instance does with its part: it serves its shards and only those (coordinator.server.shards `assign`), and
relays a request about a group another instance owns to that owner (coordinator.cluster.relay), at the relay
listener the owner announced with a secret of its own (both in its metadata, so in the plan every member gets).
The plan also names each shard's hot standby, another instance than its owner (`_standbys`: evenly spread, kept
where it is): it keeps the shard's state replayed as the owner writes (coordinator.server.shards `follow`), and a
shard whose owner is gone goes to its standby first, which then reads and replays only what it had not. A
shard given to it is claimed (its transactional id's epoch bumped, coordinator.front.state), which fences the last
owner, then read and served a lease after the claim; a shard taken from it is unloaded at once (its requests get
NOT_COORDINATOR). Between generations every instance goes on serving what it has: the fencing of the state topic,
not the group, keeps two instances from answering for one shard.

Noticing a dead instance. Each instance keeps a connection open to one listener of every other. When an instance's
process ends (SIGKILL included) its connections close; the others see that, find its address refusing, and remove
it from the group at once (LeaveGroup naming its member), so its shards are claimed by the others within a
rebalance, a lease and a replay, not after the group's session timeout. An instance whose machine or network goes
away is removed by the cluster after `coordinator.instance.session.timeout.ms`; meanwhile its shards' leases lapse
and it answers for none of them. A closing instance leaves the group itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from coordinator.cluster.internal import InternalChannel, new_secret
from coordinator.cluster.upstream import Upstream, UpstreamError
from coordinator.config import Config
from coordinator.server.shards import Shards
from coordinator.tasks import cancel_and_wait
from protocol.api import decode_response, request_class
from protocol.api_keys import ApiKey
from protocol.build import build
from protocol.errors import ErrorCode

from .cluster import COORDINATOR_MOVED, UpstreamCluster, UpstreamTimeout
from .state import StateTopic

log = logging.getLogger(__name__)

PROTOCOL_TYPE = "kgc-coordinator"
PROTOCOL_NAME = "sticky-shards"
HEARTBEAT_S = 0.3  # how soon a member hears of a rebalance (one small request per member and interval)
RETRY_S = 0.5
PROBE_TIMEOUT_S = 1.0  # a peer whose watched connection closed is dead if its address refuses or stays silent
UNREACHED_RETRY_S = 10.0
BROKERS_CHECK_S = 5.0
REJOIN = frozenset({ErrorCode.rebalance_in_progress})
RESET = frozenset({ErrorCode.unknown_member_id, ErrorCode.illegal_generation, ErrorCode.fenced_instance_id})


@dataclasses.dataclass(frozen=True)
class Member:
    """One instance as the group knows it."""

    member_id: str
    name: str
    host: str
    ports: dict[int, int]  # upstream node id -> the port of this instance's listener for it
    owned: frozenset[int] = frozenset()
    held: tuple[int, ...] = ()  # the upstream nodes whose address it is now, the longest held first
    # its relay listener (coordinator.cluster.internal; None: it has none), and what the Envelopes it takes there
    # must carry
    relay: tuple[str, int] | None = None
    secret: str = ""
    followed: frozenset[int] = frozenset()  # the shards it is a hot standby of now

    def metadata(self) -> bytes:
        doc = {"name": self.name, "host": self.host, "ports": self.ports, "owned": sorted(self.owned)}
        extra = {"held": list(self.held), "followed": sorted(self.followed), **self._relay_doc()}
        return json.dumps({**doc, **extra}).encode()

    def _relay_doc(self) -> dict[str, Any]:
        return {} if self.relay is None else {"relay": list(self.relay), "secret": self.secret}

    @classmethod
    def from_metadata(cls, member_id: str, data: bytes) -> Member:
        doc = json.loads(data)
        return cls(
            member_id,
            str(doc["name"]),
            str(doc["host"]),
            {int(n): int(p) for n, p in doc["ports"].items()},
            frozenset(int(s) for s in doc.get("owned", ())),
            tuple(int(n) for n in doc.get("held", ())),
            *_relay_of(doc),
            frozenset(int(s) for s in doc.get("followed", ())),
        )


def _relay_of(doc: dict[str, Any]) -> tuple[tuple[str, int] | None, str]:
    relay = doc.get("relay")
    if not relay:
        return None, ""
    return (str(relay[0]), int(relay[1])), str(doc.get("secret", ""))


@dataclasses.dataclass(frozen=True)
class Plan:
    """A generation's division: `owners[shard]`, `standbys[shard]` and `holders[node]` are indexes into `members`
    (-1: nobody); `holders` lists each member's nodes the longest held first."""

    generation: int
    members: tuple[Member, ...]
    owners: tuple[int, ...]
    holders: dict[int, int]
    standbys: tuple[int, ...] = ()

    def encode(self) -> bytes:
        return json.dumps(
            {
                "generation": self.generation,
                "members": [
                    {
                        "member_id": m.member_id,
                        "name": m.name,
                        "host": m.host,
                        "ports": m.ports,
                        **m._relay_doc(),
                    }
                    for m in self.members
                ],
                "owners": list(self.owners),
                "holders": list(self.holders.items()),
                "standbys": list(self.standbys),
            }
        ).encode()

    @classmethod
    def decode(cls, data: bytes) -> Plan:
        doc = json.loads(data)
        members = tuple(
            Member(
                m["member_id"],
                m["name"],
                m["host"],
                {int(n): int(p) for n, p in m["ports"].items()},
                relay=_relay_of(m)[0],
                secret=_relay_of(m)[1],
            )
            for m in doc["members"]
        )
        return cls(
            int(doc["generation"]),
            members,
            tuple(int(o) for o in doc["owners"]),
            {int(n): int(i) for n, i in doc["holders"]},
            tuple(int(i) for i in doc.get("standbys", ())),
        )

    def shards_of(self, member_id: str) -> frozenset[int]:
        return frozenset(
            s for s, i in enumerate(self.owners) if i >= 0 and self.members[i].member_id == member_id
        )

    def followed_by(self, member_id: str) -> frozenset[int]:
        """The shards `member_id` is the hot standby of."""
        return frozenset(
            s for s, i in enumerate(self.standbys) if i >= 0 and self.members[i].member_id == member_id
        )

    def owner(self, shard: int) -> Member | None:
        index = self.owners[shard] if shard < len(self.owners) else -1
        return self.members[index] if index >= 0 else None

    def nodes_of(self, member_id: str) -> list[int]:
        return [n for n, i in self.holders.items() if self.members[i].member_id == member_id]


def plan(generation: int, members: list[Member], shards: int, nodes: list[int]) -> Plan:
    """The division of `shards` shards and the addresses of `nodes` among `members` (see the module doc)."""
    ordered = tuple(sorted(members, key=lambda m: (m.name, m.member_id)))
    holders = _holders(ordered, nodes)
    eligible = sorted(set(holders.values())) or list(range(len(ordered)))
    owners = [-1] * shards
    taken: set[int] = set()
    kept: dict[int, list[int]] = {}
    for i in eligible:
        kept[i] = [s for s in sorted(ordered[i].owned) if 0 <= s < shards and s not in taken]
        taken.update(kept[i])

    # a shard whose owner is gone goes to its hot standby first (it has the shard's state already)
    def able(shard: int) -> list[int]:
        return sorted(eligible, key=lambda i: shard not in ordered[i].followed)

    def orphans_followed(i: int) -> int:  # (an extra shard of an uneven split goes where it is followed)
        return sum(1 for s in ordered[i].followed if 0 <= s < shards and s not in taken)

    for i, mine in _share(kept, list(range(shards)), able, orphans_followed).items():
        for s in mine:
            owners[s] = i
    return Plan(generation, ordered, tuple(owners), holders, _standbys(ordered, eligible, owners))


def _standbys(ordered: tuple[Member, ...], eligible: list[int], owners: list[int]) -> tuple[int, ...]:
    """Each shard's hot standby: an eligible member other than its owner. Each owner's shards are spread evenly
    over the others (so every member follows about as many as it owns), a member keeping what it follows already
    (its state is replayed) within that spread; none with one eligible member."""
    standbys = [-1] * len(owners)
    if len(eligible) < 2:
        return tuple(standbys)
    count = dict.fromkeys(eligible, 0)
    by_owner: dict[int, list[int]] = {}
    for shard, owner in enumerate(owners):
        by_owner.setdefault(owner, []).append(shard)
    for owner, mine in by_owner.items():
        others = [i for i in eligible if i != owner]
        cap = -(-len(mine) // len(others))
        taken = dict.fromkeys(others, 0)
        for keeping in (True, False):
            for shard in mine:
                if standbys[shard] >= 0:
                    continue
                if keeping:
                    chosen = next((i for i in others if shard in ordered[i].followed and taken[i] < cap), -1)
                    if chosen < 0:
                        continue
                else:
                    chosen = min(others, key=lambda i: (taken[i], count[i], i))  # noqa: B023 - used at once
                standbys[shard] = chosen
                taken[chosen] += 1
                count[chosen] += 1
    return tuple(standbys)


def _holders(ordered: tuple[Member, ...], nodes: list[int]) -> dict[int, int]:
    """Which member's listener is each node's address: each keeps what it held (the longest held first) up to an
    even share, the rest go to those under theirs. A node keeps its address while its holder lives: librdkafka does
    not follow a group coordinator whose node id stays and whose address changes, so FindCoordinator names an
    owner's longest-held node, which has never moved (nodes_of's first)."""
    known = sorted(set(nodes))
    taken: set[int] = set()
    kept: dict[int, list[int]] = {}
    for i, m in enumerate(ordered):
        kept[i] = [n for n in dict.fromkeys(m.held) if n in known and n in m.ports and n not in taken]
        taken.update(kept[i])
    shared = _share(kept, known, lambda node: [i for i, m in enumerate(ordered) if node in m.ports])
    return {n: i for i, mine in shared.items() for n in mine}


def _share(
    kept: dict[int, list[int]],
    items: list[int],
    able: Callable[[int], list[int]],
    claim: Callable[[int], int] = lambda i: 0,
) -> dict[int, list[int]]:
    """A sticky even split of `items` among the members of `kept` (member -> what it holds now, in the order to
    keep it; no item twice): each keeps its first ones up to an even share (those that keep the most may hold one
    more: the fewest moves; among equals, those with the greatest `claim`), and every other item goes, in order, to
    the first member of `able(item)` under its share, else to the least loaded of them (an item no member is able
    to take is left out)."""
    if not kept:
        return {}
    base, extra = divmod(len(items), len(kept))
    by_kept = sorted(kept, key=lambda i: (-len(kept[i]), -claim(i), i))
    quota = {i: base + (1 if rank < extra else 0) for rank, i in enumerate(by_kept)}
    out = {i: kept[i][: quota[i]] for i in kept}
    placed = {item for mine in out.values() for item in mine}
    for item in items:
        candidates = [] if item in placed else able(item)
        if candidates:
            under = [i for i in candidates if len(out[i]) < quota[i]]
            chosen = under[0] if under else min(candidates, key=lambda i: (len(out[i]), i))
            out[chosen].append(item)
    return out


class InstanceGroup:
    """This instance's membership (see the module doc): a server part started after the front's data plane (whose
    broker listeners it announces) and the group service (whose shards it assigns)."""

    def __init__(
        self,
        config: Config,
        cluster: UpstreamCluster,
        shards: Shards,
        group_id: str,
        me: Callable[[], tuple[str, str, dict[int, int]]],
        open_relay: Callable[[str], Awaitable[tuple[str, int]]] | None = None,
    ) -> None:
        """`me()`: this instance's (name, host, ports per upstream node) as it announces them now;
        `open_relay(secret)`: opens its relay listener (Envelopes carrying `secret`) at start, and gives the
        address its peers reach it at (None: it has none)."""
        self.cluster = cluster
        self._open_relay = open_relay
        self._relay: tuple[str, int] | None = None
        # what Envelopes relayed to this instance carry (its peers learn it from the plan)
        self.secret = new_secret()
        self._relay_ids: dict[str, int] = {}  # member id -> the owner number the group service relays to
        self._numbers = itertools.count()  # (never one again: a relay connection names its owner by number)
        self._relay_members: dict[int, Member] = {}  # owner number -> the member in the newest plan
        self._channels: dict[int, InternalChannel] = {}
        self.shards = shards
        self.group_id = group_id
        self._me = me
        self.session_ms = int(config["coordinator.instance.session.timeout.ms"])
        self.standby = bool(config["coordinator.instance.standby"])
        self.rebalance_ms = self.session_ms
        self.member_id = ""
        self.plan: Plan | None = None
        self.leader = False
        self._brokers_checked = 0.0
        self._connection: Upstream | None = None
        self._rejoin = asyncio.Event()
        self._run_task: asyncio.Task[None] | None = None
        self._watches: dict[str, asyncio.Task[None]] = {}  # member id -> its watch
        self._closing = False
        self._leaving: asyncio.Task[None] | None = None
        self._planned = asyncio.Event()

    # -- what the rest of the front asks -------------------------------------------------------------------

    def address_of(self, node: int) -> tuple[str, int] | None:
        """Where clients reach upstream node `node`: another instance's listener (None: this instance's)."""
        plan = self.plan
        if plan is None or node not in plan.holders:
            return None
        member = plan.members[plan.holders[node]]
        if member.member_id == self.member_id or node not in member.ports:
            return None
        return member.host, member.ports[node]

    def node_of_shard(self, shard: int) -> int | None:
        """The node a FindCoordinator for a group of `shard` names: the one the shard's owner has been the address
        of the longest (see `_holders`); None while the shard has none."""
        plan = self.plan
        if plan is None:
            return None
        owner = plan.owner(shard)
        if owner is None:
            return None
        nodes = plan.nodes_of(owner.member_id)
        return nodes[0] if nodes else None

    @property
    def ready(self) -> bool:
        return self.plan is not None

    # -- relaying a group request to its shard's owner (coordinator.server.group_service) ---------------------

    def owner_of_shard(self, shard: int) -> int | None:
        """The number of the instance that owns `shard` (see `relay_address`), when it is another one that takes
        relayed requests; None: this instance answers (NOT_COORDINATOR, or the shard is loading here)."""
        plan = self.plan
        owner = plan.owner(shard) if plan is not None else None
        if owner is None or owner.member_id == self.member_id or owner.relay is None:
            return None
        number = self._relay_ids.get(owner.member_id)
        if number is None:
            number = self._relay_ids[owner.member_id] = next(self._numbers)
        self._relay_members[number] = owner
        return number

    def relay_address(self, number: int) -> tuple[str, int]:
        """Where instance `number` takes relayed requests; LookupError when it left the group."""
        member = self._relay_members.get(number)
        if member is None or member.relay is None:
            raise LookupError(f"instance {number} is no longer in the group")
        return member.relay

    def _forget_gone(self, division: Plan) -> None:
        """The instances no longer in the group: a request relayed to one of them is answered NOT_COORDINATOR."""
        present = {m.member_id for m in division.members}
        for member_id, number in list(self._relay_ids.items()):
            if member_id not in present:
                del self._relay_ids[member_id]
                self._relay_members.pop(number, None)
                self._channels.pop(number, None)

    def channel_to(self, number: int) -> InternalChannel:
        """The channel to instance `number`: its secret in every Envelope."""
        channel = self._channels.get(number)
        member = self._relay_members[number]
        if channel is None or channel.secret != member.secret:
            channel = self._channels[number] = InternalChannel(member.secret, lambda name: None)
        return channel

    # -- the part ------------------------------------------------------------------------------------------

    def register(self, table: Any) -> None:
        pass

    async def start(self) -> None:
        opener = self.shards.log_opener
        if isinstance(opener, StateTopic):
            # An unusable state topic (another partition count, no permission, a cluster without transactions)
            # stops the start with its reason (StateTopicError), before this instance joins or claims anything.
            # A cluster that does not answer now is retried when the shards are opened.
            try:
                await opener.ensure_once()
            except (UpstreamTimeout, UpstreamError, OSError) as exc:
                log.warning(
                    "instance group %s: the state topic is not checked yet: %r (retrying)", self.group_id, exc
                )
        if self._open_relay is not None:
            self._relay = await self._open_relay(self.secret)
        self._run_task = asyncio.create_task(self._run())
        # the first plan normally comes within a round trip or two (the cluster's group.initial.rebalance.delay.ms
        # for the first instance of a new group): wait for it, and a small load, before the listener opens
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.cluster.timeout_s + 3.0):
                await self._planned.wait()
        lease_s = float(getattr(self.shards.log_opener, "lease_s", 0.0))
        deadline = time.monotonic() + 1.0 + lease_s
        while not self.shards.ready and time.monotonic() < deadline:
            await asyncio.sleep(0.05)

    def stop_waiting(self) -> None:
        """Shutdown begins: leave the group now, so that the others take this instance's shards at once."""
        if self._leaving is None:
            self._leaving = asyncio.create_task(self._leave_for_good())

    async def _leave_for_good(self) -> None:
        self._closing = True
        await cancel_and_wait(
            [t for t in (self._run_task, *self._watches.values()) if t is not None],
            "closing the instance group",
        )
        if self.member_id:
            try:
                async with asyncio.timeout(self.cluster.timeout_s):
                    await self._leave([self.member_id], "the instance is shutting down")
            except Exception as exc:  # noqa: BLE001 - the cluster removes it after its session timeout
                log.warning("instance group %s: leaving failed: %r", self.group_id, exc)

    async def close(self) -> None:
        self.stop_waiting()
        assert self._leaving is not None
        await self._leaving
        if self._connection is not None:
            self._connection.close()

    # -- membership ------------------------------------------------------------------------------------------

    async def _run(self) -> None:
        failures = 0
        while True:
            try:
                await self._join()
                failures = 0
                await self._heartbeat()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the cluster slow or away: try again; leases keep reads safe
                failures += 1
                if failures == 1 or failures % 20 == 0:
                    log.warning("instance group %s: %r (retrying)", self.group_id, exc)
                self._drop_connection()
                await asyncio.sleep(RETRY_S)

    async def _ask(self, api_key: int, newest: int, body: dict[str, Any], timeout_s: float) -> Any:
        """One request to the group's coordinator on the connection of this group alone (a JoinGroup waits
        there for the whole join, which would hold up the server's other requests to that broker)."""
        if self._connection is None:
            deadline = time.monotonic() + self.cluster.timeout_s
            node = await self.cluster.coordinator_of(self.group_id, deadline)
            self._connection = self.cluster.connection(node, lambda upstream, lost: None)
        version = self.cluster.version(api_key, newest)
        future = self._connection.send(
            api_key, version, "kgc-instance", build(request_class(api_key, version), body)
        )
        assert future is not None
        async with asyncio.timeout(timeout_s):
            payload = await future
        answer = decode_response(api_key, version, payload)
        if answer.error_code in COORDINATOR_MOVED:
            self._drop_connection()
            raise UpstreamError(f"the group coordinator moved ({answer.error_code.name})")
        return answer

    def _drop_connection(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None
        self.cluster.forget_coordinator(self.group_id)

    async def _join(self) -> None:
        """Join and sync until a plan is had."""
        while True:
            self._rejoin.clear()
            name, host, ports = self._me()
            held = tuple(self.plan.nodes_of(self.member_id)) if self.plan is not None else ()
            me = Member(
                self.member_id,
                name,
                host,
                ports,
                self.shards.held(),
                held,
                self._relay,
                self.secret,
                self.shards.followed(),
            )
            answer = await self._ask(
                ApiKey.JOIN_GROUP,
                9,
                {
                    "group_id": self.group_id,
                    "session_timeout": self.session_ms,
                    "rebalance_timeout": self.rebalance_ms,
                    "member_id": self.member_id,
                    "group_instance_id": None,
                    "protocol_type": PROTOCOL_TYPE,
                    "protocols": [{"name": PROTOCOL_NAME, "metadata": me.metadata()}],
                    "reason": "an instance joins",
                },
                self.rebalance_ms / 1000 + self.cluster.timeout_s,
            )
            if answer.error_code == ErrorCode.member_id_required:
                self.member_id = answer.member_id
                continue
            if not self._stands(answer.error_code, "JoinGroup"):
                continue
            self.member_id = answer.member_id
            self.leader = answer.leader == self.member_id
            generation = int(answer.generation_id)
            assignments: list[dict[str, Any]] = []
            if self.leader:
                members = [Member.from_metadata(m.member_id, m.metadata) for m in answer.members]
                division = plan(generation, members, self.shards.num_shards, sorted(self.cluster.nodes))
                data = division.encode()
                assignments = [{"member_id": m.member_id, "assignment": data} for m in members]
            synced = await self._ask(
                ApiKey.SYNC_GROUP,
                5,
                {
                    "group_id": self.group_id,
                    "generation_id": generation,
                    "member_id": self.member_id,
                    "group_instance_id": None,
                    "protocol_type": PROTOCOL_TYPE,
                    "protocol_name": PROTOCOL_NAME,
                    "assignments": assignments,
                },
                self.rebalance_ms / 1000 + self.cluster.timeout_s,
            )
            if not self._stands(synced.error_code, "SyncGroup"):
                continue
            self._apply(Plan.decode(synced.assignment))
            return

    def _stands(self, code: ErrorCode, what: str) -> bool:
        """Whether a JoinGroup's or SyncGroup's answer stands (False: join again); raises when refused."""
        if code in RESET:
            self._dropped(code.name)
            return False
        if code in REJOIN:
            return False
        if code != ErrorCode.none:
            raise UpstreamError(f"{what} of the instance group failed: {code.name}")
        return True

    def _apply(self, division: Plan) -> None:
        mine = division.shards_of(self.member_id)
        before = frozenset(self.shards.by_index)
        self.plan = division
        self.shards.assign(mine)
        followed = division.followed_by(self.member_id) if self.standby else frozenset()
        self.shards.follow(followed)
        self._forget_gone(division)
        log.info(
            "instance group %s generation %d: %d instances; this one serves %d shards (%d new, %d given up), "
            "is the hot standby of %d and the address of brokers %s",
            self.group_id,
            division.generation,
            len(division.members),
            len(mine),
            len(mine - before),
            len(before - mine),
            len(followed),
            division.nodes_of(self.member_id),
        )
        self._planned.set()
        others = {m.member_id: m for m in division.members if m.member_id != self.member_id}
        for member_id in list(self._watches):
            if member_id not in others:
                self._watches.pop(member_id).cancel()
        for member_id, member in others.items():
            if member_id not in self._watches and member.ports:
                self._watches[member_id] = asyncio.create_task(self._watch(member))

    async def _heartbeat(self) -> None:
        """Heartbeat (at the generation of the plan `_join` just applied) until the group rebalances, or this
        instance should rejoin."""
        assert self.plan is not None
        generation = self.plan.generation
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(HEARTBEAT_S):
                    await self._rejoin.wait()
            if self._rejoin.is_set() or self._brokers_changed():
                return
            answer = await self._ask(
                ApiKey.HEARTBEAT,
                4,
                {
                    "group_id": self.group_id,
                    "generation_id": generation,
                    "member_id": self.member_id,
                    "group_instance_id": None,
                },
                self.cluster.timeout_s,
            )
            if answer.error_code in REJOIN:
                return
            if answer.error_code in RESET:
                self._dropped(answer.error_code.name)
                return
            if answer.error_code != ErrorCode.none:
                raise UpstreamError(f"Heartbeat in the instance group failed: {answer.error_code.name}")

    def _brokers_changed(self) -> bool:
        """The leader plans again when the cluster's brokers are not the plan's (one joined, one was removed), so
        that every broker has one address, the same everywhere; at most every BROKERS_CHECK_S."""
        now = time.monotonic()
        if not self.leader or self.plan is None or now - self._brokers_checked < BROKERS_CHECK_S:
            return False
        self._brokers_checked = now
        _, _, ports = self._me()
        nodes = set(self.cluster.nodes)
        planned = set(self.plan.holders)
        changed = bool((nodes & set(ports)) - planned or planned - nodes)
        if changed:
            log.info("instance group %s: the cluster's brokers changed; planning again", self.group_id)
        return changed

    def _dropped(self, why: str) -> None:
        """The cluster no longer counts this instance a member (its session expired while it was cut off, or the
        others removed it): its shards are someone else's by now, so it gives them up and joins anew."""
        if self.member_id:
            log.warning(
                "instance group %s: the cluster dropped this instance (%s); giving up its shards and joining again",
                self.group_id,
                why,
            )
            self.shards.assign(frozenset())
        self.member_id = ""

    async def _leave(self, member_ids: list[str], reason: str) -> None:
        """LeaveGroup for these members, on the server's own connection to the cluster (the group's may hold a
        JoinGroup that this leave is to end)."""
        await self.cluster.ask_coordinator(
            self.group_id,
            ApiKey.LEAVE_GROUP,
            5,
            {
                "group_id": self.group_id,
                "members": [
                    {"member_id": m, "group_instance_id": None, "reason": reason} for m in member_ids
                ],
            },
        )

    # -- watching the others ---------------------------------------------------------------------------------

    async def _watch(self, member: Member) -> None:
        """Hold a connection to one of `member`'s listeners; when it closes and the address then refuses, remove
        the member from the group (see the module doc). An address never reached (the instance advertises one
        that only clients reach, e.g. localhost behind a published port) is tried again now and then, and the
        member left to the cluster's session timeout."""
        port = member.ports[min(member.ports)]
        reached = False
        while True:
            try:
                async with asyncio.timeout(PROBE_TIMEOUT_S):
                    reader, writer = await asyncio.open_connection(member.host, port)
            except (OSError, TimeoutError) as exc:
                if reached:
                    await self._remove(member, f"its listener {member.host}:{port} is gone ({exc!r})")
                    return
                log.debug(
                    "instance group %s: %s not reachable at %s:%d",
                    self.group_id,
                    member.name,
                    member.host,
                    port,
                )
                await asyncio.sleep(UNREACHED_RETRY_S)
                continue
            reached = True
            try:
                while await reader.read(4096):
                    pass  # nothing is sent; a server never speaks first
            except OSError:
                pass
            finally:
                writer.close()

    async def _remove(self, member: Member, why: str) -> None:
        if self._closing or self.plan is None or member not in self.plan.members:
            return
        log.warning("instance group %s: instance %s left without a word: %s", self.group_id, member.name, why)
        try:
            await self._leave([member.member_id], f"instance {member.name} is gone: {why}"[:200])
        except (UpstreamError, UpstreamTimeout, TimeoutError, OSError) as exc:
            log.warning("instance group %s: removing %s failed: %r", self.group_id, member.name, exc)
        self._rejoin.set()
