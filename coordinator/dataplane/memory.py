"""In-memory partitions of the embedded data plane (a data plane without a data directory: tests, demos)."""

from __future__ import annotations

import bisect
import itertools

from .batches import NO_TIMESTAMP, read_header, record_timestamps, with_base_offset


class PartitionLog:
    """One partition's record batches, in memory.

    Offsets are contiguous: each appended batch starts at the current log end offset and advances it by the
    batch's record count. Batches are kept whole, so reads return whole batches starting at the one that holds
    the requested offset. A running maximum of batch max timestamps makes the timestamp lookup a binary
    search.
    """

    def __init__(self) -> None:
        self._batches: list[bytes] = []
        self._base_offsets: list[int] = []
        self._max_timestamps: list[int] = []  # per batch
        self._running_max: list[int] = []  # max of _max_timestamps[:i + 1], non-decreasing
        self.log_start_offset = 0
        self.high_watermark = 0  # == log end offset: a single replica commits on append
        self.version = 0  # bumped on every append

    @property
    def log_end_offset(self) -> int:
        return self.high_watermark

    @property
    def size_in_bytes(self) -> int:
        return sum(len(b) for b in self._batches)

    def append(self, batch: bytes, max_timestamp: int | None = None) -> int:
        """Append one validated batch, assigning its base offset; returns that offset.

        `max_timestamp` is the largest record timestamp when the caller has read the records; otherwise the
        header's maxTimestamp is used.
        """
        header = read_header(batch)
        base_offset = self.high_watermark
        if max_timestamp is None:
            max_timestamp = header.max_timestamp
        self._batches.append(with_base_offset(batch, base_offset))
        self._base_offsets.append(base_offset)
        self._max_timestamps.append(max_timestamp)
        previous = self._running_max[-1] if self._running_max else NO_TIMESTAMP
        self._running_max.append(max(previous, max_timestamp))
        self.high_watermark = base_offset + header.last_offset_delta + 1
        self.version += 1
        return base_offset

    def read(self, offset: int, max_bytes: int, min_one: bool = False) -> bytes:
        """Whole batches from the one holding `offset`, at most `max_bytes` in total; with `min_one`, the
        first batch is returned even when it alone is larger (KIP-74), so a consumer always makes progress."""
        if not self.log_start_offset <= offset < self.high_watermark:
            return b""
        index = bisect.bisect_right(self._base_offsets, offset) - 1
        chunks: list[bytes] = []
        size = 0
        for batch in itertools.islice(self._batches, index, None):
            if size + len(batch) > max_bytes and not (min_one and not chunks):
                break
            chunks.append(batch)
            size += len(batch)
        return b"".join(chunks)

    def offset_for_timestamp(self, target: int) -> tuple[int, int] | None:
        """(timestamp, offset) of the first record whose timestamp is at least `target`, or None.

        For batches whose records cannot be decoded here (snappy, lz4, zstd) the answer is the batch's first
        offset with its max timestamp: batch granularity.
        """
        index = bisect.bisect_left(self._running_max, target)
        if index == len(self._batches):
            return None
        return self._first_record_at_least(index, target)

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        """(timestamp, offset) of the first record with the largest timestamp, or None for an empty log."""
        if not self._batches:
            return None
        largest = self._running_max[-1]
        index = bisect.bisect_left(self._running_max, largest)
        return self._first_record_at_least(index, largest)

    def _first_record_at_least(self, index: int, target: int) -> tuple[int, int]:
        records = record_timestamps(self._batches[index])
        if records is not None:
            for offset, timestamp in records:
                if timestamp >= target:
                    return timestamp, offset
        return self._max_timestamps[index], self._base_offsets[index]
