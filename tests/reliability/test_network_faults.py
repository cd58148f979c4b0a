"""Network faults between real confluent-kafka members and the server, with the test's own network namespaces.

The server listens on the host end of the namespace's link (10.213.x.1); members marked "in the namespace" run
under `ip netns exec` and reach it only over that link, the others run on the host.

* cut: a veth pair; the host end is taken down (no packet passes either way, and no RST tells anyone). The cut
  member is expired after its session timeout and the two host members take over its partitions; when the link
  comes back it rejoins and the partitions are split three ways again; records produced before, during and after
  the cut are all consumed.
* per-IP limit: a connection flood from the namespace's address is held to max.connections.per.ip while the host
  (another address) is served as usual.
* impaired: 200 ms round trip and 5% loss. `tc qdisc ... netem` does not exist in this sandbox's kernel (no
  sch_netem: "Error: Specified qdisc kind is unknown.", and no gact action or iptables binary either), so the
  link is a pair of TUN devices joined by clients/impair.py, a userspace netem: 100 ms each way and 5% of the
  packets dropped each way. A group of 5 members in the namespace forms, splits 10 partitions evenly and
  consumes every record.

Figures (faults injected, rebalances, records) are printed with -s.
"""

from __future__ import annotations

import json
import subprocess
import time
import types

import pytest
from netfaults import Netns, netns_support

from tests.support.members import (
    GROUP_CLIENTS,
    Member,
    Members,
    consumed_all,
    create_topic,
    produce_batch,
    wait_split,
)
from tests.support.server import PYTHON, start_server

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(netns_support() is not None, reason=f"network namespaces: {netns_support()}"),
]

SESSION_MS = 6000


def start_member(
    pool: Members,
    name: str,
    bootstrap: str,
    group: str,
    topic: str,
    settings: dict,
    netns: Netns | None = None,
    max_runtime: float = 300,
) -> Member:
    """A ck_member.py process (tests/e2e/groups/clients), inside `netns` if given."""
    cmd = [
        PYTHON,
        str(GROUP_CLIENTS / "ck_member.py"),
        "--bootstrap",
        bootstrap,
        "--group",
        group,
        "--topic",
        topic,
        "--events",
        "",
        "--name",
        name,
        "--max-runtime",
        str(max_runtime),
    ]
    for key, value in settings.items():
        cmd += ["--set", f"{key}={value}"]
    if netns is not None:
        cmd = netns.exec_prefix + cmd
    member = Member("ck", name, cmd, pool.run_dir)
    member.cmd[member.cmd.index("--events") + 1] = str(member.events_path)
    pool.all.append(member)
    return member.start()


def server_on(ns: Netns, run_dir, **settings):
    return start_server(
        run_dir,
        {"group.initial.rebalance.delay.ms": 0, **settings},
        extra_args=["--listen", f"{ns.host_ip}:0"],
    )


def test_cut_member_expires_after_its_session_and_rejoins_when_the_link_heals(tmp_path):
    group, topic, partitions = "net-cut", "net-cut-topic", 6
    settings = {
        "partition.assignment.strategy": "range",
        "session.timeout.ms": SESSION_MS,
        "heartbeat.interval.ms": 1000,
    }
    with Netns() as ns:
        server = server_on(ns, tmp_path / "server")
        pool = Members(tmp_path)
        pool.server = server
        try:
            create_topic(server, topic, partitions)
            cut_member = start_member(pool, "cut", server.bootstrap, group, topic, settings, netns=ns)
            host_members = [
                start_member(pool, f"host-{i}", server.bootstrap, group, topic, settings) for i in range(2)
            ]
            everyone = [cut_member, *host_members]
            wait_split(pool, everyone, partitions, [2, 2, 2], timeout=60)
            placed = produce_batch(server, topic, 120, 11, tmp_path, partitions=partitions)

            ns.cut()
            cut_at = time.time()
            during = produce_batch(server, topic, 120, 12, tmp_path, partitions=partitions)
            wait_split(pool, host_members, partitions, [3, 3], timeout=SESSION_MS / 1000 + 30, stable_for=0)
            moved_after = max(m.rebalance_events()[-1]["t"] for m in host_members) - cut_at
            # The records produced during the cut are consumed by the two members still reachable.
            deadline = time.monotonic() + 60
            while not consumed_all(host_members, during):
                assert time.monotonic() < deadline, (
                    "host members did not consume during the cut\n" + pool.describe()
                )
                time.sleep(0.3)

            ns.heal()
            healed_at = time.time()
            wait_split(pool, everyone, partitions, [2, 2, 2], timeout=90, stable_for=2)
            rejoined_after = max(m.rebalance_events()[-1]["t"] for m in everyone) - healed_at
            after = produce_batch(server, topic, 120, 13, tmp_path, partitions=partitions)
            everything = {**placed, **during, **after}
            deadline = time.monotonic() + 60
            while not consumed_all(everyone, everything):
                assert time.monotonic() < deadline, (
                    "not everything consumed after the heal\n" + pool.describe()
                )
                time.sleep(0.3)
            assigned = sum(len(m.events("assigned")) for m in everyone)
            print(
                f"\nnetwork cut (veth {ns.host_dev} down for {healed_at - cut_at:.1f} s): partitions moved to "
                f"the host members {moved_after:.1f} s after the cut (session.timeout.ms={SESSION_MS}); the cut "
                f"member rejoined and the split was 2/2/2 again {rejoined_after:.1f} s after the heal; "
                f"{len(everything)} records, all consumed; {assigned} assignment callbacks in all"
            )
            assert moved_after <= SESSION_MS / 1000 + 10, f"took {moved_after:.1f} s"
            assert all(m.alive() for m in everyone), pool.describe()
            assert server.alive()
        finally:
            pool.cleanup()
            server.stop()


def test_group_of_5_converges_and_consumes_everything_over_200ms_rtt_and_5pct_loss(tmp_path):
    group, topic, partitions, n = "net-lossy", "net-lossy-topic", 10, 5
    settings = {
        "partition.assignment.strategy": "range",
        "session.timeout.ms": 20000,
        "heartbeat.interval.ms": 2000,
    }
    with Netns(link="impaired", delay_ms=100, loss=0.05) as ns:
        server = server_on(ns, tmp_path / "server", **{"group.initial.rebalance.delay.ms": 3000})
        pool = Members(tmp_path)
        pool.server = types.SimpleNamespace(output=server.output)
        try:
            create_topic(server, topic, partitions)
            placed = produce_batch(server, topic, 1000, 21, tmp_path, partitions=partitions)
            started = time.monotonic()
            group_members = [
                start_member(pool, f"lossy-{i}", server.bootstrap, group, topic, settings, netns=ns)
                for i in range(n)
            ]
            wait_split(pool, group_members, partitions, [2] * n, timeout=180, stable_for=3)
            converged = time.monotonic() - started
            deadline = time.monotonic() + 180
            while not consumed_all(group_members, placed):
                assert time.monotonic() < deadline, "not everything consumed\n" + pool.describe()
                time.sleep(0.5)
            consumed = time.monotonic() - started
            assigned = sum(len(m.events("assigned")) for m in group_members)
            assert all(m.alive() for m in group_members), pool.describe()
        finally:
            pool.cleanup()
            server.stop()
    counts = ns.impairer_counts or {}
    print(
        f"\nimpaired link (100 ms each way, 5% loss each way, userspace netem): {n} members converged to "
        f"2 partitions each in {converged:.1f} s and consumed all {len(placed)} records in {consumed:.1f} s; "
        f"{assigned} assignment callbacks; packets carried {counts.get('to_ns', 0) + counts.get('to_host', 0)}, "
        f"dropped {counts.get('dropped', 0)}"
    )
    assert counts.get("dropped", 0) > 0


_FLOOD = r"""
import json, socket, struct, sys
host, port, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
request = struct.pack(">hhi", 18, 0, 1) + struct.pack(">h", 5) + b"flood"
socks, answered, closed = [], 0, 0
for _ in range(count):
    s = socket.create_connection((host, port), timeout=10)
    socks.append(s)
for s in socks:
    try:
        s.sendall(struct.pack(">i", len(request)) + request)
        head = s.recv(8)
        if len(head) == 8:
            answered += 1
        else:
            closed += 1
    except OSError:
        closed += 1
print(json.dumps({"answered": answered, "closed": closed}), flush=True)
sys.stdin.readline()  # hold the connections until told
"""


def test_per_ip_limit_contains_a_connection_flood_from_one_address(tmp_path):
    """max.connections.per.ip=20: 200 connections from the namespace's address get 20 served and 180 closed at
    accept, while clients from another address (the host) are served as usual."""
    limit, flood = 20, 200
    with Netns() as ns:
        server = server_on(ns, tmp_path / "server", **{"max.connections.per.ip": limit})
        flooder = None
        try:
            flooder = subprocess.Popen(
                ns.exec_prefix + [PYTHON, "-c", _FLOOD, ns.host_ip, str(server.port), str(flood)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            result = json.loads(flooder.stdout.readline())
            # While the flood holds its 20, the host (another address) produces through the same listener.
            create_topic(server, "per-ip", 2)
            placed = produce_batch(server, "per-ip", 50, 31, tmp_path, partitions=2)
            print(
                f"\nper-ip limit {limit}: {flood} connections from {ns.ns_ip}: {result}; meanwhile "
                f"{len(placed)} records produced from the host"
            )
            assert result == {"answered": limit, "closed": flood - limit}
            assert len(placed) == 50
        finally:
            if flooder is not None:
                flooder.communicate("\n", timeout=30)
            server.stop()
