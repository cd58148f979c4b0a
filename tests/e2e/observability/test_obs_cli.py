"""`kafka-group-coordinator groups ...` against a live group: aligned tables, --json, reset-offsets, delete.

Run with `-s` to see the tables (docs/observability.md shows this test's output)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from obs_support import get_json, produce, wait_until

from tests.support.server import PYTHON, REPO

pytestmark = pytest.mark.e2e

TOPIC, GROUP = "orders", "billing"


def cli(server, *args: str, env_url: bool = False) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    cmd = [PYTHON, "-m", "coordinator", "groups"]
    if env_url:
        env["KGC_ADMIN_URL"] = server.admin_url
    else:
        cmd += ["--admin", server.admin_url]
    proc = subprocess.run(
        cmd + list(args), capture_output=True, timeout=60, cwd=REPO, env=env, stdin=subprocess.DEVNULL
    )
    shown = " ".join(["kafka-group-coordinator", "groups", *args])
    print(f"$ {shown}\n{proc.stdout.decode()}{proc.stderr.decode()}")
    return proc


def test_cli_on_a_live_group(server_factory, members):
    server = server_factory({"metrics.lag.sample.interval.ms": 200})
    produce(server, TOPIC, 3, 0)  # the topic, empty: data comes once both members hold their partitions
    a = members.start("billing-1", server, GROUP, TOPIC, "--quota", "50")
    b = members.start("billing-2", server, GROUP, TOPIC, "--quota", "30")
    # With data already there, the first member could consume the second's share before the second joined
    # (its join waits for the first member's next heartbeat), leaving it nothing to reach its quota with.
    wait_until(
        lambda: (
            all(m.events("assigned") for m in (a, b))
            and len(get_json(server, f"/v1/groups/{GROUP}")[1].get("members", [])) == 2
        ),
        60,
        "both members assigned",
        members.describe,
    )
    produce(server, TOPIC, 3, 40)

    def stable_and_committed() -> bool:
        _, body = get_json(server, f"/v1/groups/{GROUP}")
        done = all(
            m.events("commit") and m.events("commit")[-1]["processed"] == q for m, q in ((a, 50), (b, 30))
        )
        return done and body.get("state") == "Stable" and len(body["members"]) == 2

    wait_until(stable_and_committed, 60, "a Stable group of two that committed", members.describe)

    listing = cli(server, "list")
    assert listing.returncode == 0
    lines = listing.stdout.decode().splitlines()
    header = next(line for line in lines if "GROUP" in line)
    assert header.split() == [
        "GROUP",
        "STATE",
        "TYPE",
        "PROTOCOL",
        "GENERATION",
        "MEMBERS",
        "LAG",
        "UNCOMMITTED",
    ]
    row = next(line for line in lines if line.strip().startswith(GROUP)).split()
    assert row[:4] == [GROUP, "Stable", "consumer", "range"] and row[5] == "2"
    assert header.index("LAG") + len("LAG") == lines[lines.index(header) + 2].index(row[6]) + len(
        row[6]
    )  # aligned

    described = cli(server, "describe", GROUP)
    text = described.stdout.decode()
    assert described.returncode == 0 and "billing-1" in text and "billing-2" in text and "orders:" in text
    assert "CURRENT-OFFSET" in text and "LOG-END-OFFSET" in text

    as_json = cli(server, "--json", "describe", GROUP, env_url=True)
    body = json.loads(as_json.stdout)
    assert {m["client_id"] for m in body["members"]} == {"billing-1", "billing-2"}
    assert sorted(p for m in body["members"] for a_ in m["assignment"] for p in a_["partitions"]) == [0, 1, 2]

    refused = cli(server, "reset-offsets", GROUP, "--to-earliest", "--execute")
    assert refused.returncode == 1 and b"NON_EMPTY_GROUP" in refused.stderr

    b.close()
    wait_until(
        lambda: (
            get_json(server, f"/v1/groups/{GROUP}")[1]["state"] == "Stable"
            and len(get_json(server, f"/v1/groups/{GROUP}")[1]["members"]) == 1
        ),
        30,
        "a alone and Stable",
    )
    timeline = cli(server, "timeline", GROUP)
    text = timeline.stdout.decode()
    assert timeline.returncode == 0 and "new_member" in text and "leave" in text and "(left)" in text

    a.close()
    wait_until(lambda: get_json(server, f"/v1/groups/{GROUP}")[1]["state"] == "Empty", 30, "Empty group")
    dry = cli(server, "reset-offsets", GROUP, "--to-earliest")
    assert dry.returncode == 0 and b"Dry run" in dry.stdout
    assert all(o["committed_offset"] > 0 for o in get_json(server, f"/v1/groups/{GROUP}")[1]["offsets"])
    done = cli(
        server,
        "reset-offsets",
        GROUP,
        "--to-datetime",
        "2000-01-01T00:00:00Z",
        "--topic",
        f"{TOPIC}:0",
        "--execute",
    )
    assert done.returncode == 0
    offsets = {
        o["partition"]: o["committed_offset"] for o in get_json(server, f"/v1/groups/{GROUP}")[1]["offsets"]
    }
    assert offsets[0] == 0 and all(offsets[p] > 0 for p in offsets if p != 0)

    assert cli(server, "delete", GROUP).returncode == 0
    missing = cli(server, "describe", GROUP)
    assert missing.returncode == 1 and b"GROUP_ID_NOT_FOUND" in missing.stderr
    assert cli(server, "list").returncode == 0

    unreachable = subprocess.run(
        [PYTHON, "-m", "coordinator", "groups", "--admin", "http://127.0.0.1:1", "list"],
        capture_output=True,
        timeout=60,
        cwd=REPO,
        stdin=subprocess.DEVNULL,
    )
    assert unreachable.returncode == 2 and b"cannot reach" in unreachable.stderr
