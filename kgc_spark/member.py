"""The Spark driver's group membership: a confluent-kafka consumer that joins the group and never fetches.

A streaming query's driver (the long-lived Python process that holds the DataSourceStreamReader between
micro-batches) owns one GroupMember. It subscribes to the query's topics with the group's id, so the
coordinator sees an ordinary consumer-group member (and, with a group.instance.id, a static one), and the
group's assignor decides which partitions this query plans. The consumer pauses every partition it is given:
the rows are read by the executors with their own assign()-mode consumers, so fetching here would only waste
memory and bandwidth.

One background thread owns the consumer: it calls poll() for as long as the member lives, and runs every other
call on the consumer (offsets, commits, close) between two polls. librdkafka heartbeats on its own thread, but
it serves rebalances (and resets its max.poll.interval.ms clock) only inside poll(), and Spark calls into the
reader only when it plans a batch, which can be minutes apart with a long trigger interval. Calls are not
made from Spark's thread while another thread polls: with confluent-kafka 2.16, get_watermark_offsets() from
one thread never returns (its timeout included) while a second thread sits in poll().

Spark does not call the reader's stop() when a query stops: it ends the planner process with SIGTERM, on
which the member closes (close_on_sigterm). A dynamic member then leaves the group; a static member of the
classic protocol sends nothing and is replaced in place when the query restarts under the same name; one of
the consumer protocol leaves with epoch -2, keeping its partitions for the next member with its instance id.
A member killed outright leaves nothing: the classic protocol replaces it all the same, the consumer protocol
refuses its successor (UNRELEASED_INSTANCE_ID) until its session expires, and the successor starts over
until then (`unreleased_wait_s`).

Rebalances are eager (the classic protocol with an eager assignor: every partition is revoked, then the new
assignment is given whole) or incremental (`group.protocol=consumer`, KIP-848, or the classic protocol with
`cooperative-sticky`: only the partitions that move are revoked or added). librdkafka refuses assign() in an
incremental rebalance, so the member follows the protocol the configuration selects.
"""

from __future__ import annotations

import logging
import os
import queue
import signal
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from typing import TypeVar

from confluent_kafka import OFFSET_INVALID, Consumer, KafkaError, KafkaException, TopicPartition

log = logging.getLogger("kgc_spark.member")
_UNRELEASED = KafkaError(KafkaError.UNRELEASED_INSTANCE_ID).str()

TP = tuple[str, int]
T = TypeVar("T")


class GroupMember:
    """A confluent-kafka Consumer in the group, with its assignment kept current by a polling thread."""

    def __init__(
        self,
        config: Mapping[str, object],
        topics: Iterable[str],
        poll_interval_s: float = 0.05,
        unreleased_wait_s: float = 0.0,
    ) -> None:
        conf = dict(config)
        conf.setdefault("enable.auto.commit", False)
        conf.setdefault("enable.auto.offset.store", False)
        self.incremental = incremental_rebalances(conf)
        self._conf = conf
        self._consumer = Consumer(conf)
        self._topics = list(topics)
        # KIP-848: a static member whose previous incarnation has not left (a driver that was killed) is refused
        # with UNRELEASED_INSTANCE_ID, fatal in librdkafka, until the old one's session expires: the member
        # starts over for this long before it gives up (see _run).
        self._unreleased_until = time.monotonic() + unreleased_wait_s
        self.unreleased_retries = 0
        self._poll_interval_s = poll_interval_s
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._assignment: frozenset[TP] = frozenset()
        self._assigned_once = False
        self._closed = False
        self._calls: queue.SimpleQueue[tuple[Callable[[], object], Future]] = queue.SimpleQueue()
        self.rebalances = 0
        self.last_error: KafkaError | None = None
        self.fatal_error: KafkaError | None = None  # e.g. FENCED_INSTANCE_ID: another process took our place
        self._subscribe()
        self._thread = threading.Thread(target=self._run, name="kgc-spark-group-member", daemon=True)
        self._thread.start()

    def _subscribe(self) -> None:
        self._consumer.subscribe(self._topics, on_assign=self._on_assign, on_revoke=self._on_revoke)

    # -- rebalance callbacks (run inside poll(), on the polling thread) --------------------------------------

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # Assign, then pause at once: this consumer only holds the membership; executors read the data.
        # Incremental: `partitions` are the ones added (perhaps none, when only a revocation was owed).
        given = frozenset((tp.topic, tp.partition) for tp in partitions)
        if self.incremental:
            consumer.incremental_assign(partitions)
        else:
            consumer.assign(partitions)
        if partitions:
            consumer.pause(partitions)
        with self._changed:
            self._assignment = self._assignment | given if self.incremental else given
            self._assigned_once = True
            self.rebalances += 1
            self._changed.notify_all()
        log.info("assigned %s, holding %s", sorted(given), sorted(self._assignment))

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        taken = frozenset((tp.topic, tp.partition) for tp in partitions)
        with self._changed:
            self._assignment = self._assignment - taken if self.incremental else frozenset()
            self._changed.notify_all()
        if self.incremental:
            consumer.incremental_unassign(partitions)
        else:
            consumer.unassign()
        log.info("revoked %s", sorted(taken))

    def _run(self) -> None:
        while not self._closed:
            self._serve_calls()
            if self._closed:
                break
            try:
                msg = self._consumer.poll(self._poll_interval_s)
            except Exception as exc:  # noqa: BLE001 - reported as the member's fatal error
                # A rebalance callback failed (poll raises what it raised): the assignment is no longer known, so
                # fail the query with the reason rather than let this thread die and the query wait.
                if isinstance(exc, KafkaException) and isinstance(exc.args[0], KafkaError):
                    err = exc.args[0]
                else:
                    err = KafkaError(KafkaError._FAIL, f"a rebalance callback failed: {exc!r}", fatal=True)
                self._fail(err, " in a rebalance")
                break
            if msg is not None and msg.error() is not None:
                err = msg.error()
                self.last_error = err
                fatal = err.fatal() or err.code() == KafkaError._FATAL
                if fatal and self._start_over(err):
                    continue
                if fatal:  # librdkafka's fatal errors
                    self._fail(err, "")
                    break
                # Other errors are informational (librdkafka retries by itself).
                log.warning("group member: %s", err)
        self._serve_calls()  # fail whatever is still queued

    def _fail(self, err: KafkaError, where: str) -> None:
        """The consumer is unusable: every later call fails with `err`, so the query stops with the reason instead
        of planning partitions it no longer owns."""
        log.error("group member failed%s: %s", where, err)
        with self._changed:
            self.last_error = self.fatal_error = err
            self._assignment = frozenset()
            self._changed.notify_all()

    def _start_over(self, err: KafkaError) -> bool:
        """After UNRELEASED_INSTANCE_ID before the first assignment, within the wait: a new consumer with the same
        instance id, a second later. True if it was made."""
        if self._assigned_once or time.monotonic() >= self._unreleased_until or _UNRELEASED not in err.str():
            return False
        self.unreleased_retries += 1
        if self.unreleased_retries == 1:
            log.warning(
                "group member: %s; retrying until the previous member with this group.instance.id leaves or its"
                " session times out",
                err.str(),
            )
        self._consumer.close()
        time.sleep(1.0)
        self._consumer = Consumer(self._conf)
        self._subscribe()
        return True

    def _serve_calls(self) -> None:
        while True:
            try:
                fn, fut = self._calls.get_nowait()
            except queue.Empty:
                return
            if not fut.set_running_or_notify_cancel():
                continue
            if self.fatal_error is not None and fn != self._close_now:
                fut.set_exception(KafkaException(self.fatal_error))
                continue
            if self._closed and fn != self._close_now:
                fut.set_exception(RuntimeError("the group member is closed"))
                continue
            try:
                fut.set_result(fn())
            except BaseException as exc:  # handed to the caller
                fut.set_exception(exc)

    def _call(self, fn: Callable[[], T], timeout_s: float) -> T:
        """Run fn on the polling thread (the consumer's only user) and wait for its result."""
        if threading.current_thread() is self._thread:
            return fn()
        if self.fatal_error is not None:
            raise KafkaException(self.fatal_error)
        if not self._thread.is_alive():
            raise RuntimeError("the group member is closed")
        fut: Future = Future()
        self._calls.put((fn, fut))
        return fut.result(timeout=timeout_s + 10.0 * self._poll_interval_s + 5.0)

    # -- what the stream reader asks -------------------------------------------------------------------------

    @property
    def assigned_once(self) -> bool:
        with self._lock:
            return self._assigned_once

    def assignment(self) -> frozenset[TP]:
        with self._lock:
            return self._assignment

    def wait_for_assignment(self, timeout_s: float) -> frozenset[TP]:
        """The current assignment, once the first rebalance finished (or whatever it is after timeout_s)."""
        with self._changed:
            self._changed.wait_for(
                lambda: (self._assigned_once and bool(self._assignment)) or self.fatal_error is not None,
                timeout=timeout_s,
            )
            return self._assignment

    def high_watermarks(self, partitions: Iterable[TP], timeout_s: float) -> dict[TP, int]:
        """The log-end offset of each partition, asked of the broker now (ListOffsets), not from a cache."""
        return {tp: high for tp, (_low, high) in self.watermarks(partitions, timeout_s).items()}

    def low_watermarks(self, partitions: Iterable[TP], timeout_s: float) -> dict[TP, int]:
        return {tp: low for tp, (low, _high) in self.watermarks(partitions, timeout_s).items()}

    def watermarks(self, partitions: Iterable[TP], timeout_s: float) -> dict[TP, tuple[int, int]]:
        tps = list(partitions)

        def query() -> dict[TP, tuple[int, int]]:
            out = {}
            for topic, partition in tps:
                out[(topic, partition)] = self._consumer.get_watermark_offsets(
                    TopicPartition(topic, partition), timeout=timeout_s, cached=False
                )
            return out

        return self._call(query, timeout_s * max(1, len(tps)))

    def offsets_for_times(self, stamps: Mapping[TP, int], timeout_s: float) -> dict[TP, int]:
        """The first offset at or after each timestamp (ListOffsets by time); -1 where there is none."""
        return self._call(lambda: offsets_for_times(self._consumer, stamps, timeout_s), timeout_s)

    def committed(self, partitions: Iterable[TP], timeout_s: float) -> dict[TP, int]:
        """The group's committed offsets (OffsetFetch) of these partitions (those that have one)."""
        tps = [TopicPartition(t, p) for t, p in partitions]
        if not tps:
            return {}
        result = self._call(lambda: self._consumer.committed(tps, timeout=timeout_s), timeout_s)
        return {
            (tp.topic, tp.partition): tp.offset
            for tp in result
            if tp.error is None and tp.offset != OFFSET_INVALID and tp.offset >= 0
        }

    def commit(self, offsets: Mapping[TP, int]) -> dict[TP, int]:
        """Commit these offsets for the partitions this member owns now; return what was committed.

        Offsets of partitions that moved to another member are not committed: their new owner's progress is
        the group's progress, and this member's late commit would move it backwards or forwards under
        its feet.
        A commit refused because a rebalance is under way is dropped, not raised: the next batch's commit
        carries the same or later offsets.
        """
        owned = self.assignment()
        mine = {tp: off for tp, off in offsets.items() if tp in owned}
        if not mine:
            return {}
        tps = [TopicPartition(t, p, off) for (t, p), off in sorted(mine.items())]
        try:
            self._call(lambda: self._consumer.commit(offsets=tps, asynchronous=False), 60.0)
        except KafkaException as exc:
            log.warning("commit of %s failed: %s", mine, exc)
            return {}
        return mine

    def close(self, timeout_s: float = 30.0) -> None:
        """Leave the group (a static member only closes: it stays in the group until its session expires)."""
        if self._closed:
            return
        if self._thread.is_alive():
            self._call(self._close_now, timeout_s)
            self._thread.join(timeout_s)
        else:
            self._close_now()

    def _close_now(self) -> None:
        self._closed = True
        self._consumer.close()

    def close_on_sigterm(self, timeout_s: float = 10.0) -> bool:
        """Close this member when the process gets SIGTERM (how Spark ends a query's planner process, without
        calling the reader's stop()), then let the signal do what it did before. A closed consumer leaves the
        group: a dynamic member at once, so the others need not wait for its session to expire; a static one
        of the consumer protocol with epoch -2, so its partitions wait for its next incarnation, which is then
        not refused with UNRELEASED_INSTANCE_ID (a static member of the classic protocol sends nothing and
        keeps its place as before). Only from the main thread (Python's rule for signal handlers); False if
        not installed."""
        if threading.current_thread() is not threading.main_thread():
            return False
        previous = signal.getsignal(signal.SIGTERM)

        def on_sigterm(signum: int, _frame: object) -> None:
            try:
                self.close(timeout_s)
            except Exception:  # noqa: BLE001 - the process is ending either way
                log.exception("closing the group member on SIGTERM")
            finally:
                signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
                os.kill(os.getpid(), signum)

        signal.signal(signal.SIGTERM, on_sigterm)
        return True


def incremental_rebalances(config: Mapping[str, object]) -> bool:
    """Whether librdkafka runs this consumer's rebalances incrementally: the consumer group protocol (KIP-848),
    or the classic protocol with the cooperative-sticky assignor (librdkafka refuses a list that mixes it with
    eager assignors)."""
    if str(config.get("group.protocol", "classic")).strip().lower() == "consumer":
        return True
    strategies = str(config.get("partition.assignment.strategy", "range,roundrobin"))
    return "cooperative-sticky" in {s.strip().lower() for s in strategies.split(",")}


def topic_partitions(consumer: Consumer, topics: tuple[str, ...], timeout_s: float) -> list[TP]:
    """Every partition of these topics (a topic that does not exist has none)."""
    out: list[TP] = []
    for topic in topics:
        metadata = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
        if metadata is None or metadata.error is not None:
            continue
        out.extend((topic, p) for p in sorted(metadata.partitions))
    return out


def offsets_for_times(consumer: Consumer, stamps: Mapping[TP, int], timeout_s: float) -> dict[TP, int]:
    """The first offset at or after each timestamp (ListOffsets by time); -1 where there is none."""
    if not stamps:
        return {}
    query = [TopicPartition(t, p, ts) for (t, p), ts in sorted(stamps.items())]
    found = consumer.offsets_for_times(query, timeout=timeout_s)
    out = {}
    for tp in found:
        if tp.error is not None:
            raise KafkaException(tp.error)
        out[(tp.topic, tp.partition)] = tp.offset if tp.offset >= 0 else -1
    return out
