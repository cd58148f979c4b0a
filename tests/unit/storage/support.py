"""Helpers for the storage tests: a log factory that closes what it opened, and views of a log."""

from __future__ import annotations

import os

from storage import FS, Entry, Log, StorageError

DIR = "/data/log"  # where logs live on a MemFS


class Logs:
    """Opens logs and closes them all at teardown (pytest runs with filterwarnings=error)."""

    def __init__(self) -> None:
        self.opened: list[Log] = []

    def open(self, directory: str = DIR, **kwargs: object) -> Log:
        lg = Log.open(directory, **kwargs)  # type: ignore[arg-type]
        self.opened.append(lg)
        return lg

    def reopen(self, lg: Log, fs: FS, **kwargs: object) -> Log:
        """Close `lg` (if still open) and open its directory again on `fs`."""
        lg.close(timeout=5)
        return self.open(lg.directory, fs=fs, **kwargs)

    def close_all(self) -> None:
        for lg in self.opened:
            try:
                lg.close(timeout=5)
            except StorageError:
                pass


def entries(lg: Log) -> list[Entry]:
    return list(lg.replay())


def pairs(lg: Log) -> list[tuple[bytes, bytes | None]]:
    return [(e.key, e.value) for e in lg.replay()]


def state(lg: Log) -> dict[bytes, bytes]:
    """The key -> last value map a replay builds (a tombstone removes the key)."""
    result: dict[bytes, bytes] = {}
    for e in lg.replay():
        if e.value is None:
            result.pop(e.key, None)
        else:
            result[e.key] = e.value
    return result


def segment_names(fs: FS, directory: str = DIR) -> list[str]:
    return sorted(n for n in fs.listdir(directory) if n.endswith(".log"))


def seg_path(name: str, directory: str = DIR) -> str:
    return os.path.join(directory, name)


def kv(i: int) -> tuple[bytes, bytes]:
    return (b"key-%04d" % i, b"value-%06d" % i)
