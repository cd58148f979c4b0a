"""Fuzz every request decoder of the server's API table and the group log's reader, in process.

    .venv/bin/python scripts/fuzz.py [--cases 1000000] [--seed N] [--storage-share 0.1] [--json]

Targets:

* requests: `ApiTable.decode` of the table the real server builds (`coordinator.app.build`, not
  started), for every registered api key and every version in its range. A corpus of valid requests is generated
  per (key, version) from the kio entity's type hints (random ints, strings, bytes, nested arrays) and encoded
  with kio's writer; each case is one such frame mutated (bit flips, interesting integers written over 1/2/4/8
  bytes, truncation, random tail, inserted or deleted bytes, a splice of two frames, a valid header with a random
  body) or plain random bytes. Allowed outcomes: a decoded request, or our `ProtocolError`
  (RequestDecodeError, UnknownApiKey). A request that decodes must carry the correlation id of its prefix.
* log: `storage.Log.open` + `replay` over segment files (an in-memory FS) made of valid entries and then mutated
  the same ways, sometimes split into two segments. Allowed outcomes: recovery truncates (Recovery says what was
  cut) or `StorageError` (StorageCorruptError, StorageFormatError); every entry replayed must be one that was
  written, with strictly increasing sequence numbers.

Anything else (another exception type, a failed check) is a finding: it is counted, the first few are printed
with a reproducer (target, seed, case number, hex of the input), and the exit status is 1. Figures: cases per
target and outcome, rate, slowest case. tests/reliability/test_fuzz.py runs `run()` with a CI-sized count;
tests/reliability/test_hostile.py sends `mutated_frames()` to a live server.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import logging
import os
import random
import struct
import sys
import tempfile
import time
import types
import typing
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from kio.static.primitive import i32Timedelta, i64Timedelta  # noqa: E402

from protocol.api import ApiTable, request_class  # noqa: E402
from protocol.api import encode_request as api_encode_request  # noqa: E402
from protocol.errors import ProtocolError  # noqa: E402

_INTERESTING = [
    0,
    1,
    -1,
    0x7F,
    0x80,
    0xFF,
    0x7FFF,
    0x8000,
    0xFFFF,
    0x7FFFFFFF,
    -0x80000000,
    0xFFFFFFFF,
    2**63 - 1,
    -(2**63),
    2**31,
    2**16,
]


# -- the server's table ---------------------------------------------------------------------------------


def server_table() -> ApiTable:
    """The API table of the real server (every part registered), built without starting anything."""
    from coordinator import app
    from coordinator.config import Config

    with tempfile.TemporaryDirectory(prefix="kgc-fuzz-") as data_dir:
        built = app.build(Config(), ("127.0.0.1", 0), None, None, data_dir)
    return built.server.table


def api_versions(table: ApiTable) -> list[tuple[int, int]]:
    return [(s.api_key, v) for s in table.specs() for v in range(s.min_version, s.max_version + 1)]


# -- valid requests from type hints -----------------------------------------------------------------------


def _random_value(tp: Any, rng: random.Random, depth: int) -> Any:
    origin = typing.get_origin(tp)
    if origin in (types.UnionType, typing.Union):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) != len(typing.get_args(tp)) and rng.random() < 0.3:
            return None
        return _random_value(args[0], rng, depth)
    if origin is tuple:
        inner = typing.get_args(tp)[0]
        count = rng.choice([0, 1, 1, 2, 3]) if depth < 3 else 0
        return tuple(_random_value(inner, rng, depth + 1) for _ in range(count))
    if dataclasses.is_dataclass(tp):
        return random_entity(tp, rng, depth + 1)
    if isinstance(tp, type):
        if issubclass(tp, bool):
            return rng.random() < 0.5
        if issubclass(tp, (i32Timedelta, i64Timedelta)) or tp is datetime.timedelta:
            return datetime.timedelta(milliseconds=rng.choice([0, 1, 100, 6000, 30000, 300000]))
        if issubclass(tp, int):
            low, high = getattr(tp, "__low__", -(2**31)), getattr(tp, "__high__", 2**31 - 1)
            pick = rng.random()
            if pick < 0.2:
                return rng.choice([low, high, 0])
            return rng.randint(max(low, -1000), min(high, 100000))
        if issubclass(tp, float):
            return rng.uniform(-1e6, 1e6)
        if issubclass(tp, str):
            return "".join(rng.choice("abcdefgh-._0123456789") for _ in range(rng.choice([0, 1, 5, 12, 40])))
        if issubclass(tp, bytes):
            return rng.randbytes(rng.choice([0, 1, 8, 61, 200]))
        if issubclass(tp, uuid.UUID):
            return uuid.UUID(int=rng.getrandbits(128))
    if tp is uuid.UUID:
        return uuid.UUID(int=rng.getrandbits(128))
    raise TypeError(f"no generator for {tp!r}")


def random_entity(cls: type, rng: random.Random, depth: int = 0) -> Any:
    hints = typing.get_type_hints(cls)
    values = {}
    for f in dataclasses.fields(cls):
        values[f.name] = _random_value(hints[f.name], rng, depth)
    return cls(**values)


def encode_request(entity: Any, correlation_id: int, client_id: str | None = "fuzz") -> bytes:
    """Header (v1, or v2 for flexible versions) + body, without the length prefix."""
    return api_encode_request(entity, correlation_id, client_id)[4:]


def request_corpus(table: ApiTable, rng: random.Random, per_version: int = 4) -> list[bytes]:
    corpus = []
    for api_key, version in api_versions(table):
        cls = request_class(api_key, version)
        made = 0
        for _ in range(per_version * 4):
            try:
                corpus.append(encode_request(random_entity(cls, rng), rng.getrandbits(31)))
            except (TypeError, ValueError, OverflowError, struct.error):
                continue  # a random value the writer refuses; try another
            made += 1
            if made == per_version:
                break
        if not made:
            raise RuntimeError(f"could not generate a valid request for api {api_key} v{version}")
    return corpus


# -- mutations ----------------------------------------------------------------------------------------------

MUTATIONS = (
    "flip",
    "interesting",
    "truncate",
    "extend",
    "insert",
    "delete",
    "splice",
    "random_body",
    "random",
)


def mutate(
    data: bytes, rng: random.Random, corpus: list[bytes], kind: str | None = None, keep_prefix: int = 0
) -> tuple[str, bytes]:
    """One mutation of `data`; the first `keep_prefix` bytes are left alone (the api key and version, so that
    the body decoders, not only the key lookup, see the damage)."""
    kind = kind or rng.choice(MUTATIONS)
    buf = bytearray(data)
    lo = min(keep_prefix, len(buf))

    def at() -> int:
        return rng.randint(lo, max(lo, len(buf) - 1))

    if kind == "flip":
        for _ in range(rng.choice([1, 1, 2, 4, 8])):
            if len(buf) > lo:
                buf[at()] ^= 1 << rng.randint(0, 7)
    elif kind == "interesting":
        width = rng.choice([1, 2, 4, 8])
        fmt = {1: ">B", 2: ">H", 4: ">I", 8: ">Q"}[width]
        value = rng.choice(_INTERESTING) % (1 << (8 * width))
        pos = at()
        buf[pos : pos + width] = struct.pack(fmt, value)
    elif kind == "truncate":
        del buf[at() :]
    elif kind == "extend":
        buf += rng.randbytes(rng.choice([1, 3, 16, 100]))
    elif kind == "insert":
        pos = at()
        buf[pos:pos] = rng.randbytes(rng.choice([1, 2, 4, 9]))
    elif kind == "delete":
        pos = at()
        del buf[pos : pos + rng.choice([1, 2, 4, 9])]
    elif kind == "splice":
        other = rng.choice(corpus)
        cut = at()
        buf = buf[:cut] + other[rng.randint(0, len(other)) :]
    elif kind == "random_body":
        buf = buf[: max(lo, 8)] + rng.randbytes(rng.choice([0, 1, 5, 30, 200]))
    elif kind == "random":
        buf = bytearray(rng.randbytes(rng.choice([0, 1, 7, 8, 9, 20, 100, 500])))
    return kind, bytes(buf)


def mutated_frames(table: ApiTable, count: int, seed: int) -> list[bytes]:
    """`count` mutated request payloads (no length prefix) for sending to a live server."""
    rng = random.Random(seed)
    corpus = request_corpus(table, rng, per_version=2)
    return [mutate(rng.choice(corpus), rng, corpus, keep_prefix=rng.choice([0, 4]))[1] for _ in range(count)]


def _decode_all(table: ApiTable, frames: list[bytes], start: int, current: Any) -> None:
    for i in range(start, len(frames)):
        current.value = i
        try:
            table.decode(frames[i])
        except ProtocolError:
            pass
    current.value = len(frames)


def process_killers(table: ApiTable, frames: list[bytes]) -> list[int]:
    """Indexes of the frames whose decoding kills the process (decoded in forked children): the known kio abort
    on huge array lengths. A wire test that must keep its server alive holds these back and says how many."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    os.environ["RUST_BACKTRACE"] = "0"
    killers: list[int] = []
    start = 0
    while start < len(frames):
        current = ctx.Value("q", start, lock=False)
        proc = ctx.Process(target=_decode_all, args=(table, frames, start, current))
        proc.start()
        proc.join()
        if proc.exitcode == 0:
            break
        killers.append(current.value)
        start = current.value + 1
    return killers


# -- the log ------------------------------------------------------------------------------------------------


def _log_corpus(rng: random.Random) -> tuple[bytes, list[tuple[int, bytes, bytes | None, int]]]:
    from storage.format import encode_entry

    entries = []
    seq = rng.randint(0, 5)
    for _ in range(rng.randint(1, 12)):
        key = rng.randbytes(rng.choice([0, 1, 5, 20]))
        value = None if rng.random() < 0.15 else rng.randbytes(rng.choice([0, 1, 10, 80]))
        ts = rng.randint(0, 2**40)
        entries.append((seq, key, value, ts))
        seq += rng.choice([1, 1, 1, 2])
    return b"".join(encode_entry(s, k, v, t) for s, k, v, t in entries), entries


def fuzz_log_case(rng: random.Random, kind: str | None = None) -> str:
    """One mutated log, opened and replayed. Returns the outcome; raises AssertionError on a finding and lets
    unexpected exceptions through."""
    from storage import Log, StorageError
    from storage.fakefs import MemFS

    raw, entries = _log_corpus(rng)
    other, other_entries = _log_corpus(rng)
    kind, data = mutate(raw, rng, [other], kind)
    written = {(s, k, v) for s, k, v, _ in entries + other_entries}
    fs = MemFS()
    directory = "/log"
    fs.makedirs(directory)
    if rng.random() < 0.25 and len(data) > 2:
        cut = rng.randint(1, len(data) - 1)
        parts = [(0, data[:cut]), (entries[-1][0] + 1, other)]  # a second segment, named after the first
    else:
        parts = [(0, data)]
    for base, blob in parts:
        f = fs.open_append(f"{directory}/{base:020d}.log")
        f.write(blob)
        f.fsync()
        f.close()
    try:
        log = Log.open(directory, fs=fs, linger_ms=0)
    except StorageError:
        return "storage_error"
    try:
        got = [(e.seq, e.key, e.value) for e in log.replay()]
    except StorageError:
        return "storage_error"
    finally:
        log.close()
    seqs = [s for s, _, _ in got]
    assert seqs == sorted(set(seqs)), f"replayed sequence numbers do not increase: {seqs}"
    assert all(e in written for e in got), "replay yielded an entry that was never written"
    return "clean" if log.recovery.clean else "truncated"


# -- the run ------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Report:
    cases: int = 0
    seconds: float = 0.0
    outcomes: Counter = dataclasses.field(default_factory=Counter)
    mutations: Counter = dataclasses.field(default_factory=Counter)
    apis: int = 0
    api_versions: int = 0
    slowest_ms: float = 0.0
    slowest: str = ""
    findings: list[dict] = dataclasses.field(default_factory=list)
    finding_count: int = 0

    def summary(self) -> dict:
        return {
            "cases": self.cases,
            "seconds": round(self.seconds, 1),
            "cases_per_s": round(self.cases / self.seconds) if self.seconds else 0,
            "apis": self.apis,
            "api_versions": self.api_versions,
            "outcomes": dict(sorted(self.outcomes.items())),
            "mutations": dict(sorted(self.mutations.items())),
            "slowest_case_ms": round(self.slowest_ms, 2),
            "slowest_case": self.slowest,
            "findings": self.finding_count,
            "findings_by_kind": dict(sorted(Counter(_finding_kind(f) for f in self.findings).items())),
            "first_findings": self.findings[:5],
        }


def case_input(
    case: int, seed: int, storage_share: float, corpus: list[bytes]
) -> tuple[str, random.Random, str, bytes]:
    """Case `case` of run `seed`, regenerated from those two numbers alone: (target, its rng, mutation, input);
    for the log target the input is made by `fuzz_log_case` from the rng."""
    case_rng = random.Random(seed * 1_000_003 + case)
    if case_rng.random() < storage_share:
        return "log", case_rng, case_rng.choice(MUTATIONS), b""
    base = case_rng.choice(corpus)
    kind, data = mutate(base, case_rng, corpus, keep_prefix=case_rng.choice([0, 4, 4, 4]))
    return "request", case_rng, kind, data


def run(
    cases: int,
    seed: int,
    storage_share: float = 0.1,
    table: ApiTable | None = None,
    progress: bool = False,
    start: int = 0,
    skip: frozenset[int] = frozenset(),
    current: Any = None,
) -> Report:
    """Cases start .. start+cases-1 in this process (`current.value` is set to each case number before it runs,
    for `run_isolated`); cases in `skip` are not run."""
    table = table or server_table()
    pairs = api_versions(table)
    corpus = request_corpus(table, random.Random(seed))
    report = Report(apis=len(table.specs()), api_versions=len(pairs))
    started = time.perf_counter()
    last_print = started
    for case in range(start, start + cases):
        if case in skip:
            continue
        if current is not None:
            current.value = case
        target, case_rng, kind, data = case_input(case, seed, storage_share, corpus)
        t0 = time.perf_counter()
        if target == "log":
            try:
                outcome = fuzz_log_case(case_rng, kind)
            except Exception as exc:  # noqa: BLE001 - anything else is what we look for
                outcome = "FINDING"
                _finding(report, target, seed, case, kind, exc, b"")
        else:
            try:
                decoded = table.decode(data)
                outcome = "decoded" if decoded.body is not None else "unsupported_version"
                (correlation,) = struct.unpack_from(">i", data, 4)
                assert decoded.context.correlation_id == correlation, "correlation id changed"
            except ProtocolError as exc:
                outcome = type(exc).__name__
            except Exception as exc:  # noqa: BLE001
                outcome = "FINDING"
                _finding(report, target, seed, case, kind, exc, data)
        elapsed_ms = (time.perf_counter() - t0) * 1000
        if elapsed_ms > report.slowest_ms:
            report.slowest_ms = elapsed_ms
            report.slowest = f"{target}/{kind} case {case}"
        report.outcomes[f"{target}:{outcome}"] += 1
        report.mutations[kind] += 1
        report.cases += 1
        if progress and time.perf_counter() - last_print > 30:
            last_print = time.perf_counter()
            print(f"  {case + 1} cases, {report.finding_count} findings", file=sys.stderr, flush=True)
    report.seconds = time.perf_counter() - started
    return report


def merge(into: Report, part: Report) -> None:
    into.cases += part.cases
    into.outcomes.update(part.outcomes)
    into.mutations.update(part.mutations)
    into.apis, into.api_versions = part.apis, part.api_versions
    if part.slowest_ms > into.slowest_ms:
        into.slowest_ms, into.slowest = part.slowest_ms, part.slowest
    into.findings.extend(part.findings)
    into.finding_count += part.finding_count


def _child(
    conn: Any,
    current: Any,
    table: ApiTable,
    start: int,
    cases: int,
    seed: int,
    storage_share: float,
    skip: frozenset[int],
    stderr_path: str,
) -> None:
    fd = os.open(stderr_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(fd, 2)  # what a dying process says (a Rust panic message) is kept for the finding
    os.close(fd)
    logging.getLogger("storage").setLevel(logging.ERROR)  # "recovered with loss" is the expected outcome
    conn.send(run(cases, seed, storage_share, table, start=start, skip=skip, current=current))
    conn.close()


def run_isolated(
    cases: int, seed: int, storage_share: float = 0.1, chunk: int = 5_000, progress: bool = False
) -> Report:
    """`run` in forked children, `chunk` cases each, so that a case that kills the process (a native abort, a
    segfault) is a finding too: the chunk is run again without it and the run goes on."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    os.environ["RUST_BACKTRACE"] = "0"
    stderr_file = tempfile.NamedTemporaryFile(prefix="kgc-fuzz-", suffix=".stderr", delete=False)  # noqa: SIM115
    stderr_file.close()
    table = server_table()
    corpus = request_corpus(table, random.Random(seed))
    total = Report()
    started = time.perf_counter()
    skip: set[int] = set()
    start = 0
    while start < cases:
        size = min(chunk, cases - start)
        current = ctx.Value("q", -1, lock=False)
        parent_end, child_end = ctx.Pipe(duplex=False)
        proc = ctx.Process(
            target=_child,
            args=(
                child_end,
                current,
                table,
                start,
                size,
                seed,
                storage_share,
                frozenset(skip),
                stderr_file.name,
            ),
        )
        proc.start()
        child_end.close()
        try:
            part = parent_end.recv()
        except EOFError:
            part = None
        parent_end.close()
        proc.join()
        if part is None or proc.exitcode != 0:
            case = current.value
            target, _, kind, data = case_input(case, seed, storage_share, corpus)
            how = (
                f"signal {-proc.exitcode}" if proc.exitcode and proc.exitcode < 0 else f"exit {proc.exitcode}"
            )
            with open(stderr_file.name, errors="replace") as fh:
                said = [line.strip() for line in fh if line.strip() and not line.startswith("note:")]
            if said:
                how += f": {said[-1][:200]}"
            total.outcomes[f"{target}:PROCESS_DIED"] += 1
            total.mutations[kind] += 1
            total.cases += 1
            _finding(total, target, seed, case, kind, RuntimeError(f"the process died ({how})"), data)
            skip.add(case)
            if progress:
                print(
                    f"  case {case} killed the process ({how}); re-running its chunk without it",
                    file=sys.stderr,
                    flush=True,
                )
            continue  # the same chunk again, without that case
        merge(total, part)
        start += size
        if progress:
            print(
                f"  {start} cases, {total.finding_count} findings, {time.perf_counter() - started:.0f} s",
                file=sys.stderr,
                flush=True,
            )
    total.seconds = time.perf_counter() - started
    os.unlink(stderr_file.name)
    return total


def _finding_kind(finding: dict) -> str:
    """`request api K vV: ERROR` or `log: ERROR`, the error shortened to its class (the kio abort named as such)."""
    error = finding["error"]
    what = "kio allocation abort" if "memory allocation of" in error else error.split(":")[0]
    if finding["target"] == "request" and len(finding["input_hex"]) >= 8:
        key, version = struct.unpack(">hh", bytes.fromhex(finding["input_hex"][:8]))
        return f"request api {key} v{version}: {what}"
    return f"{finding['target']}: {what}"


def _finding(
    report: Report, target: str, seed: int, case: int, kind: str, exc: BaseException, data: bytes
) -> None:
    report.finding_count += 1
    if len(report.findings) < 1000:
        report.findings.append(
            {
                "target": target,
                "seed": seed,
                "case": case,
                "mutation": kind,
                "error": f"{type(exc).__name__}: {exc}"[:300],
                "input_hex": data[:400].hex(),
            }
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--storage-share", type=float, default=0.1)
    ap.add_argument("--json", action="store_true", help="print the summary as one JSON line")
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else random.SystemRandom().getrandbits(32)
    report = run_isolated(args.cases, seed, args.storage_share, progress=not args.json)
    summary = {"seed": seed, **report.summary()}
    if args.json:
        print(json.dumps(summary))
    else:
        for name, value in summary.items():
            print(f"{name}: {value}")
    return 1 if report.finding_count else 0


if __name__ == "__main__":
    sys.exit(main())
