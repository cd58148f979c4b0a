"""An append-only, CRC-checked, segmented log of key/value entries: group-commit fsync, compaction, replay.

Format (version 1)
==================

A log is a directory of segment files ``<base>.log``, where ``<base>`` is the sequence number of the segment's
first entry (or a lower bound of it), zero-padded to 20 digits so that names sort in log order. A segment is a
run of entries, nothing else (no file header). Each entry, all integers little-endian::

    offset  size  field
    0       4     length     uint32: bytes after the CRC field (30 - 8 + key_len + value_len)
    4       4     crc        CRC32C (Castagnoli) of those `length` bytes: version .. value
    8       1     version    format version of this entry: 1
    9       1     flags      bit 0: tombstone (the value is None and empty); other bits must be 0
    10      4     key_len    uint32
    14      8     seq        uint64 sequence number, strictly increasing through the whole log
    22      8     timestamp  int64 wall-clock milliseconds at append; tombstone retention is measured from it
    30      k     key
    30+k    v     value      the rest of the entry

Sequence numbers increase by one per acknowledged entry; compaction removes entries, so replay may skip
numbers. The Log that has the directory open holds a lock (flock) on the file ``LOCK`` in it, so that no
second Log can open it. Files ending in ``.tmp`` are compaction output that was never renamed into place;
`Log.open` removes them.

Migration
=========

Every entry carries its own version byte, so one log may hold entries of several versions and an upgrade never
has to rewrite a file: the writer always writes `FORMAT_VERSION`, readers accept it and the version before it,
and compaction, which rewrites closed segments, carries old entries forward byte for byte. To change the
format: bump `FORMAT_VERSION`, keep a decoder for the previous version next to the new one (the framing —
length, CRC, version byte — must not change, so any reader can find entry boundaries and check them), and drop
the decoder for version N-1 in the release after (a log with such entries must first be opened, and compacted,
by a release that knows both). An entry whose CRC is good but whose version is newer than this code knows
makes `Log.open` raise `StorageFormatError` instead of truncating: a downgrade must never destroy data.

Theory of operation
===================

This module is our own because no library does this job for bytes in Python: the crc32c package supplies the
checksum, the rest is here. It knows bytes, not groups: the coordinator decides what keys and values mean.

Recovery. `Log.open` reads every segment once, checking each entry's framing, CRC and sequence number. Reading
stops at the first short or corrupt entry. If that is in the last segment (a torn tail from a crash
mid-write), the file is truncated there; if it is in an earlier segment, that segment is truncated there and
every later segment is removed, because a log with a hole in it would replay a state that never existed.
Either way the valid prefix is kept, and `Log.recovery` says what was cut (`Truncation`). A segment whose name
is not beyond the last sequence number already read is the leftover of a compaction merge that crashed before
removing its inputs (their entries are in the merged file), and is removed too.

Clean shutdown. `Log.close` writes the file ``clean-shutdown``: every segment's name and size, the entry count
and the next sequence number. If `open` finds it and the directory holds exactly those segments at exactly
those sizes, nothing can have been torn or left over (the log only ever appends, and a compaction that ran
since changes the names or sizes), so it skips the scan; the CRCs of those segments are checked by the first
replay instead, in the same pass that reads them (one pass where there were two). `open` removes the file, so
a log that is not closed cleanly again is scanned in full next time. This is Kafka's clean-shutdown file and
recovery point, for a log that fsyncs every append. A checksum that fails in that first replay (the disk
changed the bytes since the clean close) raises StorageCorruptError; reopening the log then scans it and cuts
it at the damage, as a crash's recovery would.

Appends and group commit. `Log.append` queues entries and returns a `concurrent.futures.Future` at once; a
single writer thread does all writes. When it is idle, a lone append is written and fsynced at once. Appends
that arrive while a flush is in progress queue up; the next flush takes all of them (after waiting at most
`linger_ms` from the arrival of the oldest, to gather more), writes them as one write and fsyncs once. Each
future completes with the sequence number of its last entry only after that fsync. If the write or the fsync
fails (ENOSPC, EIO), every future of the batch fails with a `StorageError`, and the segment is truncated back
to its last durable size (and that truncation fsynced) before anything else is written, so a torn or
unacknowledged entry is never followed by an acknowledged one; if that truncation fails too, the log keeps
retrying it before each later flush, which fails until it succeeds. A fsync that hangs holds its batch's
futures pending; later appends queue behind it. The active segment is rolled when the next batch would take it
past `segment_bytes`; the new file's name is made durable (directory fsync) before anything is written to it.

Compaction. `Log.compact` runs in a background thread over the closed segments (never the active one) while
appends go on. It keeps, per key, only the entry with the highest sequence number in the log (looking into the
active segment's durable part too), and drops that entry as well if it is a tombstone older than the
retention. Consecutive closed segments are merged while the result fits in `segment_bytes`. Each group of
segments is written to ``<first>.log.tmp``, fsynced, renamed over the group's first segment and the directory
fsynced, then the group's other segments are removed, in order, each removal made durable before the next.
Groups are rewritten oldest first, so a crash at any step leaves a log that replays to the same key -> last
value map (an entry is dropped only once every older entry for its key already is).

Replay. `Log.replay` yields every durable entry in order from a snapshot taken when iteration starts: it opens
all segment files at once, so a concurrent compaction that renames or removes them does not disturb it.
Segments are read in large chunks and parsed with struct; the progress callback gets (bytes_done, bytes_total,
entries). Replay trusts the CRCs that were checked: by recovery, as this Log wrote the bytes, or as compaction
copied them from checked entries, so checking them again would only double the cost of loading (it still checks
the framing and the headers, and raises StorageCorruptError if a file no longer parses). The segments of a
cleanly closed log, which open did not read, are checked on their first replay. Where the compiled module
storage._speedups is built (storage/_speedups.c, by an install with a C compiler), its loop parses the
entries; the pure-Python loop beside it does the same, and the tests run both.
"""

from __future__ import annotations

import concurrent.futures
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from storage.format import (
    CHECKSUM,
    CLEAN_FILE,
    COPY_CHUNK,
    DEFAULT_MAX_BATCH_BYTES,
    DEFAULT_SEGMENT_BYTES,
    FORMAT_VERSION,
    FRAME_SIZE,
    LOCK_FILE,
    MAX_LENGTH,
    PREFIX,
    SEGMENT_RE,
    Entry,
    ProgressFn,
    Segment,
    Stop,
    StorageClosedError,
    StorageCorruptError,
    StorageError,
    StorageIOError,
    encode_into,
    entry_size,
    os_error,
    parse,
    reporter,
    segment_name,
)
from storage.fs import FS, TEMP_SUFFIX, File, Lock, OsFS

__all__ = ["CompactionResult", "Log", "LogStats", "Recovery", "Truncation"]

log = logging.getLogger(__name__)

SettledFn = Callable[[list[Any]], None]  # the flushed appends' futures (or tickets: append_settled)


@dataclass(frozen=True)
class Truncation:
    """Where reading stopped early on open, and what was cut off there."""

    segment: str  # file name
    offset: int  # end of the valid prefix in that segment
    bytes: int  # bytes cut off that segment
    reason: str  # INCOMPLETE, CHECKSUM or BAD_HEADER


@dataclass(frozen=True)
class Recovery:
    """What `Log.open` found and repaired."""

    segments: int  # segments kept
    entries: int  # valid entries
    bytes: int  # valid bytes
    truncation: Truncation | None = None
    lost_segments: tuple[str, ...] = ()  # removed because an earlier segment is corrupt
    lost_bytes: int = 0  # bytes in those
    removed_leftovers: tuple[str, ...] = ()  # inputs of an interrupted compaction merge
    removed_temp_files: tuple[str, ...] = ()
    # The log was closed cleanly and is still as it was left: nothing was scanned (the first replay checks it).
    clean_shutdown: bool = False

    @property
    def clean(self) -> bool:
        """Nothing was cut off (removing compaction leftovers loses nothing)."""
        return self.truncation is None and not self.lost_segments


@dataclass(frozen=True)
class CompactionResult:
    segments_before: int  # closed segments looked at
    segments_after: int
    bytes_before: int
    bytes_after: int
    entries_before: int
    entries_after: int
    tombstones_dropped: int
    files_rewritten: int
    aborted: bool = False  # stopped early because the log is closing


@dataclass(frozen=True)
class LogStats:
    segments: int
    total_bytes: int  # durable bytes in all segments
    entries: int  # entries in the log (recovered + appended - compacted away)
    entries_appended: int  # acknowledged since open
    appends: int  # acknowledged append() calls since open
    flushes: int  # successful write+fsync rounds (group commits) since open
    failed_flushes: int
    next_seq: int
    compactions: int


class _Pending:
    """One queued append. With a `future` (Log.append) its outcome goes there; without one (Log.append_settled)
    the pending itself is the ticket the settled callback hands back: `exception()`, then `result()`."""

    __slots__ = ("items", "timestamp_ms", "future", "nbytes", "enqueued", "_last", "_error")

    def __init__(
        self,
        items: list[tuple[bytes, bytes | None]],
        timestamp_ms: int | None,
        future: concurrent.futures.Future[int] | None,
        nbytes: int,
        enqueued: float,
    ) -> None:
        self.items = items
        self.timestamp_ms = timestamp_ms
        self.future = future
        self.nbytes = nbytes
        self.enqueued = enqueued
        self._last = -1
        self._error: BaseException | None = None

    def start(self) -> bool:
        """Taken by the writer: False if its future was cancelled meanwhile (withdrawn)."""
        return self.future is None or self.future.set_running_or_notify_cancel()

    def fail(self, exc: BaseException) -> None:
        if self.future is None:
            if self._error is None and self._last < 0:  # settled once only, as a future is
                self._error = exc
        elif not self.future.done():
            self.future.set_exception(exc)

    def succeed(self, last: int) -> None:
        if self.future is None:
            self._last = last
        else:
            self.future.set_result(last)

    def ticket(self) -> Any:
        """What the settled callback gets for this append: its future, or itself."""
        return self if self.future is None else self.future

    def exception(self) -> BaseException | None:
        return self._error

    def result(self) -> int:
        if self._error is not None:
            raise self._error
        return self._last


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


# ------------------------------------------------------------------------------------------------------------
# The log


class Log:
    """See the module docstring. Create with `Log.open`; thread-safe."""

    def __init__(
        self,
        *,
        directory: str,
        fs: FS,
        segment_bytes: int,
        linger_ms: float,
        max_batch_bytes: int,
        wall_ms: Callable[[], int],
        segments: list[Segment],
        active_file: File,
        next_seq: int,
        recovery: Recovery,
        dir_lock: Lock,
        settled: SettledFn | None = None,
    ) -> None:
        self.directory = directory
        self._settled = settled
        self._dir_lock = dir_lock
        self.recovery = recovery
        self._fs = fs
        self._segment_bytes = segment_bytes
        self._linger_s = linger_ms / 1000.0
        self._max_batch_bytes = max_batch_bytes
        self._wall_ms = wall_ms

        # Guarded by _lock: the segment list and the active segment's durable size (read by replay and
        # compaction, changed by the writer and compaction), and the stats.
        self._lock = threading.Lock()
        self._segments = segments
        self._active = segments[-1]
        self._entries = recovery.entries
        self._entries_appended = 0
        self._appends = 0
        self._flushes = 0
        self._failed_flushes = 0
        self._compactions = 0

        # Owned by the writer thread.
        self._active_file = active_file
        self._next_seq = next_seq
        self._dirty = False  # the active file may hold bytes past its durable size
        self._damaged = False  # replay found a segment that no longer parses (set once, by any thread)

        # Guarded by _cond: the queue of appends.
        self._cond = threading.Condition(threading.Lock())
        self._queue: list[_Pending] = []
        self._queued_bytes = 0
        self._closing = False
        self._closed = False
        self._abandoned = False  # see abandon(): the writer must not touch the files any more

        self._compact_lock = threading.Lock()
        self._compactor: concurrent.futures.ThreadPoolExecutor | None = None
        self._writer = threading.Thread(target=self._run_writer, name=f"log-writer {directory}", daemon=True)
        self._writer.start()

    # -- open / recovery ------------------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        directory: str,
        *,
        fs: FS | None = None,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        linger_ms: float = 10,
        max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
        wall_ms: Callable[[], int] | None = None,
        progress: ProgressFn | None = None,
        settled: SettledFn | None = None,
    ) -> Log:
        """Open (creating if needed) the log in `directory`, recover it, and start its writer thread.

        Recovery (see the module docstring) reads every segment, unless the log was closed cleanly and is still
        as it was left; `progress(bytes_done, bytes_total, entries)` reports on it. `wall_ms` gives the append time stored in entries that are appended without one.
        `settled(futures)`, called in the writer thread, gets the append futures each flush completed (or
        failed), in append order, once they all are: one call per flush, for a caller that would rather not
        be woken once per future (an event loop: one thread-safe call instead of one per append). Appends made
        with `append_settled` appear there as their tickets.
        Raises StorageError if the directory cannot be read or repaired (StorageFormatError: newer format).
        """
        if segment_bytes < FRAME_SIZE:
            raise ValueError("segment_bytes is too small")
        if linger_ms < 0 or max_batch_bytes <= 0:
            raise ValueError("linger_ms must be >= 0 and max_batch_bytes > 0")
        fs = fs if fs is not None else OsFS()
        try:
            fs.make_dirs(directory)
            dir_lock = fs.lock(os.path.join(directory, LOCK_FILE))
        except BlockingIOError as exc:
            raise StorageError(f"log {directory} is in use by another Log", op="open") from exc
        except OSError as exc:
            raise os_error("open", exc) from exc
        try:
            segments, next_seq, recovery = _recover(fs, directory, progress)
            active_file = fs.open_append(segments[-1].path)
        except BaseException as exc:
            dir_lock.close()
            if isinstance(exc, OSError):
                raise os_error("open", exc) from exc
            raise
        if not recovery.clean:
            log.warning("log %s recovered with loss: %s", directory, recovery)
        return cls(
            directory=directory,
            fs=fs,
            segment_bytes=segment_bytes,
            linger_ms=linger_ms,
            max_batch_bytes=max_batch_bytes,
            wall_ms=wall_ms if wall_ms is not None else _wall_ms,
            segments=segments,
            active_file=active_file,
            next_seq=next_seq,
            recovery=recovery,
            dir_lock=dir_lock,
            settled=settled,
        )

    # -- replay ---------------------------------------------------------------------------------------------

    def replay(self, progress: ProgressFn | None = None) -> Generator[Entry, None, None]:
        """Every durable entry, in order, as of when iteration starts.

        `progress(bytes_done, bytes_total, entries)` is called as segments are read (about every 8 MiB) and at
        the end. Safe to run while appends and compaction go on.

        Replay does not check CRCs again: every durable byte of a segment was checked by `open` (recovery),
        written by this Log, or copied by compaction from checked entries; only the segments a clean shutdown
        let `open` skip are checked, on their first replay (StorageCorruptError on a mismatch). It still checks
        the framing and headers (lengths, version, flags, increasing sequence numbers) and raises
        StorageCorruptError if a segment no longer parses as it did.
        """
        with self._lock:
            self._check_open()
            files: list[tuple[File, int, Segment]] = []
            try:
                for seg in self._segments:
                    files.append((self._fs.open_read(seg.path), seg.size, seg))
            except OSError as exc:
                for f, _, _ in files:
                    f.close()
                raise os_error("replay", exc) from exc
        yield from self._replay(files, progress)

    def _replay(
        self, files: list[tuple[File, int, Segment]], progress: ProgressFn | None
    ) -> Generator[Entry, None, None]:
        total = sum(limit for _, limit, _ in files)
        done = 0
        entries = 0
        prev_seq = -1
        try:
            for f, limit, seg in files:
                stop = Stop()
                report = None
                if progress is not None:
                    report = reporter(progress, done, total, entries)
                verify = not seg.checked
                try:
                    yield from parse(f, limit, prev_seq, stop, report, verify=verify)
                except OSError as exc:
                    raise os_error("replay", exc) from exc
                if stop.reason is not None:
                    self._found_damage()
                    if verify and stop.reason == CHECKSUM:
                        raise StorageCorruptError(
                            f"segment {seg.name}: checksum mismatch at offset {stop.valid_end}, found on its "
                            "first read after a clean shutdown (the bytes changed on disk since); reopening "
                            "the log recovers it up to there",
                            op="replay",
                        )
                    raise StorageCorruptError(
                        f"segment {seg.name} changed after open: {stop.reason} at offset {stop.valid_end}",
                        op="replay",
                    )
                if verify:
                    seg.checked = True
                prev_seq = stop.last_seq
                entries += stop.entries
                done += limit
                if progress is not None:
                    progress(done, total, entries)
        finally:
            for f, _, _ in files:
                f.close()

    # -- append ---------------------------------------------------------------------------------------------

    def append(
        self, entries: Sequence[tuple[bytes, bytes | None]], timestamp_ms: int | None = None
    ) -> concurrent.futures.Future[int]:
        """Queue entries (key, value-or-None) for writing; never blocks on I/O.

        The future completes with the sequence number of the last entry once all of them are written and
        fsynced, or fails with a StorageError if they could not be (then none of them is in the log).
        Entries of one append are written together, in order, after those of earlier appends. `timestamp_ms`
        (default: the wall clock when written) is stored with each entry and measures tombstone retention.
        Cancelling the future while the append still waits in the queue withdraws it.
        """
        future: concurrent.futures.Future[int] = concurrent.futures.Future()
        self._enqueue(entries, timestamp_ms, future)
        return future

    def append_settled(
        self, entries: Sequence[tuple[bytes, bytes | None]], timestamp_ms: int | None = None
    ) -> Any:
        """`append` without a future, for the owner of the `settled` callback (Log.open), which gets the
        returned ticket back in the flush that settles it: `ticket.exception()` is None once its entries are
        written and fsynced, and then `ticket.result()` is the sequence number of the last one. A future costs a
        lock and a condition per append; a caller that hears of every flush anyway needs neither. Not
        withdrawable: the entries are written even if the caller stops waiting."""
        if self._settled is None:
            raise RuntimeError("append_settled needs the settled callback of Log.open")
        return self._enqueue(entries, timestamp_ms, None)

    def _enqueue(
        self,
        entries: Sequence[tuple[bytes, bytes | None]],
        timestamp_ms: int | None,
        future: concurrent.futures.Future[int] | None,
    ) -> _Pending:
        items: list[tuple[bytes, bytes | None]] = []
        nbytes = 0
        for key, value in entries:
            if type(key) is not bytes:
                if not isinstance(key, bytes | bytearray | memoryview):
                    raise TypeError(f"key must be bytes, not {type(key).__name__}")
                key = bytes(key)
            if value is not None and type(value) is not bytes:
                if not isinstance(value, bytes | bytearray | memoryview):
                    raise TypeError(f"value must be bytes or None, not {type(value).__name__}")
                value = bytes(value)
            size = entry_size(key, value)
            if size - PREFIX > MAX_LENGTH:
                raise ValueError("entry too large")
            nbytes += size
            items.append((key, value))
        if not items:
            raise ValueError("append needs at least one entry")
        pending = _Pending(items, timestamp_ms, future, nbytes, time.monotonic())
        with self._cond:
            if self._closing:
                raise StorageClosedError("log is closed", op="append")
            self._queue.append(pending)
            self._queued_bytes += nbytes
            # The writer waits for the first append of a batch, then lingers on a timeout: waking it for
            # every append in between only to wait again cost a thread hand-off per append. It is woken
            # again only when the batch is full.
            if len(self._queue) == 1 or self._queued_bytes >= self._max_batch_bytes:
                self._cond.notify()
        return pending

    def _run_writer(self) -> None:
        while True:
            with self._cond:
                if self._queue:
                    # These arrived while the last flush was in progress: gather more for a while.
                    if self._linger_s > 0:
                        deadline = self._queue[0].enqueued + self._linger_s
                        while self._queued_bytes < self._max_batch_bytes and not self._closing:
                            remaining = deadline - time.monotonic()
                            if remaining <= 0:
                                break
                            self._cond.wait(remaining)
                else:
                    while not self._queue and not self._closing:
                        self._cond.wait()
                    if not self._queue:
                        return
                batch, self._queue = self._queue, []
                self._queued_bytes = 0
            live = [p for p in batch if p.start()]
            if live and self._abandoned:
                gone = StorageClosedError("log was abandoned", op="append")
                for p in live:
                    p.fail(gone)
            elif live:
                try:
                    self._flush(live)
                except BaseException as exc:  # the writer thread must survive anything
                    log.exception("log writer: unexpected error")
                    err = StorageIOError(f"unexpected error in the log writer: {exc!r}", op="flush")
                    for p in live:
                        p.fail(err)
            if live:
                self._notify_settled([p.ticket() for p in live])

    def _notify_settled(self, futures: list[Any]) -> None:
        if self._settled is not None:
            try:
                self._settled(futures)
            except Exception:  # a closed event loop, say: the futures themselves are settled anyway
                log.exception("log %s: the settled callback failed", self.directory)

    def _flush(self, batch: list[_Pending]) -> None:
        parts: list[bytes] = []
        lasts: list[int] = []
        seq = self._next_seq
        now: int | None = None
        for p in batch:
            ts = p.timestamp_ms
            if ts is None:
                if now is None:
                    now = self._wall_ms()
                ts = now
            seq = encode_into(parts, p.items, seq, ts)
            lasts.append(seq - 1)
        data = b"".join(parts)
        op = "write"
        try:
            if self._dirty:
                op = "truncate"
                self._restore()
            if self._active.size > 0 and self._active.size + len(data) > self._segment_bytes:
                op = "roll"
                self._roll()
            op = "write"
            self._dirty = True
            self._active_file.write(data)
            op = "fsync"
            self._active_file.fsync()
            self._dirty = False
        except OSError as exc:
            err = os_error(op, exc)
            if self._dirty and not self._abandoned:  # abandoned: a new Log may own the files now
                try:
                    self._restore()
                except OSError as again:
                    log.warning("log %s: truncating after a failed %s: %s", self.directory, op, again)
            with self._lock:
                self._failed_flushes += 1
            for p in batch:
                p.fail(err)
            return
        count = seq - self._next_seq
        self._next_seq = seq
        with self._lock:
            self._active.size += len(data)
            self._entries += count
            self._entries_appended += count
            self._appends += len(batch)
            self._flushes += 1
        for p, last in zip(batch, lasts, strict=True):
            p.succeed(last)

    def _restore(self) -> None:
        """Cut the active file back to its durable size, durably (after a failed write or fsync)."""
        self._active_file.truncate(self._active.size)
        self._active_file.fsync()
        self._dirty = False

    def _roll(self) -> None:
        name = segment_name(self._next_seq)
        path = os.path.join(self.directory, name)
        f = self._fs.open_append(path)
        try:
            self._fs.fsync_dir(self.directory)
        except OSError:
            f.close()
            raise
        seg = Segment(self._next_seq, name, path, 0)
        old, self._active_file = self._active_file, f
        with self._lock:
            self._segments.append(seg)
            self._active = seg
        old.close()

    # -- compaction -----------------------------------------------------------------------------------------

    def compact(self, now_ms: int, delete_retention_ms: int) -> concurrent.futures.Future[CompactionResult]:
        """Compact the closed segments in a background thread; appends go on meanwhile.

        Keeps the last value per key; a tombstone that is the last entry for its key is kept until
        `delete_retention_ms` after its timestamp (`now_ms - timestamp_ms >= delete_retention_ms` drops it).
        One compaction runs at a time; the future fails with a StorageError if an I/O error stopped it (the
        log is consistent either way).
        """
        with self._cond:
            if self._closing:
                raise StorageClosedError("log is closed", op="compact")
            if self._compactor is None:
                self._compactor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="log-compact")
            return self._compactor.submit(self._compact_guarded, now_ms, delete_retention_ms)

    def _compact_guarded(self, now_ms: int, retention_ms: int) -> CompactionResult:
        try:
            with self._compact_lock:
                return self._compact(now_ms, retention_ms)
        except OSError as exc:
            raise os_error("compact", exc) from exc

    def _compact(self, now_ms: int, retention_ms: int) -> CompactionResult:
        with self._lock:
            segments = list(self._segments)
            active, active_limit = self._active, self._active.size
        closed = segments[:-1]
        if not closed:
            return CompactionResult(0, 0, 0, 0, 0, 0, 0, 0)

        # Pass 1: the sequence number of the last entry of every key.
        last_seq: dict[bytes, int] = {}
        prev = -1
        for seg, limit in [(s, s.size) for s in closed] + [(active, active_limit)]:
            stop = Stop()
            for entry in self._read(seg, limit, prev, stop):
                last_seq[entry[1]] = entry[0]
            prev = stop.last_seq if stop.entries else prev

        # Pass 2: which byte ranges of each closed segment to keep.
        plans: list[_Plan] = []
        prev = -1
        entries_before = 0
        for seg in closed:
            plan = _Plan(seg)
            offset = 0
            stop = Stop()
            for seq, key, value, ts in self._read(seg, seg.size, prev, stop):
                size = FRAME_SIZE + len(key) + (0 if value is None else len(value))
                if last_seq[key] == seq:
                    if value is None and now_ms - ts >= retention_ms:
                        plan.tombstones_dropped += 1
                    else:
                        plan.keep(offset, offset + size)
                offset += size
            prev = stop.last_seq if stop.entries else prev
            plan.entries = stop.entries
            entries_before += stop.entries
            plans.append(plan)

        # Group consecutive segments whose kept bytes fit in one segment; rewrite oldest first.
        groups: list[list[_Plan]] = [[]]
        group_bytes = 0
        for plan in plans:
            if groups[-1] and group_bytes + plan.kept_bytes > self._segment_bytes:
                groups.append([])
                group_bytes = 0
            groups[-1].append(plan)
            group_bytes += plan.kept_bytes
        rewritten = 0
        dropped = 0
        tombstones_dropped = 0
        aborted = False
        for group in groups:
            if len(group) == 1 and group[0].unchanged:
                continue
            if self._closing:
                aborted = True
                break
            self._rewrite(group)
            rewritten += 1
            gone = sum(p.entries - p.kept_entries for p in group)
            dropped += gone
            tombstones_dropped += sum(p.tombstones_dropped for p in group)
            with self._lock:
                self._entries -= gone

        with self._lock:
            after = [s for s in self._segments if s.base < active.base]
            self._compactions += 1
        return CompactionResult(
            segments_before=len(closed),
            segments_after=len(after),
            bytes_before=sum(s.size for s in closed),
            bytes_after=sum(s.size for s in after),
            entries_before=entries_before,
            entries_after=entries_before - dropped,
            tombstones_dropped=tombstones_dropped,
            files_rewritten=rewritten,
            aborted=aborted,
        )

    def _read(self, seg: Segment, limit: int, prev_seq: int, stop: Stop) -> Iterator[Entry]:
        f = self._fs.open_read(seg.path)
        try:
            yield from parse(f, limit, prev_seq, stop)
        finally:
            f.close()
        if stop.reason is not None:
            raise StorageCorruptError(
                f"segment {seg.name}: {stop.reason} at offset {stop.valid_end}; compaction stopped",
                op="compact",
            )

    def _rewrite(self, group: list[_Plan]) -> None:
        fs = self._fs
        first = group[0].segment
        kept = sum(p.kept_bytes for p in group)
        if kept == 0:
            # Oldest first, each made durable before the next: then every crash leaves a consistent log.
            for plan in group:
                with self._lock:
                    fs.remove(plan.segment.path)
                    self._segments.remove(plan.segment)
                fs.fsync_dir(self.directory)
            return
        tmp = first.path + TEMP_SUFFIX
        try:
            if fs.exists(tmp):
                fs.remove(tmp)
            out = fs.open_append(tmp)
            try:
                for plan in group:
                    self._copy(plan, out)
                out.fsync()
            finally:
                out.close()
            with self._lock:
                fs.rename(tmp, first.path)
                i = self._segments.index(first)
                # The inputs after the first leave the in-memory log now, even if removing their files fails
                # below: their entries are in the merged file, and the next open removes such leftovers.
                self._segments[i : i + len(group)] = [Segment(first.base, first.name, first.path, kept)]
        except BaseException:
            try:
                if fs.exists(tmp):
                    fs.remove(tmp)
            except OSError:
                pass  # the next open removes it
            raise
        fs.fsync_dir(self.directory)
        for plan in group[1:]:  # in order, like the removals above
            fs.remove(plan.segment.path)
            fs.fsync_dir(self.directory)

    def _copy(self, plan: _Plan, out: File) -> None:
        src = self._fs.open_read(plan.segment.path)
        try:
            buf = b""
            buf_start = 0
            pending: list[bytes] = []
            pending_bytes = 0
            for start, end in plan.spans:
                while start < end:
                    if not buf_start <= start < buf_start + len(buf):
                        buf = src.read_at(start, COPY_CHUNK)
                        buf_start = start
                        if not buf:
                            raise StorageCorruptError(f"segment {plan.segment.name} shrank", op="compact")
                    stop = min(end, buf_start + len(buf))
                    pending.append(buf[start - buf_start : stop - buf_start])
                    pending_bytes += stop - start
                    start = stop
                    if pending_bytes >= COPY_CHUNK:
                        out.write(b"".join(pending))
                        pending, pending_bytes = [], 0
            if pending:
                out.write(b"".join(pending))
        finally:
            src.close()

    # -- state ----------------------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise StorageClosedError("log is closed", op="replay")

    def stats(self) -> LogStats:
        with self._lock:
            return LogStats(
                segments=len(self._segments),
                total_bytes=sum(s.size for s in self._segments),
                entries=self._entries,
                entries_appended=self._entries_appended,
                appends=self._appends,
                flushes=self._flushes,
                failed_flushes=self._failed_flushes,
                next_seq=self._next_seq,
                compactions=self._compactions,
            )

    def close(self, timeout: float | None = None) -> None:
        """Write what is queued, stop the writer thread and any compaction, close the files.

        Raises StorageError if the writer does not stop within `timeout` seconds (a hung fsync); the log is
        then closing (appends are refused) and `close` may be called again.
        """
        with self._cond:
            if self._closed:
                return
            self._closing = True
            self._cond.notify_all()
        self._writer.join(timeout)
        if self._writer.is_alive():
            raise StorageError("the log writer did not stop in time (is a fsync hanging?)", op="close")
        if self._compactor is not None:
            self._compactor.shutdown(wait=True)
        self._active_file.close()
        # Not after a failed truncation (the active file may hold bytes past its durable size) nor after replay
        # found damage: the next open must scan, and cut them.
        if not self._dirty and not self._damaged:
            self._write_clean_shutdown()
        self._dir_lock.close()
        with self._lock:
            self._closed = True

    def _found_damage(self) -> None:
        """Replay found a segment that no longer parses: no clean-shutdown file at close, and the one open
        removed stays removed even after a power cut, so that the next open scans and cuts the damage."""
        self._damaged = True
        try:
            self._fs.fsync_dir(self.directory)
        except OSError as exc:
            log.warning("log %s: fsync of the directory failed (%s)", self.directory, exc)

    def _write_clean_shutdown(self) -> None:
        """The clean-shutdown file (module docstring): written after the writer and compaction stopped, so the
        segments are final. Best effort: without it the next open scans the log, as after a crash."""
        with self._lock:
            marker = {
                "format": FORMAT_VERSION,
                "next_seq": self._next_seq,
                "entries": self._entries,
                "segments": [[seg.name, seg.size] for seg in self._segments],
            }
        try:
            self._fs.write_atomically(os.path.join(self.directory, CLEAN_FILE), json.dumps(marker).encode())
        except OSError as exc:
            log.warning(
                "log %s: the clean-shutdown file could not be written (%s): the next open scans it",
                self.directory,
                exc,
            )

    def abandon(self, compaction_wait_s: float = 1.0) -> None:
        """Give the log up without waiting for its writer, which may be stuck in a hung fsync.

        Queued appends fail with StorageClosedError; the writer finishes the operation it is in (its batch
        then completes or fails as usual) and afterwards never writes, truncates or rolls again; the directory
        lock is released at once so a new Log can open the directory and recover from what is on disk. A
        write() that is itself stuck when this is called could still land after the new Log has taken over;
        fsync is what hangs in practice (write() returns once the page cache has the bytes). A running
        compaction is given `compaction_wait_s` to notice and stop before the lock is released.
        """
        with self._cond:
            if self._closed:
                return
            self._closing = True
            self._abandoned = True
            queued, self._queue = self._queue, []
            self._queued_bytes = 0
            self._cond.notify_all()
        gone = StorageClosedError("log was abandoned", op="append")
        failed = []
        for p in queued:
            if p.start():
                p.fail(gone)
                failed.append(p.ticket())
        if failed:
            self._notify_settled(failed)
        if self._compact_lock.acquire(timeout=compaction_wait_s):
            self._compact_lock.release()
        else:
            log.warning("log %s abandoned while a compaction is still running", self.directory)
        self._dir_lock.close()
        with self._lock:
            self._closed = True

    def __enter__(self) -> Log:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Plan:
    """What compaction keeps of one closed segment: byte ranges, in order, adjacent ones merged."""

    __slots__ = ("segment", "spans", "kept_bytes", "kept_entries", "entries", "tombstones_dropped")

    def __init__(self, segment: Segment) -> None:
        self.segment = segment
        self.spans: list[list[int]] = []
        self.kept_bytes = 0
        self.kept_entries = 0
        self.entries = 0
        self.tombstones_dropped = 0

    def keep(self, start: int, end: int) -> None:
        if self.spans and self.spans[-1][1] == start:
            self.spans[-1][1] = end
        else:
            self.spans.append([start, end])
        self.kept_bytes += end - start
        self.kept_entries += 1

    @property
    def unchanged(self) -> bool:
        return self.kept_bytes == self.segment.size


def _recover(fs: FS, directory: str, progress: ProgressFn | None) -> tuple[list[Segment], int, Recovery]:
    names = sorted(fs.listdir(directory))
    removed_temp = []
    found: list[tuple[int, str]] = []
    for name in names:
        if name.endswith(TEMP_SUFFIX):
            fs.remove(os.path.join(directory, name))
            removed_temp.append(name)
        elif m := SEGMENT_RE.match(name):
            found.append((int(m.group(1)), name))
    found.sort()
    dir_dirty = bool(removed_temp)
    sizes = {name: fs.size(os.path.join(directory, name)) for _, name in found}
    total = sum(sizes.values())
    clean = _take_clean_shutdown(fs, directory, [(name, sizes[name]) for _, name in found])
    if clean is not None and clean[0] >= found[-1][0]:
        next_seq, entries = clean
        trusted = [
            Segment(base, name, os.path.join(directory, name), sizes[name], checked=False)
            for base, name in found
        ]
        if progress is not None:
            progress(total, total, entries)
        if dir_dirty:
            fs.fsync_dir(directory)
        return (
            trusted,
            next_seq,
            Recovery(
                segments=len(trusted),
                entries=entries,
                bytes=total,
                removed_temp_files=tuple(removed_temp),
                clean_shutdown=True,
            ),
        )

    segments: list[Segment] = []
    leftovers: list[str] = []
    lost: list[str] = []
    lost_bytes = 0
    truncation: Truncation | None = None
    max_seq = -1
    entries = 0
    done = 0
    for i, (base, name) in enumerate(found):
        path = os.path.join(directory, name)
        if base <= max_seq:
            fs.remove(path)
            leftovers.append(name)
            dir_dirty = True
            done += sizes[name]
            continue
        size = sizes[name]
        stop = Stop()
        f = fs.open_read(path)
        try:
            report = None if progress is None else reporter(progress, done, total, entries)
            for _ in parse(f, size, max(max_seq, base - 1), stop, report, emit=False):
                pass
        finally:
            f.close()
        entries += stop.entries
        done += size
        if stop.entries:
            max_seq = stop.last_seq
        segments.append(Segment(base, name, path, stop.valid_end))
        if stop.valid_end < size:
            assert stop.reason is not None
            truncation = Truncation(name, stop.valid_end, size - stop.valid_end, stop.reason)
            # Later segments go first, durably: if we crash before truncating, the next open finds the same
            # corruption and finishes the job; truncating first could leave them to be replayed after a hole.
            for _, later in found[i + 1 :]:
                lost_bytes += sizes[later]
                fs.remove(os.path.join(directory, later))
                lost.append(later)
            if lost or dir_dirty:
                fs.fsync_dir(directory)
                dir_dirty = False
            f = fs.open_append(path)
            try:
                f.truncate(stop.valid_end)
                f.fsync()
            finally:
                f.close()
            break
    if progress is not None:
        progress(total, total, entries)
    if not segments:
        name = segment_name(max_seq + 1)
        path = os.path.join(directory, name)
        fs.open_append(path).close()
        segments.append(Segment(max_seq + 1, name, path, 0))
        dir_dirty = True
    if dir_dirty:
        fs.fsync_dir(directory)
    next_seq = max(max_seq + 1, segments[-1].base)
    recovery = Recovery(
        segments=len(segments),
        entries=entries,
        bytes=sum(s.size for s in segments),
        truncation=truncation,
        lost_segments=tuple(lost),
        lost_bytes=lost_bytes,
        removed_leftovers=tuple(leftovers),
        removed_temp_files=tuple(removed_temp),
    )
    return segments, next_seq, recovery


def _take_clean_shutdown(fs: FS, directory: str, found: list[tuple[str, int]]) -> tuple[int, int] | None:
    """(next_seq, entries) from the clean-shutdown file if the segments are still exactly the ones it lists
    (names and sizes), else None; the file is removed either way, so that it is used once (module docstring).
    Its removal is not made durable here: if a power cut brings it back, either the log grew since (the sizes no
    longer match) or it is still as it was closed; a replay that finds damage makes it durable (_found_damage)."""
    path = os.path.join(directory, CLEAN_FILE)
    if not fs.exists(path):
        return None
    try:
        data = fs.read_file(path)
        fs.remove(path)
    except OSError as exc:
        raise os_error("open", exc) from exc
    try:
        marker = json.loads(data)
        listed = [(str(name), int(size)) for name, size in marker["segments"]]
        if marker["format"] != FORMAT_VERSION or listed != found or not found:
            return None
        next_seq, entries = int(marker["next_seq"]), int(marker["entries"])
    except (ValueError, KeyError, TypeError):  # a torn or foreign file: scan
        return None
    if next_seq < 0 or entries < 0:
        return None
    return next_seq, entries
