"""Hypothesis properties: compaction preserves the key -> value map; garbage never crashes replay."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage import Log, StorageFormatError
from storage.fakefs import MemFS
from storage.format import encode_entry
from tests.unit.storage.support import DIR, pairs, seg_path, state

ZERO = "00000000000000000000.log"
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

keys = st.sampled_from([b"a", b"b", b"c", b"d", b"e", b""])
values = st.one_of(st.none(), st.binary(max_size=12))
ops = st.lists(st.tuples(keys, values, st.integers(0, 10)), min_size=1, max_size=60)


def _expected(history: list[tuple[bytes, bytes | None, int]]) -> dict[bytes, bytes]:
    result: dict[bytes, bytes] = {}
    for key, value, _ in history:
        if value is None:
            result.pop(key, None)
        else:
            result[key] = value
    return result


@SETTINGS
@given(
    history=ops,
    batch=st.integers(1, 4),
    segment_bytes=st.integers(40, 300),
    compact_every=st.integers(1, 30),
    now=st.integers(0, 12),
    retention=st.integers(0, 12),
)
def test_compaction_preserves_the_final_map(
    history: list[tuple[bytes, bytes | None, int]],
    batch: int,
    segment_bytes: int,
    compact_every: int,
    now: int,
    retention: int,
) -> None:
    fs = MemFS()
    lg = Log.open(DIR, fs=fs, segment_bytes=segment_bytes)
    try:
        for start in range(0, len(history), batch):
            chunk = history[start : start + batch]
            for key, value, ts in chunk:
                lg.append([(key, value)], timestamp_ms=ts).result(5)
            if (start // batch) % compact_every == compact_every - 1:
                lg.compact(now, retention).result(5)
        before = list(lg.replay())
        lg.compact(now, retention).result(5)
        after = list(lg.replay())
        assert state(lg) == _expected(history)
        # What is left is a subsequence of what was there.
        seqs = [e.seq for e in after]
        assert seqs == sorted(set(seqs))
        assert set(after) <= set(before)
        # A tombstone that ends its key's history and is younger than the retention is still there.
        last: dict[bytes, tuple[bytes | None, int]] = {k: (v, ts) for k, v, ts in history}
        for key, (value, ts) in last.items():
            if value is None and now - ts < retention:
                assert any(e.key == key and e.value is None for e in after), key
    finally:
        lg.close()
    reopened = Log.open(DIR, fs=fs, segment_bytes=segment_bytes)
    try:
        assert reopened.recovery.clean
        assert state(reopened) == _expected(history)
    finally:
        reopened.close()


def _open_bytes(data: bytes) -> tuple[MemFS, list[tuple[bytes, bytes | None]] | None]:
    fs = MemFS()
    fs.makedirs(DIR)
    fs.write_bytes(seg_path(ZERO), data)
    try:
        lg = Log.open(DIR, fs=fs)
    except StorageFormatError:
        return fs, None
    try:
        assert fs.size(seg_path(ZERO)) == lg.recovery.bytes
        return fs, pairs(lg)
    finally:
        lg.close()


def _reparses_identically(fs: MemFS, got: list[tuple[bytes, bytes | None]]) -> None:
    lg = Log.open(DIR, fs=fs)
    try:
        assert lg.recovery.clean
        assert pairs(lg) == got
    finally:
        lg.close()


@SETTINGS
@given(st.binary(max_size=600))
def test_any_bytes_as_a_segment_never_crash_replay(data: bytes) -> None:
    fs, got = _open_bytes(data)
    if got is not None:
        _reparses_identically(fs, got)


valid_entries = st.lists(st.tuples(st.binary(max_size=10), values), max_size=8)


def _encode(items: list[tuple[bytes, bytes | None]]) -> bytes:
    return b"".join(encode_entry(seq, key, value, 1000 + seq) for seq, (key, value) in enumerate(items))


@SETTINGS
@given(valid_entries, st.binary(max_size=200))
def test_valid_entries_followed_by_garbage_replay_as_the_valid_prefix(
    items: list[tuple[bytes, bytes | None]], garbage: bytes
) -> None:
    fs, got = _open_bytes(_encode(items) + garbage)
    if got is not None:
        assert got[: len(items)] == items
        _reparses_identically(fs, got)


@SETTINGS
@given(valid_entries.filter(bool), st.data())
def test_a_damaged_log_replays_a_prefix_of_what_was_written(
    items: list[tuple[bytes, bytes | None]], data: st.DataObject
) -> None:
    raw = bytearray(_encode(items))
    damage = data.draw(st.sampled_from(["flip", "cut", "overwrite"]))
    at = data.draw(st.integers(0, len(raw) - 1))
    if damage == "flip":
        raw[at] ^= 1 << data.draw(st.integers(0, 7))
    elif damage == "cut":
        del raw[at:]
    else:
        patch = data.draw(st.binary(min_size=1, max_size=16))
        raw[at : at + len(patch)] = patch
    fs, got = _open_bytes(bytes(raw))
    assert got is not None
    assert got == items[: len(got)]
    _reparses_identically(fs, got)
