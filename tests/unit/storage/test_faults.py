"""Write and fsync failures, hanging fsyncs, torn writes and process deaths."""

from __future__ import annotations

import errno
import os
import time
from concurrent.futures import Future

import pytest

from storage import Log, OsFS, StorageError, StorageFullError, StorageIOError
from storage.fakefs import FaultFS, MemFS
from storage.format import encode_entry
from tests.unit.storage.support import DIR, Logs, kv, pairs, seg_path, segment_names

ZERO = "00000000000000000000.log"


def _setup(logs: Logs, **kwargs: object) -> tuple[FaultFS, MemFS, Log]:
    mem = MemFS()
    fs = FaultFS(mem)
    return fs, mem, logs.open(DIR, fs=fs, **kwargs)


@pytest.mark.parametrize(
    ("code", "keep_bytes", "error"),
    [
        (errno.ENOSPC, 0, StorageFullError),
        (errno.ENOSPC, 10, StorageFullError),  # a torn write: part of it landed
        (errno.EIO, 0, StorageIOError),
        (errno.EIO, 45, StorageIOError),
    ],
)
def test_write_failure_fails_the_batch_and_leaves_nothing_torn(
    logs: Logs, code: int, keep_bytes: int, error: type[StorageError]
) -> None:
    fs, mem, lg = _setup(logs)
    assert lg.append([kv(0)]).result(5) == 0
    size = mem.size(seg_path(ZERO))
    fs.fail_writes(code, keep_bytes=keep_bytes)
    failed = [lg.append([kv(1), kv(2)]), lg.append([kv(3)])]
    for fut in failed:
        with pytest.raises(error) as info:
            fut.result(5)
        assert info.value.errno == code and info.value.op == "write"
    assert mem.size(seg_path(ZERO)) == size  # the torn bytes were truncated away
    fs.clear()
    assert lg.append([kv(4)]).result(5) == 1  # failed entries gave their sequence numbers back
    assert lg.stats().failed_flushes >= 1
    lg = logs.reopen(lg, fs)
    assert lg.recovery.clean
    assert pairs(lg) == [kv(0), kv(4)]  # exactly the acknowledged entries
    assert pairs(logs.reopen(lg, mem.crash())) == [kv(0), kv(4)]


@pytest.mark.parametrize("code", [errno.EIO, errno.ENOSPC])
def test_fsync_failure_fails_the_batch_and_its_bytes_are_removed(logs: Logs, code: int) -> None:
    fs, mem, lg = _setup(logs)
    lg.append([kv(0)]).result(5)
    size = mem.size(seg_path(ZERO))
    fs.fail_fsyncs(code, times=1)
    with pytest.raises(StorageError) as info:
        lg.append([kv(1)]).result(5)
    assert info.value.op == "fsync" and info.value.errno == code
    assert mem.size(seg_path(ZERO)) == size
    assert mem.durable_size(seg_path(ZERO)) == size
    assert lg.append([kv(2)]).result(5) == 1
    assert pairs(logs.reopen(lg, fs)) == [kv(0), kv(2)]


def test_when_truncating_after_a_failure_fails_too_the_log_retries_before_writing(logs: Logs) -> None:
    fs, mem, lg = _setup(logs)
    lg.append([kv(0)]).result(5)
    size = mem.size(seg_path(ZERO))
    fs.fail_writes(errno.EIO, keep_bytes=7)
    fs.fail_op("truncate", errno.EIO)
    with pytest.raises(StorageIOError):
        lg.append([kv(1)]).result(5)
    assert mem.size(seg_path(ZERO)) == size + 7  # torn bytes are still there ...
    fs.clear()
    fs.fail_op("truncate", errno.EIO)  # writes would work now; truncation still fails
    with pytest.raises(StorageIOError) as info:
        lg.append([kv(2)]).result(5)  # ... so nothing is written after them
    assert info.value.op == "truncate"
    assert mem.size(seg_path(ZERO)) == size + 7
    fs.clear()
    assert lg.append([kv(3)]).result(5) == 1
    assert pairs(logs.reopen(lg, fs)) == [kv(0), kv(3)]
    assert logs.opened[-1].recovery.clean


def test_a_hanging_fsync_holds_futures_until_released(logs: Logs) -> None:
    fs, mem, lg = _setup(logs, linger_ms=0)
    fs.hang_fsyncs()
    first = lg.append([kv(0)])
    assert fs.wait_until_hung(5)
    later = [lg.append([kv(i)]) for i in range(1, 4)]
    time.sleep(0.1)
    assert not first.done() and not any(f.done() for f in later)
    assert mem.durable_size(seg_path(ZERO)) == 0
    fs.release_fsyncs()
    assert first.result(5) == 0
    assert [f.result(5) for f in later] == [1, 2, 3]
    assert pairs(lg) == [kv(i) for i in range(4)]


def test_close_times_out_while_a_fsync_hangs_and_can_be_retried(logs: Logs) -> None:
    fs, _, lg = _setup(logs)
    fs.hang_fsyncs()
    fut = lg.append([kv(0)])
    assert fs.wait_until_hung(5)
    with pytest.raises(StorageError):
        lg.close(timeout=0.05)
    fs.release_fsyncs()
    lg.close(timeout=5)
    assert fut.result(0) == 0


def test_failing_roll_fails_the_batch_and_the_log_goes_on(logs: Logs) -> None:
    size = len(encode_entry(0, *kv(0), 0))
    fs, mem, lg = _setup(logs, segment_bytes=2 * size)
    lg.append([kv(0), kv(1)]).result(5)
    fs.fail_op("fsync_dir", errno.EIO, times=1)
    with pytest.raises(StorageIOError) as info:
        lg.append([kv(2)]).result(5)
    assert info.value.op == "roll"
    assert lg.append([kv(3)]).result(5) == 2
    assert segment_names(mem) == [ZERO, f"{2:020d}.log"]
    assert pairs(logs.reopen(lg, fs, segment_bytes=2 * size)) == [kv(0), kv(1), kv(3)]


def test_torn_write_then_process_death_on_real_files(logs: Logs, tmp_path: os.PathLike[str]) -> None:
    d = os.path.join(str(tmp_path), "log")
    fs = FaultFS(OsFS())
    lg = logs.open(d, fs=fs)
    lg.append([kv(0), kv(1)]).result(5)
    fs.torn_write(17)
    with pytest.raises(StorageError):
        lg.append([kv(2)]).result(5)
    lg.close()  # the process is "dead": nothing more reaches the file, not even the truncation
    assert os.path.getsize(os.path.join(d, ZERO)) == 2 * len(encode_entry(0, *kv(0), 0)) + 17
    again = logs.open(d, fs=OsFS())
    assert pairs(again) == [kv(0), kv(1)]
    assert again.recovery.truncation is not None and again.recovery.truncation.bytes == 17


def _crash_run(ops_allowed: int) -> tuple[MemFS, list[tuple[bytes, bytes]], list[list[tuple[bytes, bytes]]]]:
    """Appends (with rolling) until the process dies after `ops_allowed` mutating operations.

    Returns the filesystem, the acknowledged entries in order, and every attempted batch in order.
    """
    mem = MemFS()
    fs = FaultFS(mem)
    size = len(encode_entry(0, *kv(0), 0))
    lg = Log.open(DIR, fs=fs, segment_bytes=3 * size, linger_ms=0)
    fs.crash_after_ops(ops_allowed)
    acked: list[tuple[bytes, bytes]] = []
    attempted: list[list[tuple[bytes, bytes]]] = []
    try:
        for i in range(0, 12, 2):
            batch = [kv(i), kv(i + 1)]
            attempted.append(batch)
            fut: Future[int] = lg.append(batch)
            try:
                fut.result(5)
            except StorageError:
                break
            acked.extend(batch)
    finally:
        lg.close(timeout=5)
    return mem, acked, attempted


def test_process_death_at_every_step_keeps_every_acknowledged_entry(logs: Logs) -> None:
    # Count the mutating operations of a clean run to know every point a death can hit.
    probe = FaultFS(MemFS())
    size = len(encode_entry(0, *kv(0), 0))
    lg = Log.open(DIR, fs=probe, segment_bytes=3 * size, linger_ms=0)
    start = len(probe.events)
    for i in range(0, 12, 2):
        lg.append([kv(i), kv(i + 1)]).result(5)
    lg.close()
    total = len(probe.events) - start
    assert total > 20

    for allowed in range(total + 1):
        mem, acked, attempted = _crash_run(allowed)
        for view in (mem, mem.crash()):  # the OS survived / the power was cut
            lg = logs.open(DIR, fs=view)
            got = pairs(lg)
            # Every acknowledged entry is there, in order; past them at most the one batch in flight.
            assert got[: len(acked)] == acked, allowed
            extra = got[len(acked) :]
            in_flight = attempted[len(acked) // 2] if len(attempted) > len(acked) // 2 else []
            assert extra == in_flight[: len(extra)], allowed
            assert [e.seq for e in lg.replay()] == list(range(len(got)))
            lg.append([(b"after", b"recovery")]).result(5)
            lg.close()
