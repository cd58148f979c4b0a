"""The division the instances' leader plans (coordinator.front.instances.plan): even, sticky, and a node's address
kept while its holder lives; whom a group request is relayed to, and a relay to an owner that cannot be reached."""

from __future__ import annotations

import asyncio
import dataclasses
import socket

import pytest

from coordinator.cluster.relay import PeerRelay
from coordinator.config import Config
from coordinator.front.instances import InstanceGroup, Member, Plan, plan
from coordinator.server.group_service import RelayUnavailable
from protocol.api import RequestContext, request_class
from protocol.build import build

NODES = [1, 2, 3]
PORTS = {1: 9001, 2: 9002, 3: 9003}


def _member(name: str, owned: frozenset[int] = frozenset(), held: tuple[int, ...] = ()) -> Member:
    return Member(f"id-{name}", name, f"host-{name}", dict(PORTS), owned, held)


def _shares(division: Plan) -> dict[str, frozenset[int]]:
    return {m.name: division.shards_of(m.member_id) for m in division.members}


def _nodes(division: Plan) -> dict[str, list[int]]:
    return {m.name: division.nodes_of(m.member_id) for m in division.members}


def test_one_instance_holds_everything():
    division = plan(1, [_member("a")], 6, NODES)
    assert _shares(division) == {"a": frozenset(range(6))}
    assert _nodes(division) == {"a": [1, 2, 3]}


def test_three_instances_divide_evenly_and_every_owner_has_a_node():
    division = plan(1, [_member("a"), _member("b"), _member("c")], 50, NODES)
    shares = _shares(division)
    assert sorted(len(s) for s in shares.values()) == [16, 17, 17]
    assert frozenset().union(*shares.values()) == frozenset(range(50))
    assert sorted(len(n) for n in _nodes(division).values()) == [1, 1, 1]


def test_a_join_moves_only_what_the_newcomer_needs():
    first = plan(1, [_member("a"), _member("b")], 6, NODES)
    before = _shares(first)
    nodes = _nodes(first)
    members = [_member(n, before[n], tuple(nodes[n])) for n in ("a", "b")] + [_member("c")]
    after = _shares(plan(2, members, 6, NODES))
    assert sum(len(after[n] - before[n]) for n in ("a", "b")) == 0  # nothing moves between the old two
    assert len(after["c"]) == 2


def test_a_leave_keeps_the_survivors_shards_and_nodes_where_they_were():
    first = plan(1, [_member("a"), _member("b"), _member("c")], 6, NODES)
    shares, nodes = _shares(first), _nodes(first)
    survivors = [_member(n, shares[n], tuple(nodes[n])) for n in ("a", "c")]
    second = plan(2, survivors, 6, NODES)
    after, after_nodes = _shares(second), _nodes(second)
    for n in ("a", "c"):
        assert shares[n] <= after[n]
        assert after_nodes[n][0] == nodes[n][0]  # the longest-held node first: never a moved one
    assert after["a"] | after["c"] == frozenset(range(6))


def test_the_plan_survives_its_encoding():
    division = plan(3, [_member("a"), _member("b")], 5, NODES)
    again = Plan.decode(division.encode())
    assert again == division
    assert _nodes(again) == _nodes(division)


def test_no_broker_known_yet_still_divides_the_shards():
    division = plan(1, [_member("a"), _member("b")], 4, [])
    assert sorted(len(s) for s in _shares(division).values()) == [2, 2]


def _relaying(name: str, owned: frozenset[int] = frozenset()) -> Member:
    return dataclasses.replace(_member(name, owned), relay=(f"host-{name}", 7000), secret=f"secret-{name}")


def test_a_member_announces_its_relay_and_the_plan_passes_it_on():
    a = _relaying("a")
    assert Member.from_metadata(a.member_id, a.metadata()) == a
    assert Member.from_metadata("id-b", _member("b").metadata()).relay is None  # an instance without one
    division = plan(2, [a, _member("b")], 4, NODES)
    assert Plan.decode(division.encode()) == division


def test_a_request_is_relayed_to_the_owner_that_takes_relays():
    group = InstanceGroup(Config({}), None, None, "state", lambda: ("a", "host-a", dict(PORTS)))  # type: ignore[arg-type]
    assert group.owner_of_shard(0) is None  # no plan yet: answered here
    a, b, c = _relaying("a"), _relaying("b"), _member("c")
    group.member_id = a.member_id
    group.plan = plan(1, [a, b, c], 6, NODES)
    owners = {shard: group.plan.owner(shard).name for shard in range(6)}  # type: ignore[union-attr]
    for shard, name in owners.items():
        number = group.owner_of_shard(shard)
        if name in ("a", "c"):  # its own, or an owner without a relay listener: answered here
            assert number is None
            continue
        assert number is not None
        assert group.relay_address(number) == ("host-b", 7000)
        assert group.channel_to(number).secret == "secret-b"
    number = next(n for n in map(group.owner_of_shard, owners) if n is not None)
    group.plan = plan(2, [a, c], 6, NODES)  # b left
    group._forget_gone(group.plan)
    with pytest.raises(LookupError):
        group.relay_address(number)


def test_a_relay_to_an_owner_that_cannot_be_reached_is_unavailable():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there

    def address_of(owner: int) -> tuple[str, int]:
        if owner != 1:
            raise LookupError(owner)
        return "127.0.0.1", port

    async def scenario() -> None:
        relay = PeerRelay(Config({}), address_of, None, connect_timeout_s=1.0)
        ctx = RequestContext(12, 4, 1, "c", "127.0.0.1", 5)
        body = build(
            request_class(12, 4),
            {"group_id": "g", "generation_id": 1, "member_id": "m", "group_instance_id": None},
        )
        for owner in (1, 2):
            with pytest.raises(RelayUnavailable):
                await relay.call(owner, ctx, body)
        relay.close()

    asyncio.run(scenario())


def test_every_shard_has_a_hot_standby_other_than_its_owner_evenly_spread():
    division = plan(1, [_member("a"), _member("b"), _member("c")], 6, NODES)
    assert all(s >= 0 and s != o for s, o in zip(division.standbys, division.owners, strict=True))
    assert sorted(len(division.followed_by(m.member_id)) for m in division.members) == [2, 2, 2]
    alone = plan(1, [_member("a")], 6, NODES)
    assert alone.standbys == (-1,) * 6  # nobody else to follow a shard
    # a third instance joins two that follow each other's shards: it gets its share of standbys too
    two = plan(1, [_member("a"), _member("b")], 6, NODES)
    joined = plan(2, [_as_planned(two, "a"), _as_planned(two, "b"), _member("c")], 6, NODES)
    assert sorted(len(joined.followed_by(m.member_id)) for m in joined.members) == [2, 2, 2]


def _as_planned(division: Plan, name: str) -> Member:
    """`name` as it announces itself after `division`: what it serves and follows."""
    m = next(m for m in division.members if m.name == name)
    return dataclasses.replace(
        _member(name, division.shards_of(m.member_id), tuple(division.nodes_of(m.member_id))),
        followed=division.followed_by(m.member_id),
    )


@pytest.mark.parametrize("shards", [12, 7, 3])
def test_a_dead_owners_shards_go_to_their_hot_standbys_and_standbys_stay(shards):
    first = plan(1, [_member("a"), _member("b"), _member("c")], shards, NODES)
    planned = {n: _as_planned(first, n) for n in "abc"}
    again = plan(2, list(planned.values()), shards, NODES)
    assert again.standbys == first.standbys and again.owners == first.owners  # nothing moves
    for dead in "abc":  # (an uneven split's extra shard goes where it is followed)
        after = plan(3, [m for n, m in planned.items() if n != dead], shards, NODES)
        for shard in planned[dead].owned:
            owner = after.owner(shard)
            assert owner is not None and shard in owner.followed, (dead, shard, owner)
        assert all(s >= 0 and s != o for s, o in zip(after.standbys, after.owners, strict=True))
