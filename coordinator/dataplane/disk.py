"""Durable topics for the embedded data plane: the data directory layout, the writer thread, partition logs.

Layout (DATA_DIR/topics/)::

    LOCK                               flock held by the running server (one server per data directory)
    producer-ids.state                 JSON {"version": 1, "next_producer_id": N}: ids below N may be in use
    <topic>.json                       topic metadata, JSON {"version", "name", "topic_id", "partitions",
                                       "configs"}; written atomically (temp file, fsync, rename, dir fsync)
    <topic>-<partition>/               one directory per partition (Kafka's layout)
        partition.metadata             Kafka's format: "version: 0\\ntopic_id: <base64url uuid>\\n"
        <base offset, 20 digits>.log   segments: RecordBatch v2 bytes as Fetch returns them (see `segments`)
    <topic>-<partition>.<id>-delete/   a deleted partition, renamed before its files are removed

Partition directory names always end in "-<digits>", metadata files in ".json", so the two never collide.

Creating a topic makes its partition directories (partition.metadata, an empty first segment, each directory
made durable) and then writes ``<topic>.json``: that atomic rename is the commit point. Deleting a topic
removes ``<topic>.json`` first (durably): from then on the topic does not exist, and a crash at any later step
only leaves directories that the next start recognises as orphans (no metadata, or a different topic id) and
removes. After the commit, each partition directory is renamed to ``...-delete`` (so the name is free at once
for a new topic) and its files removed.

Writer thread. Every mutating disk operation of the data plane runs on one thread per data plane, in the order
it was submitted: appends, segment rolls, fsyncs, topic creation and deletion, retention removals, the
producer id file. The event loop only queues work and awaits its future, so it never blocks on the disk.
Appends that queue up while the thread is busy (for instance in a fsync) are written together by the next
flush:

* each append (one produce request's batches for one partition) gets its offsets here, is written with one
  write() call, and becomes visible to Fetch (high watermark) only once its flush settles;
* acks=-1 appends wait for a fsync of the partition's active segment; all acks=-1 appends to a partition in
  one flush share that fsync (group commit). acks=0/1 appends are answered after the write, from the page
  cache: a power cut (not a process crash) can lose them, as in Kafka with its default flush settings. Their
  bytes are fsynced by the next acks=-1 append to the partition, when the segment rolls, and at a clean
  shutdown;
* a failed write (ENOSPC, EIO) cuts the file back to the end before that append, so no torn batch is ever
  followed by another; a failed fsync cuts back everything the flush wrote to that partition; the appends fail
  with `StorageFailure` (KAFKA_STORAGE_ERROR) and later appends proceed normally once the disk works again. If
  cutting back fails too, the partition retries it before its next write and refuses writes until it succeeds;
* a segment is rolled when the next append would take it past segment.bytes: the full segment is fsynced, the
  new file created and its name made durable before anything is written to it. So after a crash only the last
  segment can have a torn tail.

A fsync that hangs holds the thread, and everything queued behind it waits: Produce answers REQUEST_TIMED_OUT
after its timeout; an append still queued when its request gave up is withdrawn, one already written stays.
"""

from __future__ import annotations

import base64
import concurrent.futures
import dataclasses
import json
import logging
import os
import re
import struct
import threading
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from storage.fs import FS, TEMP_SUFFIX, File, Lock

from .batches import read_header
from .segments import (
    Segment,
    SegmentView,
    Truncation,
    read_views,
    recover_partition,
    segment_name,
)

log = logging.getLogger(__name__)

TOPICS_DIR = "topics"
LOCK_FILE = "LOCK"
PRODUCER_IDS_FILE = "producer-ids.state"
PARTITION_METADATA = "partition.metadata"
META_SUFFIX = ".json"
DELETE_SUFFIX = "-delete"
_PARTITION_DIR_RE = re.compile(r"^(.+)-(\d+)$")
_BASE_OFFSET = struct.Struct(">q")
_MAX_NAME = 255
FORMAT_VERSION = 1

# A fetch whose first byte is this close to the end of the active segment reads on the event loop: those bytes
# were just written and sit in the page cache. Anything older is read in a worker thread.
HOT_BYTES = 4 * 1024 * 1024


class StorageFailure(Exception):
    """A disk operation failed; the partition answers KAFKA_STORAGE_ERROR."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.errno = code


class LogClosed(Exception):
    """The partition was deleted, or the data plane is shutting down."""


def _failure(what: str, exc: BaseException) -> StorageFailure:
    code = getattr(exc, "errno", None)
    failure = StorageFailure(f"{what} failed: {exc}", code)
    failure.__cause__ = exc
    return failure


def remove_tree(fs: FS, path: str) -> None:
    """Remove a directory and everything in it (files and directories one level deep or more)."""
    for name in fs.listdir(path):
        child = os.path.join(path, name)
        try:
            fs.remove(child)
        except (IsADirectoryError, PermissionError, FileNotFoundError):
            remove_tree(fs, child)
    fs.fsync_dir(path)
    fs.remove_dir(path)


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def delete_dir_name(topic: str, partition: int, topic_id: uuid.UUID) -> str:
    """Kafka's ``<topic>-<partition>.<unique id>-delete``, the topic cut short to fit a file name."""
    suffix = f"-{partition}.{topic_id.hex}{DELETE_SUFFIX}"
    return topic[: _MAX_NAME - len(suffix)] + suffix


def kafka_uuid(topic_id: uuid.UUID) -> str:
    """Kafka's Uuid.toString(): URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(topic_id.bytes).rstrip(b"=").decode()


def parse_kafka_uuid(text: str) -> uuid.UUID:
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))


# ------------------------------------------------------------------------------------------------------------
# Partition log


@dataclasses.dataclass(frozen=True, slots=True)
class LogConfig:
    segment_bytes: int
    retention_ms: int
    retention_bytes: int


class _WriterState:
    """A partition as the writer thread sees it; only that thread touches it once the log is open."""

    __slots__ = ("file", "base", "path", "size", "next_offset", "unsynced", "needs_cut", "closed")

    def __init__(self, file: File, base: int, path: str, size: int, next_offset: int) -> None:
        self.file = file  # append handle on the active segment
        self.base = base
        self.path = path
        self.size = size  # bytes written and kept
        self.next_offset = next_offset
        self.unsynced = False  # bytes written since the last fsync
        self.needs_cut = False  # a failed truncation left bytes past `size`
        self.closed = False


class DiskLog:
    """One partition's segment files.

    The event loop owns `segments`, `log_start_offset` and `high_watermark`: the writer thread reports what it
    wrote through the loop (`apply`), so handlers read them without locks. The module docstring covers writes.
    """

    def __init__(
        self,
        fs: FS,
        directory: str,
        recovered_segments: list[Segment],
        next_offset: int,
        config: LogConfig,
        writer_file: File,
        truncation: Truncation | None = None,
    ) -> None:
        self.fs = fs
        self.directory = directory
        self.segments = recovered_segments
        self.log_start_offset = recovered_segments[0].base_offset
        self.high_watermark = next_offset
        self.config = config
        self.truncation = truncation
        self.version = 0  # bumped on every change readers may be waiting for
        self.retired = False
        active = recovered_segments[-1]
        self.w = _WriterState(writer_file, active.base_offset, active.path, active.size, next_offset)

    @property
    def log_end_offset(self) -> int:
        return self.high_watermark

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    # -- loop side --------------------------------------------------------------------------------

    def apply(self, events: list[tuple[str, Any]]) -> None:
        """What the writer wrote and settled, in order: ("roll", Segment) and ("batches", [info...])."""
        if self.retired:
            for kind, payload in events:
                if kind == "roll":
                    payload.retire()
            return
        for kind, payload in events:
            if kind == "roll":
                self.segments.append(payload)
            else:
                seg = self.segments[-1]
                for info in payload:
                    seg.add_batch(*info)
        self.high_watermark = self.segments[-1].end_offset
        self.version += 1

    def _views_from(self, offset: int) -> list[SegmentView]:
        segments = self.segments
        i = max(bisect_segments(segments, offset), 0)
        return [SegmentView.of(s) for s in segments[i:] if s.file is not None]

    def is_hot(self, offset: int) -> bool:
        last = self.segments[-1]
        return offset >= last.base_offset and last.size - last.floor_position(offset) <= HOT_BYTES

    def read(self, offset: int, max_bytes: int, min_one: bool = False) -> bytes:
        """Whole batches from the one holding `offset` (blocking reads; `views` is for other threads)."""
        if not self.log_start_offset <= offset < self.high_watermark:
            return b""
        return read_views(self._views_from(offset), offset, max_bytes, min_one)

    def views(self, offset: int | None = None) -> list[SegmentView]:
        """Segment views from the one holding `offset` (default: all), referenced until `release`."""
        views = self._views_from(self.log_start_offset if offset is None else offset)
        for view in views:
            view.segment.refs += 1
        return views

    @staticmethod
    def release(views: Iterable[SegmentView]) -> None:
        for view in views:
            view.segment.refs -= 1
            view.segment.close_if_unused()

    def retention_victims(self, now_ms: int) -> int:
        """How many of the oldest closed segments retention deletes now (Kafka's rules: time first, then
        size; a segment goes when its newest batch is older than retention.ms, and while the partition without
        it would still hold at least retention.bytes)."""
        closed = self.segments[:-1]
        count = 0
        retention_ms = self.config.retention_ms
        if retention_ms >= 0:
            while (
                count < len(closed)
                and closed[count].batches
                and now_ms - closed[count].max_timestamp > retention_ms
            ):
                count += 1
        retention_bytes = self.config.retention_bytes
        if retention_bytes >= 0:
            diff = sum(s.size for s in self.segments[count:]) - retention_bytes
            while count < len(closed) and diff - closed[count].size >= 0:
                diff -= closed[count].size
                count += 1
        return count

    def drop_oldest(self, count: int) -> list[Segment]:
        """Take the `count` oldest segments out of the log (the log start moves to the next one)."""
        victims = self.segments[:count]
        self.segments = self.segments[count:]
        self.log_start_offset = self.segments[0].base_offset
        self.version += 1
        for seg in victims:
            seg.retire()
        return victims

    def retire(self) -> None:
        """The topic is gone or the plane closes: close read handles once no reader holds them."""
        self.retired = True
        self.version += 1
        for seg in self.segments:
            seg.retire()


def bisect_segments(segments: list[Segment], offset: int) -> int:
    lo, hi = 0, len(segments)
    while lo < hi:
        mid = (lo + hi) // 2
        if segments[mid].base_offset <= offset:
            lo = mid + 1
        else:
            hi = mid
    return lo - 1


# ------------------------------------------------------------------------------------------------------------
# Writer thread


class _Append:
    __slots__ = ("log", "batches", "nbytes", "sync", "future")

    def __init__(self, log: DiskLog, batches: list[bytes], sync: bool) -> None:
        self.log = log
        self.batches = batches
        self.nbytes = sum(len(b) for b in batches)
        self.sync = sync
        self.future: concurrent.futures.Future[int] = concurrent.futures.Future()


class _Call:
    __slots__ = ("fn", "args", "future")

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.fn = fn
        self.args = args
        self.future: concurrent.futures.Future[Any] = concurrent.futures.Future()


class _Stop:
    __slots__ = ("logs",)

    def __init__(self, logs: list[DiskLog]) -> None:
        self.logs = logs


class _Chunk:
    """Appends to one partition written since its last settle point (all in the same segment)."""

    __slots__ = ("log", "start_size", "start_offset", "jobs", "infos")

    def __init__(self, log: DiskLog) -> None:
        self.log = log
        self.start_size = log.w.size
        self.start_offset = log.w.next_offset
        self.jobs: list[tuple[_Append, int]] = []  # (job, base offset)
        self.infos: list[tuple[int, int, int, int, int]] = []

    @property
    def sync(self) -> bool:
        return any(job.sync for job, _ in self.jobs)


class Writer:
    """The data plane's disk thread; see the module docstring."""

    def __init__(
        self,
        fs: FS,
        post: Callable[..., None],
        on_applied: Callable[[DiskLog, list[tuple[str, Any]]], None],
        name: str = "dataplane-writer",
    ) -> None:
        self._fs = fs
        self._post = post  # runs a callable on the event loop (call_soon_threadsafe)
        self._on_applied = on_applied  # posted with what a partition got: see DiskLog.apply
        self._cond = threading.Condition(threading.Lock())
        self._queue: list[_Append | _Call | _Stop] = []
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.flushes = 0
        self.fsyncs = 0

    def start(self) -> None:
        self._thread.start()

    # -- submitting (any thread) ------------------------------------------------------------------

    def append(self, log: DiskLog, batches: list[bytes], sync: bool) -> concurrent.futures.Future[int]:
        """Queue one append; the future gets the base offset, or fails with StorageFailure / LogClosed.
        Cancelling it while it still waits in the queue withdraws it."""
        job = _Append(log, batches, sync)
        self._submit(job)
        return job.future

    def call(self, fn: Callable[..., Any], *args: Any) -> concurrent.futures.Future[Any]:
        """Run `fn(*args)` on the writer thread, in order with the appends."""
        job = _Call(fn, args)
        self._submit(job)
        return job.future

    def _submit(self, job: _Append | _Call) -> None:
        with self._cond:
            if not self._stopping:
                self._queue.append(job)
                self._cond.notify()
                return
        job.future.set_exception(LogClosed("the data plane is shutting down"))

    def stop(self, logs: list[DiskLog]) -> None:
        """Finish what is queued, fsync `logs` with unsynced bytes, close their append handles, and end."""
        with self._cond:
            if self._stopping:
                return
            self._stopping = True
            self._queue.append(_Stop(logs))
            self._cond.notify()

    def join(self, timeout: float | None = None) -> bool:
        if self._thread.ident is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    # -- the thread -------------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue:
                    self._cond.wait()
                jobs, self._queue = self._queue, []
            run: list[_Append] = []
            for job in jobs:
                if isinstance(job, _Append):
                    run.append(job)
                    continue
                if run:
                    self._flush(run)
                    run = []
                if isinstance(job, _Stop):
                    self._shutdown(job.logs)
                    return
                self._call(job)
            if run:
                self._flush(run)

    def _call(self, job: _Call) -> None:
        if not job.future.set_running_or_notify_cancel():
            return
        try:
            result = job.fn(*job.args)
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting coroutine
            job.future.set_exception(exc)
        else:
            job.future.set_result(result)

    def _shutdown(self, logs: list[DiskLog]) -> None:
        for partition in logs:
            w = partition.w
            if w.closed:
                continue
            try:
                if w.unsynced:
                    w.file.fsync()
                    w.unsynced = False
            except OSError as exc:
                log.error("fsync of %s at shutdown failed: %s", w.path, exc)
            w.closed = True
            w.file.close()

    # -- appends ----------------------------------------------------------------------------------

    def _flush(self, jobs: list[_Append]) -> None:
        try:
            self._flush_appends(jobs)
        except Exception as exc:  # a bug, not a disk error: keep the thread alive and answer everyone
            log.exception("data plane writer failed")
            for job in jobs:
                if not job.future.done():
                    if job.future.running() or job.future.set_running_or_notify_cancel():
                        job.future.set_exception(_failure("append", exc))

    def _flush_appends(self, jobs: list[_Append]) -> None:
        self.flushes += 1
        by_log: dict[DiskLog, list[_Append]] = {}
        for job in jobs:
            by_log.setdefault(job.log, []).append(job)
        to_sync: list[_Chunk] = []
        for partition, partition_jobs in by_log.items():
            chunk = self._write_all(partition, partition_jobs)
            if chunk is None or not chunk.jobs:
                continue
            if chunk.sync:
                to_sync.append(chunk)  # acks=1 appends of other partitions are answered before these fsyncs
            else:
                self._settle(chunk, sync=False)
        for chunk in to_sync:
            self._settle(chunk, sync=True)

    def _write_all(self, partition: DiskLog, jobs: list[_Append]) -> _Chunk | None:
        w = partition.w
        chunk = _Chunk(partition)
        for job in jobs:
            if not job.future.set_running_or_notify_cancel():
                continue  # the request gave up before its turn
            if w.closed:
                job.future.set_exception(LogClosed("the partition is closed"))
                continue
            if w.size > 0 and w.size + job.nbytes > partition.config.segment_bytes:
                # The full segment must be durable before the next one exists (only the last can be torn).
                if not self._settle(chunk, sync=True):
                    self._fail([job], "the fsync before rolling the segment failed")
                    continue
                try:
                    self._roll(partition)
                except OSError as exc:
                    job.future.set_exception(_failure("rolling the segment", exc))
                    chunk = _Chunk(partition)
                    continue
                chunk = _Chunk(partition)
            try:
                self._cut_if_needed(w)
                base, infos = self._write(w, job)
            except (OSError, ValueError) as exc:  # ValueError: a handle closed under us
                self._cut(w, w.size)  # before answering: the answer means nothing of it is left
                job.future.set_exception(_failure("write", exc))
                continue
            chunk.jobs.append((job, base))
            chunk.infos.extend(infos)
        return chunk

    @staticmethod
    def _write(w: _WriterState, job: _Append) -> tuple[int, list[tuple[int, int, int, int, int]]]:
        buf = bytearray().join(job.batches)
        infos = []
        offset = w.next_offset
        position = w.size
        at = 0
        for data in job.batches:
            header = read_header(data)
            _BASE_OFFSET.pack_into(buf, at, offset)
            last = offset + header.last_offset_delta
            infos.append((offset, last, position, len(data), header.max_timestamp))
            offset = last + 1
            position += len(data)
            at += len(data)
        w.file.write(buf)
        w.size = position
        w.next_offset = offset
        w.unsynced = True
        return infos[0][0], infos

    def _settle(self, chunk: _Chunk, sync: bool) -> bool:
        """Make the chunk visible and answer its appends (after a fsync if `sync`); on a failed fsync cut it
        off and fail its appends. Returns whether it succeeded."""
        partition = chunk.log
        w = partition.w
        if sync and (chunk.jobs or w.unsynced):
            try:
                self.fsyncs += 1
                w.file.fsync()
            except OSError as exc:
                self._cut(w, chunk.start_size)
                w.next_offset = chunk.start_offset
                self._fail([job for job, _ in chunk.jobs], "fsync", exc)
                chunk.jobs, chunk.infos = [], []
                return False
            w.unsynced = False
        if chunk.jobs:
            self._post(self._on_applied, partition, [("batches", chunk.infos)])
            for job, base in chunk.jobs:
                job.future.set_result(base)
            chunk.jobs, chunk.infos = [], []
            chunk.start_size, chunk.start_offset = w.size, w.next_offset
        return True

    @staticmethod
    def _fail(jobs: list[_Append], what: str, exc: BaseException | None = None) -> None:
        failure = _failure(what, exc) if exc is not None else StorageFailure(what)
        for job in jobs:
            job.future.set_exception(failure)

    def _cut(self, w: _WriterState, size: int) -> None:
        w.size = size
        try:
            w.file.truncate(size)
            w.needs_cut = False
        except OSError as exc:
            log.error("cannot cut %s back to %d bytes: %s (retried before the next write)", w.path, size, exc)
            w.needs_cut = True

    @staticmethod
    def _cut_if_needed(w: _WriterState) -> None:
        if w.needs_cut:
            w.file.truncate(w.size)  # raises again while the disk still fails
            w.needs_cut = False

    def _roll(self, partition: DiskLog) -> None:
        w = partition.w
        path = os.path.join(partition.directory, segment_name(w.next_offset))
        new_file = self._fs.open_append(path)
        try:
            self._fs.fsync_dir(partition.directory)
            reader = self._fs.open_read(path)
        except BaseException:
            new_file.close()
            try:
                self._fs.remove(path)  # else recovery finds an empty file named inside this segment
            except OSError:
                pass
            raise
        old, w.file = w.file, new_file
        w.base, w.path, w.size, w.unsynced = w.next_offset, path, 0, False
        old.close()
        self._post(self._on_applied, partition, [("roll", Segment(w.base, path, reader))])


# ------------------------------------------------------------------------------------------------------------
# The topics directory


@dataclasses.dataclass(frozen=True, slots=True)
class TopicMeta:
    name: str
    topic_id: uuid.UUID
    partitions: int
    configs: dict[str, str]

    def encode(self) -> bytes:
        return (
            json.dumps(
                {
                    "version": FORMAT_VERSION,
                    "name": self.name,
                    "topic_id": str(self.topic_id),
                    "partitions": self.partitions,
                    "configs": self.configs,
                },
                sort_keys=True,
                indent=1,
            ).encode()
            + b"\n"
        )

    @classmethod
    def decode(cls, data: bytes) -> TopicMeta:
        doc = json.loads(data)
        if doc.get("version") != FORMAT_VERSION:
            raise ValueError(f"unknown topic metadata version {doc.get('version')!r}")
        configs = doc["configs"]
        if not isinstance(configs, dict) or not all(isinstance(v, str) for v in configs.values()):
            raise ValueError("configs must map names to strings")
        partitions = int(doc["partitions"])
        if partitions <= 0:
            raise ValueError(f"bad partition count {partitions}")
        return cls(str(doc["name"]), uuid.UUID(doc["topic_id"]), partitions, dict(configs))


@dataclasses.dataclass(slots=True)
class LoadedTopic:
    meta: TopicMeta
    logs: list[DiskLog]


class TopicStore:
    """DATA_DIR/topics: the layout in the module docstring. Every method does blocking I/O: call it from the
    writer thread (or, before the writer starts, from a worker thread)."""

    def __init__(self, fs: FS, data_dir: str) -> None:
        self.fs = fs
        self.directory = os.path.join(data_dir, TOPICS_DIR)
        self._lock: Lock | None = None

    # -- open / close -----------------------------------------------------------------------------

    def open(self) -> None:
        self.fs.make_dirs(self.directory)
        try:
            self._lock = self.fs.lock(os.path.join(self.directory, LOCK_FILE))
        except BlockingIOError as exc:
            raise StorageFailure(f"{self.directory} is in use by another server") from exc

    def close(self) -> None:
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def load(self, log_config: Callable[[dict[str, str]], LogConfig]) -> list[LoadedTopic]:
        """Read every topic, remove leftovers (temp files, deleted or orphaned partition directories), recover
        every partition."""
        fs = self.fs
        metas: dict[str, TopicMeta] = {}
        unreadable: set[str] = set()
        partition_dirs: list[tuple[str, int, str]] = []
        leftovers: list[str] = []
        dirty = False
        for name in sorted(fs.listdir(self.directory)):
            path = os.path.join(self.directory, name)
            if name in (LOCK_FILE, PRODUCER_IDS_FILE):
                continue
            if name.endswith(TEMP_SUFFIX):
                fs.remove(path)
                dirty = True
            elif name.endswith(DELETE_SUFFIX):
                leftovers.append(name)
            elif name.endswith(META_SUFFIX):
                topic = name[: -len(META_SUFFIX)]
                try:
                    meta = TopicMeta.decode(fs.read_file(path))
                    if meta.name != topic:
                        raise ValueError(f"names topic {meta.name!r}")
                except (ValueError, KeyError, TypeError) as exc:
                    log.error(
                        "topic metadata %s is unreadable (%s); the topic is not served and its files "
                        "are left alone",
                        path,
                        exc,
                    )
                    unreadable.add(topic)
                    continue
                metas[topic] = meta
            elif m := _PARTITION_DIR_RE.match(name):
                partition_dirs.append((m.group(1), int(m.group(2)), name))
        if dirty:
            fs.fsync_dir(self.directory)
        for name in leftovers:
            log.info("removing deleted partition directory %s", name)
            remove_tree(fs, os.path.join(self.directory, name))
        for topic, partition, name in partition_dirs:
            if topic in unreadable:
                continue
            found = metas.get(topic)
            reason = None
            if found is None:
                reason = "no such topic"
            elif partition >= found.partitions:
                reason = f"the topic has {found.partitions} partitions"
            else:
                found_id = self._partition_topic_id(os.path.join(self.directory, name))
                if found_id is not None and found_id != found.topic_id:
                    reason = f"it belongs to topic id {found_id}, not {found.topic_id}"
            if reason is not None:
                log.warning("removing orphaned partition directory %s: %s", name, reason)
                self._delete_partition_dir(topic, partition, uuid.uuid4())
        if leftovers:
            fs.fsync_dir(self.directory)
        loaded = []
        for meta in metas.values():
            config = log_config(meta.configs)
            logs = [self._open_partition(meta, p, config) for p in range(meta.partitions)]
            loaded.append(LoadedTopic(meta, logs))
        return loaded

    def _partition_topic_id(self, directory: str) -> uuid.UUID | None:
        try:
            text = self.fs.read_file(os.path.join(directory, PARTITION_METADATA)).decode()
            fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
            return parse_kafka_uuid(fields["topic_id"].strip())
        except (OSError, ValueError, KeyError, UnicodeDecodeError):
            return None

    def _open_partition(self, meta: TopicMeta, partition: int, config: LogConfig) -> DiskLog:
        directory = os.path.join(self.directory, partition_dir_name(meta.name, partition))
        if not self.fs.exists(directory):
            log.warning("partition directory %s is missing; starting it empty", directory)
            self._make_partition_dir(meta, partition)
        elif self._partition_topic_id(directory) is None:
            self.fs.write_atomically(os.path.join(directory, PARTITION_METADATA), _partition_metadata(meta))
        recovered = recover_partition(self.fs, directory)
        try:
            writer_file = self.fs.open_append(recovered.segments[-1].path)
        except BaseException:
            for seg in recovered.segments:
                seg.retire()
            raise
        return DiskLog(
            self.fs,
            directory,
            recovered.segments,
            recovered.next_offset,
            config,
            writer_file,
            recovered.truncation,
        )

    # -- topics -----------------------------------------------------------------------------------

    def _make_partition_dir(self, meta: TopicMeta, partition: int) -> None:
        fs = self.fs
        directory = os.path.join(self.directory, partition_dir_name(meta.name, partition))
        fs.makedirs(directory)
        f = fs.open_append(os.path.join(directory, PARTITION_METADATA))
        try:
            f.write(_partition_metadata(meta))
            f.fsync()
        finally:
            f.close()
        fs.open_append(os.path.join(directory, segment_name(0))).close()
        fs.fsync_dir(directory)

    def create_topic(self, meta: TopicMeta, config: LogConfig) -> list[DiskLog]:
        """Make the partition directories, then commit with the metadata file; returns the opened logs."""
        fs = self.fs
        for partition in range(meta.partitions):
            directory = os.path.join(self.directory, partition_dir_name(meta.name, partition))
            if fs.exists(directory):  # an orphan a crash left behind
                self._delete_partition_dir(meta.name, partition, uuid.uuid4())
            self._make_partition_dir(meta, partition)
        fs.fsync_dir(self.directory)
        fs.write_atomically(os.path.join(self.directory, meta.name + META_SUFFIX), meta.encode())
        logs: list[DiskLog] = []
        try:
            for partition in range(meta.partitions):
                logs.append(self._open_partition(meta, partition, config))
        except BaseException:
            for opened in logs:
                opened.w.file.close()
                opened.retire()
            raise
        return logs

    def delete_topic(self, meta: TopicMeta, logs: list[DiskLog]) -> None:
        """Commit the deletion (the metadata file goes, durably), then remove the partitions' files. Raises
        only when the commit fails (the topic is then intact); later failures are logged and the directories
        left to the next start."""
        path = os.path.join(self.directory, meta.name + META_SUFFIX)
        self.fs.remove(path)
        self.fs.fsync_dir(self.directory)
        for log_ in logs:
            log_.w.closed = True
            log_.w.file.close()
        try:
            renamed = []
            for partition in range(meta.partitions):
                renamed.append(self._rename_for_delete(meta.name, partition, meta.topic_id))
            self.fs.fsync_dir(self.directory)
            for directory in renamed:
                if directory is not None:
                    remove_tree(self.fs, directory)
            self.fs.fsync_dir(self.directory)
        except OSError as exc:
            log.error(
                "topic %s is deleted but removing its files failed (the next start finishes): %s",
                meta.name,
                exc,
            )

    def _rename_for_delete(self, topic: str, partition: int, topic_id: uuid.UUID) -> str | None:
        src = os.path.join(self.directory, partition_dir_name(topic, partition))
        if not self.fs.exists(src):
            return None
        dst = os.path.join(self.directory, delete_dir_name(topic, partition, topic_id))
        self.fs.rename_dir(src, dst)
        return dst

    def _delete_partition_dir(self, topic: str, partition: int, unique: uuid.UUID) -> None:
        renamed = self._rename_for_delete(topic, partition, unique)
        self.fs.fsync_dir(self.directory)
        if renamed is not None:
            remove_tree(self.fs, renamed)

    def remove_segments(self, partition: DiskLog, paths: list[str]) -> None:
        """Remove segment files oldest first, each removal durable before the next (retention)."""
        for path in paths:
            self.fs.remove(path)
            self.fs.fsync_dir(partition.directory)

    # -- producer ids -----------------------------------------------------------------------------

    def read_next_producer_id(self) -> int:
        path = os.path.join(self.directory, PRODUCER_IDS_FILE)
        if not self.fs.exists(path):
            return 0
        doc = json.loads(self.fs.read_file(path))
        return int(doc["next_producer_id"])

    def write_next_producer_id(self, value: int) -> None:
        data = json.dumps({"version": FORMAT_VERSION, "next_producer_id": value}).encode() + b"\n"
        self.fs.write_atomically(os.path.join(self.directory, PRODUCER_IDS_FILE), data)


def _partition_metadata(meta: TopicMeta) -> bytes:
    return f"version: 0\ntopic_id: {kafka_uuid(meta.topic_id)}\n".encode()
