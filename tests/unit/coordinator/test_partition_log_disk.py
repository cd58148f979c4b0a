"""Segment files below the data plane: the sparse index, recovery, reads, and the topics directory layout."""

from __future__ import annotations

import json
import os
import random
import uuid
from typing import Any

import pytest

from coordinator.dataplane import segments
from coordinator.dataplane.batches import read_header, with_base_offset
from coordinator.dataplane.disk import (
    LogConfig,
    TopicMeta,
    TopicStore,
    delete_dir_name,
    kafka_uuid,
    parse_kafka_uuid,
    remove_tree,
)
from coordinator.dataplane.segments import (
    Segment,
    SegmentView,
    recover_partition,
    segment_name,
)
from storage import FS, OsFS
from storage.fakefs import FaultFS, MemFS

from .test_dataplane import BASE_TS, batch

CONFIG = LogConfig(segment_bytes=1 << 30, retention_ms=-1, retention_bytes=-1)


@pytest.fixture(params=["os", "mem"])
def fs_dir(request: pytest.FixtureRequest, tmp_path: Any) -> tuple[FS, str]:
    if request.param == "os":
        directory = str(tmp_path / "p-0")
        os.makedirs(directory)
        return OsFS(), directory
    fs = MemFS()
    fs.makedirs("/mem/p-0")
    return fs, "/mem/p-0"


def write_segment(fs: FS, directory: str, base: int, batches: list[bytes]) -> list[bytes]:
    """Write batches with offsets from `base` into a segment file; returns them as stored."""
    stored = []
    offset = base
    for b in batches:
        stored.append(with_base_offset(b, offset))
        offset += read_header(b).records_count
    f = fs.open_append(os.path.join(directory, segment_name(base)))
    try:
        f.write(b"".join(stored))
        f.fsync()
    finally:
        f.close()
    return stored


def close_all(recovered: segments.Recovered) -> None:
    for seg in recovered.segments:
        seg.retire()


def views(recovered: segments.Recovered) -> list[SegmentView]:
    return [SegmentView.of(s) for s in recovered.segments]


def test_segment_index_is_sparse() -> None:
    seg = Segment(100, "x")
    position = 0
    for n in range(200):
        seg.add_batch(100 + n, 100 + n, position, 100, BASE_TS + n)
        position += 100
    assert seg.batches == 200 and seg.size == 20_000 and seg.end_offset == 300
    # an entry for the first batch, then for the first batch at least INDEX_INTERVAL_BYTES after the last one
    assert list(seg.idx_positions) == [0, 4100, 8200, 12300, 16400]
    assert list(seg.idx_offsets) == [100 + p // 100 for p in seg.idx_positions]
    assert list(seg.idx_timestamps) == [-(2**63)] + [BASE_TS + p // 100 - 1 for p in seg.idx_positions[1:]]
    assert seg.floor_position(100) == 0
    assert seg.floor_position(299) == seg.idx_positions[-1]
    assert seg.max_timestamp == BASE_TS + 199 and seg.max_timestamp_offset == 299


def test_recovery_indexes_reads_and_searches(fs_dir: tuple[FS, str]) -> None:
    fs, directory = fs_dir
    rng = random.Random(3)
    first = write_segment(
        fs,
        directory,
        0,
        [
            batch(*[b"v" * rng.randint(0, 300)] * rng.randint(1, 3), first_ts=BASE_TS + n * 1000)
            for n in range(150)
        ],
    )
    base = sum(read_header(b).records_count for b in first)
    second = write_segment(
        fs, directory, base, [batch(b"w" * 50, first_ts=BASE_TS + 500_000 + n) for n in range(30)]
    )
    recovered = recover_partition(fs, directory)
    try:
        assert recovered.truncation is None
        assert [s.base_offset for s in recovered.segments] == [0, base]
        assert recovered.next_offset == base + 30
        assert len(recovered.segments[0].idx_offsets) > 5
        everything = b"".join(first + second)
        assert segments.read_views(views(recovered), 0, 1 << 30, False) == everything
        # every offset finds the batch that holds it
        for stored in first + second:
            header = read_header(stored)
            for offset in (header.base_offset, header.last_offset):
                got = segments.read_views(views(recovered), offset, 1, True)
                assert got == stored
        # max_bytes stops at whole batches
        assert segments.read_views(views(recovered), 0, len(first[0]) + len(first[1]) - 1, False) == first[0]
        assert segments.read_views(views(recovered), 0, 10, False) == b""
        assert segments.offset_for_timestamp(views(recovered), BASE_TS + 500_000) == (BASE_TS + 500_000, base)
        assert segments.offset_for_timestamp(views(recovered), BASE_TS + 10**9) is None
        found = segments.max_timestamp_offset(views(recovered))
        assert found == (BASE_TS + 500_029, base + 29)
    finally:
        close_all(recovered)


def test_recovery_of_an_empty_directory_starts_at_zero(fs_dir: tuple[FS, str]) -> None:
    fs, directory = fs_dir
    recovered = recover_partition(fs, directory)
    try:
        assert recovered.next_offset == 0 and [s.base_offset for s in recovered.segments] == [0]
        assert fs.listdir(directory) == [segment_name(0)]
        assert segments.max_timestamp_offset(views(recovered)) is None
    finally:
        close_all(recovered)


def test_empty_segment_keeps_its_offset(fs_dir: tuple[FS, str]) -> None:
    """After retention removed everything but an empty active segment, the log restarts at its name."""
    fs, directory = fs_dir
    fs.open_append(os.path.join(directory, segment_name(42))).close()
    recovered = recover_partition(fs, directory)
    try:
        assert recovered.next_offset == 42 and recovered.segments[0].base_offset == 42
    finally:
        close_all(recovered)


def test_random_damage_keeps_the_longest_valid_prefix() -> None:
    rng = random.Random(5)
    fs = MemFS()
    for trial in range(60):
        directory = f"/mem/t{trial}"
        fs.makedirs(directory)
        stored = write_segment(fs, directory, 0, [batch(b"%d" % n * rng.randint(1, 30)) for n in range(8)])
        data = bytearray(b"".join(stored))
        starts = [sum(len(b) for b in stored[:i]) for i in range(len(stored))]
        at = rng.randrange(len(data))
        damaged = max(i for i, s in enumerate(starts) if s <= at)  # the batch holding byte `at`
        if rng.random() < 0.5:
            data[at] ^= 1 << rng.randrange(8)
            if 12 <= at - starts[damaged] < 16:
                damaged = len(stored)  # partitionLeaderEpoch: not covered by the CRC (as in Kafka)
        else:
            del data[at:]
        fs.write_bytes(os.path.join(directory, segment_name(0)), bytes(data))
        recovered = recover_partition(fs, directory)
        try:
            kept = bytes(data) if damaged == len(stored) else b"".join(stored[:damaged])
            assert segments.read_views(views(recovered), 0, 1 << 30, False) == kept, trial
            assert recovered.next_offset == damaged
            assert fs.read_bytes(os.path.join(directory, segment_name(0))) == kept
        finally:
            close_all(recovered)


def test_recovery_with_faults_reports_them(fs_dir: tuple[FS, str]) -> None:
    fs, directory = fs_dir
    write_segment(fs, directory, 0, [batch(b"a")])
    faulty = FaultFS(fs)
    faulty.fail_op("read")
    with pytest.raises(OSError):
        recover_partition(faulty, directory)


# -- the topics directory ------------------------------------------------------------------------------------


def test_kafka_uuid_round_trip() -> None:
    topic_id = uuid.uuid4()
    text = kafka_uuid(topic_id)
    assert len(text) == 22 and "=" not in text
    assert parse_kafka_uuid(text) == topic_id


def test_delete_dir_name_fits_a_file_name() -> None:
    topic_id = uuid.uuid4()
    name = delete_dir_name("t" * 249, 9999, topic_id)
    assert len(name) <= 255 and name.endswith(f"-9999.{topic_id.hex}-delete")
    assert delete_dir_name("short", 3, topic_id) == f"short-3.{topic_id.hex}-delete"


@pytest.mark.parametrize("kind", ["mem", "os", "fault"])
def test_directory_helpers(kind: str, tmp_path: Any) -> None:
    fs: FS
    if kind == "os":
        fs, root = OsFS(), str(tmp_path)
    else:
        fs, root = MemFS(), "/mem"
        fs.makedirs(root)
        if kind == "fault":
            fs = FaultFS(fs)
    src = os.path.join(root, "a-0")
    fs.makedirs(src)
    f = fs.open_append(os.path.join(src, "x.log"))
    f.write(b"data")
    f.close()
    dst = os.path.join(root, "a-0.gone-delete")
    fs.rename_dir(src, dst)
    assert not fs.exists(src) and fs.listdir(dst) == ["x.log"]
    remove_tree(fs, dst)
    assert not fs.exists(dst)
    if isinstance(fs, FaultFS):
        assert fs.counts["rename"] == 1 and fs.counts["remove"] == 2


def test_load_removes_leftovers_and_orphans() -> None:
    fs = MemFS()
    fs.makedirs("/d")
    store = TopicStore(fs, "/d")
    store.open()
    try:
        meta = TopicMeta("t", uuid.uuid4(), 2, {"retention.ms": "5"})
        for partition_log in store.create_topic(meta, CONFIG):
            partition_log.w.file.close()
            partition_log.retire()
        topics = "/d/topics"
        # leftovers: a temp file, a half-deleted directory, an orphan (no metadata), a partition beyond the
        # count, a partition directory of an older topic with the same name
        fs.write_bytes(f"{topics}/u.json.tmp", b"{")
        fs.makedirs(f"{topics}/old-0.abc-delete")
        fs.write_bytes(f"{topics}/old-0.abc-delete/{segment_name(0)}", b"x")
        fs.makedirs(f"{topics}/orphan-0")
        fs.makedirs(f"{topics}/t-2")
        fs.write_bytes(
            f"{topics}/t-1/partition.metadata", f"version: 0\ntopic_id: {kafka_uuid(uuid.uuid4())}\n".encode()
        )
        loaded = store.load(lambda configs: CONFIG)
        try:
            (topic,) = loaded
            assert topic.meta == meta and len(topic.logs) == 2
            assert sorted(fs.listdir(topics)) == ["LOCK", "t-0", "t-1", "t.json"]
            assert sorted(fs.listdir(f"{topics}/t-1")) == ["00000000000000000000.log", "partition.metadata"]
            assert (
                parse_kafka_uuid(
                    fs.read_bytes(f"{topics}/t-1/partition.metadata").decode().split("topic_id:")[1].strip()
                )
                == meta.topic_id
            )
            assert json.loads(fs.read_bytes(f"{topics}/t.json"))["topic_id"] == str(meta.topic_id)
        finally:
            for t in loaded:
                for partition_log in t.logs:
                    partition_log.w.file.close()
                    partition_log.retire()
    finally:
        store.close()


def test_unreadable_metadata_leaves_the_topic_alone(caplog: pytest.LogCaptureFixture) -> None:
    fs = MemFS()
    fs.makedirs("/d/topics/bad-0")
    fs.write_bytes("/d/topics/bad.json", b"not json")
    fs.write_bytes(f"/d/topics/bad-0/{segment_name(0)}", b"keep me")
    store = TopicStore(fs, "/d")
    store.open()
    try:
        assert store.load(lambda configs: CONFIG) == []
        assert fs.read_bytes(f"/d/topics/bad-0/{segment_name(0)}") == b"keep me"
        assert "unreadable" in caplog.text
    finally:
        store.close()


def test_producer_id_file() -> None:
    fs = MemFS()
    fs.makedirs("/d")
    store = TopicStore(fs, "/d")
    store.open()
    try:
        assert store.read_next_producer_id() == 0
        store.write_next_producer_id(2000)
        assert store.read_next_producer_id() == 2000
        assert fs.crash().read_bytes("/d/topics/producer-ids.state")  # durable
    finally:
        store.close()
