"""Build kio entities of a given version from plain data.

kio generates one frozen dataclass per message version. Handlers describe an answer once, as a mapping (or as an
entity of any version), and `build(ResponseClass, data)` makes the entity of the exact version the client asked for:
fields that version lacks are dropped, nested entities and tuples of entities are built recursively with that
version's nested classes, plain ints become the timedelta wrappers kio uses for `*_ms` durations, and fields left
out take the schema default (or an empty value, see `_empty`).
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

from kio.static.primitive import i32Timedelta, i64Timedelta

E = TypeVar("E")

_MISSING = dataclasses.MISSING


@dataclasses.dataclass(frozen=True, slots=True)
class _FieldPlan:
    name: str
    kafka_type: str | None
    nested: type | None  # entity class for nested/tuple-of-entity fields
    is_tuple: bool
    nullable: bool
    has_default: bool


def _unwrap(tp: Any) -> tuple[Any, bool, bool]:
    """Return (inner type, is_tuple, nullable)."""
    nullable = False
    origin = typing.get_origin(tp)
    if origin in (types.UnionType, typing.Union):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        nullable = len(args) != len(typing.get_args(tp))
        tp = args[0] if len(args) == 1 else tp
        origin = typing.get_origin(tp)
    if origin is tuple:
        inner = typing.get_args(tp)[0]
        inner_origin = typing.get_origin(inner)
        if inner_origin in (types.UnionType, typing.Union):
            inner = [a for a in typing.get_args(inner) if a is not type(None)][0]
        return inner, True, nullable
    return tp, False, nullable


@functools.cache
def _plan(cls: Any) -> tuple[_FieldPlan, ...]:
    hints = typing.get_type_hints(cls)
    plans = []
    for f in dataclasses.fields(cls):
        inner, is_tuple, nullable = _unwrap(hints[f.name])
        nested = inner if isinstance(inner, type) and dataclasses.is_dataclass(inner) else None
        plans.append(
            _FieldPlan(
                name=f.name,
                kafka_type=f.metadata.get("kafka_type"),
                nested=nested,
                is_tuple=is_tuple,
                nullable=nullable,
                has_default=f.default is not _MISSING or f.default_factory is not _MISSING,
            )
        )
    return tuple(plans)


def _get(data: Any, name: str) -> Any:
    if isinstance(data, Mapping):
        return data.get(name, _MISSING)
    return getattr(data, name, _MISSING)


def _empty(p: _FieldPlan) -> Any:
    if p.nullable:
        return None
    if p.is_tuple:
        return ()
    kt = p.kafka_type
    if kt == "string":
        return ""
    if kt in ("bytes", "records"):
        return b""
    if kt == "bool":
        return False
    if kt == "timedelta_i32":
        return i32Timedelta.parse(datetime.timedelta(0))
    if kt == "timedelta_i64":
        return i64Timedelta.parse(datetime.timedelta(0))
    if kt == "uuid":
        return None
    if p.nested is not None:
        return build(p.nested, {})
    return 0


def _coerce(p: _FieldPlan, value: Any) -> Any:
    if value is None:
        return None
    if p.nested is not None:
        if p.is_tuple:
            return tuple(build(p.nested, v) for v in value)
        return build(p.nested, value)
    if p.kafka_type == "timedelta_i32" and not isinstance(value, datetime.timedelta):
        return i32Timedelta.parse(datetime.timedelta(milliseconds=int(value)))
    if p.kafka_type == "timedelta_i64" and not isinstance(value, datetime.timedelta):
        return i64Timedelta.parse(datetime.timedelta(milliseconds=int(value)))
    if p.is_tuple and not isinstance(value, tuple):
        return tuple(value)
    return value


def build(cls: type[E], data: Any = None, /, **overrides: Any) -> E:
    """Make an entity of `cls` from a mapping or another entity (any version), plus keyword overrides."""
    if data is None:
        data = {}
    if isinstance(data, cls) and not overrides:
        return data
    kwargs = {}
    plan_of: Any = cls  # a kio entity class (hashable; mypy cannot tell from type[E])
    for p in _plan(plan_of):
        value = overrides[p.name] if p.name in overrides else _get(data, p.name)
        if value is _MISSING:
            if p.has_default:
                continue
            value = _empty(p)
            kwargs[p.name] = value
            continue
        kwargs[p.name] = _coerce(p, value)
    return cls(**kwargs)


@functools.cache
def entity_array_fields(cls: type) -> tuple[str, ...]:
    """The fields of a kio entity class that hold arrays of entities (where nested error codes live)."""
    plan_of: Any = cls
    return tuple(p.name for p in _plan(plan_of) if p.is_tuple and p.nested is not None)


def fields_of(cls: type) -> frozenset[str]:
    """The field names of an entity class (cached)."""
    return frozenset(p.name for p in _plan(cls))


def ms(value: datetime.timedelta) -> int:
    """kio decodes `*_ms` durations as timedelta; the coordinator counts in integer milliseconds."""
    if isinstance(value, datetime.timedelta):
        return value // _ONE_MS
    return int(value)


_ONE_MS = datetime.timedelta(milliseconds=1)
