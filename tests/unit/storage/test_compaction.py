"""Compaction: last value per key, tombstone retention, merging, crash safety, and concurrency."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest

from storage import Log, StorageError
from storage.fakefs import FaultFS, MemFS
from storage.format import encode_entry
from tests.unit.storage.support import DIR, Logs, entries, pairs, seg_path, segment_names, state

SIZE = len(encode_entry(0, b"k0", b"v00", 0))  # every entry below has this size, tombstones aside
HOUR = 3_600_000


def _write(lg: Log, items: Sequence[tuple[bytes, bytes | None, int]]) -> None:
    for key, value, ts in items:
        lg.append([(key, value)], timestamp_ms=ts).result(5)


def _history() -> list[tuple[bytes, bytes | None, int]]:
    """Overwrites, deletes at old and recent times, and a key deleted then written again."""
    items: list[tuple[bytes, bytes | None, int]] = []
    for round_ in range(4):
        for k in range(5):
            items.append((b"k%d" % k, b"v%d%d" % (round_, k), round_ * HOUR))
    items += [(b"k1", None, 0), (b"k2", None, 10 * HOUR), (b"k3", None, 0), (b"k3", b"v99", 0)]
    items += [(b"k%d" % k, b"w%d0" % k, 11 * HOUR) for k in range(5, 9)]
    return items


def _separated_history() -> list[tuple[bytes, bytes | None, int]]:
    """A value and, two segments later, its expired tombstone, with a segment that stays as it is between.

    They land in different compaction groups; rewriting the later group first and crashing would bring the
    deleted value back.
    """
    items: list[tuple[bytes, bytes | None, int]] = [(b"k1", b"v01", 0)]
    items += [(b"x%d" % i, b"v00", 0) for i in range(3)]
    items += [(b"u%d" % i, b"v00", 0) for i in range(4)]
    items += [(b"k1", None, 0)] + [(b"y%d" % i, b"v00", 0) for i in range(3)]
    items += [(b"z0", b"v00", 11 * HOUR)]
    return items


def _expected(items: Sequence[tuple[bytes, bytes | None, int]]) -> dict[bytes, bytes]:
    result: dict[bytes, bytes] = {}
    for key, value, _ in items:
        if value is None:
            result.pop(key, None)
        else:
            result[key] = value
    return result


def test_keeps_the_last_value_per_key_and_never_touches_the_active_segment(logs: Logs, memfs: MemFS) -> None:
    lg = logs.open(fs=memfs, segment_bytes=4 * SIZE)
    items = [(b"k%d" % (i % 3), b"v%02d" % i, 0) for i in range(14)]
    _write(lg, items)
    names = segment_names(memfs)
    active_before = memfs.read_bytes(seg_path(names[-1]))
    result = lg.compact(now_ms=0, delete_retention_ms=HOUR).result(5)
    assert state(lg) == _expected(items)
    assert memfs.read_bytes(seg_path(segment_names(memfs)[-1])) == active_before
    assert segment_names(memfs)[-1] == names[-1]
    # Closed segments hold entries 0..11; every key's last value is in the active segment (12, 13) or at
    # 11 (k2), so only entry 11 is left of them.
    assert [e.seq for e in entries(lg)] == [11, 12, 13]
    assert result.entries_before == 12 and result.entries_after == 1
    assert result.segments_before == 3 and result.segments_after == 1
    assert lg.stats().entries == 3
    lg = logs.reopen(lg, memfs, segment_bytes=4 * SIZE)
    assert lg.recovery.clean and state(lg) == _expected(items)
    assert lg.append([(b"k0", b"new")]).result(5) == 14


def test_tombstones_are_kept_for_the_retention_then_dropped(logs: Logs, memfs: MemFS) -> None:
    lg = logs.open(fs=memfs, segment_bytes=3 * SIZE)
    items: list[tuple[bytes, bytes | None, int]] = [
        (b"k1", b"v01", 0),
        (b"k1", None, 1 * HOUR),  # deleted at 1h
        (b"k2", b"v02", 0),
        (b"k2", None, 5 * HOUR),  # deleted at 5h
        (b"k3", b"v03", 0),
        (b"k4", None, 0),  # deleting what never existed
        (b"zz", b"v00", 9 * HOUR),
        (b"zz", b"v01", 9 * HOUR),  # active segment
    ]
    _write(lg, items)
    lg.compact(now_ms=3 * HOUR, delete_retention_ms=2 * HOUR).result(5)
    # k1's tombstone is 2h old: dropped. k2's is 0h old: kept, k4's 3h: dropped.
    closed = [(e.key, e.value) for e in entries(lg) if e.key != b"zz"]
    assert closed == [(b"k2", None), (b"k3", b"v03")]
    assert state(lg) == _expected(items)
    result = lg.compact(now_ms=7 * HOUR, delete_retention_ms=2 * HOUR).result(5)
    assert [(e.key, e.value) for e in entries(lg) if e.key != b"zz"] == [(b"k3", b"v03")]
    assert result.tombstones_dropped == 1
    assert state(lg) == _expected(items)


def test_merges_small_segments_and_names_them_by_the_first(logs: Logs, memfs: MemFS) -> None:
    lg = logs.open(fs=memfs, segment_bytes=4 * SIZE)
    keys = [b"ka", b"ka", b"ka", b"kb"] + [b"ka", b"ka", b"ka", b"kc"] + [b"kd"] * 4  # 1, 2 and 1 kept
    items = [(key, b"v%02d" % i, 0) for i, key in enumerate(keys)]
    items += [(b"u%d" % i, b"v00", 0) for i in range(4)]  # a full segment of unique keys
    items += [(b"k9", b"v99", 0)]  # the active segment
    _write(lg, items)
    assert len(segment_names(memfs)) == 5
    result = lg.compact(0, HOUR).result(5)
    # [1 kept] [2 kept] [1 kept] [4]: the first three fit in one segment; the last stays as it was.
    assert segment_names(memfs) == [f"{b:020d}.log" for b in (0, 12, 16)]
    assert result.files_rewritten == 1 and result.segments_after == 2
    assert state(lg) == _expected(items)
    again = lg.compact(0, HOUR).result(5)
    assert again.files_rewritten == 0  # nothing left to do
    assert segment_names(memfs.crash()) == segment_names(memfs)
    assert state(logs.open(fs=memfs.crash())) == _expected(items)


def test_nothing_to_compact_with_only_the_active_segment(logs: Logs, memfs: MemFS) -> None:
    lg = logs.open(fs=memfs)
    _write(lg, [(b"k", b"v", 0), (b"k", b"w", 0)])
    result = lg.compact(0, 0).result(5)
    assert result.segments_before == 0 and result.files_rewritten == 0
    assert len(entries(lg)) == 2


def test_appends_go_on_while_compaction_runs(logs: Logs, memfs: MemFS) -> None:
    lg = logs.open(fs=memfs, segment_bytes=20 * SIZE, linger_ms=0)
    items = [(b"k%d" % (i % 7), b"v%02d" % (i % 100), 0) for i in range(300)]
    _write(lg, items[:150])
    stop = threading.Event()

    def appender() -> None:
        for key, value, ts in items[150:]:
            lg.append([(key, value)], timestamp_ms=ts).result(5)
        stop.set()

    t = threading.Thread(target=appender)
    t.start()
    rounds = 0
    while not stop.is_set() or rounds < 2:
        lg.compact(0, HOUR).result(5)
        rounds += 1
    t.join(10)
    assert state(lg) == _expected(items)
    lg.compact(0, HOUR).result(5)
    assert state(lg) == _expected(items)
    assert state(logs.reopen(lg, memfs)) == _expected(items)


def test_replay_started_before_compaction_sees_the_original_entries(logs: Logs, memfs: MemFS) -> None:
    lg = logs.open(fs=memfs, segment_bytes=2 * SIZE)
    items = [(b"k0", b"v%02d" % i, 0) for i in range(7)]
    _write(lg, items)
    it = lg.replay()
    first = next(it)
    lg.compact(0, HOUR).result(5)
    assert [first.value] + [e.value for e in it] == [v for _, v, _ in items]
    assert [e.value for e in lg.replay()] == [b"v06"]


def test_an_io_error_stops_compaction_and_the_log_stays_consistent(logs: Logs) -> None:
    fs = FaultFS(MemFS())
    lg = logs.open(DIR, fs=fs, segment_bytes=4 * SIZE)
    items = _history()
    _write(lg, items)
    fs.fail_op("rename", times=1)
    with pytest.raises(StorageError):
        lg.compact(0, HOUR).result(5)
    assert not [n for n in fs.inner.listdir(DIR) if n.endswith(".tmp")]
    assert state(lg) == _expected(items)
    lg.compact(0, HOUR).result(5)
    assert state(lg) == _expected(items)
    assert state(logs.reopen(lg, fs)) == _expected(items)


def _compaction_fixture(
    history: list[tuple[bytes, bytes | None, int]], crash_after: int | None
) -> tuple[MemFS, int]:
    """A log of `history`, compacted until the process dies after `crash_after` mutating operations."""
    mem = MemFS()
    fs = FaultFS(mem)
    lg = Log.open(DIR, fs=fs, segment_bytes=4 * SIZE)
    _write(lg, history)
    start = len(fs.events)
    if crash_after is not None:
        fs.crash_after_ops(crash_after)
    try:
        lg.compact(now_ms=11 * HOUR, delete_retention_ms=2 * HOUR).result(5)
    except StorageError:
        pass
    finally:
        lg.close()
    return mem, len(fs.events) - start


@pytest.mark.parametrize(
    ("history", "merges"), [(_history(), True), (_separated_history(), False)], ids=["mixed", "separated"]
)
def test_a_crash_at_any_step_of_compaction_leaves_a_consistent_log(
    logs: Logs, history: list[tuple[bytes, bytes | None, int]], merges: bool
) -> None:
    expected = _expected(history)
    young_tombstones = [(k, v) for k, v, ts in history if v is None and ts >= 9 * HOUR]
    _, steps = _compaction_fixture(history, None)
    assert steps >= 6
    leftovers = temps = 0
    for allowed in range(steps + 1):
        mem, _ = _compaction_fixture(history, allowed)
        for view in (mem, mem.crash()):  # the process died / the power was cut
            lg = logs.open(DIR, fs=view, segment_bytes=4 * SIZE)
            assert lg.recovery.clean, allowed
            leftovers += bool(lg.recovery.removed_leftovers)
            temps += bool(lg.recovery.removed_temp_files)
            assert state(lg) == expected, allowed
            # Recent tombstones are still there to delete what a lagging reader may hold.
            assert all(t in pairs(lg) for t in young_tombstones)
            lg.compact(now_ms=11 * HOUR, delete_retention_ms=2 * HOUR).result(5)
            assert state(lg) == expected, allowed
            lg.close()
            assert state(logs.open(DIR, fs=view)) == expected
    assert temps  # the repairs were exercised
    assert bool(leftovers) == merges


def test_compaction_copies_entries_larger_than_its_copy_buffer(logs: Logs, memfs: MemFS) -> None:
    import os

    big = os.urandom(5 * 1024 * 1024)  # more than the 4 MiB copy chunk
    lg = logs.open(fs=memfs, segment_bytes=6 * 1024 * 1024)
    items: list[tuple[bytes, bytes | None, int]] = [(b"x", b"1", 0), (b"big", big, 0), (b"x", b"2", 0)]
    items += [(b"filler", b"f" * 2 * 1024 * 1024, 0), (b"x", b"3", 0)]  # rolls: [x1 big x2] [filler x3]
    _write(lg, items)
    assert len(segment_names(memfs)) == 2
    result = lg.compact(0, HOUR).result(5)
    assert result.files_rewritten == 1 and result.entries_after == 1
    assert state(lg) == _expected(items)
    assert state(logs.reopen(lg, memfs)) == _expected(items)
