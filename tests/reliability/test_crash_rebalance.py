"""Server SIGKILL during rebalances, not only during commits (tests/crash covers the commit stream alone).

Set-up, each part in its own process (helpers reused from tests/crash/test_crash_recovery.py and tests/e2e/groups):

* the server on a fixed port and data dir (CrashServer), SIGKILLed KILLS times and restarted on both;
* a raw-wire committer (tests/crash/clients/committer.py): strictly increasing simple commits of group
  "rel-committer", every acknowledged one written to a file before it counts;
* two groups of confluent-kafka members (ck_member.py) on an 8-partition topic, one eager (range), one
  cooperative (cooperative-sticky), churned the whole time by a thread: every 0.7-1.5 s a member joins or one of
  them leaves (LeaveGroup), between 1 and 4 members per group, so kills land in the middle of rebalances.

After every restart, with the committer frozen (SIGSTOP), the offsets the server returns must be >= the last
acknowledged before the kill; at the end the churn stops and each group's remaining members must converge (an
even split of the 8 partitions held for 2 s), and the final committed offsets >= the last acknowledged.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import threading
import time
import types
import urllib.request

import pytest

from tests.support.crash import CRASH_CLIENTS, CrashServer, committed_offsets, create_topics, last_acked
from tests.support.members import Members, even_sizes, split_ok, wait_split
from tests.support.server import PYTHON

pytestmark = pytest.mark.e2e

KILLS = 4
PARTITIONS = 8
TOPIC, COMMIT_TOPIC, COMMITTER_GROUP = "rel-churn", "rel-commits", "rel-committer"
GROUPS = {"rel-churn-eager": "range", "rel-churn-coop": "cooperative-sticky"}


def group_generation(admin_url: str, group: str) -> int | None:
    with urllib.request.urlopen(f"{admin_url}/v1/groups/{group}", timeout=10) as resp:
        return json.loads(resp.read()).get("generation")


def test_sigkill_during_rebalances_loses_no_commit_and_groups_converge(tmp_path):
    from confluent_kafka.admin import AdminClient

    rng = random.Random()
    server = CrashServer(tmp_path, {"num.partitions": PARTITIONS, "group.initial.rebalance.delay.ms": 0})
    server.start()
    port, bootstrap = server.port, server.bootstrap
    pool = Members(tmp_path)
    pool.server = types.SimpleNamespace(output=lambda: server.stderr_tail())
    endpoint = types.SimpleNamespace(bootstrap=bootstrap, output=lambda: server.stderr_tail())
    committer = None
    stop_churn = threading.Event()
    churner = None
    live: dict[str, list] = {g: [] for g in GROUPS}
    counter = {"joins": 0, "leaves": 0}

    def new_admin() -> AdminClient:
        return AdminClient(
            {
                "bootstrap.servers": bootstrap,
                "reconnect.backoff.ms": 50,
                "reconnect.backoff.max.ms": 500,
                "log_level": 2,
            }
        )

    def join(group: str) -> None:
        settings = {
            "partition.assignment.strategy": GROUPS[group],
            "session.timeout.ms": 10000,
            "heartbeat.interval.ms": 1000,
            "reconnect.backoff.ms": 50,
            "reconnect.backoff.max.ms": 500,
        }
        counter["joins"] += 1
        live[group].append(
            pool.start(
                "ck",
                f"{group}-{counter['joins']}",
                endpoint,
                group,
                TOPIC,
                settings=settings,
                max_runtime=600,
            )
        )

    def churn() -> None:
        while not stop_churn.wait(rng.uniform(0.7, 1.5)):
            group = rng.choice(list(GROUPS))
            members = [m for m in live[group] if m.alive()]
            if len(members) < 2 or (len(members) < 4 and rng.random() < 0.5):
                join(group)
            else:
                leaving = rng.choice(members)
                live[group].remove(leaving)
                try:
                    leaving.send("close")
                    counter["leaves"] += 1
                except OSError:
                    pass

    try:
        server.wait_ready()
        admin = new_admin()
        create_topics(admin, [TOPIC, COMMIT_TOPIC])
        acked_path = tmp_path / "committer.acked"
        acked_path.touch()
        committer = subprocess.Popen(
            [
                PYTHON,
                str(CRASH_CLIENTS / "committer.py"),
                "--port",
                str(port),
                "--group",
                COMMITTER_GROUP,
                "--topic",
                COMMIT_TOPIC,
                "--partitions",
                ",".join(map(str, range(PARTITIONS))),
                "--acked",
                str(acked_path),
                "--depth",
                "4",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for group in GROUPS:
            join(group)
            join(group)
        churner = threading.Thread(target=churn, daemon=True)
        churner.start()

        losses = []
        for kill in range(KILLS):
            time.sleep(rng.uniform(1.5, 3.5))
            server.kill()
            time.sleep(0.05)
            committer.send_signal(signal.SIGSTOP)
            acked_before, _ = last_acked([acked_path])
            server.start()
            server.wait_ready()
            recovered = committed_offsets(new_admin(), COMMITTER_GROUP, COMMIT_TOPIC)
            short = {p: (recovered.get(p), o) for p, o in acked_before.items() if recovered.get(p, -1) < o}
            if short:
                losses.append((kill + 1, short))
            committer.send_signal(signal.SIGCONT)
            create_topics(new_admin(), [TOPIC, COMMIT_TOPIC])
        time.sleep(1.0)
        stop_churn.set()
        churner.join(10)

        # -- every group converges -------------------------------------------------------------------------
        converge_started = time.monotonic()
        final = {}
        for group in GROUPS:
            members = [m for m in live[group] if m.alive()]
            assert members, f"no member of {group} left alive\n{pool.describe()}"
            final[group] = wait_split(
                pool, members, PARTITIONS, even_sizes(PARTITIONS, len(members)), timeout=120, stable_for=2
            )
        converged_s = time.monotonic() - converge_started
        generations = {g: group_generation(server.admin_url, g) for g in GROUPS}

        committer.send_signal(signal.SIGTERM)
        out, err = committer.communicate(timeout=30)
        assert committer.returncode == 0, err
        last, acked_count = last_acked([acked_path])
        committed = committed_offsets(new_admin(), COMMITTER_GROUP, COMMIT_TOPIC)
        lost = {p: (committed.get(p), o) for p, o in last.items() if committed.get(p, -1) < o}
        assignments = sum(len(m.events("assigned")) for m in pool.all)
        revocations = sum(len(m.events(("revoked", "lost"))) for m in pool.all)
        print(
            f"\ncrash during rebalances: {KILLS} SIGKILLs; {counter['joins']} member joins and "
            f"{counter['leaves']} leaves over 2 groups (eager range, cooperative-sticky); "
            f"{assignments} assignment and {revocations} revoke/lost callbacks seen by members; "
            f"server generations at the end (= rebalances completed, kept across restarts): {generations}; "
            f"groups converged {converged_s:.1f} s after the churn stopped: "
            f"{ {g: {m: sorted(p) for m, p in s.items()} for g, s in final.items()} }"
        )
        print(
            f"  acknowledged commits checked: {acked_count}; lost at a restart: {len(losses)} restarts; "
            f"lost at the end: {len(lost)} partitions"
        )
        assert not losses, f"acknowledged commits lost at restart: {losses}\n{server.stderr_tail()}"
        assert not lost, f"acknowledged commits lost: {lost}"
        for group in GROUPS:
            assert split_ok([m for m in live[group] if m.alive()], PARTITIONS)
    finally:
        stop_churn.set()
        if churner is not None:
            churner.join(10)
        pool.cleanup()
        if committer is not None:
            if committer.poll() is None:
                committer.send_signal(signal.SIGCONT)
                committer.kill()
            committer.communicate(timeout=10)
        if server.proc is not None:
            try:
                server.stop()
            except subprocess.TimeoutExpired:
                pass
