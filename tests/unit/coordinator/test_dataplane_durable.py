"""The embedded data plane with a data directory: partitions in segment files that survive a restart.

Tests use real temporary directories (OsFS), MemFS (to ask what a power cut would leave) and FaultFS (to make
writes, fsyncs and reads fail, hang or crash the simulated process).
"""

from __future__ import annotations

import asyncio
import errno
import gzip
import io
import os
import random
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from kio.records.schema import NewRecordBatch, Record
from kio.records.writers import write_new_batch
from kio.static.primitive import i8, i16, i32, i64

from coordinator.config import Config
from coordinator.dataplane import disk
from coordinator.dataplane.batches import read_header, with_base_offset
from coordinator.dataplane.embedded import EmbeddedDataPlane
from protocol.api import ApiTable
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from storage import FS, OsFS
from storage.fakefs import FaultFS, MemFS
from tests.support.waits import until

from .test_dataplane import BASE_TS, NODE, Harness, batch, split_batches, ts

MEM_DIR = "/mem/data"


class DurableHarness(Harness):
    """A Harness whose data plane keeps its partitions in `data_dir` on `fs`."""

    def __init__(self, data_dir: str, fs: FS | None = None, **settings: Any) -> None:
        self.config = Config(settings)
        self.data_dir = data_dir
        self.fs = fs
        self.plane = EmbeddedDataPlane(self.config, lambda: NODE, data_dir=data_dir, fs=fs)
        self.table = ApiTable()
        self.plane.register(self.table)
        self._correlation = 0

    async def produce_many(
        self, topic: str, partition: int, batches: list[bytes], acks: int = -1, timeout: int = 5000
    ) -> Any:
        response = await self.call(
            ApiKey.PRODUCE,
            9,
            {
                "acks": acks,
                "timeout": timeout,
                "topic_data": [
                    {"name": topic, "partition_data": [{"index": partition, "records": b"".join(batches)}]}
                ],
            },
        )
        return None if response is None else response.responses[0].partition_responses[0]

    async def fetch_all(self, topic: str, partition: int, start: int | None = None) -> bytes:
        """Every batch from `start` (default: the log start) to the high watermark, a fetch at a time."""
        offset = self.plane._topics[topic].partitions[partition].log_start_offset if start is None else start
        out = []
        while offset < self.plane.log_end_offset(topic, partition):
            answer = await self.fetch(topic, partition, offset, partition_max_bytes=1000)
            assert answer.error_code == ErrorCode.none, answer
            assert answer.records
            out.append(answer.records)
            offset = read_header(split_batches(answer.records)[-1]).last_offset + 1
        return b"".join(out)


@pytest.fixture
async def open_plane() -> AsyncIterator[Callable[..., Any]]:
    """Opens (starts) durable harnesses; closes whatever a test left open."""
    harnesses: list[DurableHarness] = []

    async def open_harness(data_dir: str, fs: FS | None = None, **settings: Any) -> DurableHarness:
        h = DurableHarness(data_dir, fs, **settings)
        await h.plane.start()
        harnesses.append(h)
        return h

    yield open_harness
    for h in harnesses:
        if isinstance(h.fs, FaultFS):
            h.fs.clear()
        await h.plane.close()


@pytest.fixture(params=["os", "mem"])
def where(request: pytest.FixtureRequest, tmp_path: Any) -> tuple[FS, str]:
    if request.param == "os":
        return OsFS(), str(tmp_path / "data")
    fs = MemFS()
    fs.makedirs(MEM_DIR)
    return fs, MEM_DIR


def memfs() -> MemFS:
    fs = MemFS()
    fs.makedirs(MEM_DIR)
    return fs


def gzip_batch(*values: bytes, first_ts: int = BASE_TS) -> bytes:
    records = tuple(
        Record(
            attributes=i8(0), timestamp=ts(first_ts + n * 1000), offset=i64(n), key=None, value=v, headers=()
        )
        for n, v in enumerate(values)
    )
    plain = io.BytesIO()
    write_new_batch(
        plain,
        NewRecordBatch(
            producer_id=i64(-1),
            producer_epoch=i16(-1),
            base_sequence=i32(-1),
            records=records,
            attributes=i16(0),
            partition_leader_epoch=i32(-1),
        ),
    )
    # kio writes uncompressed batches; compress by hand: same header, gzip payload, codec bit, new CRC.
    from crc32c import crc32c

    from coordinator.dataplane.batches import HEADER_SIZE

    raw = plain.getvalue()
    payload = gzip.compress(raw[HEADER_SIZE:])
    out = bytearray(raw[:HEADER_SIZE] + payload)
    out[8:12] = (len(out) - 12).to_bytes(4, "big")
    out[22] |= 0x01
    out[17:21] = crc32c(bytes(out[21:])).to_bytes(4, "big")
    return bytes(out)


def segment_files(fs: FS, data_dir: str, topic: str, partition: int) -> list[str]:
    directory = os.path.join(data_dir, "topics", f"{topic}-{partition}")
    return sorted(n for n in fs.listdir(directory) if n.endswith(".log"))


def segment_path(data_dir: str, topic: str, partition: int, name: str) -> str:
    return os.path.join(data_dir, "topics", f"{topic}-{partition}", name)


def read_bytes(fs: FS, path: str) -> bytes:
    f = fs.open_read(path)
    try:
        return f.read_at(0, f.size())
    finally:
        f.close()


def rewrite(fs: FS, path: str, data: bytes) -> None:
    """Replace a file's content (a test's hand on the disk while the server is down)."""
    if isinstance(fs, MemFS):
        fs.write_bytes(path, data)
        return
    with open(path, "wb") as fh:
        fh.write(data)


# -- restart -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("hot", [True, False], ids=["page-cache-reads", "worker-thread-reads"])
async def test_produce_close_reopen_fetch_is_byte_identical(
    open_plane: Any, where: tuple[FS, str], monkeypatch: pytest.MonkeyPatch, hot: bool
) -> None:
    fs, data_dir = where
    if not hot:
        monkeypatch.setattr(disk, "HOT_BYTES", -1)
    h = await open_plane(data_dir, fs)
    created = await h.create(
        "orders",
        3,
        configs=[{"name": "segment.bytes", "value": "700"}, {"name": "cleanup.policy", "value": "delete"}],
    )
    sent: dict[int, list[tuple[int, bytes]]] = {0: [], 1: [], 2: []}
    rng = random.Random(7)
    for n in range(40):
        partition = n % 3
        group = [
            batch(*[b"v%d-%d" % (n, i) for i in range(rng.randint(1, 4))]) for _ in range(rng.randint(1, 3))
        ]
        if n % 7 == 0:
            group.append(gzip_batch(b"gz%d" % n, b"zz"))
        acks = (-1, 1, 0)[n % 3 if n % 5 else 0]
        answer = await h.produce_many("orders", partition, group, acks=acks)
        records = sum(read_header(b).records_count for b in group)
        offset = h.plane.log_end_offset("orders", partition) - records
        if answer is not None:
            assert answer.error_code == ErrorCode.none
            assert answer.base_offset == offset
        for b in group:
            sent[partition].append((offset, with_base_offset(b, offset)))
            offset += read_header(b).records_count
    before = {p: await h.fetch_all("orders", p) for p in range(3)}
    for p in range(3):
        assert before[p] == b"".join(b for _, b in sent[p])
    assert len(segment_files(fs, data_dir, "orders", 0)) > 1  # rolled
    await h.plane.close()

    again = await open_plane(data_dir, fs)
    assert again.plane.topic_id("orders") == created.topic_id
    assert again.plane.partition_count("orders") == 3
    (described,) = (await again.metadata(["orders"])).topics
    assert described.topic_id == created.topic_id
    assert again.plane._topics["orders"].configs == {"segment.bytes": "700", "cleanup.policy": "delete"}
    for p in range(3):
        assert again.plane.log_end_offset("orders", p) == h.plane.log_end_offset("orders", p)
        assert await again.fetch_all("orders", p) == before[p]
        for offset, stored in sent[p]:
            first = split_batches((await again.fetch("orders", p, offset)).records)[0]
            assert first == stored
        assert (await again.list_offset("orders", p, -2)).offset == 0
        assert (await again.list_offset("orders", p, -1)).offset == again.plane.log_end_offset("orders", p)
    # appends continue where the log ended
    end = again.plane.log_end_offset("orders", 1)
    assert (await again.produce("orders", 1, batch(b"after"))).base_offset == end


@pytest.mark.parametrize(
    "segment_bytes, count, largest",
    [
        (1500, 60, 40),  # many small segments, one index entry each
        (60_000, 400, 40),  # a sparse index of many entries per segment
        (1 << 30, 120, 9000),  # batches larger than the index interval
    ],
)
async def test_answers_match_the_in_memory_plane(
    open_plane: Any,
    tmp_path: Any,
    monkeypatch: pytest.MonkeyPatch,
    segment_bytes: int,
    count: int,
    largest: int,
) -> None:
    """The same produce sequence answered by a memory plane and a durable one (after a restart)."""
    monkeypatch.setattr(disk, "HOT_BYTES", -1)
    memory = Harness(**{"message.max.bytes": 1 << 20})
    data_dir = str(tmp_path / "data")
    durable = await open_plane(data_dir, **{"message.max.bytes": 1 << 20})
    rng = random.Random(segment_bytes)
    await memory.create("m", 1)
    await durable.create("m", 1, configs=[{"name": "segment.bytes", "value": str(segment_bytes)}])
    for stamp in [BASE_TS + rng.randint(-50, 50) * 1000 for _ in range(count)]:
        b = batch(
            *[b"x" * rng.randint(0, largest) for _ in range(rng.randint(1, 5))],
            first_ts=stamp,
            step_ms=rng.choice([0, 1000, 3000]),
        )
        for h in (memory, durable):
            assert (await h.produce("m", 0, b)).error_code == ErrorCode.none
    await durable.plane.close()
    reopened = await open_plane(data_dir)
    segments = reopened.plane._topics["m"].partitions[0].segments
    assert len(segments) > 3 or max(len(s.idx_offsets) for s in segments) > 3
    for probe in [-1, -2, -3] + [BASE_TS + k * 1000 for k in range(-60, 70, 3)]:
        want = await memory.list_offset("m", 0, probe)
        got = await reopened.list_offset("m", 0, probe)
        assert (got.error_code, got.offset, got.timestamp) == (
            want.error_code,
            want.offset,
            want.timestamp,
        ), probe
    hw = memory.plane.log_end_offset("m", 0)
    for offset in range(0, hw + 1, max(hw // 80, 1)):
        for max_bytes in (1, 200, 5000, 1 << 20):
            want = await memory.fetch("m", 0, offset, partition_max_bytes=max_bytes)
            got = await reopened.fetch("m", 0, offset, partition_max_bytes=max_bytes)
            assert (got.records, got.high_watermark) == (want.records, want.high_watermark), (
                offset,
                max_bytes,
            )


async def test_power_cut_keeps_every_acks_all_batch(open_plane: Any) -> None:
    fs = memfs()
    h = await open_plane(MEM_DIR, fs)
    await h.create("d", 1, configs=[{"name": "segment.bytes", "value": "500"}])
    acked = []
    for n in range(12):
        b = batch(b"durable %d" % n)
        answer = await h.produce("d", 0, b, acks=-1)
        acked.append(with_base_offset(b, answer.base_offset))
    request = {"transactional_id": None, "transaction_timeout": 1}
    ids = [(await h.call(ApiKey.INIT_PRODUCER_ID, 4, request)).producer_id for _ in range(3)]
    after_cut = fs.crash()  # while the plane is still running: nothing was flushed by a clean close
    survivor = await open_plane(MEM_DIR, after_cut)
    assert survivor.plane.topic_id("d") == h.plane.topic_id("d")
    assert await survivor.fetch_all("d", 0) == b"".join(acked)
    new_id = (await survivor.call(ApiKey.INIT_PRODUCER_ID, 4, request)).producer_id
    assert new_id > max(ids)


async def test_producer_ids_do_not_repeat_after_a_restart(open_plane: Any, tmp_path: Any) -> None:
    data_dir = str(tmp_path / "data")
    request = {"transactional_id": None, "transaction_timeout": 1}
    h = await open_plane(data_dir)
    first = [(await h.call(ApiKey.INIT_PRODUCER_ID, 4, request)).producer_id for _ in range(5)]
    assert len(set(first)) == 5
    await h.plane.close()
    again = await open_plane(data_dir)
    second = [(await again.call(ApiKey.INIT_PRODUCER_ID, 4, request)).producer_id for _ in range(5)]
    assert min(second) > max(first)


async def test_a_second_plane_cannot_open_the_same_directory(open_plane: Any, tmp_path: Any) -> None:
    data_dir = str(tmp_path / "data")
    await open_plane(data_dir)
    other = DurableHarness(data_dir)
    with pytest.raises(disk.StorageFailure):
        await other.plane.start()


# -- recovery ------------------------------------------------------------------------------------------------


async def _three_batches(open_plane: Any, fs: FS, data_dir: str) -> tuple[list[bytes], str]:
    h = await open_plane(data_dir, fs)
    await h.create("r", 1)
    stored = []
    for values in ([b"a", b"b"], [b"c"], [b"d", b"e", b"f"]):
        b = batch(*values)
        stored.append(with_base_offset(b, (await h.produce("r", 0, b)).base_offset))
    await h.plane.close()
    (name,) = segment_files(fs, data_dir, "r", 0)
    return stored, segment_path(data_dir, "r", 0, name)


async def test_torn_tail_at_every_byte_of_the_last_batch(
    open_plane: Any, where: tuple[FS, str], caplog: pytest.LogCaptureFixture
) -> None:
    fs, data_dir = where
    stored, path = await _three_batches(open_plane, fs, data_dir)
    whole = read_bytes(fs, path)
    prefix = len(stored[0]) + len(stored[1])
    for cut in range(prefix, len(whole)):
        rewrite(fs, path, whole[:cut])
        h = await open_plane(data_dir, fs)
        assert h.plane.log_end_offset("r", 0) == 3, cut
        assert await h.fetch_all("r", 0) == stored[0] + stored[1]
        if cut > prefix:
            assert "cut" in caplog.text
        assert read_bytes(fs, path) == whole[:prefix]  # the tail is gone from the file too
        await h.plane.close()
    rewrite(fs, path, whole)
    h = await open_plane(data_dir, fs)
    assert await h.fetch_all("r", 0) == b"".join(stored)
    # after a cut, appends take the offsets the lost batch had
    await h.plane.close()
    rewrite(fs, path, whole[: prefix + 30])
    h = await open_plane(data_dir, fs)
    assert (await h.produce("r", 0, batch(b"again"))).base_offset == 3


@pytest.mark.parametrize(
    "position, reason",
    [
        (-1, "checksum"),  # last byte of the last record
        (30, "checksum"),  # inside the header, covered by the CRC (baseTimestamp)
        (17, "checksum"),  # the CRC itself
        (16, "invalid batch header"),  # magic
        (3, "base offset"),  # baseOffset
        (9, "incomplete"),  # batchLength: now larger than the file
    ],
)
async def test_bit_flip_in_the_last_batch_cuts_it(
    open_plane: Any, tmp_path: Any, position: int, reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    fs, data_dir = OsFS(), str(tmp_path / "data")
    stored, path = await _three_batches(open_plane, fs, data_dir)
    whole = bytearray(read_bytes(fs, path))
    last_start = len(stored[0]) + len(stored[1])
    at = len(whole) - 1 if position < 0 else last_start + position
    whole[at] ^= 0x40
    rewrite(fs, path, bytes(whole))
    h = await open_plane(data_dir, fs)
    assert h.plane.log_end_offset("r", 0) == 3
    assert await h.fetch_all("r", 0) == stored[0] + stored[1]
    assert fs.size(path) == last_start
    assert reason in caplog.text


async def test_damage_in_an_earlier_segment_cuts_there_and_drops_the_later_ones(
    open_plane: Any, tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    fs, data_dir = OsFS(), str(tmp_path / "data")
    h = await open_plane(data_dir, fs)
    await h.create("s", 1, configs=[{"name": "segment.bytes", "value": str(len(batch(b"0" * 20)))}])
    stored = []
    for n in range(6):
        b = batch(b"%d" % n * 20)
        stored.append(with_base_offset(b, (await h.produce("s", 0, b)).base_offset))
    await h.plane.close()
    names = segment_files(fs, data_dir, "s", 0)
    assert len(names) == 6  # one batch per segment at this size
    second = segment_path(data_dir, "s", 0, names[1])
    data = bytearray(read_bytes(fs, second))
    data[-1] ^= 1
    rewrite(fs, second, bytes(data))
    h = await open_plane(data_dir, fs)
    assert h.plane.log_end_offset("s", 0) == 1
    assert await h.fetch_all("s", 0) == stored[0]
    assert segment_files(fs, data_dir, "s", 0) == names[:2]
    assert "removed later segments" in caplog.text
    assert (await h.produce("s", 0, batch(b"new"))).base_offset == 1


async def test_recovery_removes_an_empty_stray_segment(open_plane: Any, tmp_path: Any) -> None:
    fs, data_dir = OsFS(), str(tmp_path / "data")
    stored, path = await _three_batches(open_plane, fs, data_dir)
    stray = segment_path(data_dir, "r", 0, f"{1:020d}.log")
    open(stray, "wb").close()
    h = await open_plane(data_dir, fs)
    assert await h.fetch_all("r", 0) == b"".join(stored)
    assert not os.path.exists(stray)


# -- segments and retention ----------------------------------------------------------------------------------


async def test_segments_roll_at_segment_bytes(open_plane: Any, where: tuple[FS, str]) -> None:
    fs, data_dir = where
    h = await open_plane(data_dir, fs, **{"log.segment.bytes": 1000})
    await h.create("roll", 1)
    await h.create("own", 1, configs=[{"name": "segment.bytes", "value": "250"}])
    sizes = []
    for _ in range(10):
        b = batch(b"x" * 100)  # ~180 bytes
        sizes.append(len(b))
        await h.produce("roll", 0, b)
        await h.produce("own", 0, b)
    names = segment_files(fs, data_dir, "roll", 0)
    per_segment = 1000 // sizes[0]
    assert len(names) == -(-10 // per_segment)
    assert names[1] == f"{per_segment:020d}.log"
    for name in names[:-1]:
        assert fs.size(segment_path(data_dir, "roll", 0, name)) <= 1000
    assert segment_files(fs, data_dir, "own", 0) == [f"{n:020d}.log" for n in range(10)]
    # a batch larger than segment.bytes gets a segment of its own
    big = batch(b"y" * 400)
    assert (await h.produce("own", 0, big)).base_offset == 10
    assert fs.size(segment_path(data_dir, "own", 0, f"{10:020d}.log")) == len(big)
    assert len(split_batches(await h.fetch_all("own", 0))) == 11


async def test_retention_by_time(open_plane: Any, where: tuple[FS, str]) -> None:
    fs, data_dir = where
    h = await open_plane(data_dir, fs)
    one_batch = str(len(batch(b"z" * 30)))  # one batch per segment
    await h.create(
        "old",
        1,
        configs=[{"name": "segment.bytes", "value": one_batch}, {"name": "retention.ms", "value": "60000"}],
    )
    now = BASE_TS + 1_000_000
    for n in range(5):  # batch n's newest record is at BASE_TS + n * 200000
        await h.produce("old", 0, batch(b"z" * 30, first_ts=BASE_TS + n * 200_000))
    assert len(segment_files(fs, data_dir, "old", 0)) == 5
    # segments 0..3 are older than 60 s at `now` except 4 (the active one, never deleted): newest-first rule
    assert await h.plane.enforce_retention(now_ms=BASE_TS + 3 * 200_000 + 60_001) == 4
    assert segment_files(fs, data_dir, "old", 0) == [f"{4:020d}.log"]
    assert (await h.list_offset("old", 0, -2)).offset == 4
    below = await h.fetch("old", 0, 3)
    assert below.error_code == ErrorCode.offset_out_of_range and below.log_start_offset == 4
    assert (await h.fetch("old", 0, 4)).records
    assert (await h.produce("old", 0, batch(b"z" * 30))).log_start_offset == 4
    assert await h.plane.enforce_retention(now_ms=now) == 1  # segment 4 is closed now
    await h.plane.close()
    again = await open_plane(data_dir, fs)
    assert (await again.list_offset("old", 0, -2)).offset == 5
    assert again.plane.log_end_offset("old", 0) == 6
    assert (await again.fetch("old", 0, 0)).error_code == ErrorCode.offset_out_of_range


async def test_retention_stops_at_the_first_segment_to_keep(open_plane: Any, tmp_path: Any) -> None:
    h = await open_plane(str(tmp_path / "data"))
    await h.create(
        "t",
        1,
        configs=[
            {"name": "segment.bytes", "value": str(len(batch(b"q" * 30)))},
            {"name": "retention.ms", "value": "1000"},
        ],
    )
    for stamp in (BASE_TS, BASE_TS + 10_000_000, BASE_TS, BASE_TS):
        await h.produce("t", 0, batch(b"q" * 30, first_ts=stamp))
    assert await h.plane.enforce_retention(now_ms=BASE_TS + 5_000_000) == 1  # the second one is young
    assert (await h.list_offset("t", 0, -2)).offset == 1


async def test_retention_by_bytes(open_plane: Any, where: tuple[FS, str]) -> None:
    fs, data_dir = where
    h = await open_plane(data_dir, fs, **{"log.retention.bytes": 450, "log.retention.ms": -1})
    size = len(batch(b"w" * 30))
    await h.create("big", 1, configs=[{"name": "segment.bytes", "value": str(size)}])
    for _ in range(6):
        await h.produce("big", 0, batch(b"w" * 30))
    # 6 segments of `size` bytes; delete the oldest while what stays is still >= 450 bytes
    keep = -(-450 // size)
    assert 1 < keep < 6
    assert await h.plane.enforce_retention() == 6 - keep
    assert len(segment_files(fs, data_dir, "big", 0)) == keep
    assert (await h.list_offset("big", 0, -2)).offset == 6 - keep
    assert (await h.fetch("big", 0, 0)).error_code == ErrorCode.offset_out_of_range
    assert await h.plane.enforce_retention() == 0


async def test_infinite_retention_keeps_everything(open_plane: Any, tmp_path: Any) -> None:
    h = await open_plane(str(tmp_path / "data"))
    await h.create(
        "keep",
        1,
        configs=[{"name": "segment.bytes", "value": "100"}, {"name": "retention.ms", "value": "-1"}],
    )
    for _ in range(4):
        await h.produce("keep", 0, batch(b"k", first_ts=0))
    assert len(h.plane._topics["keep"].partitions[0].segments) == 4
    assert await h.plane.enforce_retention() == 0


async def test_retention_runs_periodically(open_plane: Any, tmp_path: Any) -> None:
    h = await open_plane(
        str(tmp_path / "data"),
        **{"log.retention.check.interval.ms": 20, "log.retention.ms": 1000, "log.segment.bytes": 100},
    )
    await h.create("p", 1)
    for _ in range(3):
        await h.produce("p", 0, batch(b"old", first_ts=BASE_TS))
    for _ in range(100):
        if (await h.list_offset("p", 0, -2)).offset == 2:
            break
        await asyncio.sleep(0.02)
    assert (await h.list_offset("p", 0, -2)).offset == 2


@pytest.mark.parametrize(
    "key, value",
    [("segment.bytes", "13"), ("segment.bytes", "x"), ("retention.ms", "-2"), ("retention.bytes", "1.5")],
)
async def test_bad_log_configs_are_refused(key: str, value: str) -> None:
    h = Harness()
    result = await h.create("bad", configs=[{"name": key, "value": value}])
    assert result.error_code == ErrorCode.invalid_config
    assert key in result.error_message


# -- topic deletion ------------------------------------------------------------------------------------------


async def test_deleted_topic_stays_deleted(open_plane: Any, where: tuple[FS, str]) -> None:
    fs, data_dir = where
    h = await open_plane(data_dir, fs)
    first = await h.create("gone", 2)
    await h.produce("gone", 1, batch(b"a"))
    await h.create("stays", 1)
    response = await h.call(ApiKey.DELETE_TOPICS, 5, {"topic_names": ["gone"], "timeout": 1000})
    assert response.responses[0].error_code == ErrorCode.none
    topics_dir = os.path.join(data_dir, "topics")
    assert not [n for n in fs.listdir(topics_dir) if n.startswith("gone")]
    await h.plane.close()
    again = await open_plane(data_dir, fs)
    assert again.plane.partition_count("gone") is None
    assert again.plane.partition_count("stays") == 1
    second = await again.create("gone", 1)
    assert second.topic_id != first.topic_id
    assert again.plane.log_end_offset("gone", 0) == 0
    await again.plane.close()
    third = await open_plane(data_dir, fs)
    assert third.plane.topic_id("gone") == second.topic_id
    assert third.plane.log_end_offset("gone", 0) == 0


@pytest.mark.parametrize("nth", [1, 2, 3, 4])
async def test_crash_in_the_middle_of_a_delete_does_not_resurrect(open_plane: Any, nth: int) -> None:
    """Die at the nth directory rename or removal after the commit point: the topic is gone after restart."""
    inner = memfs()
    fs = FaultFS(inner)
    h = await open_plane(MEM_DIR, fs)
    await h.create("half", 3)
    for p in range(3):
        await h.produce("half", p, batch(b"x"))
    fs.crash_at("rename" if nth <= 2 else "remove", nth=nth if nth <= 2 else nth - 2, path_contains="half-")
    await h.call(ApiKey.DELETE_TOPICS, 5, {"topic_names": ["half"], "timeout": 1000})
    assert fs.crashed
    after = inner.crash()
    again = await open_plane(MEM_DIR, after)
    assert again.plane.partition_count("half") is None
    assert not [n for n in after.listdir(os.path.join(MEM_DIR, "topics")) if n.startswith("half")]


async def test_a_failed_delete_commit_keeps_the_topic(open_plane: Any) -> None:
    fs = FaultFS(memfs())
    h = await open_plane(MEM_DIR, fs)
    await h.create("kept", 1)
    await h.produce("kept", 0, batch(b"x"))
    fs.fail_op("remove", times=1, path_contains="kept.json")
    response = await h.call(ApiKey.DELETE_TOPICS, 5, {"topic_names": ["kept"], "timeout": 1000})
    assert response.responses[0].error_code == ErrorCode.kafka_storage_error
    assert h.plane.log_end_offset("kept", 0) == 1
    assert (await h.produce("kept", 0, batch(b"y"))).base_offset == 1
    response = await h.call(ApiKey.DELETE_TOPICS, 5, {"topic_names": ["kept"], "timeout": 1000})
    assert response.responses[0].error_code == ErrorCode.none


async def test_crash_before_a_create_commits_leaves_no_topic(open_plane: Any) -> None:
    inner = memfs()
    fs = FaultFS(inner)
    h = await open_plane(MEM_DIR, fs)
    fs.crash_at("rename", path_contains="new.json")
    result = await h.create("new", 2)
    assert result.error_code == ErrorCode.kafka_storage_error
    after = inner.crash()
    again = await open_plane(MEM_DIR, after)
    assert again.plane.partition_count("new") is None
    assert not [n for n in after.listdir(os.path.join(MEM_DIR, "topics")) if n.startswith("new")]
    assert (await again.create("new", 2)).error_code == ErrorCode.none


async def test_auto_created_topics_are_durable(open_plane: Any, tmp_path: Any) -> None:
    data_dir = str(tmp_path / "data")
    h = await open_plane(data_dir, **{"num.partitions": 2})
    answers = await asyncio.gather(*(h.metadata(["auto"]) for _ in range(3)))
    ids = {a.topics[0].topic_id for a in answers}
    assert len(ids) == 1 and all(a.topics[0].error_code == ErrorCode.none for a in answers)
    await h.plane.close()
    again = await open_plane(data_dir)
    assert again.plane.topic_id("auto") in ids
    assert again.plane.partition_count("auto") == 2


async def test_create_topic_method_is_durable(open_plane: Any, tmp_path: Any) -> None:
    data_dir = str(tmp_path / "data")
    h = await open_plane(data_dir)
    topic_id = h.plane.create_topic("direct", 2)
    await h.plane.close()
    again = await open_plane(data_dir)
    assert again.plane.topic_id("direct") == topic_id


# -- failures ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EIO])
@pytest.mark.parametrize("keep_bytes", [0, 1, 40])
async def test_failed_write_answers_storage_error_and_leaves_no_torn_batch(
    open_plane: Any, code: int, keep_bytes: int
) -> None:
    fs = FaultFS(memfs())
    h = await open_plane(MEM_DIR, fs)
    await h.create("f", 2)
    assert (await h.produce("f", 0, batch(b"before"))).base_offset == 0
    (name,) = segment_files(fs, MEM_DIR, "f", 0)
    path = segment_path(MEM_DIR, "f", 0, name)
    size = fs.size(path)
    fs.fail_writes(code, keep_bytes=keep_bytes, path_contains="f-0")
    for acks in (-1, 1):
        failed = await h.produce("f", 0, batch(b"lost"), acks=acks)
        assert failed.error_code == ErrorCode.kafka_storage_error and failed.base_offset == -1
        assert failed.error_message
        assert fs.size(path) == size
        assert h.plane.log_end_offset("f", 0) == 1
    assert (await h.produce("f", 1, batch(b"other partition"))).error_code == ErrorCode.none
    fs.clear()
    later = batch(b"after")
    assert (await h.produce("f", 0, later)).base_offset == 1
    fetched = split_batches(await h.fetch_all("f", 0))
    assert fetched[1] == with_base_offset(later, 1) and len(fetched) == 2
    await h.plane.close()
    again = await open_plane(MEM_DIR, fs.inner)
    assert split_batches(await again.fetch_all("f", 0)) == fetched


async def test_failed_fsync_answers_storage_error_and_cuts_the_batch(open_plane: Any) -> None:
    fs = FaultFS(memfs())
    h = await open_plane(MEM_DIR, fs)
    await h.create("s", 1)
    await h.produce("s", 0, batch(b"ok"))
    fs.fail_fsyncs(times=1, path_contains="s-0")
    failed = await h.produce("s", 0, batch(b"not durable"), acks=-1)
    assert failed.error_code == ErrorCode.kafka_storage_error
    assert h.plane.log_end_offset("s", 0) == 1
    assert (await h.produce("s", 0, batch(b"fine"))).base_offset == 1
    assert len(split_batches(await h.fetch_all("s", 0))) == 2


async def test_failed_cut_is_retried_before_the_next_write(open_plane: Any) -> None:
    fs = FaultFS(memfs())
    h = await open_plane(MEM_DIR, fs)
    await h.create("c", 1)
    await h.produce("c", 0, batch(b"ok"))
    fs.fail_writes(errno.EIO, keep_bytes=20, times=1)
    fs.fail_op("truncate", times=2)
    assert (await h.produce("c", 0, batch(b"torn"))).error_code == ErrorCode.kafka_storage_error
    # the cut failed: the next append retries it, fails again, and is refused
    assert (await h.produce("c", 0, batch(b"refused"))).error_code == ErrorCode.kafka_storage_error
    ok = await h.produce("c", 0, batch(b"accepted"))
    assert ok.error_code == ErrorCode.none and ok.base_offset == 1
    await h.plane.close()
    again = await open_plane(MEM_DIR, fs.inner)
    assert len(split_batches(await again.fetch_all("c", 0))) == 2


async def test_stalled_fsync_times_out_and_queued_appends_are_withdrawn(open_plane: Any) -> None:
    fs = FaultFS(memfs())
    h = await open_plane(MEM_DIR, fs)
    await h.create("h", 1)
    fs.hang_fsyncs()
    loop = asyncio.get_running_loop()
    started = loop.time()
    first = asyncio.create_task(h.produce_many("h", 0, [batch(b"stuck")], timeout=200))
    await asyncio.to_thread(fs.wait_until_hung)
    second = asyncio.create_task(h.produce_many("h", 0, [batch(b"queued")], timeout=200))
    for task in (first, second):
        answer = await asyncio.wait_for(task, 5)
        assert answer.error_code == ErrorCode.request_timed_out
    assert loop.time() - started < 3
    fs.release_fsyncs()
    fs.clear()
    # the first append was written before its fsync hung: it stays; the second never left the queue
    for _ in range(100):
        if h.plane.log_end_offset("h", 0) == 1:
            break
        await asyncio.sleep(0.01)
    assert h.plane.log_end_offset("h", 0) == 1
    assert (await h.produce("h", 0, batch(b"next"))).base_offset == 1


async def test_acks_one_is_answered_without_waiting_for_another_partitions_fsync(open_plane: Any) -> None:
    fs = FaultFS(memfs())
    h = await open_plane(MEM_DIR, fs)
    await h.create("a", 2)
    fs.hang_fsyncs()
    first = asyncio.create_task(h.produce_many("a", 0, [batch(b"first")], acks=-1))
    await asyncio.to_thread(fs.wait_until_hung)
    # these two queue behind the hung fsync, so the next flush takes both
    durable = asyncio.create_task(h.produce_many("a", 0, [batch(b"all")], acks=-1))
    leader_only = asyncio.create_task(h.produce_many("a", 1, [batch(b"one")], acks=1))
    await asyncio.sleep(0.05)
    fs.slow_fsyncs(0.5)
    loop = asyncio.get_running_loop()
    fs.release_fsyncs()
    released = loop.time()
    assert (await leader_only).error_code == ErrorCode.none
    assert loop.time() - released < 0.4
    assert not durable.done()
    assert (await durable).error_code == ErrorCode.none
    assert (await first).error_code == ErrorCode.none
    fs.clear()


async def test_concurrent_acks_all_produces_share_fsyncs(open_plane: Any) -> None:
    fs = FaultFS(memfs())
    h = await open_plane(MEM_DIR, fs)
    await h.create("g", 1)
    await h.produce("g", 0, batch(b"warm-up"))
    fs.slow_fsyncs(0.02)
    before = fs.counts["fsync"]
    answers = await asyncio.gather(*(h.produce("g", 0, batch(b"%d" % n)) for n in range(40)))
    assert sorted(a.base_offset for a in answers) == list(range(1, 41))
    assert fs.counts["fsync"] - before <= 10


async def test_read_error_answers_storage_error(open_plane: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(disk, "HOT_BYTES", -1)
    fs = FaultFS(memfs())
    h = await open_plane(MEM_DIR, fs)
    await h.create("rd", 1)
    await h.produce("rd", 0, batch(b"x"))
    fs.fail_op("read", times=1)
    assert (await h.fetch("rd", 0, 0)).error_code == ErrorCode.kafka_storage_error
    assert (await h.fetch("rd", 0, 0)).records


async def test_acks_zero_is_written(open_plane: Any, tmp_path: Any) -> None:
    data_dir = str(tmp_path / "data")
    h = await open_plane(data_dir)
    await h.create("z", 1)
    assert await h.produce("z", 0, batch(b"fire and forget"), acks=0) is None
    assert h.plane.log_end_offset("z", 0) == 1
    await h.plane.close()
    assert (await open_plane(data_dir)).plane.log_end_offset("z", 0) == 1


async def test_long_poll_wakes_on_a_durable_append(open_plane: Any, tmp_path: Any) -> None:
    h = await open_plane(str(tmp_path / "data"))
    await h.create("lp", 1)
    waiting = asyncio.create_task(h.fetch("lp", 0, 0, max_wait=10_000))
    await until(lambda: len(h.plane._waiters) > 0, "the fetch parks")
    assert not waiting.done()
    sent = batch(b"wake up")
    await h.produce("lp", 0, sent)
    assert (await asyncio.wait_for(waiting, 2)).records == sent


async def test_produce_after_close_is_refused(tmp_path: Any) -> None:
    h = DurableHarness(str(tmp_path / "data"))
    await h.plane.start()
    await h.create("late", 1)
    await h.plane.close()
    answer = await h.produce("late", 0, batch(b"x"))
    assert answer.error_code == ErrorCode.unknown_topic_or_partition
    with pytest.raises(RuntimeError):
        await h.plane.start()
