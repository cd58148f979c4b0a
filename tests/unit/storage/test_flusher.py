"""One writer thread for many logs (storage.Flusher): every log's appends durable and in order, one cycle for the
appends of many logs, each log's own linger, close and abandon, and a log whose fsync hangs not holding back the
others beyond the flusher's stall budget."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from storage import Flusher, StorageClosedError, StorageError
from storage.fakefs import FaultFS, MemFS
from tests.unit.storage.support import Logs, entries


@pytest.fixture
def flusher() -> Iterator[Flusher]:
    f = Flusher(stall_s=0.1)
    yield f
    f.close(5)


def test_many_logs_share_one_thread_and_each_keeps_its_order(logs: Logs, flusher: Flusher) -> None:
    mem = MemFS()
    fs = FaultFS(mem)
    fs.slow_fsyncs(0.002)
    opened = [logs.open(f"/data/shard-{i}", fs=fs, linger_ms=1, flusher=flusher) for i in range(8)]
    before = threading.active_count()
    results: dict[int, list[int]] = {}

    def worker(i: int) -> None:
        results[i] = [opened[i].append([(b"k%d" % n, b"v%d" % n)]).result(10) for n in range(40)]

    workers = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(30)
    assert threading.active_count() == before  # no thread per log
    for i, lg in enumerate(opened):
        assert results[i] == list(range(40))
        assert [(e.key, e.value) for e in entries(lg)] == [(b"k%d" % n, b"v%d" % n) for n in range(40)]
    # appends of several logs went in one cycle (each log alone would take 8 x 40 = 320)
    assert flusher.cycles < 320, flusher.cycles
    for lg in opened:  # durable once acknowledged: a crash keeps all of it
        lg.close(5)
    crashed = FaultFS(mem.crash())
    for i in range(8):
        reopened = logs.open(f"/data/shard-{i}", fs=crashed, flusher=flusher)
        assert len(entries(reopened)) == 40


def test_a_lone_append_is_not_held_for_the_linger(logs: Logs, flusher: Flusher) -> None:
    lg = logs.open("/data/a", fs=MemFS(), linger_ms=500, flusher=flusher)
    started = time.monotonic()
    assert lg.append([(b"k", b"v")]).result(5) == 0
    assert time.monotonic() - started < 0.4


def test_close_writes_what_is_queued_and_refuses_more(logs: Logs, flusher: Flusher) -> None:
    fs = FaultFS(MemFS())
    fs.slow_fsyncs(0.01)
    lg = logs.open("/data/a", fs=fs, linger_ms=50, flusher=flusher)
    futures = [lg.append([(b"k%d" % n, b"v")]) for n in range(20)]
    lg.close(5)
    assert [f.result(0) for f in futures] == list(range(20))
    with pytest.raises(StorageClosedError):
        lg.append([(b"k", b"v")])


def test_a_hung_log_does_not_hold_back_the_others(logs: Logs, flusher: Flusher) -> None:
    fs = FaultFS(MemFS())
    sick = logs.open("/data/sick", fs=fs, flusher=flusher)
    healthy = logs.open("/data/healthy", fs=fs, flusher=flusher)
    fs.hang_fsyncs(path_contains="sick")
    stuck = sick.append([(b"k", b"v")])
    assert fs.wait_until_hung(5)
    started = time.monotonic()
    assert healthy.append([(b"k", b"v")]).result(5) == 0  # written by a new thread after the stall budget
    assert time.monotonic() - started < 2
    assert flusher.replaced == 1
    more = sick.append([(b"k2", b"v")])  # behind the hung batch of its own log
    time.sleep(0.3)
    assert not stuck.done() and not more.done()
    fs.release_fsyncs()
    assert stuck.result(5) == 0 and more.result(5) == 1
    assert healthy.append([(b"k2", b"v")]).result(5) == 1


def test_an_abandoned_log_fails_its_queued_appends(logs: Logs, flusher: Flusher) -> None:
    fs = FaultFS(MemFS())
    lg = logs.open("/data/a", fs=fs, flusher=flusher)
    fs.hang_fsyncs()
    first = lg.append([(b"k", b"v")])
    assert fs.wait_until_hung(5)
    queued = lg.append([(b"k2", b"v")])
    lg.abandon()
    with pytest.raises(StorageClosedError):
        queued.result(5)
    fs.release_fsyncs()
    assert first.result(5) == 0  # the batch in I/O completes as usual


def test_a_failed_fsync_fails_only_its_logs_batch(logs: Logs, flusher: Flusher) -> None:
    mem = MemFS()
    fs = FaultFS(mem)
    bad = logs.open("/data/bad", fs=fs, flusher=flusher)
    good = logs.open("/data/good", fs=fs, flusher=flusher)
    fs.fail_fsyncs(times=1, path_contains="bad")
    with pytest.raises(StorageError):
        bad.append([(b"k", b"v")]).result(5)
    assert good.append([(b"k", b"v")]).result(5) == 0
    assert bad.append([(b"k", b"v2")]).result(5) == 0  # cut back: the failed entry is not in the log
    assert [(e.key, e.value) for e in entries(bad)] == [(b"k", b"v2")]
