"""The filesystem interface: OsFS and MemFS alike, MemFS knowing what is durable, FaultFS injecting faults."""

from __future__ import annotations

import errno
import os
import threading

import pytest

from storage import FS, OsFS
from storage.fakefs import FaultFS, MemFS, SimulatedCrash


@pytest.fixture(params=["os", "mem"])
def fs_and_dir(request: pytest.FixtureRequest, tmp_path: os.PathLike[str]) -> tuple[FS, str]:
    if request.param == "os":
        return OsFS(), os.path.join(str(tmp_path), "d")
    return MemFS(), "/mem/d"


def test_basic_operations_behave_the_same(fs_and_dir: tuple[FS, str]) -> None:
    fs, d = fs_and_dir
    fs.makedirs(d)
    fs.makedirs(d)  # idempotent
    assert fs.exists(d)
    path = os.path.join(d, "a")
    assert not fs.exists(path)
    f = fs.open_append(path)
    f.write(b"hello ")
    f.write(memoryview(b"world"))
    f.fsync()
    assert f.size() == 11
    f.truncate(5)
    f.write(b"!")  # appends at the (new) end
    f.close()
    f.close()  # idempotent
    assert fs.size(path) == 6
    r = fs.open_read(path)
    assert r.read_at(0, 100) == b"hello!"
    assert r.read_at(2, 2) == b"ll"
    assert r.read_at(10, 5) == b""
    fs.rename(path, os.path.join(d, "b"))
    # A handle open on a file keeps seeing it after it is renamed or removed (POSIX).
    assert r.read_at(0, 6) == b"hello!"
    r.close()
    assert fs.listdir(d) == ["b"]
    fs.truncate(os.path.join(d, "b"), 2)
    assert fs.size(os.path.join(d, "b")) == 2
    fs.fsync_dir(d)
    fs.remove(os.path.join(d, "b"))
    assert fs.listdir(d) == []
    with pytest.raises(FileNotFoundError):
        fs.open_read(os.path.join(d, "b"))
    with pytest.raises(FileNotFoundError):
        fs.remove(os.path.join(d, "b"))
    with pytest.raises(FileNotFoundError):
        fs.listdir(os.path.join(d, "missing"))


def test_rename_replaces_and_open_handles_keep_the_old_file(fs_and_dir: tuple[FS, str]) -> None:
    fs, d = fs_and_dir
    fs.makedirs(d)
    old, new = os.path.join(d, "seg"), os.path.join(d, "seg.tmp")
    for path, data in ((old, b"old"), (new, b"new")):
        f = fs.open_append(path)
        f.write(data)
        f.close()
    reader = fs.open_read(old)
    fs.rename(new, old)
    assert reader.read_at(0, 10) == b"old"
    reader.close()
    reader = fs.open_read(old)
    assert reader.read_at(0, 10) == b"new"
    reader.close()
    assert fs.listdir(d) == ["seg"]


def test_memfs_crash_keeps_only_fsynced_bytes_and_names() -> None:
    fs = MemFS()
    fs.makedirs("/d")
    f = fs.open_append("/d/a")
    f.write(b"durable")
    f.fsync()
    f.write(b" lost")
    fs.fsync_dir("/d")
    g = fs.open_append("/d/b")  # name never made durable
    g.write(b"x")
    g.fsync()
    after = fs.crash()
    assert after.listdir("/d") == ["a"]
    assert after.read_bytes("/d/a") == b"durable"
    assert fs.durable_size("/d/a") == 7 and fs.durable_size("/d/b") == 0

    # A truncate is durable only after a fsync, too.
    f.truncate(3)
    assert fs.crash().read_bytes("/d/a") == b"durable"
    f.fsync()
    assert fs.crash().read_bytes("/d/a") == b"dur"
    f.write(b"able again")
    f.fsync()
    assert fs.crash().read_bytes("/d/a") == b"durable again"
    f.close()
    g.close()

    # A rename is durable after the directory fsync; until then a crash shows the old names.
    fs.rename("/d/b", "/d/a")
    assert fs.crash().read_bytes("/d/a") == b"durable again"
    fs.fsync_dir("/d")
    assert fs.crash().read_bytes("/d/a") == b"x"
    assert fs.crash().listdir("/d") == ["a"]


def test_faultfs_torn_write_and_failing_writes_then_clear() -> None:
    fs = FaultFS()
    fs.makedirs("/d")
    f = fs.open_append("/d/a")
    fs.fail_writes(errno.ENOSPC, keep_bytes=3)
    with pytest.raises(OSError) as info:
        f.write(b"abcdef")
    assert info.value.errno == errno.ENOSPC
    assert f.size() == 3  # only the first bytes landed
    with pytest.raises(OSError):
        f.write(b"x")  # sticky until cleared
    fs.clear()
    f.write(b"gh")
    assert fs.inner.read_bytes("/d/a") == b"abcxgh"  # type: ignore[attr-defined]

    fs.fail_writes(errno.EIO, times=1)
    with pytest.raises(OSError) as info:
        f.write(b"zz")
    assert info.value.errno == errno.EIO
    f.write(b"ok")  # times ran out
    f.close()
    assert fs.counts["write"] == 5


def test_faultfs_fsync_failure_makes_nothing_durable() -> None:
    fs = FaultFS()
    fs.makedirs("/d")
    f = fs.open_append("/d/a")
    f.write(b"data")
    fs.fail_fsyncs(errno.EIO, times=1)
    with pytest.raises(OSError):
        f.fsync()
    assert fs.inner.durable_size("/d/a") == 0  # type: ignore[attr-defined]
    f.fsync()
    fs.fsync_dir("/d")
    assert fs.inner.durable_size("/d/a") == 4  # type: ignore[attr-defined]
    f.close()


def test_faultfs_hanging_fsync_blocks_until_released() -> None:
    fs = FaultFS()
    fs.makedirs("/d")
    f = fs.open_append("/d/a")
    f.write(b"data")
    fs.hang_fsyncs()
    done = threading.Event()

    def sync() -> None:
        f.fsync()
        done.set()

    t = threading.Thread(target=sync)
    t.start()
    assert fs.wait_until_hung(5)
    assert fs.hung == 1
    assert not done.wait(0.05)
    fs.release_fsyncs()
    t.join(5)
    assert done.is_set() and fs.hung == 0
    f.close()


def test_faultfs_simulated_death_stops_everything() -> None:
    fs = FaultFS()
    fs.makedirs("/d")
    f = fs.open_append("/d/a")
    fs.torn_write(2)
    with pytest.raises(SimulatedCrash):
        f.write(b"abcd")
    assert fs.crashed
    with pytest.raises(SimulatedCrash):
        f.fsync()
    with pytest.raises(SimulatedCrash):
        fs.listdir("/d")
    f.close()  # closing still works
    fs.clear()
    assert fs.crashed  # a death is not undone
    assert fs.inner.read_bytes("/d/a") == b"ab"  # type: ignore[attr-defined]


def test_faultfs_crash_at_an_operation_before_or_after_it() -> None:
    fs = FaultFS()
    fs.makedirs("/d")
    for name in ("a", "b"):
        fs.open_append(f"/d/{name}").close()
    fs.crash_at("rename", after=True)
    with pytest.raises(SimulatedCrash):
        fs.rename("/d/a", "/d/c")
    assert fs.inner.listdir("/d") == ["b", "c"]

    fs = FaultFS()
    fs.makedirs("/d")
    fs.open_append("/d/a").close()
    fs.crash_at("remove", nth=2)
    fs.open_append("/d/b").close()
    fs.remove("/d/a")
    with pytest.raises(SimulatedCrash):
        fs.remove("/d/b")
    assert fs.inner.listdir("/d") == ["b"]


def test_faultfs_crash_after_n_mutating_ops_and_event_log() -> None:
    fs = FaultFS()
    fs.makedirs("/d")
    fs.crash_after_ops(2)
    f = fs.open_append("/d/a")  # 1
    f.write(b"x")  # 2
    fs.listdir("/d")  # not mutating
    with pytest.raises(SimulatedCrash):
        f.fsync()
    f.close()
    assert [op for op, _, _ in fs.events] == ["open_append", "write"]


def test_faultfs_fail_op_by_name() -> None:
    fs = FaultFS()
    fs.makedirs("/d")
    fs.open_append("/d/a").close()
    fs.fail_op("rename", errno.EIO, path_contains="/d/a", times=1)
    with pytest.raises(OSError):
        fs.rename("/d/a", "/d/b")
    fs.rename("/d/a", "/d/b")
    assert fs.listdir("/d") == ["b"]


def test_faultfs_over_osfs(tmp_path: os.PathLike[str]) -> None:
    d = os.path.join(str(tmp_path), "d")
    fs = FaultFS(OsFS())
    fs.makedirs(d)
    f = fs.open_append(os.path.join(d, "a"))
    fs.fail_writes(errno.ENOSPC, keep_bytes=2, times=1)
    with pytest.raises(OSError):
        f.write(b"abcd")
    f.close()
    with open(os.path.join(d, "a"), "rb") as raw:
        assert raw.read() == b"ab"


def _write_many(path: str, content: bytes, times: int) -> None:
    fs = OsFS()
    for _ in range(times):
        fs.write_atomically(path, content)


def test_processes_writing_the_same_file_at_once_each_replace_it_whole(tmp_path: os.PathLike[str]) -> None:
    """The workers of `serve --workers N` write the groups' layout.json at their first start, at the same time."""
    import multiprocessing

    path = os.path.join(str(tmp_path), "layout.json")
    contents = [b'{"shards": %d}' % i for i in range(4)]
    context = multiprocessing.get_context("fork")
    writers = [context.Process(target=_write_many, args=(path, c, 200)) for c in contents]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(60)
    assert [w.exitcode for w in writers] == [0, 0, 0, 0]
    assert OsFS().read_file(path) in contents
    assert os.listdir(str(tmp_path)) == ["layout.json"]  # no temp file left behind
