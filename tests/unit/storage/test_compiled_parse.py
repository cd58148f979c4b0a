"""The compiled inner loop of storage.format.parse (storage._speedups) against the pure-Python one.

Every other storage test runs with both loops (conftest.parse_loop); these compare them directly, entry for
entry and stop for stop, on logs damaged at random.
"""

from __future__ import annotations

import os

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import storage.format
from storage.fakefs import MemFS
from storage.format import Stop, encode_into

PATH = "/segment"


@pytest.fixture(autouse=True)
def parse_loop() -> str:
    """(conftest's runs every test with each loop; these call both themselves)"""
    return "both"


def _run(
    loop: object, data: bytes, prev_seq: int, verify: bool, emit: bool, chunk: int
) -> tuple[object, ...]:
    fs = MemFS()
    fs.write_bytes(PATH, data)
    f = fs.open_read(PATH)
    stop = Stop()
    progress: list[tuple[int, int]] = []
    try:
        entries = list(loop(f, len(data), prev_seq, stop, lambda *a: progress.append(a), chunk, emit, verify))  # type: ignore[operator]
        error = None
    except storage.format.StorageFormatError as exc:
        entries, error = [], str(exc)
    finally:
        f.close()
    return entries, stop.valid_end, stop.reason, stop.last_seq, stop.entries, progress, error


entry_st = st.tuples(st.binary(max_size=40), st.one_of(st.none(), st.binary(max_size=200)))


@settings(max_examples=300, deadline=None)
@given(
    items=st.lists(entry_st, max_size=30),
    first_seq=st.sampled_from([0, 5, 2**63 - 3, 2**64 - 40]),
    damage=st.lists(st.tuples(st.integers(min_value=0), st.integers(min_value=0, max_value=255)), max_size=3),
    cut=st.one_of(st.none(), st.integers(min_value=0)),
    prev_seq=st.sampled_from([-1, 0, 3, 7]),
    verify=st.booleans(),
    emit=st.booleans(),
    chunk=st.sampled_from([1, 31, 64, 4096]),
)
def test_both_loops_read_any_log_alike(
    items: list[tuple[bytes, bytes | None]],
    first_seq: int,
    damage: list[tuple[int, int]],
    cut: int | None,
    prev_seq: int,
    verify: bool,
    emit: bool,
    chunk: int,
) -> None:
    if storage.format._speedups is None:
        pytest.fail("storage._speedups is not built")
    parts: list[bytes] = []
    encode_into(parts, items, first_seq, -(2**40))
    data = bytearray(b"".join(parts))
    for offset, byte in damage:
        if data:
            data[offset % len(data)] = byte
    if cut is not None and data:
        data = data[: cut % (len(data) + 1)]
    args = (bytes(data), prev_seq, verify, emit, chunk)
    assert _run(storage.format._parse_compiled, *args) == _run(storage.format._parse_python, *args)


def test_a_newer_format_version_is_refused_alike() -> None:
    parts: list[bytes] = []
    encode_into(parts, [(b"k", b"v"), (b"k2", b"v2")], 0, 0)
    body = bytearray(parts[3])
    body[0] = 2  # the version byte of the second entry, with its CRC made good again
    parts[2] = storage.format.LEN_CRC.pack(len(body), crc32c.crc32c(bytes(body)))
    parts[3] = bytes(body)
    data = b"".join(parts)
    compiled = _run(storage.format._parse_compiled, data, -1, True, True, 4096)
    assert compiled == _run(storage.format._parse_python, data, -1, True, True, 4096)
    assert "format version 2" in str(compiled[-1])


@pytest.mark.parametrize("size", [0, 1, 7, 8, 9, 63, 64, 1000, 100_003])
def test_the_compiled_checksum_is_crc32c(size: int) -> None:
    if storage.format._speedups is None:
        pytest.fail("storage._speedups is not built")
    data = os.urandom(size)
    assert storage.format._speedups.checksum(data) == crc32c.crc32c(data)
