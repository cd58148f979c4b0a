"""protocol.shape: the walk along kio's schemas reads every valid request body exactly to its end, and a claimed
array length larger than the bytes left is our decode error, never kio's allocation."""

from __future__ import annotations

import io

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.serial import entity_writer
from kio.static.primitive import Records

from protocol.api import request_class
from protocol.errors import RequestDecodeError
from protocol.shape import _entity, array_check, compile_walker


def _classes() -> list[type]:
    found = []
    for api_key in range(0, 80):
        for version in range(0, 20):
            try:
                found.append(request_class(api_key, version))
            except Exception:
                continue
    return found


CLASSES = _classes()
st.register_type_strategy(Records, st.binary(max_size=16).map(Records))


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: f"{c.__module__.split('.')[2]}-v{c.__version__}")
@settings(max_examples=5, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_the_walk_reads_a_valid_body_exactly_to_its_end(cls: type, data: st.DataObject):
    entity = data.draw(st.from_type(cls))
    buf = io.BytesIO()
    entity_writer(cls)(buf, entity)
    body = buf.getvalue()
    walk, _ = _entity(cls)
    assert walk(body, 0, len(body)) == len(body)
    assert compile_walker(cls)(body, 0, len(body)) == len(body)
    check = array_check(cls)
    if check is not None:
        check(b"\x00" * 3 + body, 3)  # an offset into a frame, as ApiTable.decode passes it


def test_every_request_with_arrays_is_checked():
    unchecked = [c for c in CLASSES if array_check(c) is None and _entity(c)[1]]
    assert not unchecked


def test_an_array_claiming_more_elements_than_bytes_is_refused():
    cls = request_class(11, 9)  # JoinGroup v9: group_id, timeouts, member_id, instance id, type, protocols
    body = (
        b"\x02g"
        + b"\x00\x00\x27\x10" * 2
        + b"\x01"
        + b"\x00"
        + b"\x09consumer"
        + bytes([0x81, 0x80, 0x80, 0x80, 0x10])
        + b"\x00\x00"
    )
    check = array_check(cls)
    assert check is not None
    with pytest.raises(RequestDecodeError, match="claims 4294967296 elements"):
        check(body, 0)
    check(body[:12], 0)  # a short body is left to kio's reader
