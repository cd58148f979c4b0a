"""Group commit: one writer, one write and one fsync per batch, futures complete only after their fsync."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future

import pytest

from storage.fakefs import FaultFS, MemFS
from storage.format import StorageError, encode_entry
from tests.unit.storage.support import DIR, Logs, entries, kv, seg_path

ZERO = "00000000000000000000.log"


def test_concurrent_appends_share_fsyncs_and_complete_only_when_durable(logs: Logs) -> None:
    mem = MemFS()
    fs = FaultFS(mem)
    fs.slow_fsyncs(0.002)  # like a disk: appends that arrive meanwhile queue up for the next flush
    lg = logs.open(DIR, fs=fs, linger_ms=1)
    fsyncs_before = fs.counts["fsync"]
    durable_at_ack: dict[int, int] = {}
    lock = threading.Lock()

    def on_done(fut: Future[int]) -> None:
        with lock:
            durable_at_ack[fut.result()] = mem.durable_size(seg_path(ZERO))

    threads, per_thread, results = 8, 25, {}

    def worker(t: int) -> None:
        mine = []
        for i in range(per_thread):
            fut = lg.append([(b"t%d" % t, b"%d" % i), (b"t%d-again" % t, b"%d" % i)])
            fut.add_done_callback(on_done)
            mine.append(fut.result(10))
        results[t] = mine

    workers = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(30)
    appends = threads * per_thread
    fsyncs = fs.counts["fsync"] - fsyncs_before
    assert len(durable_at_ack) == appends
    assert fsyncs < appends / 2, fsyncs  # group commit
    assert lg.stats().flushes == fsyncs and lg.stats().appends == appends

    # Every append's entries are adjacent and in order; each thread's appends are in its order; and when a
    # future completed, the bytes through its last entry were already durable.
    replayed = entries(lg)
    assert [e.seq for e in replayed] == list(range(2 * appends))
    end, ends = 0, {}
    for e in replayed:
        end += len(encode_entry(e.seq, e.key, e.value, e.timestamp_ms))
        ends[e.seq] = end
    for t, seqs in results.items():
        assert seqs == sorted(seqs)
        for i, last in enumerate(seqs):
            assert replayed[last - 1].key == b"t%d" % t and replayed[last].key == b"t%d-again" % t
            assert replayed[last].value == b"%d" % i
            assert durable_at_ack[last] >= ends[last]


def test_a_lone_append_on_an_idle_log_does_not_linger(logs: Logs, memfs: MemFS) -> None:
    lg = logs.open(fs=memfs, linger_ms=10_000)
    for i in range(3):
        started = time.monotonic()
        lg.append([kv(i)]).result(5)
        assert time.monotonic() - started < 2.0


def test_appends_queued_behind_a_flush_go_together_in_the_next(logs: Logs) -> None:
    fs = FaultFS()
    lg = logs.open(DIR, fs=fs, linger_ms=0)
    before_writes, before_fsyncs = fs.counts["write"], fs.counts["fsync"]
    fs.hang_fsyncs()
    first = lg.append([kv(0)])
    assert fs.wait_until_hung(5)
    queued = [lg.append([kv(i)]) for i in range(1, 6)]
    time.sleep(0.05)
    assert not first.done() and not any(f.done() for f in queued)
    fs.release_fsyncs()
    assert first.result(5) == 0
    assert [f.result(5) for f in queued] == [1, 2, 3, 4, 5]
    assert fs.counts["write"] - before_writes == 2  # one write for the first, one for the five queued
    assert fs.counts["fsync"] - before_fsyncs == 2


def test_linger_gathers_appends_that_arrive_while_busy(logs: Logs) -> None:
    fs = FaultFS()
    lg = logs.open(DIR, fs=fs, linger_ms=1000)
    before = fs.counts["fsync"]
    fs.hang_fsyncs()
    first = lg.append([kv(0)])
    assert fs.wait_until_hung(5)
    early = lg.append([kv(1)])  # queued while the first flush is in progress
    fs.release_fsyncs()
    first.result(5)
    time.sleep(0.05)  # the writer is now lingering for company for `early`
    late = lg.append([kv(2)])
    assert early.result(5) == 1 and late.result(5) == 2
    assert fs.counts["fsync"] - before == 2


def test_max_batch_bytes_cuts_the_linger_short(logs: Logs) -> None:
    fs = FaultFS()
    lg = logs.open(DIR, fs=fs, linger_ms=10_000, max_batch_bytes=1)
    fs.hang_fsyncs()
    first = lg.append([kv(0)])
    assert fs.wait_until_hung(5)
    queued = lg.append([kv(1)])
    fs.release_fsyncs()
    started = time.monotonic()
    assert first.result(5) == 0 and queued.result(5) == 1
    assert time.monotonic() - started < 2.0


def test_settled_hands_over_each_flush_once_in_append_order(logs: Logs) -> None:
    """`settled` gets every flush's futures in one call, after each of them is done: an event loop needs one
    wake-up per flush, not one per append."""
    mem = MemFS()
    fs = FaultFS(mem)
    fs.slow_fsyncs(0.002)
    calls: list[list[Future[int]]] = []
    lock = threading.Lock()

    def settled(futures: list[Future[int]]) -> None:
        assert all(f.done() for f in futures)
        with lock:
            calls.append(futures)

    lg = logs.open(DIR, fs=fs, linger_ms=1, settled=settled)
    futures = [lg.append([kv(i)]) for i in range(50)]
    assert [f.result(10) for f in futures] == list(range(50))
    deadline = time.monotonic() + 5
    while sum(len(c) for c in calls) < 50 and time.monotonic() < deadline:
        time.sleep(0.01)
    handed = [f for call in calls for f in call]
    assert handed == futures  # each once, in append order
    assert len(calls) == lg.stats().flushes < 50

    # Appends failed by abandon() are handed over too.
    fs.hang_fsyncs()
    stuck = lg.append([kv(50)])
    assert fs.wait_until_hung(5)
    queued = lg.append([kv(51)])
    lg.abandon()
    assert queued.exception(5) is not None
    assert calls[-1] == [queued]
    fs.release_fsyncs()
    stuck.result(5)


def test_append_settled_hands_back_tickets_instead_of_futures(logs: Logs) -> None:
    """`append_settled` (no future per append) hands its ticket to `settled` in the flush that settles it: the
    last sequence number once durable, the StorageError when the fsync failed or the log was abandoned."""
    fs = FaultFS(MemFS())
    fs.slow_fsyncs(0.002)
    calls: list[list[object]] = []
    done = threading.Condition()

    def settled(tickets: list[object]) -> None:
        with done:
            calls.append(tickets)
            done.notify_all()

    def handed(n: int) -> list[object]:
        with done:
            assert done.wait_for(lambda: sum(len(c) for c in calls) >= n, 5)
            return [t for call in calls for t in call]

    lg = logs.open(DIR, fs=fs, linger_ms=1, settled=settled)
    tickets = [lg.append_settled([kv(i), kv(i + 100)]) for i in range(0, 40, 2)]
    assert handed(20) == tickets
    assert all(t.exception() is None for t in tickets)
    assert [t.result() for t in tickets] == list(range(1, 40, 2))  # the last entry of each append
    assert [e[0] for e in entries(lg)] == list(range(40))  # every entry durable, in order

    fs.fail_fsyncs(times=1)
    failed = lg.append_settled([kv(40)])
    assert handed(21)[-1] is failed
    assert isinstance(failed.exception(), StorageError)
    with pytest.raises(StorageError):
        failed.result()

    fs.hang_fsyncs()
    stuck = lg.append_settled([kv(41)])
    assert fs.wait_until_hung(5)
    queued = lg.append_settled([kv(42)])
    lg.abandon()
    assert handed(22)[-1] is queued and isinstance(queued.exception(), StorageError)
    fs.release_fsyncs()
    assert handed(23)[-1] is stuck


def test_append_settled_needs_the_settled_callback(logs: Logs, memfs: MemFS) -> None:
    lg = logs.open(DIR, fs=memfs)
    with pytest.raises(RuntimeError):
        lg.append_settled([kv(0)])
