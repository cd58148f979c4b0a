"""Crash recovery with real clients: SIGKILL the server 20 times while commits stream and a static group runs.

Set-up (all in separate processes, the server exactly as a user starts it):

* the server on one port (picked by its first start) and one data dir (restarted on both after every kill);
* two committers (clients/committer.py): raw-wire OffsetCommit v8 simple commits (generation -1) of group
  "committer", pipelined 16 deep, each owning half of the partitions of topic "commits" and committing
  strictly increasing offsets; every acknowledged (error NONE) commit is appended to a file before it is
  counted;
* a static group "static" of two confluent-kafka consumers (clients/static_member.py: group.instance.id,
  session.timeout.ms=30000, heartbeat.interval.ms=1000) subscribed to topic "subscribed", logging every
  assign/revoke/lost callback.

Then 20 times: wait a random 0.3-2.0 s, SIGKILL the server, restart it on the same data dir and port, wait for
its listening line, create the topics again (the data plane is not durable yet: CreateTopics, ignoring
TOPIC_ALREADY_EXISTS; the server also runs with num.partitions equal to the topics' partition count so that an
auto-created topic is the same), and let things run for ~1 s.

Checked after every restart: with the committers frozen (SIGSTOP right after the kill, SIGCONT once checked),
the offsets the restarted server returns (AdminClient list_consumer_group_offsets) are >= the last offset
acknowledged before the kill, for every partition. Checked at the end: the same for the final state, and each
static member saw exactly one assignment callback (its initial one) and no revoke/assign/lost across all
crashes. CRASH_KILLS=N changes the number of kills; CRASH_WIPE_LOG=1 is a self-check of the test (it deletes
the group log before each restart, and the test must fail); CRASH_MIN_RATE (default 1000) is the commit rate
the committers must sustain.

Figures are printed (run with -s): acknowledged commits, commit rate, restart times. The server's stderr (all
runs, with a marker per restart) and librdkafka's cgrp debug logs stay in the test's tmp dir for
investigation; their paths are printed too.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import time

import pytest

from tests.support.crash import (
    CRASH_CLIENTS as CLIENTS,
)
from tests.support.crash import (
    CrashServer,
    committed_offsets,
    create_topics,
    last_acked,
    read_events,
    rebalance_events,
)
from tests.support.server import PYTHON

pytestmark = pytest.mark.e2e


KILLS = int(os.environ.get("CRASH_KILLS", "20"))
# Self-check of the test itself: CRASH_WIPE_LOG=1 deletes the group log before every restart (a server that
# persists nothing); the test must then fail on both checks.
WIPE_LOG = os.environ.get("CRASH_WIPE_LOG") == "1"
# The stream the test must sustain (acknowledged commits/s while the server is up); ~1,900/s on an idle 2-core
# machine, so a shared machine under heavy load may need CRASH_MIN_RATE lowered.
MIN_RATE = int(os.environ.get("CRASH_MIN_RATE", "1000"))
PARTITIONS = 8  # of both topics
COMMIT_TOPIC, MEMBER_TOPIC = "commits", "subscribed"
COMMITTER_GROUP, STATIC_GROUP = "committer", "static"
COMMITTERS = 2
DEPTH = 16


def test_sigkill_loses_no_acknowledged_commit_and_keeps_the_static_group(tmp_path):
    from confluent_kafka.admin import AdminClient

    rng = random.Random(int(os.environ.get("CRASH_SEED", str(time.time_ns()))))
    server = CrashServer(
        tmp_path,
        {
            "num.partitions": PARTITIONS,
            "group.initial.rebalance.delay.ms": 3000,  # both static members land in generation 1 together
        },
    )
    server.start()
    port, bootstrap = server.port, server.bootstrap
    procs: list[subprocess.Popen] = []
    files = []
    try:
        server.wait_ready()

        def new_admin() -> AdminClient:
            # A fresh client after every restart: a librdkafka 2.16 AdminClient that lives across a SIGKILL of
            # its broker sometimes never answers list_consumer_group_offsets (times out) and may abort on
            # `rd_kafka_enq_once_del_source_return: Assertion eonce->refcnt > 0` (a client bug, not the
            # server's).
            return AdminClient(
                {
                    "bootstrap.servers": bootstrap,
                    "reconnect.backoff.ms": 50,
                    "reconnect.backoff.max.ms": 500,
                    "log_level": 2,
                }
            )  # no connection-refused noise

        admin = new_admin()
        create_topics(admin, [COMMIT_TOPIC, MEMBER_TOPIC])

        # -- the static group ----------------------------------------------------------------------------
        members = []
        for i in range(2):
            events = tmp_path / f"member-{i}.events"
            member_log = tmp_path / f"member-{i}.librdkafka.log"
            stderr = open(tmp_path / f"member-{i}.stderr", "wb")  # noqa: SIM115
            files.append(stderr)
            proc = subprocess.Popen(
                [
                    PYTHON,
                    str(CLIENTS / "static_member.py"),
                    "--bootstrap",
                    bootstrap,
                    "--group",
                    STATIC_GROUP,
                    "--topic",
                    MEMBER_TOPIC,
                    "--instance-id",
                    f"static-{i}",
                    "--events",
                    str(events),
                    "--librdkafka-log",
                    str(member_log),
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
            )
            procs.append(proc)
            members.append((proc, events, member_log))
        deadline = time.monotonic() + 30
        while True:
            assigned = [[e for e in rebalance_events(ev) if e["ev"] == "assigned"] for _, ev, _ in members]
            if all(assigned) and sorted(p for a in assigned for e in a for p in e["partitions"]) == list(
                range(PARTITIONS)
            ):
                break
            assert time.monotonic() < deadline, f"static group did not form: {assigned}"
            time.sleep(0.1)
        time.sleep(1.0)  # let any follow-up rebalance show up before taking the baseline
        baseline = [rebalance_events(ev) for _, ev, _ in members]
        assert all(len(b) == 1 and b[0]["ev"] == "assigned" for b in baseline), baseline

        # -- the committers ------------------------------------------------------------------------------
        acked_paths = []
        committers = []
        for i in range(COMMITTERS):
            acked = tmp_path / f"committer-{i}.acked"
            acked.touch()
            acked_paths.append(acked)
            parts = ",".join(str(p) for p in range(i, PARTITIONS, COMMITTERS))
            proc = subprocess.Popen(
                [
                    PYTHON,
                    str(CLIENTS / "committer.py"),
                    "--port",
                    str(port),
                    "--group",
                    COMMITTER_GROUP,
                    "--topic",
                    COMMIT_TOPIC,
                    "--partitions",
                    parts,
                    "--acked",
                    str(acked),
                    "--depth",
                    str(DEPTH),
                    "--first",
                    str(i + 1),
                    "--step",
                    str(COMMITTERS),
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            procs.append(proc)
            committers.append(proc)
        commit_started = time.monotonic()
        deadline = time.monotonic() + 15
        while not all(p.stat().st_size for p in acked_paths):
            assert time.monotonic() < deadline, "committers got no acknowledgement"
            time.sleep(0.05)

        # -- the crashes ---------------------------------------------------------------------------------
        to_listening, to_ready, paused = [], [], []
        losses = []  # per crash: partitions whose recovered offset is below the last one acknowledged
        for crash in range(KILLS):
            time.sleep(rng.uniform(0.3, 2.0))
            killed = time.monotonic()
            server.kill()
            # Freeze the committers (they are reconnecting by now) so that what the restarted server holds can
            # be compared with exactly what was acknowledged before the kill, before new commits overwrite it.
            time.sleep(0.05)
            for proc in committers:
                proc.send_signal(signal.SIGSTOP)
            acked_before_kill, _ = last_acked(acked_paths)
            if WIPE_LOG:
                shutil.rmtree(server.data_dir / "groups", ignore_errors=True)
            server.start()
            to_listening.append(time.monotonic() - killed)
            server.wait_ready()
            to_ready.append(time.monotonic() - killed)
            admin = new_admin()
            recovered = committed_offsets(admin, COMMITTER_GROUP, COMMIT_TOPIC)
            short = {
                p: (recovered.get(p), o) for p, o in acked_before_kill.items() if recovered.get(p, -1) < o
            }
            if short:
                losses.append((crash + 1, short))
            for proc in committers:
                proc.send_signal(signal.SIGCONT)
            paused.append(time.monotonic() - killed)
            create_topics(admin, [COMMIT_TOPIC, MEMBER_TOPIC])
            time.sleep(1.0)
            assert all(p.poll() is None for p, _, _ in members), "a static member process died"
            assert all(p.poll() is None for p in committers), "a committer process died"

        # -- stop the committers, then read back -------------------------------------------------------
        summaries = []
        for proc in committers:
            proc.send_signal(signal.SIGTERM)
        for proc in committers:
            out, err = proc.communicate(timeout=30)
            assert proc.returncode == 0, err
            summaries.append(json.loads(out.strip().splitlines()[-1]))
        commit_seconds = time.monotonic() - commit_started
        last, acked_count = last_acked(acked_paths)
        admin = new_admin()
        committed = committed_offsets(admin, COMMITTER_GROUP, COMMIT_TOPIC)
        lost = {p: (committed.get(p), last[p]) for p in last if committed.get(p, -1) < last[p]}

        time.sleep(1.0)  # anything the last restart set off shows up by now
        after = [rebalance_events(ev) for _, ev, _ in members]
        member_errors = [sum(1 for e in read_events(ev) if e["ev"] == "error") for _, ev, _ in members]

        # -- figures -------------------------------------------------------------------------------------
        errors: dict[str, int] = {}
        for s in summaries:
            for code, n in s["errors"].items():
                errors[code] = errors.get(code, 0) + n
        loaded = re.findall(
            r"group coordinator loaded in ([0-9.]+)s: \{'records': (\d+)",
            server.stderr_path.read_text(errors="replace"),
        )
        print()
        print(f"crash test: {KILLS} SIGKILLs, port {port}, run dir {tmp_path}")
        serving_seconds = commit_seconds - sum(paused)
        print(
            f"  acknowledged commits: {acked_count} in {commit_seconds:.1f} s "
            f"= {acked_count / commit_seconds:.0f} commits/s overall, "
            f"{acked_count / serving_seconds:.0f} commits/s while serving "
            f"(excluding {sum(paused):.1f} s from each kill to loaded and checked)"
        )
        print(f"  committer errors by code: {errors}; reconnects: {sum(s['connects'] for s in summaries)}")
        print(
            f"  kill -> listening: median {statistics.median(to_listening):.3f} s, "
            f"max {max(to_listening):.3f} s"
        )
        print(
            f"  kill -> /readyz 200 (log loaded): median {statistics.median(to_ready):.3f} s, "
            f"max {max(to_ready):.3f} s"
        )
        if loaded:
            print(f"  last load: {loaded[-1][1]} records in {loaded[-1][0]} s")
        print(
            f"  after every restart, recovered >= acknowledged before the kill: {not losses} "
            f"({len(losses)} of {KILLS} restarts lost commits)"
        )
        print(f"  committed vs last acknowledged: { {p: (committed.get(p), last[p]) for p in sorted(last)} }")
        print(
            f"  static members' rebalance callbacks: {[[e['ev'] for e in a] for a in after]}; "
            f"error callbacks: {member_errors}"
        )
        print(f"  server stderr: {server.stderr_path}")

        assert acked_count / serving_seconds >= MIN_RATE, (
            f"the committers did not sustain {MIN_RATE} acknowledged commits/s while the server was up "
            f"(load average {os.getloadavg()[0]:.1f}: is something else running on this machine?)"
        )
        assert not losses, (
            f"acknowledged commits lost at restart (crash, {{partition: (recovered, acked)}}): {losses}"
        )
        assert not lost, f"acknowledged commits lost (partition: (committed, last acked)): {lost}"
        assert set(last) == set(range(PARTITIONS))
        for i, (events, base) in enumerate(zip(after, baseline, strict=True)):
            assert events == base, (
                f"static member {i} saw rebalance callbacks after its initial assignment: {events[1:]}\n"
                f"see {members[i][2]} and {server.stderr_path}"
            )
    finally:
        try:
            for proc in procs:
                if proc.poll() is None:
                    if proc.stdin is not None:
                        try:
                            proc.stdin.close()  # static members: close and exit
                        except OSError:
                            pass
                    else:
                        proc.send_signal(signal.SIGTERM)
            for proc in procs:
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=10)
                for stream in (proc.stdout, proc.stderr):
                    if stream is not None:
                        stream.close()
        finally:
            for f in files:
                f.close()
            if server.proc is not None:
                try:
                    server.stop()
                except subprocess.TimeoutExpired:
                    pass  # stop() killed it
