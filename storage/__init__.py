"""An append-only, CRC-checked, segmented log with group-commit fsync, compaction and replay.

It knows bytes, not groups: entries are (key, value) pairs of bytes, and a value of None is a tombstone.
See `storage.log` for the format and the theory of operation, `storage.fs` for the filesystem interface and
`storage.fakefs` for its test doubles (MemFS, FaultFS), which production code never imports.
"""

from storage.format import (
    FORMAT_VERSION,
    Entry,
    StorageClosedError,
    StorageCorruptError,
    StorageError,
    StorageFormatError,
    StorageFullError,
    StorageIOError,
)
from storage.fs import FS, File, Lock, OsFS
from storage.log import CompactionResult, Log, LogStats, Recovery, Truncation

__all__ = [
    "FORMAT_VERSION",
    "FS",
    "File",
    "Lock",
    "OsFS",
    "Log",
    "Entry",
    "Recovery",
    "Truncation",
    "CompactionResult",
    "LogStats",
    "StorageError",
    "StorageFullError",
    "StorageIOError",
    "StorageClosedError",
    "StorageCorruptError",
    "StorageFormatError",
]
