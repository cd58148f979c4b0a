"""Test doubles of the filesystem interface (storage.fs.FS): never imported by production code.

- `MemFS`: an in-memory store that also remembers what is *durable*: a file's bytes as of its last fsync and a
  directory's names as of its last directory fsync. `MemFS.crash` returns what a power cut would leave, so a
  test can check that every acknowledged write survives and that nothing needs a fsync that was skipped.
- `FaultFS`: wraps either one and injects faults, switchable at runtime and clearable so recovery can be
  tested: failing writes (ENOSPC, EIO, optionally torn: only the first N bytes land), failing, slow or hanging
  fsyncs, failing renames and the like, and a simulated process death at a chosen operation, after which
  every operation fails. It counts operations and records the mutating ones in order.
"""

from __future__ import annotations

import errno as _errno
import os
import threading
import time
from collections import Counter
from collections.abc import Callable

from storage.fs import FS, File, FSOps, Lock

__all__ = ["MUTATING_OPS", "FaultFS", "MemFS", "SimulatedCrash"]


# ------------------------------------------------------------------------------------------------------------
# MemFS


class _Inode:
    __slots__ = ("data", "durable", "clean_upto")

    def __init__(self, data: bytes = b"") -> None:
        self.data = bytearray(data)
        self.durable = bytearray(data)
        # data[:clean_upto] == durable[:clean_upto], so a fsync copies only what changed since.
        self.clean_upto = len(data)


def _oserror(code: int, path: str) -> OSError:
    return OSError(code, os.strerror(code), path)


class _MemFile:
    __slots__ = ("_fs", "_inode", "_writable", "_closed", "path")

    def __init__(self, fs: MemFS, inode: _Inode, writable: bool, path: str) -> None:
        self._fs = fs
        self._inode = inode
        self._writable = writable
        self._closed = False
        self.path = path

    def _check(self, write: bool = False) -> None:
        if self._closed:
            raise ValueError("I/O on a closed file")
        if write and not self._writable:
            raise _oserror(_errno.EBADF, self.path)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        with self._fs._lock:
            self._check(write=True)
            self._inode.data += data

    def read_at(self, offset: int, size: int) -> bytes:
        with self._fs._lock:
            self._check()
            return bytes(self._inode.data[offset : offset + size])

    def fsync(self) -> None:
        with self._fs._lock:
            self._check()
            ino = self._inode
            del ino.durable[ino.clean_upto :]
            ino.durable += ino.data[ino.clean_upto :]
            ino.clean_upto = len(ino.data)

    def truncate(self, size: int) -> None:
        with self._fs._lock:
            self._check(write=True)
            _truncate_inode(self._inode, size)

    def size(self) -> int:
        with self._fs._lock:
            self._check()
            return len(self._inode.data)

    def close(self) -> None:
        self._closed = True


class _MemLock:
    __slots__ = ("_fs", "_path")

    def __init__(self, fs: MemFS, path: str | None) -> None:
        self._fs = fs
        self._path = path

    def close(self) -> None:
        with self._fs._lock:
            if self._path is not None:
                self._fs._locks.discard(self._path)
                self._path = None


def _truncate_inode(ino: _Inode, size: int) -> None:
    if size < len(ino.data):
        del ino.data[size:]
    else:
        ino.data += bytes(size - len(ino.data))
    ino.clean_upto = min(ino.clean_upto, size)


class MemFS(FSOps):
    """An in-memory filesystem that tracks durability.

    A file's content is durable as of its last fsync; a name (create, rename, remove) is durable as of the
    last `fsync_dir` of its directory. `crash()` returns the filesystem a power cut would leave behind.
    Directories themselves are always durable (makedirs is not what this double is for).
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._dirs: set[str] = {"/", "."}
        self._files: dict[str, _Inode] = {}
        self._durable_names: dict[str, _Inode] = {}
        self._locks: set[str] = set()

    @staticmethod
    def _norm(path: str) -> str:
        return os.path.normpath(path)

    def _parent_exists(self, path: str) -> None:
        parent = os.path.dirname(path) or "."
        if parent not in self._dirs:
            raise _oserror(_errno.ENOENT, parent)

    def _inode(self, path: str) -> _Inode:
        try:
            return self._files[path]
        except KeyError:
            raise _oserror(_errno.ENOENT, path) from None

    def open_append(self, path: str) -> File:
        path = self._norm(path)
        with self._lock:
            self._parent_exists(path)
            if path in self._dirs:
                raise _oserror(_errno.EISDIR, path)
            ino = self._files.get(path)
            if ino is None:
                ino = self._files[path] = _Inode()
            return _MemFile(self, ino, True, path)

    def open_read(self, path: str) -> File:
        path = self._norm(path)
        with self._lock:
            return _MemFile(self, self._inode(path), False, path)

    def fsync_dir(self, path: str) -> None:
        path = self._norm(path)
        with self._lock:
            if path not in self._dirs:
                raise _oserror(_errno.ENOENT, path)
            for name in [n for n in self._durable_names if os.path.dirname(n) == path]:
                del self._durable_names[name]
            for name, ino in self._files.items():
                if os.path.dirname(name) == path:
                    self._durable_names[name] = ino

    def rename(self, src: str, dst: str) -> None:
        src, dst = self._norm(src), self._norm(dst)
        with self._lock:
            ino = self._inode(src)
            self._parent_exists(dst)
            del self._files[src]
            self._files[dst] = ino

    def remove(self, path: str) -> None:
        path = self._norm(path)
        with self._lock:
            self._inode(path)
            del self._files[path]

    def listdir(self, path: str) -> list[str]:
        path = self._norm(path)
        with self._lock:
            if path not in self._dirs:
                raise _oserror(_errno.ENOENT, path)
            names = {os.path.basename(n) for n in self._files if os.path.dirname(n) == path}
            names.update(os.path.basename(d) for d in self._dirs if d != path and os.path.dirname(d) == path)
            return sorted(names)

    def size(self, path: str) -> int:
        path = self._norm(path)
        with self._lock:
            return len(self._inode(path).data)

    def truncate(self, path: str, size: int) -> None:
        path = self._norm(path)
        with self._lock:
            _truncate_inode(self._inode(path), size)

    def exists(self, path: str) -> bool:
        path = self._norm(path)
        with self._lock:
            return path in self._files or path in self._dirs

    def makedirs(self, path: str) -> None:
        path = self._norm(path)
        with self._lock:
            if path in self._files:
                raise _oserror(_errno.EEXIST, path)
            while path not in self._dirs:
                self._dirs.add(path)
                path = os.path.dirname(path) or "."

    def rename_dir(self, src: str, dst: str) -> None:
        src, dst = self._norm(src), self._norm(dst)
        with self._lock:
            if src not in self._dirs:
                raise _oserror(_errno.ENOENT, src)
            if dst in self._dirs or dst in self._files:
                raise _oserror(_errno.EEXIST, dst)
            prefix = src + "/"
            for d in [d for d in self._dirs if d == src or d.startswith(prefix)]:
                self._dirs.discard(d)
                self._dirs.add(dst + d[len(src) :])
            for table in (self._files, self._durable_names):
                for p in [p for p in table if p.startswith(prefix)]:
                    table[dst + p[len(src) :]] = table.pop(p)

    def remove_dir(self, path: str) -> None:
        path = self._norm(path)
        with self._lock:
            if path not in self._dirs:
                raise _oserror(_errno.ENOENT, path)
            prefix = path + "/"
            if any(p.startswith(prefix) for p in self._files) or any(
                d.startswith(prefix) for d in self._dirs
            ):
                raise _oserror(_errno.ENOTEMPTY, path)
            self._dirs.discard(path)

    def lock(self, path: str) -> Lock:
        path = self._norm(path)
        with self._lock:
            if path in self._locks:
                raise BlockingIOError(_errno.EWOULDBLOCK, "locked", path)
            self._parent_exists(path)
            self._files.setdefault(path, _Inode())
            self._locks.add(path)
        return _MemLock(self, path)

    # -- test helpers ---------------------------------------------------------------------------------------

    def crash(self) -> MemFS:
        """What a power cut leaves: durable names only, each with its content as of its last fsync."""
        with self._lock:
            after = MemFS()
            after._dirs = set(self._dirs)
            copies: dict[int, _Inode] = {}
            for name, ino in self._durable_names.items():
                copy = copies.get(id(ino))
                if copy is None:
                    copy = copies[id(ino)] = _Inode(bytes(ino.durable))
                after._files[name] = copy
            after._durable_names = dict(after._files)
            return after

    def read_bytes(self, path: str) -> bytes:
        with self._lock:
            return bytes(self._inode(self._norm(path)).data)

    def write_bytes(self, path: str, data: bytes) -> None:
        """Replace a file's content and make it durable at once (for building test fixtures)."""
        path = self._norm(path)
        with self._lock:
            self._parent_exists(path)
            ino = self._files[path] = _Inode(data)
            self._durable_names[path] = ino

    def durable_size(self, path: str) -> int:
        """How many bytes of the file would survive a power cut (0 if its name would not)."""
        path = self._norm(path)
        with self._lock:
            ino = self._durable_names.get(path)
            return 0 if ino is None else len(ino.durable)


# ------------------------------------------------------------------------------------------------------------
# FaultFS


class SimulatedCrash(OSError):
    """The simulated process died: raised by the operation it died at and by every later one."""

    def __init__(self, op: str, path: str) -> None:
        super().__init__(_errno.EIO, f"simulated process death at {op}", path)


#: Operations that change what is on disk; `FaultFS.crash_after_ops` counts these.
MUTATING_OPS = frozenset({"open_append", "write", "fsync", "fsync_dir", "rename", "remove", "truncate"})


class _Rule:
    """One switched-on fault: on the matching `op`, after letting `skip` matches pass, `times` times."""

    __slots__ = ("op", "errno", "keep_bytes", "times", "skip", "path_contains", "crash", "after")

    def __init__(
        self,
        op: str,
        *,
        code: int = _errno.EIO,
        keep_bytes: int = 0,
        times: int | None = None,
        skip: int = 0,
        path_contains: str | None = None,
        crash: bool = False,
        after: bool = False,
    ) -> None:
        self.op = op
        self.errno = code
        self.keep_bytes = keep_bytes
        self.times = times
        self.skip = skip
        self.path_contains = path_contains
        self.crash = crash
        self.after = after


class _FaultFile:
    __slots__ = ("_fs", "_inner", "path")

    def __init__(self, fs: FaultFS, inner: File, path: str) -> None:
        self._fs = fs
        self._inner = inner
        self.path = path

    def write(self, data: bytes | bytearray | memoryview) -> None:
        fs = self._fs
        rule = fs._enter("write", self.path, len(data))
        if rule is not None:
            keep = min(rule.keep_bytes, len(data))
            if keep:
                self._inner.write(memoryview(data)[:keep])
            fs._fire(rule, self.path)
        self._inner.write(data)
        fs._leave("write", self.path)

    def read_at(self, offset: int, size: int) -> bytes:
        self._fs._fire(self._fs._enter("read", self.path, size), self.path)
        return self._inner.read_at(offset, size)

    def fsync(self) -> None:
        fs = self._fs
        rule = fs._enter("fsync", self.path)
        if fs._fsync_delay:
            time.sleep(fs._fsync_delay)
        fs._maybe_hang(self.path)
        fs._fire(rule, self.path)
        self._inner.fsync()
        fs._leave("fsync", self.path)

    def truncate(self, size: int) -> None:
        self._fs._fire(self._fs._enter("truncate", self.path, size), self.path)
        self._inner.truncate(size)
        self._fs._leave("truncate", self.path)

    def size(self) -> int:
        self._fs._fire(self._fs._enter("size", self.path), self.path)
        return self._inner.size()

    def close(self) -> None:
        # Allowed even after a simulated death, so that tests leak no descriptors.
        self._inner.close()


class FaultFS(FSOps):
    """A fault-injecting wrapper around another FS (a `MemFS` unless told otherwise).

    Faults are switched on with the methods below and stay on until their `times` run out or `clear()` is
    called; each can be limited to paths containing a substring. `counts` counts every operation by name, and
    `events` records each mutating one as ``(op, path, nbytes)``, for tests that check how often and in which
    order things happened.
    """

    def __init__(self, inner: FS | None = None) -> None:
        self.inner: FS = inner if inner is not None else MemFS()
        self._lock = threading.Lock()
        self.counts: Counter[str] = Counter()
        self.events: list[tuple[str, str, int]] = []
        self._rules: list[_Rule] = []
        self._crash_after_ops: int | None = None
        self._hang = False
        self._hang_path: str | None = None
        self._fsync_delay = 0.0
        self._released = threading.Event()
        self._hung = threading.Event()
        self._hung_count = 0
        self.crashed = False

    # -- switching faults -----------------------------------------------------------------------------------

    def fail_writes(
        self,
        code: int = _errno.ENOSPC,
        *,
        keep_bytes: int = 0,
        times: int | None = None,
        path_contains: str | None = None,
    ) -> None:
        """Writes raise OSError(code) after only their first `keep_bytes` bytes landed (a torn write)."""
        self._add(_Rule("write", code=code, keep_bytes=keep_bytes, times=times, path_contains=path_contains))

    def torn_write(self, keep_bytes: int, *, crash: bool = True, path_contains: str | None = None) -> None:
        """The next write lands only `keep_bytes` bytes, then the process dies (crash=False: raises EIO)."""
        self._add(_Rule("write", keep_bytes=keep_bytes, times=1, path_contains=path_contains, crash=crash))

    def fail_fsyncs(
        self, code: int = _errno.EIO, *, times: int | None = None, path_contains: str | None = None
    ) -> None:
        """File fsyncs raise OSError(code) and make nothing durable."""
        self._add(_Rule("fsync", code=code, times=times, path_contains=path_contains))

    def fail_op(
        self, op: str, code: int = _errno.EIO, *, times: int | None = None, path_contains: str | None = None
    ) -> None:
        """Any operation by name ("rename", "fsync_dir", "open_append", ...) raises OSError(code)."""
        self._add(_Rule(op, code=code, times=times, path_contains=path_contains))

    def crash_at(
        self, op: str, *, after: bool = False, nth: int = 1, path_contains: str | None = None
    ) -> None:
        """The process dies at the `nth` matching `op`: before it happens, or right after it if `after`."""
        self._add(_Rule(op, times=1, skip=nth - 1, path_contains=path_contains, crash=True, after=after))

    def crash_after_ops(self, n: int) -> None:
        """Let `n` more mutating operations happen (see MUTATING_OPS), then die before the next one."""
        with self._lock:
            self._crash_after_ops = n

    def slow_fsyncs(self, seconds: float) -> None:
        """File fsyncs take at least this long (0 to stop), like a real disk; for group-commit tests."""
        with self._lock:
            self._fsync_delay = seconds

    def hang_fsyncs(self, path_contains: str | None = None) -> None:
        """File fsyncs (of paths containing `path_contains`, if given) block until `release_fsyncs()`."""
        with self._lock:
            self._hang = True
            self._hang_path = path_contains
            self._released.clear()

    def release_fsyncs(self) -> None:
        with self._lock:
            self._hang = False
            self._released.set()

    def wait_until_hung(self, timeout: float = 5.0) -> bool:
        """Wait until some fsync is blocked by `hang_fsyncs`."""
        return self._hung.wait(timeout)

    @property
    def hung(self) -> int:
        """How many fsyncs are blocked right now."""
        with self._lock:
            return self._hung_count

    def clear(self) -> None:
        """Switch every fault off and release hung fsyncs. A simulated death is not undone."""
        with self._lock:
            self._rules.clear()
            self._crash_after_ops = None
            self._fsync_delay = 0.0
            self._hang = False
            self._released.set()

    # -- machinery ------------------------------------------------------------------------------------------

    def _add(self, rule: _Rule) -> None:
        with self._lock:
            self._rules.append(rule)

    def _match(self, op: str, path: str, after: bool) -> _Rule | None:
        # Called with the lock held.
        for rule in self._rules:
            if rule.op != op or rule.after != after:
                continue
            if rule.path_contains is not None and rule.path_contains not in path:
                continue
            if rule.skip > 0:
                rule.skip -= 1
                continue
            if rule.times is not None:
                rule.times -= 1
                if rule.times <= 0:
                    self._rules.remove(rule)
            return rule
        return None

    def _enter(self, op: str, path: str, nbytes: int = 0) -> _Rule | None:
        """Count the operation; die if a crash is due; return the fault rule to apply to it, if any."""
        with self._lock:
            if self.crashed:
                raise SimulatedCrash(op, path)
            self.counts[op] += 1
            if op in MUTATING_OPS:
                if self._crash_after_ops is not None:
                    if self._crash_after_ops <= 0:
                        self.crashed = True
                        raise SimulatedCrash(op, path)
                    self._crash_after_ops -= 1
                self.events.append((op, path, nbytes))
            rule = self._match(op, path, after=False)
            if rule is not None and rule.crash and not (op == "write" and rule.keep_bytes):
                self.crashed = True
                raise SimulatedCrash(op, path)
            return rule

    def _fire(self, rule: _Rule | None, path: str) -> None:
        if rule is None:
            return
        if rule.crash:
            with self._lock:
                self.crashed = True
            raise SimulatedCrash(rule.op, path)
        raise _oserror(rule.errno, path)

    def _leave(self, op: str, path: str) -> None:
        with self._lock:
            rule = self._match(op, path, after=True)
            if rule is not None:
                self.crashed = True
                raise SimulatedCrash(op, path)

    def _maybe_hang(self, path: str) -> None:
        with self._lock:
            if not self._hang or (self._hang_path is not None and self._hang_path not in path):
                return
            self._hung_count += 1
            self._hung.set()
        self._released.wait()
        with self._lock:
            self._hung_count -= 1
            if not self._hung_count:
                self._hung.clear()
            if self.crashed:
                raise SimulatedCrash("fsync", path)

    def _call(self, op: str, path: str, fn: Callable[[], None]) -> None:
        self._fire(self._enter(op, path), path)
        fn()
        self._leave(op, path)

    # -- FS -------------------------------------------------------------------------------------------------

    def open_append(self, path: str) -> File:
        self._fire(self._enter("open_append", path), path)
        f = self.inner.open_append(path)
        try:
            self._leave("open_append", path)
        except SimulatedCrash:
            f.close()
            raise
        return _FaultFile(self, f, path)

    def open_read(self, path: str) -> File:
        self._fire(self._enter("open_read", path), path)
        return _FaultFile(self, self.inner.open_read(path), path)

    def fsync_dir(self, path: str) -> None:
        self._call("fsync_dir", path, lambda: self.inner.fsync_dir(path))

    def rename(self, src: str, dst: str) -> None:
        self._call("rename", src, lambda: self.inner.rename(src, dst))

    def remove(self, path: str) -> None:
        self._call("remove", path, lambda: self.inner.remove(path))

    def listdir(self, path: str) -> list[str]:
        self._fire(self._enter("listdir", path), path)
        return self.inner.listdir(path)

    def size(self, path: str) -> int:
        self._fire(self._enter("size", path), path)
        return self.inner.size(path)

    def truncate(self, path: str, size: int) -> None:
        self._call("truncate", path, lambda: self.inner.truncate(path, size))

    def exists(self, path: str) -> bool:
        self._fire(self._enter("exists", path), path)
        return self.inner.exists(path)

    def makedirs(self, path: str) -> None:
        self._call("makedirs", path, lambda: self.inner.makedirs(path))

    def rename_dir(self, src: str, dst: str) -> None:
        self._call("rename", src, lambda: self.inner.rename_dir(src, dst))

    def remove_dir(self, path: str) -> None:
        self._call("remove", path, lambda: self.inner.remove_dir(path))

    def lock(self, path: str) -> Lock:
        self._fire(self._enter("lock", path), path)
        return self.inner.lock(path)
