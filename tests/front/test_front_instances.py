"""Three instances in front of one cluster on one state topic divide its shards (coordinator.front.instances): every
instance gives the same broker addresses and names the same owner for a group; a SIGKILLed instance's shards are
served again by the others within seconds while static and dynamic groups of confluent-kafka consumers consume and
commit, with no rebalance and no acknowledged commit lost; a graceful stop hands its shards over the same way."""

from __future__ import annotations

import functools
import os
import re
import signal
import time
import uuid

import pytest

from coordinator.sharding import shard_of
from tests.support.kafka_cluster import cluster_committed, create_replicated_topic
from tests.support.members import (
    check_exactly_once,
    committed_offsets,
    consumed_all,
    even_sizes,
    high_watermarks,
    produce_batch,
    wait_for,
    wait_split,
)
from tests.support.server import readyz, worker_pid
from tests.support.wire import WireClient, join_group, make, request_class, simple_commit, sync_alone

pytestmark = pytest.mark.e2e

SHARDS = 6
PARTITIONS = 6
MEMBER_SETTINGS = {"session.timeout.ms": 45000, "heartbeat.interval.ms": 1000}


class Instances:
    """The instances as one server to the client helpers: a bootstrap list of all of them."""

    def __init__(self, servers: list) -> None:
        self.servers = servers

    @property
    def bootstrap(self) -> str:
        return ",".join(s.bootstrap.split(",")[0] for s in self.servers)

    def output(self) -> str:
        return "\n".join(f"--- instance {i} ---\n{s.output()[-6000:]}" for i, s in enumerate(self.servers))


def _client(server) -> WireClient:
    host, port = server.bootstrap.split(",")[0].rsplit(":", 1)
    return WireClient(host, int(port), timeout=20)


def _coordinator(server, group: str) -> tuple[int, int, str, int]:
    with _client(server) as c:
        answer = c.call(make(request_class(10, 3), {"key": group, "key_type": 0}))
    return int(answer.error_code), int(answer.node_id), answer.host, int(answer.port)


def _brokers(server) -> list[tuple[int, str, int]]:
    body = {"topics": [], "allow_auto_topic_creation": False, "include_topic_authorized_operations": False}
    with _client(server) as c:
        answer = c.call(make(request_class(3, 12), body))
    return sorted((int(b.node_id), b.host, int(b.port)) for b in answer.brokers)


def _commit_at_owner(server, group: str, topic: str, offset: int) -> int:
    """OffsetCommit of a simple group where `server`'s FindCoordinator sends it (as a client does)."""
    code, _, host, port = _coordinator(server, group)
    if code:
        return code
    try:
        with WireClient(host, port, timeout=20) as c:
            (code,) = simple_commit(c, group, topic, {0: offset})
    except OSError:
        return -1  # the address of an instance that is gone (until the others' plan drops it)
    return code


def _settings(kafka_cluster) -> dict[str, object]:
    return {
        "upstream.bootstrap.servers": kafka_cluster.bootstrap,
        "coordinator.state.topic": f"kgc-instances-{uuid.uuid4().hex[:8]}",
        "offsets.topic.num.partitions": SHARDS,
    }


def _start(server_factory, kafka_cluster) -> list:
    settings = _settings(kafka_cluster)
    servers = [server_factory(settings) for _ in range(3)]
    wait_for(lambda: all(readyz(s.admin_url) for s in servers), 60, "three ready instances", lambda: "")
    # every instance has had the plan with all three
    wait_for(
        lambda: all("3 instances" in s.stderr_path.read_text() for s in servers),
        60,
        "the plan of three",
        lambda: Instances(servers).output(),
    )
    return servers


def _served_by(servers: list, group: str) -> int:
    """The index of the instance whose listener FindCoordinator names for `group`."""
    _, _, host, port = _coordinator(servers[0], group)
    for i, s in enumerate(servers):
        if f"through port {port} here" in s.stderr_path.read_text():
            return i
    raise AssertionError(f"no instance listens on {host}:{port}")


class Groups:
    """A static and a dynamic group of two confluent-kafka consumers each on one topic, consuming and committing
    through the instances; what they consumed and how often they rebalanced."""

    def __init__(self, members, front: Instances, tmp_path, label: str) -> None:
        self.members, self.tmp_path = members, tmp_path
        self.topic = f"instances-{label}-{uuid.uuid4().hex[:6]}"
        create_replicated_topic(front.bootstrap.split(",")[0], self.topic, PARTITIONS)
        self.static = f"instances-{label}-static-{uuid.uuid4().hex[:6]}"
        self.dynamic = f"instances-{label}-dynamic-{uuid.uuid4().hex[:6]}"
        self.placed = produce_batch(front, self.topic, 300, 41, tmp_path)
        start = functools.partial(members.start, "ck", topic=self.topic, settings=MEMBER_SETTINGS)
        self.statics = [start(f"s{i}", front, self.static, instance_id=f"s{i}") for i in range(2)]
        self.dynamics = [start(f"d{i}", front, self.dynamic) for i in range(2)]
        self.all = self.statics + self.dynamics
        for pair in (self.statics, self.dynamics):
            wait_split(members, pair, PARTITIONS, even_sizes(PARTITIONS, 2), timeout=60)
        wait_for(lambda: consumed_all(self.all, self.placed), 60, "batch 1 consumed", members.describe)
        self.rebalances = [len(m.rebalance_events()) for m in self.all]

    def produce(self, front: Instances, count: int, seed: int) -> None:
        self.placed |= produce_batch(front, self.topic, count, seed, self.tmp_path)

    def check(self, direct) -> None:
        """Everything consumed once and committed (as the cluster shows), and no rebalance since the start."""
        describe = self.members.describe
        wait_for(lambda: consumed_all(self.all, self.placed), 90, "everything consumed", describe)
        ends = high_watermarks(self.placed, PARTITIONS)
        for group in (self.static, self.dynamic):
            wait_for(
                lambda g=group: committed_offsets(direct, g, self.topic, PARTITIONS) == ends,
                60,
                f"every commit of {group} in the cluster",
                describe,
            )
        assert [len(m.rebalance_events()) for m in self.all] == self.rebalances, (
            [(m.name, m.rebalance_events()) for m in self.all],
            describe(),
        )
        for m in self.all:
            assert m.close() == 0, self.members.describe([m])
        check_exactly_once(self.statics, self.placed)
        check_exactly_once(self.dynamics, self.placed)


def test_three_instances_give_one_view_and_divide_the_groups(server_factory, kafka_cluster):
    servers = _start(server_factory, kafka_cluster)
    views = [_brokers(s) for s in servers]
    assert views[0] == views[1] == views[2], views
    assert len({(h, p) for _, h, p in views[0]}) == len(views[0])  # one address per broker
    topic = f"instances-{uuid.uuid4().hex[:6]}"
    create_replicated_topic(servers[0].bootstrap, topic, 1)
    groups = [f"instances-view-{i}" for i in range(24)]
    owners = set()
    for i, group in enumerate(groups):
        answers = {_coordinator(s, group) for s in servers}
        assert len(answers) == 1, (group, answers)  # every instance names the same owner
        assert _commit_at_owner(servers[i % 3], group, topic, 10 + i) == 0
        owners.add(next(iter(answers))[3])
    assert len(owners) == 3, owners  # the groups are spread over the three

    # Any instance answers any group: a client that skips FindCoordinator gets the owner's answer, relayed.
    for i, group in enumerate(groups[:6]):
        others = [s for j, s in enumerate(servers) if j != _served_by(servers, group)]
        for k, s in enumerate(others):
            with _client(s) as c:
                assert simple_commit(c, group, topic, {0: 100 + 10 * i + k}) == {0}, s.output()[-3000:]
    assert cluster_committed(kafka_cluster.bootstrap, groups[0], topic, 1) == {0: 101}  # the owner's mirror
    group = groups[6]
    owner = servers[_served_by(servers, group)]
    other = next(s for s in servers if s is not owner)
    with _client(other) as c:
        c.client_id = "relayed-member"
        member_id = _classic_member(c, group)
        assert (
            c.request(
                make(
                    request_class(12, 4),
                    {
                        "group_id": group,
                        "generation_id": 1,
                        "member_id": member_id,
                        "group_instance_id": None,
                    },
                )
            ).error_code
            == 0
        )
        with _client(owner) as direct_client:  # the owner knows the client as it is
            described = direct_client.request(
                make(request_class(15, 5), {"groups": [group], "include_authorized_operations": False})
            ).groups[0]
        assert [(m.member_id, m.client_id, m.client_host) for m in described.members] == [
            (member_id, "relayed-member", "/127.0.0.1")
        ], described


def _classic_member(client: WireClient, group: str) -> str:
    """Join and sync a classic group of one member (generation 1) on `client`; its member id."""
    member_id = join_group(client, group).member_id
    joined = join_group(client, group, member_id)
    assert joined.error_code == 0 and joined.generation_id == 1, joined
    synced = sync_alone(client, group, 1, member_id)
    assert synced.error_code == 0, synced
    return member_id


def test_a_killed_instance_is_taken_over_without_a_rebalance_or_a_lost_commit(
    members, server_factory, kafka_cluster, direct, tmp_path
):
    servers = _start(server_factory, kafka_cluster)
    groups = Groups(members, Instances(servers), tmp_path, "kill")
    topic, front = groups.topic, Instances(servers)

    victim = _served_by(servers, groups.static)
    survivors = [s for i, s in enumerate(servers) if i != victim]
    probes = [g for g in (f"instances-probe-{i}" for i in range(60)) if _served_by(servers, g) == victim][:4]
    assert probes
    logged = [len(s.stderr_path.read_text()) for s in survivors]  # what the survivors logged before the kill
    killed_at = time.monotonic()
    servers[victim].stopped = True  # on purpose
    servers[victim].proc.send_signal(signal.SIGKILL)
    servers[victim].proc.wait(10)
    served: dict[str, float] = {}
    while len(served) < len(probes):
        for group in probes:
            if group not in served and _commit_at_owner(survivors[0], group, topic, 1) == 0:
                served[group] = time.monotonic() - killed_at
        assert time.monotonic() - killed_at < 30, (served, front.output())
        time.sleep(0.05)
    print(f"\nthe killed instance's groups were served again after {sorted(served.values())} s")
    # each of its shards was taken over by its hot standby, which read and replayed only what it had not yet
    for shard in {shard_of(g, SHARDS) for g in [groups.static, *probes]}:
        loads = [
            line
            for s, before in zip(survivors, logged, strict=True)
            for line in s.stderr_path.read_text()[before:].splitlines()
            if f"group shard {shard} reloaded in" in line
        ]
        assert loads and all("'standby': True" in line for line in loads), (shard, loads)

    groups.produce(Instances(survivors), 300, 42)
    groups.check(direct)


def test_a_stopped_instance_hands_its_shards_over(server_factory, kafka_cluster):
    servers = _start(server_factory, kafka_cluster)
    topic = f"instances-stop-{uuid.uuid4().hex[:6]}"
    create_replicated_topic(servers[0].bootstrap, topic, 1)
    groups = [f"instances-stop-{i}" for i in range(12)]
    for i, group in enumerate(groups):
        assert _commit_at_owner(servers[0], group, topic, 50 + i) == 0
    leaving = servers[2]
    assert leaving.stop() == 0
    left_at = time.monotonic()
    for i, group in enumerate(groups):  # every group at one of the two, with what was acknowledged
        wait_for(
            lambda g=group, offset=50 + i: _commit_at_owner(servers[0], g, topic, offset) == 0,
            30,
            f"{group} served again",
            lambda: Instances(servers[:2]).output(),
        )
    print(f"\nevery group served again {time.monotonic() - left_at:.2f}s after the stop")


def test_a_rolling_restart_of_every_instance_rebalances_no_group(
    members, server_factory, kafka_cluster, direct, tmp_path
):
    """Each instance in turn stops (its shards go to the others) and a new one starts in its place (it takes a
    share back), while a static and a dynamic group consume and commit: no rebalance, no lost commit."""
    servers = _start(server_factory, kafka_cluster)
    settings = dict(servers[0].settings)
    front = Instances(list(servers))
    groups = Groups(members, front, tmp_path, "roll")

    live = list(servers)
    for round_ in range(3):
        assert live[0].stop() == 0
        live = live[1:]
        groups.produce(Instances(live), 60, 60 + round_)
        live.append(server_factory(settings))
        front.servers = live
        wait_for(
            lambda now=live: (
                all(readyz(s.admin_url) for s in now) and "3 instances" in now[-1].stderr_path.read_text()
            ),
            60,
            f"round {round_}: three instances again",
            front.output,
        )
    groups.produce(front, 120, 70)
    groups.check(direct)


def _ports_of_workers(server) -> dict[int, int]:
    """Each broker port of `serve --workers N`'s workers: port -> the worker that listens on it (from the log)."""
    owners = {}
    for line in server.stderr_path.read_text().splitlines():
        match = re.search(r"worker=(\d+) .*through port (\d+) here", line)
        if match:
            owners[int(match[2])] = int(match[1])
    return owners


def test_two_workers_are_two_instances_and_a_killed_one_is_taken_over_and_restarted(
    members, server_factory, kafka_cluster, direct, tmp_path
):
    """`coordinator.workers=2` in front of a cluster: the two workers divide the shards as two instances do (one
    bootstrap address, the broker addresses spread over both, every group at one of them), and a SIGKILLed worker's
    groups are served by the other, then the supervisor's restart joins again: no rebalance, no lost commit. The
    restarted worker listens on its predecessor's broker ports (free ones, with --listen port 0): a client whose
    coordinator keeps its node id finds it at the same address."""
    server = server_factory({**_settings(kafka_cluster), "coordinator.workers": 2})
    wait_for(lambda: "2 instances" in server.stderr_path.read_text(), 60, "the plan of two", server.output)
    wait_for(lambda: readyz(server.admin_url), 60, "ready", server.output)
    brokers = _brokers(server)
    owners = _ports_of_workers(server)
    assert len({p for _, _, p in brokers}) == len(brokers) == 3, brokers
    assert {owners[p] for _, _, p in brokers} == {0, 1}, (brokers, owners)  # the brokers spread over both
    front = Instances([server])
    groups = Groups(members, front, tmp_path, "workers")
    served_by = {}
    for i in range(40):
        code, _, _, port = _coordinator(server, f"workers-probe-{i}")
        assert code == 0
        served_by[f"workers-probe-{i}"] = owners[port]
    assert set(served_by.values()) == {0, 1}, served_by  # the groups divided between the two

    _, _, _, port = _coordinator(server, groups.static)
    victim = owners[port]
    probes = [g for g, w in served_by.items() if w == victim][:4]
    pid = worker_pid(server, victim)
    logged = len(server.stderr_path.read_text())
    killed_at = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    served: dict[str, float] = {}
    while len(served) < len(probes):
        for group in probes:
            if group not in served and _commit_at_owner(server, group, groups.topic, 1) == 0:
                served[group] = time.monotonic() - killed_at
        assert time.monotonic() - killed_at < 30, (served, server.output()[-8000:])
        time.sleep(0.05)
    print(f"\nthe killed worker's groups were served again after {sorted(served.values())} s")
    # the supervisor restarted it, and it is an instance again
    wait_for(lambda: worker_pid(server, victim) != pid, 30, "the worker restarted", server.output)
    wait_for(
        lambda: re.search(r"worker=\d .*: 2 instances", server.stderr_path.read_text()[logged:]),
        60,
        "the plan of two again",
        server.output,
    )
    assert _ports_of_workers(server) == owners  # the same ports, each at the same worker
    groups.produce(front, 300, 43)
    groups.check(direct)
