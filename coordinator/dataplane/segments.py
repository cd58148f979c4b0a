"""Segment files of one partition: the sparse index, recovery at open, and reads through the index.

A partition directory holds segment files ``<base offset, 20 digits>.log``. A segment is Kafka RecordBatch v2
bytes back to back, exactly as Fetch returns them (the producer's bytes with the server-assigned baseOffset),
with no header or trailer of its own. Offsets are contiguous: each batch starts where the previous one ended,
and a segment's first batch starts at the offset in its name (an empty segment's name is the next offset to
assign).

Index. Nothing but the segment files is on disk; `Segment` keeps a sparse index rebuilt when the partition is
opened, the way Kafka's ``.index`` / ``.timeindex`` files are laid out: an entry every `INDEX_INTERVAL_BYTES`
bytes (and one for the first batch), holding the batch's base offset, its file position and the largest batch
max timestamp of everything *before* it in the segment. A lookup bisects to the entry at or below the wanted
offset (or below the wanted timestamp) and walks batch headers from there, at most ~4 KiB plus one batch. The
segment also keeps its largest timestamp and the first batch holding it, for ListOffsets MAX_TIMESTAMP and for
time retention. Timestamps are the batch headers' maxTimestamp (what the producer computed over its records).

Recovery. `recover_partition` reads every segment once, checking each batch's framing (a whole 61-byte header,
batchLength large enough, magic 2, the batch inside the file), its CRC-32C and that its baseOffset is the next
offset. Reading stops at the first bad or short batch; that segment is truncated there and every later segment
removed (later ones first, each removal made durable), because a log with a hole would serve offsets that
never existed. A non-empty segment whose name is not the next offset is treated as corrupt from its first byte
(an empty one is a leftover of a failed roll and just removed). Since a segment is fsynced before the next one
is created, only the last segment can have a torn tail after a crash; damage anywhere else is media
corruption, handled the same way (and logged as an error).

Threads. The event loop owns the `Segment` objects (it appends index entries and changes `size`). Readers in
worker threads work from a `SegmentView` taken on the loop: the segment with the byte limit visible at that
moment, so bytes appended later are never read half-written. A segment's read handle is closed when it is
retired (retention, topic deletion, shutdown) and no reader holds a reference (`refs`, changed on the loop
only).
"""

from __future__ import annotations

import bisect
import dataclasses
import logging
import os
import re
import struct
from array import array

from crc32c import crc32c

from storage.fs import FS, File

from .batches import (
    ATTRIBUTES_OFFSET,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    read_header,
    record_timestamps,
)

log = logging.getLogger(__name__)

SEGMENT_SUFFIX = ".log"
SEGMENT_RE = re.compile(r"^(\d{20})\.log$")
INDEX_INTERVAL_BYTES = 4096  # Kafka's log.index.interval.bytes default
_INT64_MIN = -(2**63)
_SCAN_CHUNK = 64 * 1024  # header walks read this much at once
_RECOVERY_CHUNK = 8 * 1024 * 1024
_LENGTH = struct.Struct(">i")
_MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD  # 49


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}{SEGMENT_SUFFIX}"


class SegmentShrank(OSError):
    """A segment returned fewer bytes than the index says it holds (changed behind our back)."""


class Segment:
    """One segment file: its visible size, sparse index and timestamp facts; see the module docstring."""

    __slots__ = (
        "base_offset",
        "path",
        "file",
        "size",
        "end_offset",
        "batches",
        "idx_offsets",
        "idx_positions",
        "idx_timestamps",
        "_last_indexed",
        "max_timestamp",
        "max_timestamp_offset",
        "max_timestamp_position",
        "refs",
        "retired",
    )

    def __init__(self, base_offset: int, path: str, file: File | None = None) -> None:
        self.base_offset = base_offset
        self.path = path
        self.file = file  # read handle
        self.size = 0  # bytes of whole batches, all visible to readers
        self.end_offset = base_offset  # next offset after the last batch
        self.batches = 0
        self.idx_offsets = array("q")
        self.idx_positions = array("q")
        self.idx_timestamps = array("q")  # largest max timestamp of the batches before the entry
        self._last_indexed = -INDEX_INTERVAL_BYTES
        self.max_timestamp = _INT64_MIN
        self.max_timestamp_offset = -1
        self.max_timestamp_position = -1
        self.refs = 0
        self.retired = False

    def add_batch(
        self, base_offset: int, last_offset: int, position: int, size: int, max_timestamp: int
    ) -> None:
        if position - self._last_indexed >= INDEX_INTERVAL_BYTES:
            self.idx_offsets.append(base_offset)
            self.idx_positions.append(position)
            self.idx_timestamps.append(self.max_timestamp)
            self._last_indexed = position
        if max_timestamp > self.max_timestamp:
            self.max_timestamp = max_timestamp
            self.max_timestamp_offset = base_offset
            self.max_timestamp_position = position
        self.size = position + size
        self.end_offset = last_offset + 1
        self.batches += 1

    def floor_position(self, offset: int) -> int:
        """File position of the index entry at or below `offset` (0 for an empty index)."""
        i = bisect.bisect_right(self.idx_offsets, offset) - 1
        return self.idx_positions[i] if i >= 0 else 0

    def retire(self) -> None:
        """No longer part of the log: close the read handle now, or when the last reader lets go."""
        self.retired = True
        self.close_if_unused()

    def close_if_unused(self) -> None:
        if self.retired and self.refs <= 0 and self.file is not None:
            file, self.file = self.file, None
            file.close()

    def __repr__(self) -> str:
        return f"Segment({self.base_offset}, size={self.size}, batches={self.batches})"


@dataclasses.dataclass(frozen=True, slots=True)
class SegmentView:
    """A segment as of one moment on the event loop, for reading in another thread."""

    segment: Segment
    file: File
    limit: int  # bytes visible when the view was taken
    max_timestamp: int
    max_timestamp_offset: int
    max_timestamp_position: int
    batches: int

    @classmethod
    def of(cls, seg: Segment) -> SegmentView:
        assert seg.file is not None
        return cls(
            seg,
            seg.file,
            seg.size,
            seg.max_timestamp,
            seg.max_timestamp_offset,
            seg.max_timestamp_position,
            seg.batches,
        )


# ------------------------------------------------------------------------------------------------------------
# Reading


class _Window:
    """Reads small pieces (batch headers) of a file through one cached chunk."""

    __slots__ = ("_file", "_limit", "_start", "_data")

    def __init__(self, file: File, limit: int) -> None:
        self._file = file
        self._limit = limit
        self._start = 0
        self._data = b""

    def get(self, position: int, size: int) -> bytes | memoryview:
        start = self._start
        if start <= position and position + size <= start + len(self._data):
            return memoryview(self._data)[position - start : position - start + size]
        want = min(max(size, _SCAN_CHUNK), self._limit - position)
        data = self._file.read_at(position, want)
        if len(data) < size:
            raise SegmentShrank(f"short read at position {position}: {len(data)} of {size} bytes")
        self._start, self._data = position, data
        return memoryview(data)[:size]


def _batches_from(window: _Window, position: int, limit: int):  # type: ignore[no-untyped-def]
    """(position, header) of each batch from `position` up to `limit`."""
    while position + HEADER_SIZE <= limit:
        header = read_header(window.get(position, HEADER_SIZE))
        yield position, header
        position += header.size


def locate(view: SegmentView, offset: int) -> int | None:
    """File position of the batch holding `offset` (or the first batch after it), or None when the segment's
    visible part has none."""
    seg = view.segment
    i = bisect.bisect_right(seg.idx_offsets, offset) - 1
    position = seg.idx_positions[i] if i >= 0 else 0
    for pos, header in _batches_from(_Window(view.file, view.limit), position, view.limit):
        if header.last_offset >= offset:
            return pos
    return None


def read_whole_batches(file: File, position: int, limit: int, max_bytes: int, min_one: bool) -> bytes:
    """Whole batches from `position` (a batch start), at most `max_bytes` in total; with `min_one` the first
    batch even when it alone is larger."""
    if position + HEADER_SIZE > limit:
        return b""
    if max_bytes < limit - position:
        (first_length,) = _LENGTH.unpack(file.read_at(position + 8, 4))
        first = first_length + LOG_OVERHEAD
        if first > max_bytes:
            if not min_one:
                return b""
            max_bytes = first
    want = min(max_bytes, limit - position)
    data = file.read_at(position, want)
    if len(data) < want:
        raise SegmentShrank(f"short read at position {position}: {len(data)} of {want} bytes")
    end = 0
    unpack = _LENGTH.unpack_from
    total = len(data)
    while end + LOG_OVERHEAD <= total:
        size = unpack(data, end + 8)[0] + LOG_OVERHEAD
        if end + size > total:
            break
        end += size
    return data if end == total else data[:end]


def read_views(views: list[SegmentView], offset: int, max_bytes: int, min_one: bool) -> bytes:
    """Whole batches from the one holding `offset`, across segments, at most `max_bytes` (see
    `read_whole_batches` for `min_one`)."""
    chunks: list[bytes] = []
    total = 0
    located = False
    for view in views:
        if not located:
            position = locate(view, offset)
            if position is None:
                continue
            located = True
        else:
            position = 0
        data = read_whole_batches(view.file, position, view.limit, max_bytes - total, min_one and not chunks)
        if data:
            chunks.append(data)
            total += len(data)
        if position + len(data) < view.limit or total >= max_bytes:
            break
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _first_record_at_least(
    file: File, position: int, header_max: int, base_offset: int, size: int, target: int
) -> tuple[int, int]:
    batch = file.read_at(position, size)
    if len(batch) < size:
        raise SegmentShrank(f"short read at position {position}")
    records = record_timestamps(batch)
    if records is not None:
        for record_offset, timestamp in records:
            if timestamp >= target:
                return timestamp, record_offset
    return header_max, base_offset


def offset_for_timestamp(views: list[SegmentView], target: int) -> tuple[int, int] | None:
    """(timestamp, offset) of the first record whose timestamp is at least `target`, or None; batch
    granularity for codecs that cannot be decoded here."""
    for view in views:
        if not view.batches or view.max_timestamp < target:
            continue
        seg = view.segment
        i = max(bisect.bisect_left(seg.idx_timestamps, target) - 1, 0)
        if i >= len(seg.idx_positions):
            continue
        start = seg.idx_positions[i]
        for position, header in _batches_from(_Window(view.file, view.limit), start, view.limit):
            if header.max_timestamp >= target:
                return _first_record_at_least(
                    view.file, position, header.max_timestamp, header.base_offset, header.size, target
                )
    return None


def max_timestamp_offset(views: list[SegmentView]) -> tuple[int, int] | None:
    """(timestamp, offset) of the first record with the largest timestamp, or None for an empty log."""
    best: SegmentView | None = None
    for view in views:
        if view.batches and (best is None or view.max_timestamp > best.max_timestamp):
            best = view
    if best is None:
        return None
    position = best.max_timestamp_position
    header = read_header(_Window(best.file, best.limit).get(position, HEADER_SIZE))
    return _first_record_at_least(
        best.file, position, best.max_timestamp, best.max_timestamp_offset, header.size, best.max_timestamp
    )


# ------------------------------------------------------------------------------------------------------------
# Recovery


@dataclasses.dataclass(frozen=True, slots=True)
class Truncation:
    """Where recovery stopped reading a partition, and what it cut."""

    segment: str
    position: int  # end of the valid prefix in that segment
    bytes: int  # bytes cut off that segment
    reason: str
    removed_segments: tuple[str, ...] = ()
    removed_bytes: int = 0


@dataclasses.dataclass(slots=True)
class Recovered:
    segments: list[Segment]  # read handles open
    next_offset: int
    truncation: Truncation | None


def _scan(fs: FS, seg: Segment, file_size: int) -> str | None:
    """Index every valid batch of a segment file into `seg`; returns why reading stopped early, or None."""
    f = fs.open_read(seg.path)
    try:
        buf: bytes = b""
        buf_start = 0
        position = 0
        expected = seg.base_offset
        while position < file_size:
            if file_size - position < HEADER_SIZE:
                return "incomplete batch header"
            if position + HEADER_SIZE > buf_start + len(buf):
                buf = f.read_at(position, min(_RECOVERY_CHUNK, file_size - position))
                buf_start = position
                if len(buf) < HEADER_SIZE:
                    return "incomplete batch header"
            header = HEADER.unpack_from(buf, position - buf_start)
            base_offset, batch_length, _, magic, crc, _, last_offset_delta = header[:7]
            max_timestamp = header[8]
            if batch_length < _MIN_BATCH_LENGTH or magic != MAGIC or last_offset_delta < 0:
                return "invalid batch header"
            size = batch_length + LOG_OVERHEAD
            if position + size > file_size:
                return "incomplete batch"
            if base_offset != expected:
                return f"batch base offset {base_offset} where {expected} was expected"
            if position + size > buf_start + len(buf):
                buf = f.read_at(position, min(max(_RECOVERY_CHUNK, size), file_size - position))
                buf_start = position
                if len(buf) < size:
                    return "incomplete batch"
            rel = position - buf_start
            if crc32c(memoryview(buf)[rel + ATTRIBUTES_OFFSET : rel + size]) != crc:
                return "checksum mismatch"
            seg.add_batch(base_offset, base_offset + last_offset_delta, position, size, max_timestamp)
            expected = base_offset + last_offset_delta + 1
            position += size
        return None
    finally:
        f.close()


def recover_partition(fs: FS, directory: str) -> Recovered:
    """Open a partition directory: index every segment, cut a bad tail, open read handles (blocking I/O)."""
    found = sorted((int(m.group(1)), name) for name in fs.listdir(directory) if (m := SEGMENT_RE.match(name)))
    segments: list[Segment] = []
    truncation: Truncation | None = None
    dir_dirty = False
    expected: int | None = None
    for i, (base, name) in enumerate(found):
        path = os.path.join(directory, name)
        size = fs.size(path)
        seg = Segment(base, path)
        if size == 0 and expected is not None and base != expected:
            # An empty file a failed roll left behind (its name is an offset that went to an earlier segment).
            log.info("partition %s: removing stray empty segment %s", directory, name)
            fs.remove(path)
            dir_dirty = True
            continue
        if expected is not None and base != expected:
            reason: str | None = f"segment starts at offset {base} where {expected} was expected"
            valid = 0
        else:
            reason = _scan(fs, seg, size)
            valid = seg.size
        last = i == len(found) - 1
        if reason is None:
            if seg.batches == 0 and not last:
                fs.remove(path)  # an empty segment followed by others adds nothing
                dir_dirty = True
                continue
            segments.append(seg)
            expected = seg.end_offset
            continue
        # Cut here. Later segments go first, durably: a crash before the cut then finds the same damage.
        later = found[i + 1 :]
        removed_bytes = 0
        for _, later_name in later:
            later_path = os.path.join(directory, later_name)
            removed_bytes += fs.size(later_path)
            fs.remove(later_path)
        if later or dir_dirty:
            fs.fsync_dir(directory)
            dir_dirty = False
        if expected is not None and base != expected:
            fs.remove(path)
            fs.fsync_dir(directory)
            removed = (name,) + tuple(n for _, n in later)
            truncation = Truncation(name, 0, size, reason, removed, removed_bytes + size)
        else:
            f = fs.open_append(path)
            try:
                f.truncate(valid)
                f.fsync()
            finally:
                f.close()
            segments.append(seg)
            truncation = Truncation(
                name, valid, size - valid, reason, tuple(n for _, n in later), removed_bytes
            )
        level = logging.WARNING if last else logging.ERROR
        log.log(
            level,
            "partition %s: %s in %s at position %d; cut %d bytes there%s",
            directory,
            reason,
            name,
            truncation.position,
            truncation.bytes,
            f" and removed later segments {list(truncation.removed_segments)}" if later else "",
        )
        break
    if not segments:
        base = expected if expected is not None else (found[0][0] if found else 0)
        path = os.path.join(directory, segment_name(base))
        fs.open_append(path).close()
        segments.append(Segment(base, path))
        dir_dirty = True
    if dir_dirty:
        fs.fsync_dir(directory)
    try:
        for seg in segments:
            seg.file = fs.open_read(seg.path)
    except BaseException:
        for seg in segments:
            if seg.file is not None:
                seg.file.close()
        raise
    return Recovered(segments, segments[-1].end_offset, truncation)
