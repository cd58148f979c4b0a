"""The filesystem interface the log does all its I/O through, and the real one.

Everything the log and the data plane touch goes through `FS` and the `File` handles it returns, so a test can
stand a fault-injecting double in for the disk (the shape of franz-go kfake's ``persist_fs.go``: osFS / memFS;
the doubles are in storage.fakefs, which production code never imports):

- `OsFS`: real files through ``os.open``/``os.write``/``os.pread``/``os.fsync``; a directory is fsynced by
  opening it ``O_RDONLY`` and fsyncing that descriptor.

Every implementation gets the composite operations of `FSOps` (`make_dirs`, `write_atomically`, `read_file`),
built from the primitives, so a double that faults a primitive faults them too.

Handles are POSIX-like: a handle open on a file keeps seeing that file after it is renamed over or removed.
"""

from __future__ import annotations

import fcntl
import os
from typing import Protocol

__all__ = ["FS", "FSOps", "File", "Lock", "OsFS", "TEMP_SUFFIX"]

TEMP_SUFFIX = ".tmp"  # a file being written to replace another (write_atomically); never read back


class File(Protocol):
    """An open file. Append handles write at the end; read handles read at an offset."""

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Write all of `data` at the end of the file, or raise OSError (a prefix may have landed)."""

    def read_at(self, offset: int, size: int) -> bytes:
        """Up to `size` bytes from `offset`; fewer only at the end of the file."""

    def fsync(self) -> None: ...

    def truncate(self, size: int) -> None: ...

    def size(self) -> int: ...

    def close(self) -> None:
        """Idempotent."""


class FS(Protocol):
    def open_append(self, path: str) -> File:
        """Open for appending, creating the file if missing (the new name is durable only after fsync_dir)."""

    def open_read(self, path: str) -> File: ...

    def fsync_dir(self, path: str) -> None:
        """Make the directory's entries (creates, renames, removes) durable."""

    def rename(self, src: str, dst: str) -> None:
        """Atomically replace `dst` with `src`."""

    def remove(self, path: str) -> None: ...

    def listdir(self, path: str) -> list[str]: ...

    def size(self, path: str) -> int: ...

    def truncate(self, path: str, size: int) -> None: ...

    def exists(self, path: str) -> bool: ...

    def makedirs(self, path: str) -> None: ...

    def rename_dir(self, src: str, dst: str) -> None:
        """Atomically rename a directory (like rename(2)); `dst` must not exist."""

    def remove_dir(self, path: str) -> None:
        """Remove an empty directory."""

    def make_dirs(self, directory: str) -> None:
        """makedirs, each new directory made durable in its parent (FSOps)."""

    def write_atomically(self, path: str, data: bytes) -> None:
        """Replace `path` with `data`: temp file, fsync, rename over, directory fsync (FSOps)."""

    def read_file(self, path: str) -> bytes:
        """The whole content of a file (FSOps)."""

    def lock(self, path: str) -> Lock:
        """Take an exclusive lock on `path` (created if missing), or raise BlockingIOError if it is held.

        Held until the returned lock is closed, or the process exits; it keeps two logs off one directory.
        """


class Lock(Protocol):
    def close(self) -> None: ...


class FSOps:
    """The composite operations of FS, in terms of its primitives (mixed into every implementation)."""

    def make_dirs(self: FS, directory: str) -> None:
        created = []
        missing = os.path.normpath(directory)
        while not self.exists(missing):
            created.append(missing)
            parent = os.path.dirname(missing)
            if parent == missing or not parent:
                break
            missing = parent
        self.makedirs(directory)
        for new_dir in reversed(created):
            self.fsync_dir(os.path.dirname(new_dir) or ".")

    def write_atomically(self: FS, path: str, data: bytes) -> None:
        # One temp file per process: the workers of `serve --workers N` may write the same file at once (the
        # groups' layout.json at their first start), and two writers appending to one temp file garble it.
        tmp = f"{path}.{os.getpid()}{TEMP_SUFFIX}"
        try:
            if self.exists(tmp):
                self.remove(tmp)
            f = self.open_append(tmp)
            try:
                f.write(data)
                f.fsync()
            finally:
                f.close()
            self.rename(tmp, path)
        except BaseException:
            try:
                if self.exists(tmp):
                    self.remove(tmp)
            except OSError:
                pass  # the next start removes it
            raise
        self.fsync_dir(os.path.dirname(path) or ".")

    def read_file(self: FS, path: str) -> bytes:
        f = self.open_read(path)
        try:
            return f.read_at(0, f.size())
        finally:
            f.close()


# ------------------------------------------------------------------------------------------------------------
# OsFS


class _OsFile:
    __slots__ = ("_fd", "path")

    def __init__(self, fd: int, path: str) -> None:
        self._fd = fd
        self.path = path

    def write(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data)
        while view:
            n = os.write(self._fd, view)
            view = view[n:]

    def read_at(self, offset: int, size: int) -> bytes:
        data = os.pread(self._fd, size, offset)
        if len(data) == size or not data:
            return data
        parts = [data]
        got = len(data)
        while got < size:
            more = os.pread(self._fd, size - got, offset + got)
            if not more:
                break
            parts.append(more)
            got += len(more)
        return b"".join(parts)

    def fsync(self) -> None:
        os.fsync(self._fd)

    def truncate(self, size: int) -> None:
        os.ftruncate(self._fd, size)

    def size(self) -> int:
        return os.fstat(self._fd).st_size

    def close(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)


class OsFS(FSOps):
    """Real files."""

    def open_append(self, path: str) -> File:
        return _OsFile(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | _O_CLOEXEC, 0o644), path)

    def open_read(self, path: str) -> File:
        return _OsFile(os.open(path, os.O_RDONLY | _O_CLOEXEC), path)

    def fsync_dir(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY | _O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def rename(self, src: str, dst: str) -> None:
        os.replace(src, dst)

    def remove(self, path: str) -> None:
        os.remove(path)

    def listdir(self, path: str) -> list[str]:
        return os.listdir(path)

    def size(self, path: str) -> int:
        return os.stat(path).st_size

    def truncate(self, path: str, size: int) -> None:
        os.truncate(path, size)

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def makedirs(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)

    def rename_dir(self, src: str, dst: str) -> None:
        os.rename(src, dst)

    def remove_dir(self, path: str) -> None:
        os.rmdir(path)

    def lock(self, path: str) -> Lock:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | _O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise
        return _OsFile(fd, path)  # closing the descriptor releases the lock


_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
