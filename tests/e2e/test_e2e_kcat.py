"""kcat (librdkafka's command-line client), as a user would type it. kcat must be installed
(scripts/install-system-deps.sh): a missing kcat fails these tests, it does not skip them."""

from __future__ import annotations

import re

import pytest

from tests.support.e2e import create_topic, require_kcat, run

pytestmark = pytest.mark.e2e


def test_kcat_metadata_lists_broker_and_topics(server):
    kcat = require_kcat()
    create_topic("ck", server, "kcat-listed", 3)
    out = run([kcat, "-L", "-b", server.bootstrap, "-m", "10"], server, timeout=30).stdout.decode()
    assert re.search(rf"^\s*{server.workers} brokers:\s*$", out, re.M), out
    assert re.search(rf"^\s*broker 1 at {re.escape(server.bootstrap)}\b", out, re.M), out
    assert re.search(r'^\s*topic "kcat-listed" with 3 partitions:\s*$', out, re.M), out
    for p in range(3):
        assert re.search(rf"^\s*partition {p}, leader 1, replicas: 1, isrs: 1\s*$", out, re.M), out


def test_kcat_produce_keyed_lines_and_consume_them_back(server):
    kcat = require_kcat()
    topic, n = "kcat-lines", 500
    # The topic does not exist yet: kcat's first Metadata request auto-creates it (num.partitions=1 by
    # default), so the read-back order is the produce order. Values may hold the key delimiter after the
    # first one.
    lines = [f"k{i:04d}:value {i} with: colons and spaces \u00e9\u4e2d" for i in range(n)]
    payload = ("\n".join(lines) + "\n").encode()
    run(
        [kcat, "-P", "-b", server.bootstrap, "-t", topic, "-K:", "-X", "acks=all"],
        server,
        input=payload,
        timeout=60,
    )

    out = run(
        [kcat, "-C", "-b", server.bootstrap, "-t", topic, "-o", "beginning", "-e", "-q", "-f", "%k:%s\n"],
        server,
        timeout=60,
    ).stdout
    if out != payload:
        got_lines, want_lines = out.split(b"\n"), payload.split(b"\n")
        first = next((i for i, (a, b) in enumerate(zip(got_lines, want_lines, strict=False)) if a != b), None)
        pytest.fail(
            f"read back {len(got_lines) - 1} lines, want {n}; first difference at line {first}: "
            f"{got_lines[first] if first is not None else None!r} != "
            f"{want_lines[first] if first is not None else None!r}"
        )

    listed = run([kcat, "-L", "-b", server.bootstrap, "-t", topic], server, timeout=30).stdout.decode()
    assert re.search(rf'^\s*topic "{topic}" with 1 partitions:\s*$', listed, re.M), listed

    offsets = (
        run(
            [kcat, "-C", "-b", server.bootstrap, "-t", topic, "-o", "beginning", "-e", "-q", "-f", "%p %o\n"],
            server,
            timeout=60,
        )
        .stdout.decode()
        .split("\n")[:-1]
    )
    assert offsets == [f"0 {i}" for i in range(n)], offsets[:5]
