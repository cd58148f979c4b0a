"""The division the instances' leader plans (coordinator.front.instances.plan): even, sticky, and a node's address
kept while its holder lives."""

from __future__ import annotations

from coordinator.front.instances import Member, Plan, plan

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
