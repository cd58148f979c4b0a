"""The fuzzer (scripts/fuzz.py) at a CI-sized count: every request decoder of the server's API table and the group
log's reader get random and mutated input; only our decode errors (or a truncating recovery) are allowed.

RELIABILITY_FUZZ_CASES (default 120000) sets the count; `scripts/fuzz.py --cases 1000000` is the full run.

A finding it made: kio 0.6.5's native reader allocates `count * element size` up front for an array whose length
prefix says `count`, so a request claiming a few billion elements aborted the whole process ("memory allocation of
N bytes failed", SIGABRT). protocol.shape now refuses such a request before kio reads it (see
test_a_huge_array_length_is_a_decode_error_not_an_abort). The fuzzer runs its cases in forked children, so a case
that kills the process is counted as a finding (request:PROCESS_DIED) and the run goes on; any finding fails this
test (RELIABILITY_FUZZ_STRICT=0 tolerates the old kio abort again, for running this against an older tree).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
CASES = int(os.environ.get("RELIABILITY_FUZZ_CASES", "120000"))
STRICT = os.environ.get("RELIABILITY_FUZZ_STRICT", "1") == "1"
KIO_ALLOCATION_ABORT = "memory allocation of"


def load_fuzz():
    spec = importlib.util.spec_from_file_location("kgc_fuzz", REPO / "scripts" / "fuzz.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["kgc_fuzz"] = module
    spec.loader.exec_module(module)
    return module


def test_fuzz_every_request_decoder_and_the_log_reader():
    fuzz = load_fuzz()
    seed = int(os.environ.get("RELIABILITY_FUZZ_SEED", str(time.time_ns() % 2**32)))
    report = fuzz.run_isolated(CASES, seed, storage_share=0.1)
    summary = report.summary()
    known = [f for f in report.findings if KIO_ALLOCATION_ABORT in f["error"]]
    other = [f for f in report.findings if KIO_ALLOCATION_ABORT not in f["error"]]
    print()
    print(
        f"fuzz: seed {seed}, {summary['cases']} cases in {summary['seconds']} s "
        f"({summary['cases_per_s']}/s) over {summary['apis']} APIs / {summary['api_versions']} api versions "
        f"and the log reader"
    )
    print(f"  outcomes: {summary['outcomes']}")
    print(f"  slowest case: {summary['slowest_case_ms']} ms ({summary['slowest_case']})")
    print(f"  findings: {report.finding_count} ({len(known)} kio allocation aborts, {len(other)} other)")
    for f in report.findings[:5]:
        print(f"    {f}")
    assert report.cases == CASES
    assert sum(v for k, v in report.outcomes.items() if k.startswith("log:")) > CASES // 20
    assert report.outcomes["request:decoded"] > 0  # the corpus is valid enough to reach the body decoders
    assert not other, f"decoders or the log reader failed other than with our errors: {other}"
    assert report.finding_count == len(report.findings)  # all recorded (up to 1000), so all were classified
    if STRICT:
        assert not known, f"kio aborted the process on {len(known)} inputs: {known[:3]}"


_REPRO = r"""
import datetime, sys
sys.path.insert(0, sys.argv[1])
from kio.schema.join_group.v9.request import JoinGroupRequest
from protocol.api import ApiTable
from protocol.errors import RequestDecodeError
from tests.support.wire import encode_request

async def handler(ctx, request):
    return None

table = ApiTable()
table.register(11, 0, 9, handler)
request = JoinGroupRequest(group_id="g", session_timeout=datetime.timedelta(seconds=10),
                           rebalance_timeout=datetime.timedelta(seconds=10), member_id="", group_instance_id=None,
                           protocol_type="consumer", protocols=(), reason=None)
frame = encode_request(request, 1)[4:]
assert frame.endswith(b"\x01\x00\x00")  # protocols: empty compact array; reason: null; no tagged fields
frame = frame[:-3] + bytes([0x81, 0x80, 0x80, 0x80, 0x10]) + b"\x00\x00"  # protocols: 2**32 elements
try:
    table.decode(frame)
except RequestDecodeError:
    print("decode error")
"""


def test_a_huge_array_length_is_a_decode_error_not_an_abort():
    """A 41-byte JoinGroup v9 request whose `protocols` compact array claims 2**32 elements must be a decode
    error (Kafka: "Tried to allocate a collection of size N, but there are only M bytes remaining"). kio 0.6.5's
    native reader alone kills the process with SIGABRT ("memory allocation of 34359738368 bytes failed");
    protocol.shape checks claimed array lengths before it runs. Run in a child process so that, should the
    check ever be bypassed, the abort cannot take pytest down."""
    env = dict(os.environ, RUST_BACKTRACE="0")
    proc = subprocess.run(
        [sys.executable, "-c", _REPRO, str(REPO)], capture_output=True, text=True, timeout=60, env=env
    )
    assert proc.returncode == 0, f"exit {proc.returncode}: {proc.stderr.strip()[:300]}"
    assert proc.stdout.strip() == "decode error"
