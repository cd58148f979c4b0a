"""Request bodies walked along kio's schemas: claimed array lengths checked before kio's native reader sees a
request, and tagged fields kio does not know taken out (`strip_unknown_tags`, at the end).

kio 0.6.5's native reader reserves room for an array's claimed element count before reading a single element: a
41-byte JoinGroup whose protocol array claims 2**32 elements makes it ask for 32 GiB and the process aborts
(found by scripts/fuzz.py; tests/reliability/test_fuzz.py keeps the reproduction). Kafka checks a claimed length
against the bytes that remain before allocating. This module does the same: `array_check(cls)` walks a request
body along kio's own field metadata (the field order, `kafka_type`, tags, flexible or not), reads only lengths and
counts, and raises RequestDecodeError when an array claims more elements than bytes remain (every element takes at
least one byte). Anything else wrong with the bytes (a short frame, a bad string) is left to kio's reader, which
fails cleanly on those. Entities without arrays anywhere (Heartbeat, ApiVersions) are not walked at all.

Our own code rather than a library: nothing else reads kio's schemas; the rules are the Kafka protocol guide's.
"""

from __future__ import annotations

import dataclasses
import functools
import struct
from collections.abc import Callable
from typing import Any

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)

from .errors import RequestDecodeError

# A step reads one field at `pos` and returns the position after it; `end` bounds the frame.
Buffer = bytes | memoryview  # a request frame: Buffer off the socket, or a view of them
Step = Callable[[Buffer, int, int], int]

_FIXED = {
    "int8": 1,
    "int16": 2,
    "int32": 4,
    "int64": 8,
    "uint8": 1,
    "uint16": 2,
    "uint32": 4,
    "uint64": 8,
    "float64": 8,
    "bool": 1,
    "uuid": 16,
    "timedelta_i32": 4,
    "timedelta_i64": 8,
    "datetime_i64": 8,
    "error_code": 2,
}
_I8, _I16, _I32 = struct.Struct(">b"), struct.Struct(">h"), struct.Struct(">i")


class _Short(Exception):
    """The frame ends before the field: left to kio's reader to report."""


class Unwalkable(Exception):
    """A schema this module does not know how to walk (then requests of it are not checked)."""


def _uvarint(data: Buffer, pos: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= end or shift > 28:
            raise _Short
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def _fixed(data: Buffer, pos: int, end: int, unpack: struct.Struct) -> int:
    if pos + unpack.size > end:
        raise _Short
    return int(unpack.unpack_from(data, pos)[0])


def _length(flexible: bool, wide: bool) -> Callable[[Buffer, int, int], tuple[int, int]]:
    """Reader of a string/bytes length or an array count: -1 for null."""
    if flexible:

        def compact(data: Buffer, pos: int, end: int) -> tuple[int, int]:
            n, pos = _uvarint(data, pos, end)
            return n - 1, pos

        return compact
    unpack = _I32 if wide else _I16

    def legacy(data: Buffer, pos: int, end: int) -> tuple[int, int]:
        return _fixed(data, pos, end, unpack), pos + unpack.size

    return legacy


def _skip_sized(flexible: bool, wide: bool) -> Step:
    length = _length(flexible, wide)

    def skip(data: Buffer, pos: int, end: int) -> int:
        n, pos = length(data, pos, end)
        if n > 0:
            pos += n
            if pos > end:
                raise _Short
        return pos

    return skip


def _primitive(kafka_type: str, flexible: bool) -> tuple[Step, int]:
    """The step reading one value of `kafka_type`, and the fewest bytes a value takes."""
    size = _FIXED.get(kafka_type)
    if size is not None:

        def fixed(data: Buffer, pos: int, end: int) -> int:
            pos += size
            if pos > end:
                raise _Short
            return pos

        return fixed, size
    if kafka_type == "string":
        return _skip_sized(flexible, wide=False), 1 if flexible else 2
    if kafka_type in ("bytes", "records"):
        return _skip_sized(flexible, wide=True), 1 if flexible else 4
    raise Unwalkable(f"kafka_type {kafka_type!r}")


def _array(element: Step, name: str, flexible: bool) -> Step:
    count_of = _length(flexible, wide=True)

    def array(data: Buffer, pos: int, end: int) -> int:
        count, pos = count_of(data, pos, end)
        if count > end - pos:
            raise RequestDecodeError(f"field {name} claims {count} elements but {end - pos} bytes remain")
        for _ in range(count):
            pos = element(data, pos, end)
        return pos

    return array


def _field_step(field: dataclasses.Field[object], flexible: bool) -> tuple[Step, bool]:
    """The field's step, and whether an array is in it (at any depth)."""
    kind = classify_field(field)
    if isinstance(kind, EntityTupleField | EntityField):
        walk, nested_arrays = _entity(kind.type_)
        if isinstance(kind, EntityTupleField):
            return _array(walk, field.name, flexible), True
        if is_optional(field):

            def nullable(data: Buffer, pos: int, end: int) -> int:
                present = _fixed(data, pos, end, _I8)
                return pos + 1 if present < 0 else walk(data, pos + 1, end)

            return nullable, nested_arrays
        return walk, nested_arrays
    step, _ = _primitive(get_schema_field_type(field), flexible)
    if isinstance(kind, PrimitiveTupleField):
        return _array(step, field.name, flexible), True
    return step, False


@functools.cache
def _entity(cls: Any) -> tuple[Step, bool]:
    flexible = bool(cls.__flexible__)
    steps: list[Step] = []
    tagged: dict[int, Step] = {}
    has_arrays = False
    for field in dataclasses.fields(cls):
        step, arrays = _field_step(field, flexible)
        has_arrays = has_arrays or arrays
        tag = get_field_tag(field)
        if tag is None:
            steps.append(step)
        else:
            tagged[int(tag)] = step

    def walk(data: Buffer, pos: int, end: int) -> int:
        for step in steps:
            pos = step(data, pos, end)
        return _skip_tags(data, pos, end, tagged) if flexible else pos

    return walk, has_arrays


# -- generated walkers ------------------------------------------------------------------------------------
#
# The step closures above are clear but cost a Python call per field (~1 us each). `array_check` compiles each
# request class into one straight-line function instead (no call per field, varints read inline), built from the
# same kio metadata; tests/unit/protocol/test_shape.py checks it reads every request class exactly to its end.


class _Gen:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.names = 0
        self.constants: dict[str, object] = {}

    def var(self, prefix: str) -> str:
        self.names += 1
        return f"{prefix}{self.names}"

    def emit(self, indent: int, line: str) -> None:
        self.lines.append("    " * indent + line)

    def varint(self, indent: int, target: str) -> None:
        """target = unsigned varint at p (p moves past it)."""
        self.emit(indent, f"{target} = d[p]")
        self.emit(indent, f"if {target} < 128:")
        self.emit(indent + 1, "p += 1")
        self.emit(indent, "else:")
        self.emit(indent + 1, f"{target}, p = _uvarint(d, p, e)")

    def sized(self, indent: int, flexible: bool, wide: bool) -> None:
        """Skip a string or bytes value."""
        n = self.var("n")
        if flexible:
            self.varint(indent, n)
            self.emit(indent, f"if {n} > 1:")
            self.emit(indent + 1, f"p += {n} - 1")
        else:
            width = 4 if wide else 2
            self.emit(indent, f"{n} = int.from_bytes(d[p:p + {width}], 'big', signed=True)")
            self.emit(indent, f"p += {width}")
            self.emit(indent, f"if {n} > 0:")
            self.emit(indent + 1, f"p += {n}")

    def count(self, indent: int, flexible: bool, name: str) -> str:
        """Read an array count (-1: null) and refuse one larger than the bytes left."""
        c = self.var("c")
        if flexible:
            self.varint(indent, c)
            self.emit(indent, f"{c} -= 1")
        else:
            self.emit(indent, f"{c} = int.from_bytes(d[p:p + 4], 'big', signed=True)")
            self.emit(indent, "p += 4")
        self.emit(indent, f"if {c} > e - p:")
        self.emit(indent + 1, f"_refuse({name!r}, {c}, e - p)")
        return c

    def primitive(self, indent: int, kafka_type: str, flexible: bool) -> None:
        size = _FIXED.get(kafka_type)
        if size is not None:
            self.emit(indent, f"p += {size}")
        elif kafka_type == "string":
            self.sized(indent, flexible, wide=False)
        elif kafka_type in ("bytes", "records"):
            self.sized(indent, flexible, wide=True)
        else:
            raise Unwalkable(f"kafka_type {kafka_type!r}")

    def entity(self, indent: int, cls: Any) -> None:
        flexible = bool(cls.__flexible__)
        tagged: dict[int, Step] = {}
        for field in dataclasses.fields(cls):
            tag = get_field_tag(field)
            if tag is not None:
                tagged[int(tag)] = _field_step(field, flexible)[0]
                continue
            kind = classify_field(field)
            if isinstance(kind, EntityTupleField):
                c = self.count(indent, flexible, field.name)
                self.emit(indent, f"for _ in range({c}):")
                self.entity(indent + 1, kind.type_)
            elif isinstance(kind, EntityField):
                if is_optional(field):
                    self.emit(indent, "p += 1")
                    self.emit(indent, "if d[p - 1] < 128:")  # present: 1; null: -1 (0xff)
                    self.entity(indent + 1, kind.type_)
                else:
                    self.entity(indent, kind.type_)
            elif isinstance(kind, PrimitiveTupleField):
                c = self.count(indent, flexible, field.name)
                size = _FIXED.get(get_schema_field_type(field))
                if size is not None:
                    self.emit(indent, f"if {c} > 0:")
                    self.emit(indent + 1, f"p += {c} * {size}")
                else:
                    self.emit(indent, f"for _ in range({c}):")
                    self.primitive(indent + 1, get_schema_field_type(field), flexible)
            else:
                self.primitive(indent, get_schema_field_type(field), flexible)
        if flexible:
            name = self.var("tags")
            self.constants[name] = tagged
            self.emit(indent, "if d[p] == 0:")
            self.emit(indent + 1, "p += 1")
            self.emit(indent, "else:")
            self.emit(indent + 1, f"p = _skip_tags(d, p, e, {name})")


def _skip_tags(d: Buffer, p: int, e: int, known: dict[int, Step]) -> int:
    count, p = _uvarint(d, p, e)
    for _ in range(count):
        tag, p = _uvarint(d, p, e)
        size, p = _uvarint(d, p, e)
        if p + size > e:
            raise _Short
        step = known.get(tag)
        if step is not None:
            step(d, p, p + size)
        p += size
    return p


def _refuse(name: str, count: int, left: int) -> None:
    raise RequestDecodeError(f"field {name} claims {count} elements but {left} bytes remain")


def compile_walker(cls: Any) -> Callable[[Buffer, int, int], int]:
    """One function reading a `cls` body from p to its end (returns the end); raises _Short or IndexError on a
    frame that ends early and RequestDecodeError on an array longer than the bytes left."""
    gen = _Gen()
    gen.entity(1, cls)
    source = "def walk(d, p, e):\n" + "\n".join(gen.lines) + "\n    return p\n"
    namespace: dict[str, object] = {
        "_uvarint": _uvarint,
        "_skip_tags": _skip_tags,
        "_refuse": _refuse,
        **gen.constants,
    }
    exec(compile(source, f"<walker {cls.__module__}.{cls.__qualname__}>", "exec"), namespace)  # noqa: S102
    return namespace["walk"]  # type: ignore[return-value]


@functools.cache
def array_check(cls: Any) -> Callable[[Buffer, int], None] | None:
    """A check of a `cls` body at an offset of a frame, or None when `cls` has no arrays (nothing to check) or a
    field this module cannot walk."""
    try:
        _, has_arrays = _entity(cls)
        if not has_arrays:
            return None
        walk = compile_walker(cls)
    except Unwalkable:
        return None

    def check(frame: Buffer, offset: int) -> None:
        try:
            walk(frame, offset, len(frame))
        except (_Short, IndexError):
            pass  # the frame ends early: kio's reader reports it

    return check


# -- unknown tagged fields ----------------------------------------------------------------------------------
#
# kio 0.6.5's reader raises KeyError on a tagged field its schema does not have, where Kafka skips it: a newer
# client may send tags this server does not know. `strip_unknown_tags` walks a flexible entity the same way as the
# checks above and returns the frame without the tagged fields the schema does not know (None when there are none
# or the frame does not walk), for kio to read again. Only the requests that carry such a tag pay for the walk.

Edit = tuple[int, int, bytes]  # replace frame[start:end] by bytes
Stripper = Callable[[Buffer, int, int, list[Edit]], int]


def _encode_uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _plain(step: Step) -> Stripper:
    def run(d: Buffer, p: int, e: int, edits: list[Edit]) -> int:
        return step(d, p, e)

    return run


@functools.cache
def _stripper(cls: Any) -> Stripper:
    flexible = bool(cls.__flexible__)
    steps: list[Stripper] = []
    known: set[int] = set()
    for field in dataclasses.fields(cls):
        tag = get_field_tag(field)
        if tag is not None:
            known.add(int(tag))  # a known tagged field is kept as sent
            continue
        kind = classify_field(field)
        if isinstance(kind, EntityTupleField):
            steps.append(_strip_array(_stripper(kind.type_), _length(flexible, wide=True)))
        elif isinstance(kind, EntityField):
            inner = _stripper(kind.type_)
            steps.append(_strip_optional(inner) if is_optional(field) else inner)
        else:
            steps.append(_plain(_field_step(field, flexible)[0]))

    def walk(d: Buffer, p: int, e: int, edits: list[Edit]) -> int:
        for step in steps:
            p = step(d, p, e, edits)
        if not flexible:
            return p
        start = p
        count, p = _uvarint(d, p, e)
        kept: list[bytes] = []
        for _ in range(count):
            begin = p
            tag, p = _uvarint(d, p, e)
            size, p = _uvarint(d, p, e)
            p += size
            if p > e:
                raise _Short
            if tag in known:
                kept.append(bytes(d[begin:p]))
        if len(kept) != count:
            edits.append((start, p, _encode_uvarint(len(kept)) + b"".join(kept)))
        return p

    return walk


def _strip_array(element: Stripper, count_of: Callable[[Buffer, int, int], tuple[int, int]]) -> Stripper:
    def array(d: Buffer, p: int, e: int, edits: list[Edit]) -> int:
        count, p = count_of(d, p, e)
        if count > e - p:
            raise _Short
        for _ in range(count):
            p = element(d, p, e, edits)
        return p

    return array


def _strip_optional(inner: Stripper) -> Stripper:
    def optional(d: Buffer, p: int, e: int, edits: list[Edit]) -> int:
        present = _fixed(d, p, e, _I8)
        return p + 1 if present < 0 else inner(d, p + 1, e, edits)

    return optional


def strip_unknown_tags(cls: Any, frame: Buffer, offset: int) -> bytes | None:
    """`frame` without the tagged fields of the `cls` entity at `offset` (and of the entities in it) that `cls`'s
    schema does not know; None when it has none, or when the frame does not walk (kio then reports the error)."""
    edits: list[Edit] = []
    try:
        _stripper(cls)(frame, offset, len(frame), edits)
    except (_Short, IndexError, Unwalkable):
        return None
    if not edits:
        return None
    out = bytearray()
    last = 0
    for start, end, replacement in edits:  # in frame order: a nested entity's tags end before its parent's
        out += frame[last:start]
        out += replacement
        last = end
    out += frame[last:]
    return bytes(out)


def strip_header_tags(frame: Buffer) -> bytes | None:
    """`frame` without the tagged fields of its request header v2 (Kafka's defines none; its client id is a
    non-compact string, unlike the rest of a flexible header); None when it has none or is too short."""
    if len(frame) < 10:
        return None
    length = _I16.unpack_from(frame, 8)[0]
    start = 10 + max(length, 0)
    try:
        count, p = _uvarint(frame, start, len(frame))
        for _ in range(count):
            _tag, p = _uvarint(frame, p, len(frame))
            size, p = _uvarint(frame, p, len(frame))
            p += size
            if p > len(frame):
                return None
    except _Short:
        return None
    if count == 0:
        return None
    return bytes(frame[:start]) + b"\x00" + bytes(frame[p:])
