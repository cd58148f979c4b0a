"""Types of the compiled module storage._speedups (storage/_speedups.c)."""

from storage.format import Entry

def scan(
    buf: bytes, pos: int, last: int, verify: bool, emit: bool, entry_cls: type[Entry]
) -> tuple[list[Entry] | None, int, int, int, int, int]: ...
def checksum(data: bytes | bytearray | memoryview) -> int: ...
