"""The on-disk format of storage.Log: entry framing, encoding and parsing, segment names, and the errors.

The format and the theory of operation are described once, at the top of storage/log.py; this module is the
part of it that the log, its compaction and the tools share.
"""

from __future__ import annotations

import errno
import re
import struct
from collections.abc import Callable, Iterator, Sequence
from typing import NamedTuple

import crc32c as _crc32c

from storage.fs import File

FORMAT_VERSION = 1
FLAG_TOMBSTONE = 0x01

FRAME = struct.Struct("<IIBBIQq")  # length, crc, version, flags, key_len, seq, timestamp
FRAME_SIZE = FRAME.size  # 30
PREFIX = 8  # length + crc
HEADER = struct.Struct("<BBIQq")  # what the CRC covers before the key
HEADER_SIZE = HEADER.size  # 22
LEN_CRC = struct.Struct("<II")
MAX_LENGTH = 0xFFFFFFFF

DEFAULT_SEGMENT_BYTES = 100 * 1024 * 1024
DEFAULT_MAX_BATCH_BYTES = 16 * 1024 * 1024
READ_CHUNK = 8 * 1024 * 1024
EMIT_CHUNK = 1024 * 1024  # the compiled loop's chunk when it builds entries (parse)
COPY_CHUNK = 4 * 1024 * 1024

LOCK_FILE = "LOCK"  # held (flock) by the open Log
CLEAN_FILE = "clean-shutdown"  # what a clean close left (Log.close); the next open trusts it if it still fits
SEGMENT_SUFFIX = ".log"
SEGMENT_RE = re.compile(r"^(\d{20})\.log$")

checksum = _crc32c.crc32c

try:  # the compiled inner loop of parse (storage/_speedups.c); optional, parse has its own
    import storage._speedups as _speedups
except ImportError:  # pragma: no cover - built wherever the install had a C compiler
    _speedups = None  # type: ignore[assignment]

#: progress(bytes_done, bytes_total, entries_so_far), for open() and replay().
ProgressFn = Callable[[int, int, int], None]

# Why reading stopped early (Truncation.reason).
INCOMPLETE = "incomplete entry"
CHECKSUM = "checksum mismatch"
BAD_HEADER = "invalid header"


# ------------------------------------------------------------------------------------------------------------
# Errors


class StorageError(Exception):
    """A storage operation failed: `op` names the step (write, fsync, roll, ...), `errno` the OS error."""

    def __init__(self, message: str, *, op: str = "", code: int | None = None) -> None:
        super().__init__(message)
        self.op = op
        self.errno = code


class StorageFullError(StorageError):
    """No space left (ENOSPC, EDQUOT)."""


class StorageIOError(StorageError):
    """Any other I/O error (EIO, ...)."""


class StorageClosedError(StorageError):
    """The log is closed."""


class StorageCorruptError(StorageError):
    """Corruption found where it cannot be repaired by truncating (after open, in a closed segment)."""


class StorageFormatError(StorageError):
    """An entry was written by a newer format version than this code reads."""


def os_error(op: str, exc: OSError) -> StorageError:
    cls = StorageFullError if exc.errno in (errno.ENOSPC, errno.EDQUOT) else StorageIOError
    err = cls(f"{op} failed: {exc}", op=op, code=exc.errno)
    err.__cause__ = exc
    return err


# ------------------------------------------------------------------------------------------------------------
# Public value types


class Entry(NamedTuple):
    """One entry as replayed. `value` None is a tombstone."""

    seq: int
    key: bytes
    value: bytes | None
    timestamp_ms: int


# ------------------------------------------------------------------------------------------------------------
# Encoding and parsing


def encode_entry(seq: int, key: bytes, value: bytes | None, timestamp_ms: int) -> bytes:
    """One framed entry, as the writer puts it on disk (for tests and tools)."""
    out: list[bytes] = []
    encode_into(out, [(key, value)], seq, timestamp_ms)
    return b"".join(out)


def encode_into(out: list[bytes], items: Sequence[tuple[bytes, bytes | None]], seq: int, ts: int) -> int:
    """Append the framed entries to `out`; return the next sequence number."""
    pack_header = HEADER.pack
    pack_prefix = LEN_CRC.pack
    crc = checksum
    for key, value in items:
        if value is None:
            body = pack_header(FORMAT_VERSION, FLAG_TOMBSTONE, len(key), seq, ts) + key
        else:
            body = pack_header(FORMAT_VERSION, 0, len(key), seq, ts) + key + value
        out.append(pack_prefix(len(body), crc(body)))
        out.append(body)
        seq += 1
    return seq


def entry_size(key: bytes, value: bytes | None) -> int:
    return FRAME_SIZE + len(key) + (0 if value is None else len(value))


class Stop:
    """How a pass over one segment ended."""

    __slots__ = ("valid_end", "reason", "last_seq", "entries")

    def __init__(self) -> None:
        self.valid_end = 0
        self.reason: str | None = None
        self.last_seq = -1
        self.entries = 0

    def end(self, valid_end: int, reason: str | None, last_seq: int, entries: int) -> None:
        self.valid_end = valid_end
        self.reason = reason
        self.last_seq = last_seq
        self.entries = entries


def parse(
    f: File,
    limit: int,
    prev_seq: int,
    stop: Stop,
    progress: Callable[[int, int], None] | None = None,
    chunk: int = READ_CHUNK,
    emit: bool = True,
    verify: bool = True,
) -> Iterator[Entry]:
    """Yield the valid entries in the first `limit` bytes of `f`; sequence numbers must exceed `prev_seq`.

    Stops at the end of `limit` or at the first short or corrupt entry; `stop` then tells where and why.
    `progress(bytes_parsed, entries_parsed)` is called after each chunk is read. With `emit` False it only
    checks (recovery), yielding nothing. With `verify` False it skips the CRCs, for bytes already checked
    (replay: see `Log.replay`); the framing and header checks stay. Raises StorageFormatError for an intact
    entry of a newer version.

    This loop is the replay hot path: the sizes are literals (FRAME_SIZE 30, 8 bytes of length and CRC, 22
    bytes of header) and the checks are few, because every bytecode counts a million times over. Where the
    compiled module storage._speedups is built, `_parse_compiled` runs its inner loop in C instead.
    """
    if _speedups is not None:
        # Entries are built a chunk at a time: 1 MiB of them (~10,000) rather than 8 keeps the garbage of a
        # load small (measured: 8 bytes less resident memory per loaded offset, no slower).
        read = min(chunk, EMIT_CHUNK) if emit else chunk
        return _parse_compiled(f, limit, prev_seq, stop, progress, read, emit, verify)
    return _parse_python(f, limit, prev_seq, stop, progress, chunk, emit, verify)


_STOPS = (None, BAD_HEADER, CHECKSUM)  # storage._speedups.scan's stop codes 0-2 (3: a newer format version)


def _parse_compiled(
    f: File,
    limit: int,
    prev_seq: int,
    stop: Stop,
    progress: Callable[[int, int], None] | None,
    chunk: int,
    emit: bool,
    verify: bool,
) -> Iterator[Entry]:
    """`parse` with storage._speedups.scan doing each chunk's entries: the same steps, the same outcome."""
    scan = _speedups.scan
    buf = b""
    pos = 0  # in buf
    base = 0  # file offset of buf[0]
    last = prev_seq
    count = 0
    reason = None
    length = 0
    while True:
        entries, pos, last, scanned, code, length = scan(buf, pos, last, verify, emit, Entry)
        count += scanned
        if entries:
            yield from entries
        if code:
            if code == 3:
                raise _newer_format(base + pos, buf[pos + 8])
            reason = _STOPS[code]
            break
        more, reason = _refill(f, buf, pos, base, length, limit, chunk)
        if more is None:
            break
        buf, base, pos = more, base + pos, 0
        if progress is not None:
            progress(base, count)
    stop.end(base + pos, reason, last, count)


def _parse_python(
    f: File,
    limit: int,
    prev_seq: int,
    stop: Stop,
    progress: Callable[[int, int], None] | None,
    chunk: int,
    emit: bool,
    verify: bool,
) -> Iterator[Entry]:
    """`parse`'s own loop (see there)."""
    unpack = FRAME.unpack_from
    crc = checksum
    new = tuple.__new__
    entry_cls = Entry
    buf = b""
    pos = 0  # in buf
    base = 0  # file offset of buf[0]
    last = prev_seq
    count = 0
    reason = None
    length = 0
    while True:
        n = len(buf)
        while pos + 30 <= n:
            length, c, ver, flags, klen, seq, ts = unpack(buf, pos)
            if length < 22:
                reason = BAD_HEADER
                break
            end = pos + 8 + length
            if end > n:
                break
            if verify and crc(buf[pos + 8 : end]) != c:  # for small entries, copying beats a memoryview
                reason = CHECKSUM
                break
            if (
                ver != FORMAT_VERSION
                or flags > 1
                or klen > length - 22
                or seq <= last
                or (flags and klen != length - 22)
            ):
                if ver > FORMAT_VERSION and verify:  # unchecked, it may as well be damage
                    raise _newer_format(base + pos, ver)
                reason = BAD_HEADER
                break
            if emit:
                ks = pos + 30
                ke = ks + klen
                yield new(entry_cls, (seq, buf[ks:ke], None if flags else buf[ke:end], ts))
            last = seq
            count += 1
            pos = end
        if reason is not None:
            break
        more, reason = _refill(f, buf, pos, base, length, limit, chunk)
        if more is None:
            break
        buf, base, pos = more, base + pos, 0
        if progress is not None:
            progress(base, count)
    stop.end(base + pos, reason, last, count)


def _newer_format(offset: int, version: int) -> StorageFormatError:
    return StorageFormatError(
        f"entry at offset {offset} has format version {version}; this code reads up to {FORMAT_VERSION} "
        "(written by a newer release?)",
        op="read",
    )


def _refill(
    f: File, buf: bytes, pos: int, base: int, length: int, limit: int, chunk: int
) -> tuple[bytes | None, str | None]:
    """Once the complete entries of `buf` (file offset `base`) up to `pos` are parsed: the unparsed rest with the
    next chunk of the file after it, or None and why parsing stops there (None: the end of `limit`). `length`
    is the length field of the entry at `pos` when a whole header of it is in `buf`."""
    n = len(buf)
    done = base + pos
    avail = n - pos
    need = 8 + length if avail >= 30 else 30
    if done + need > limit:
        return None, (INCOMPLETE if done < limit else None)
    read_from = base + n
    data = f.read_at(read_from, min(max(chunk, need - avail), limit - read_from))
    if not data:
        return None, INCOMPLETE  # the file is shorter than we were told
    return buf[pos:] + data, None


def reporter(progress: ProgressFn, done: int, total: int, entries: int) -> Callable[[int, int], None]:
    """Turn parse's per-segment progress into the caller's whole-log progress."""
    return lambda consumed, count: progress(done + consumed, total, entries + count)


def segment_name(base: int) -> str:
    return f"{base:020d}{SEGMENT_SUFFIX}"


class Segment:
    __slots__ = ("base", "name", "path", "size", "checked")

    def __init__(self, base: int, name: str, path: str, size: int, checked: bool = True) -> None:
        self.base = base
        self.name = name
        self.path = path
        self.size = size  # durable bytes
        # Its CRCs were checked (by recovery, or as it was written or compacted); False: a segment of a cleanly
        # closed log that open trusted, whose CRCs replay checks on its first pass.
        self.checked = checked

    def __repr__(self) -> str:
        return f"Segment({self.name}, {self.size})"
