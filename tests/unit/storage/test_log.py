"""Round trips, segments, and recovery from torn and corrupt files."""

from __future__ import annotations

import errno
import itertools
import os
import struct

import pytest

from storage import (
    Entry,
    Log,
    OsFS,
    StorageClosedError,
    StorageCorruptError,
    StorageError,
    StorageFormatError,
)
from storage.fakefs import FaultFS, MemFS
from storage.format import BAD_HEADER, CHECKSUM, CLEAN_FILE, FRAME_SIZE, INCOMPLETE, encode_entry
from tests.unit.storage.support import DIR, Logs, entries, kv, pairs, seg_path, segment_names, state

ZERO = "00000000000000000000.log"


def test_round_trip_on_real_files(logs: Logs, tmp_path: os.PathLike[str]) -> None:
    d = os.path.join(str(tmp_path), "log")
    lg = logs.open(d, fs=OsFS(), wall_ms=lambda: 1234)
    written = [(b"a", b"1"), (b"b", None), (b"", b""), (b"c" * 1000, b"v" * 100_000), (b"a", b"2")]
    assert lg.append(written[:2]).result(5) == 1
    assert lg.append(written[2:]).result(5) == 4
    assert entries(lg) == [Entry(i, k, v, 1234) for i, (k, v) in enumerate(written)]
    lg.close()
    assert sorted(os.listdir(d)) == [ZERO, "LOCK", CLEAN_FILE]

    again = logs.open(d, fs=OsFS())
    assert again.recovery.clean and again.recovery.entries == 5 and again.recovery.truncation is None
    assert again.recovery.clean_shutdown
    assert sorted(os.listdir(d)) == [ZERO, "LOCK"]  # used once
    assert pairs(again) == written
    assert state(again) == {b"a": b"2", b"": b"", b"c" * 1000: b"v" * 100_000}
    assert again.append([(b"d", b"4")]).result(5) == 5  # sequence numbers go on
    assert again.stats().next_seq == 6


def test_round_trip_entry_larger_than_a_read_chunk(logs: Logs, memfs: MemFS) -> None:
    lg = logs.open(fs=memfs)
    big = os.urandom(9 * 1024 * 1024)  # the reader grows its buffer past its 8 MiB chunk
    lg.append([(b"small", b"1"), (b"big", big), (b"after", b"2")]).result(5)
    lg = logs.reopen(lg, memfs)
    assert pairs(lg) == [(b"small", b"1"), (b"big", big), (b"after", b"2")]


def test_append_timestamps_are_stored(logs: Logs, memfs: MemFS) -> None:
    clock = [1000]
    lg = logs.open(fs=memfs, wall_ms=lambda: clock[0])
    lg.append([kv(1)]).result(5)
    clock[0] = 2000
    lg.append([kv(2)], timestamp_ms=77).result(5)
    lg.append([kv(3)]).result(5)
    assert [e.timestamp_ms for e in entries(lg)] == [1000, 77, 2000]


def test_append_validates_its_arguments(logs: Logs, memfs: MemFS) -> None:
    lg = logs.open(fs=memfs)
    with pytest.raises(ValueError):
        lg.append([])
    with pytest.raises(TypeError):
        lg.append([("str-key", b"v")])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        lg.append([(b"k", "str-value")])  # type: ignore[list-item]
    key, value = bytearray(b"k"), bytearray(b"v")
    fut = lg.append([(key, value)])  # type: ignore[list-item]
    key[0] = value[0] = ord("x")  # copied at append: later changes do not leak in
    fut.result(5)
    assert pairs(lg) == [(b"k", b"v")]


def test_close_flushes_and_refuses_more(logs: Logs, memfs: MemFS) -> None:
    lg = logs.open(fs=memfs)
    futures = [lg.append([kv(i)]) for i in range(50)]
    lg.close()
    assert [f.result(0) for f in futures] == list(range(50))
    lg.close()  # idempotent
    with pytest.raises(StorageClosedError):
        lg.append([kv(1)])
    with pytest.raises(StorageClosedError):
        next(lg.replay())
    with pytest.raises(StorageClosedError):
        lg.compact(0, 0)
    assert len(pairs(logs.open(fs=memfs))) == 50


def test_segments_roll_and_are_named_by_their_first_sequence_number(logs: Logs, memfs: MemFS) -> None:
    size = len(encode_entry(0, *kv(0), 0))
    lg = logs.open(fs=memfs, segment_bytes=3 * size)
    for i in range(10):
        lg.append([kv(i)]).result(5)
    assert segment_names(memfs) == [f"{b:020d}.log" for b in (0, 3, 6, 9)]
    assert lg.stats().segments == 4 and lg.stats().total_bytes == 10 * size
    # One append is never split across segments, even when it is larger than a segment.
    lg.append([kv(i) for i in range(10, 17)]).result(5)
    assert segment_names(memfs)[-1] == f"{10:020d}.log"
    assert memfs.size(seg_path(segment_names(memfs)[-1])) == 7 * size
    lg = logs.reopen(lg, memfs, segment_bytes=3 * size)
    assert [e.seq for e in lg.replay()] == list(range(17))
    assert pairs(lg) == [kv(i) for i in range(17)]
    lg.append([kv(17)]).result(5)
    assert segment_names(memfs)[-1] == f"{17:020d}.log"


def test_new_segment_names_are_durable_before_anything_is_acknowledged(logs: Logs, memfs: MemFS) -> None:
    size = len(encode_entry(0, *kv(0), 0))
    lg = logs.open(fs=memfs, segment_bytes=2 * size)
    for i in range(7):
        lg.append([kv(i)]).result(5)
    after_power_cut = memfs.crash()
    assert pairs(logs.open(fs=after_power_cut)) == [kv(i) for i in range(7)]


def _fixture_log(memfs: MemFS, n: int, **kwargs: object) -> tuple[list[tuple[bytes, bytes]], list[int]]:
    """Write n entries; return them and each one's end offset within its segment. The log is left as a crash
    leaves it (no clean-shutdown file), so that the next open scans it."""
    lg = Log.open(DIR, fs=memfs, **kwargs)  # type: ignore[arg-type]
    written = [kv(i) for i in range(n)]
    for item in written:
        lg.append([item]).result(5)
    lg.close()
    memfs.remove(seg_path(CLEAN_FILE))
    ends, offset = [], 0
    for item in written:
        offset += len(encode_entry(0, *item, 0))
        ends.append(offset)
    return written, ends


def test_torn_tail_at_every_byte_of_the_last_entry(logs: Logs, memfs: MemFS) -> None:
    written, ends = _fixture_log(memfs, 5)
    full = memfs.read_bytes(seg_path(ZERO))
    start = ends[-2]
    for cut in range(start, ends[-1]):
        fs = MemFS()
        fs.makedirs(DIR)
        fs.write_bytes(seg_path(ZERO), full[:cut])
        lg = logs.open(fs=fs)
        assert pairs(lg) == written[:-1], cut
        rec = lg.recovery
        if cut == start:
            assert rec.clean  # a clean end: nothing to cut
        else:
            assert rec.truncation is not None
            assert (rec.truncation.segment, rec.truncation.offset, rec.truncation.bytes) == (
                ZERO,
                start,
                cut - start,
            )
            assert rec.truncation.reason == INCOMPLETE
        assert fs.size(seg_path(ZERO)) == start
        assert fs.crash().read_bytes(seg_path(ZERO)) == full[:start]  # the truncation was fsynced
        # The log goes on where the valid prefix ends.
        assert lg.append([(b"new", b"entry")]).result(5) == 4
        lg.close()
        assert pairs(logs.open(fs=fs)) == written[:-1] + [(b"new", b"entry")]


def test_torn_tail_on_real_files(logs: Logs, tmp_path: os.PathLike[str]) -> None:
    d = os.path.join(str(tmp_path), "log")
    lg = logs.open(d, fs=OsFS())
    written = [kv(i) for i in range(3)]
    lg.append(written).result(5)
    lg.close()
    path = os.path.join(d, ZERO)
    with open(path, "ab") as f:
        f.write(encode_entry(3, b"torn", b"entry", 0)[:-3])
    lg = logs.open(d, fs=OsFS())
    assert pairs(lg) == written
    assert lg.recovery.truncation is not None and lg.recovery.truncation.bytes == FRAME_SIZE + 9 - 3
    assert os.path.getsize(path) == lg.recovery.bytes


def _flip(fs: MemFS, path: str, offset: int) -> None:
    data = bytearray(fs.read_bytes(path))
    data[offset] ^= 0x10
    fs.write_bytes(path, bytes(data))


def test_bit_flip_in_the_last_entry(logs: Logs, memfs: MemFS) -> None:
    written, ends = _fixture_log(memfs, 5)
    _flip(memfs, seg_path(ZERO), ends[-1] - 1)
    lg = logs.open(fs=memfs)
    assert pairs(lg) == written[:-1]
    assert lg.recovery.truncation is not None
    assert lg.recovery.truncation.reason == CHECKSUM
    assert lg.recovery.truncation.offset == ends[-2]


def test_bit_flip_in_a_middle_entry_keeps_the_prefix(logs: Logs, memfs: MemFS) -> None:
    written, ends = _fixture_log(memfs, 6)
    _flip(memfs, seg_path(ZERO), ends[2] + FRAME_SIZE + 2)  # inside the key of entry 3
    lg = logs.open(fs=memfs)
    assert pairs(lg) == written[:3]
    assert lg.recovery.truncation is not None
    assert lg.recovery.truncation.bytes == ends[-1] - ends[2]
    assert lg.append([(b"x", b"y")]).result(5) == 3


def test_bit_flip_in_a_length_field(logs: Logs, memfs: MemFS) -> None:
    written, ends = _fixture_log(memfs, 4)
    _flip(memfs, seg_path(ZERO), ends[1] + 3)  # the length's high byte: far past the end of the file
    lg = logs.open(fs=memfs)
    assert pairs(lg) == written[:2]
    assert lg.recovery.truncation is not None and lg.recovery.truncation.reason == INCOMPLETE


def _three_segments(memfs: MemFS) -> tuple[list[tuple[bytes, bytes]], int, list[str]]:
    size = len(encode_entry(0, *kv(0), 0))
    written, _ = _fixture_log(memfs, 9, segment_bytes=3 * size)
    names = segment_names(memfs)
    assert len(names) == 3
    return written, size, names


def test_corruption_in_a_middle_segment_loses_everything_after_it(logs: Logs, memfs: MemFS) -> None:
    written, size, names = _three_segments(memfs)
    _flip(memfs, seg_path(names[1]), size + FRAME_SIZE + 1)  # the second entry of the middle segment
    lg = logs.open(fs=memfs, segment_bytes=3 * size)
    rec = lg.recovery
    assert pairs(lg) == written[:4]
    assert rec.truncation is not None
    assert (rec.truncation.segment, rec.truncation.offset, rec.truncation.reason) == (
        names[1],
        size,
        CHECKSUM,
    )
    assert rec.lost_segments == (names[2],) and rec.lost_bytes == 3 * size
    assert not rec.clean
    assert segment_names(memfs) == names[:2]
    assert segment_names(memfs.crash()) == names[:2]  # the removal is durable
    # Appends go on after the valid prefix, in the truncated segment.
    assert lg.append([(b"next", b"1")]).result(5) == 4
    lg = logs.reopen(lg, memfs, segment_bytes=3 * size)
    assert pairs(lg) == written[:4] + [(b"next", b"1")]
    assert lg.recovery.clean


def test_truncated_middle_segment(logs: Logs, memfs: MemFS) -> None:
    written, size, names = _three_segments(memfs)
    path = seg_path(names[1])
    memfs.write_bytes(path, memfs.read_bytes(path)[: 2 * size - 5])
    lg = logs.open(fs=memfs)
    assert pairs(lg) == written[:4]
    assert lg.recovery.truncation is not None and lg.recovery.truncation.reason == INCOMPLETE
    assert lg.recovery.lost_segments == (names[2],)


def test_an_empty_middle_segment_is_fine(logs: Logs, memfs: MemFS) -> None:
    written, size, names = _three_segments(memfs)
    memfs.write_bytes(seg_path(names[1]), b"")
    lg = logs.open(fs=memfs)
    # Sequence numbers may skip (as after compaction); nothing is lost past the empty file.
    assert pairs(lg) == written[:3] + written[6:]
    assert lg.recovery.clean


def test_out_of_order_sequence_numbers_are_corruption(logs: Logs, memfs: MemFS) -> None:
    data = encode_entry(5, b"a", b"1", 0) + encode_entry(5, b"b", b"2", 0) + encode_entry(6, b"c", b"3", 0)
    memfs.write_bytes(seg_path(ZERO), data)
    lg = logs.open(fs=memfs)
    assert pairs(lg) == [(b"a", b"1")]
    assert lg.recovery.truncation is not None and lg.recovery.truncation.reason == BAD_HEADER
    assert lg.append([kv(0)]).result(5) == 6


def test_intact_entry_with_bad_header_is_corruption(logs: Logs, memfs: MemFS) -> None:
    import crc32c

    body = struct.pack("<BBIQq", 1, 0x80, 1, 1, 0) + b"kv"  # an unknown flag bit, with a good CRC
    bad = struct.pack("<II", len(body), crc32c.crc32c(body)) + body
    memfs.write_bytes(seg_path(ZERO), encode_entry(0, b"a", b"1", 0) + bad)
    lg = logs.open(fs=memfs)
    assert pairs(lg) == [(b"a", b"1")]
    assert lg.recovery.truncation is not None and lg.recovery.truncation.reason == BAD_HEADER


def test_newer_format_version_refuses_to_open_and_destroys_nothing(logs: Logs, memfs: MemFS) -> None:
    import crc32c

    body = struct.pack("<BBIQq", 2, 0, 1, 1, 0) + b"kv"
    newer = struct.pack("<II", len(body), crc32c.crc32c(body)) + body
    data = encode_entry(0, b"a", b"1", 0) + newer
    memfs.write_bytes(seg_path(ZERO), data)
    with pytest.raises(StorageFormatError):
        Log.open(DIR, fs=memfs)
    assert memfs.read_bytes(seg_path(ZERO)) == data


def test_open_removes_temp_files_and_leaves_unknown_files_alone(logs: Logs, memfs: MemFS) -> None:
    written, _ = _fixture_log(memfs, 2)
    memfs.write_bytes(seg_path(ZERO + ".tmp"), b"half-written compaction output")
    memfs.write_bytes(seg_path("README"), b"not ours")
    lg = logs.open(fs=memfs)
    assert lg.recovery.removed_temp_files == (ZERO + ".tmp",)
    assert lg.recovery.clean
    assert sorted(memfs.listdir(DIR)) == [ZERO, "LOCK", "README"]
    assert pairs(lg) == written


def test_open_creates_the_directory_and_a_first_segment(logs: Logs) -> None:
    fs = FaultFS(MemFS())
    lg = logs.open("/new/dir", fs=fs)
    assert fs.inner.listdir("/new/dir") == [ZERO, "LOCK"]
    assert ZERO in fs.inner.crash().listdir("/new/dir")  # type: ignore[attr-defined]
    assert lg.recovery == lg.recovery.__class__(segments=1, entries=0, bytes=0)
    assert list(lg.replay()) == []


def test_progress_is_reported_for_open_and_replay(logs: Logs, memfs: MemFS) -> None:
    size = len(encode_entry(0, *kv(0), 0))
    _fixture_log(memfs, 20, segment_bytes=5 * size)
    seen: list[tuple[int, int, int]] = []
    lg = logs.open(fs=memfs, progress=lambda *a: seen.append(a))
    assert seen[-1] == (20 * size, 20 * size, 20)
    seen.clear()
    assert len(list(lg.replay(progress=lambda *a: seen.append(a)))) == 20
    assert seen[-1] == (20 * size, 20 * size, 20)
    assert [s[0] for s in seen] == sorted(s[0] for s in seen)
    assert [s[2] for s in seen] == sorted(s[2] for s in seen)


def _count_checksums(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A list that grows by one per CRC computed, in the Python loop (the compiled one computes its own)."""
    import storage.format

    checked: list[int] = []
    real_crc = storage.format.checksum
    monkeypatch.setattr(storage.format, "checksum", lambda data: checked.append(1) or real_crc(data))
    monkeypatch.setattr(storage.format, "_speedups", None)
    return checked


def test_entries_are_crc_checked_once_by_open_not_again_by_replay(
    logs: Logs, memfs: MemFS, monkeypatch: pytest.MonkeyPatch
) -> None:
    size = len(encode_entry(0, *kv(0), 0))
    written, _ = _fixture_log(memfs, 6, segment_bytes=3 * size)
    checked = _count_checksums(monkeypatch)
    lg = logs.open(fs=memfs, segment_bytes=3 * size)
    assert len(checked) == 6
    lg.append([kv(6)]).result(5)
    assert pairs(lg) == written + [kv(6)]  # recovered entries and appended ones alike
    assert len(checked) == 6 + 1  # the append's own CRC; replay computed none


def test_replay_still_refuses_a_segment_whose_headers_changed_after_open(logs: Logs, memfs: MemFS) -> None:
    written, ends = _fixture_log(memfs, 4)
    lg = logs.open(fs=memfs)
    data = bytearray(memfs.read_bytes(seg_path(ZERO)))
    data[ends[1] + 8] = 9  # the format version of the third entry
    memfs.write_bytes(seg_path(ZERO), bytes(data))
    replay = lg.replay()
    assert [(e.key, e.value) for e in itertools.islice(replay, 2)] == written[:2]
    with pytest.raises(StorageCorruptError, match="changed after open"):
        next(replay)


def test_replay_is_a_snapshot_when_iteration_starts(logs: Logs, memfs: MemFS) -> None:
    lg = logs.open(fs=memfs, segment_bytes=200)
    for i in range(5):
        lg.append([kv(i)]).result(5)
    it = lg.replay()
    first = next(it)
    for i in range(5, 10):
        lg.append([kv(i)]).result(5)
    assert [first.key] + [e.key for e in it] == [kv(i)[0] for i in range(5)]
    assert len(entries(lg)) == 10


def test_replay_closes_its_files_when_abandoned(logs: Logs, tmp_path: os.PathLike[str]) -> None:
    d = os.path.join(str(tmp_path), "log")
    lg = logs.open(d, fs=OsFS(), segment_bytes=100)
    for i in range(5):
        lg.append([kv(i)]).result(5)
    before = len(os.listdir("/proc/self/fd"))
    it = lg.replay()
    next(it)
    it.close()
    assert len(os.listdir("/proc/self/fd")) == before


def test_cancelled_appends_are_not_written(logs: Logs) -> None:
    fs = FaultFS()
    lg = logs.open(DIR, fs=fs, linger_ms=0)
    fs.hang_fsyncs()
    first = lg.append([kv(0)])
    assert fs.wait_until_hung(5)
    cancelled = lg.append([kv(1)])
    kept = lg.append([kv(2)])
    assert cancelled.cancel()
    fs.release_fsyncs()
    assert first.result(5) == 0 and kept.result(5) == 1
    assert pairs(lg) == [kv(0), kv(2)]


def test_stats(logs: Logs, memfs: MemFS) -> None:
    lg = logs.open(fs=memfs)
    lg.append([kv(0), kv(1)]).result(5)
    lg.append([kv(2)]).result(5)
    s = lg.stats()
    assert (s.segments, s.entries, s.entries_appended, s.appends, s.next_seq) == (1, 3, 3, 2, 3)
    assert s.total_bytes == memfs.size(seg_path(ZERO))
    lg = logs.reopen(lg, memfs)
    assert lg.stats().entries == 3 and lg.stats().entries_appended == 0


def test_a_new_log_directory_is_made_durable(logs: Logs) -> None:
    fs = FaultFS(MemFS())
    fs.makedirs("/data")
    logs.open("/data/a/b", fs=fs)
    dir_syncs = [path for op, path, _ in fs.events if op == "fsync_dir"]
    assert dir_syncs[:2] == ["/data", "/data/a"]  # each new directory's entry in its parent
    assert "/data/a/b" in dir_syncs  # and the first segment's entry


@pytest.mark.parametrize("kind", ["os", "mem"])
def test_a_directory_is_open_in_one_log_at_a_time(logs: Logs, tmp_path: os.PathLike[str], kind: str) -> None:
    fs = OsFS() if kind == "os" else MemFS()
    d = os.path.join(str(tmp_path), "log") if kind == "os" else DIR
    lg = logs.open(d, fs=fs)
    with pytest.raises(StorageError, match="in use"):
        Log.open(d, fs=fs)
    lg.close()
    logs.open(d, fs=fs).append([kv(0)]).result(5)


# -- clean shutdown ------------------------------------------------------------------------------------------


def test_a_cleanly_closed_log_is_not_scanned_by_open_and_checked_once_by_replay(
    logs: Logs, memfs: MemFS, monkeypatch: pytest.MonkeyPatch
) -> None:
    size = len(encode_entry(0, *kv(0), 0))
    lg = logs.open(fs=memfs, segment_bytes=3 * size)
    written = [kv(i) for i in range(7)]
    for item in written:
        lg.append([item]).result(5)
    lg.close()
    checked = _count_checksums(monkeypatch)
    lg = logs.open(fs=memfs, segment_bytes=3 * size)
    assert lg.recovery.clean_shutdown and lg.recovery.clean
    assert (lg.recovery.segments, lg.recovery.entries) == (3, 7)
    assert checked == []  # open read nothing
    assert CLEAN_FILE not in memfs.listdir(DIR)  # used once
    assert pairs(lg) == written
    assert len(checked) == 7  # the first replay checked every entry
    assert lg.append([kv(7)]).result(5) == 7  # the sequence goes on where it was
    assert pairs(lg) == written + [kv(7)]
    assert len(checked) == 7 + 1  # the append's own CRC; the second replay computed none
    assert lg.stats().entries == 8


def test_a_clean_shutdown_file_that_no_longer_fits_means_a_full_scan(logs: Logs, memfs: MemFS) -> None:
    lg = logs.open(fs=memfs)
    written = [kv(i) for i in range(4)]
    lg.append(written).result(5)
    lg.close()
    # Appended after the close (a torn write of a later run that died before it could close): sizes differ.
    memfs.write_bytes(seg_path(ZERO), memfs.read_bytes(seg_path(ZERO)) + b"\x07torn")
    lg = logs.open(fs=memfs)
    assert not lg.recovery.clean_shutdown
    assert lg.recovery.truncation is not None and lg.recovery.truncation.bytes == 5
    assert pairs(lg) == written
    lg.close()
    # A foreign or torn clean-shutdown file is ignored too.
    for junk in (b"", b"{", b'{"format": 1}', b'{"format": 1, "next_seq": 0, "entries": 0, "segments": []}'):
        memfs.write_bytes(seg_path(CLEAN_FILE), junk)
        lg = logs.open(fs=memfs)
        assert not lg.recovery.clean_shutdown, junk
        assert pairs(lg) == written
        lg.close()


def test_a_crash_after_a_clean_open_is_recovered_by_a_scan(logs: Logs, memfs: MemFS) -> None:
    lg = logs.open(fs=memfs)
    lg.append([kv(0), kv(1)]).result(5)
    lg.close()
    lg = logs.open(fs=memfs)
    assert lg.recovery.clean_shutdown
    lg.append([kv(2)]).result(5)
    after = memfs.crash()  # the file's removal was not made durable: it is back, but the segment grew
    assert CLEAN_FILE in after.listdir(DIR)
    again = logs.open(fs=after)
    assert not again.recovery.clean_shutdown
    assert pairs(again) == [kv(0), kv(1), kv(2)]


def test_damage_after_a_clean_shutdown_is_found_by_the_first_replay_and_cut_by_the_next_open(
    logs: Logs, memfs: MemFS
) -> None:
    lg = logs.open(fs=memfs)
    written = [kv(i) for i in range(5)]
    for item in written:
        lg.append([item]).result(5)
    lg.close()
    ends = list(itertools.accumulate(len(encode_entry(0, *item, 0)) for item in written))
    _flip(memfs, seg_path(ZERO), ends[2] + FRAME_SIZE + 2)  # inside the key of entry 3: same size
    lg = logs.open(fs=memfs)
    assert lg.recovery.clean_shutdown
    replay = lg.replay()
    assert [(e.key, e.value) for e in itertools.islice(replay, 3)] == written[:3]
    with pytest.raises(StorageCorruptError, match=f"checksum mismatch at offset {ends[2]}"):
        next(replay)
    assert CLEAN_FILE not in memfs.crash().listdir(DIR)  # not even a power cut brings it back now
    lg = logs.reopen(lg, memfs)
    assert not lg.recovery.clean_shutdown
    assert lg.recovery.truncation is not None and lg.recovery.truncation.reason == CHECKSUM
    assert pairs(lg) == written[:3]


def test_a_log_closed_with_a_failed_truncation_pending_writes_no_clean_shutdown_file(logs: Logs) -> None:
    fs = FaultFS(MemFS())
    lg = logs.open(fs=fs)
    lg.append([kv(0)]).result(5)
    fs.fail_writes(errno.EIO, keep_bytes=7, times=1)  # a torn write...
    fs.fail_op("truncate", errno.EIO, times=1)  # ...that cannot be cut off
    with pytest.raises(StorageError):
        lg.append([kv(1)]).result(5)
    lg.close()
    assert CLEAN_FILE not in fs.inner.listdir(DIR)
    again = logs.open(fs=fs)
    assert not again.recovery.clean_shutdown
    assert again.recovery.truncation is not None and again.recovery.truncation.bytes == 7
    assert pairs(again) == [kv(0)]
