"""The workers' internal channel (coordinator.cluster.internal): Envelopes carry the client's principal, host and
listener; a wrong token or anything but an Envelope is refused; and the replicas' rules for following worker 0's
security state (coordinator.cluster.security_sync)."""

from __future__ import annotations

import asyncio
import json

import pytest
from kio.schema.offset_fetch.v7.request import OffsetFetchRequest

from coordinator.brokers import local_address
from coordinator.cluster.internal import HELLO, INTERNAL_PRINCIPAL, InternalChannel, Origin
from coordinator.cluster.security_sync import SecuritySync, decode_records, encode_records
from coordinator.security.acl import AclBinding, Authorizer, Operation, PatternType, Permission, ResourceType
from coordinator.security.store import SecurityStore
from protocol.api import ApiTable, encode_request
from protocol.envelope import decode_envelope_response, encode_envelope_response, host_bytes, host_text
from protocol.errors import RequestDecodeError

LISTENERS = {None: ("0.0.0.0", 9192, "SASL_SSL"), "SASL_SSL": ("0.0.0.0", 9192, "SASL_SSL")}


def channel(secret: str = "a" * 64) -> InternalChannel:
    return InternalChannel(secret, LISTENERS.get)


def table() -> ApiTable:
    t = ApiTable()

    async def handler(ctx, body):  # type: ignore[no-untyped-def]
        return None

    t.register(9, 1, 9, handler)
    return t


def offset_fetch_frame(correlation_id: int = 7) -> bytes:
    request = OffsetFetchRequest(group_id="g", topics=None, require_stable=False)
    return encode_request(request, correlation_id, "client-1")[4:]


def test_an_envelope_carries_the_client_principal_host_and_listener() -> None:
    sender = channel()
    origin = Origin("User:alice", "10.0.0.9", "SASL_SSL", "10.0.0.1")
    frame = sender.envelope(offset_fetch_frame(), 3, origin)[4:]

    def unwrap() -> tuple[object, object]:
        decoded = channel().unwrap(frame, table(), 42)
        return decoded, local_address.get(None)

    decoded, local = asyncio.run(asyncio.to_thread(unwrap))  # a fresh context for local_address
    ctx = decoded.context
    assert (ctx.api_key, ctx.api_version, ctx.correlation_id, ctx.client_id) == (9, 7, 7, "client-1")
    assert (ctx.principal, ctx.client_host, ctx.connection_id) == ("User:alice", "10.0.0.9", 42)
    assert ctx.session.listener_name == "SASL_SSL" and ctx.session.authenticated
    assert decoded.body.group_id == "g"
    assert decoded.envelope == 3
    assert local == ("10.0.0.1", 9192)  # broker addresses are answered for the client's listener
    answer = InternalChannel.wrap(decoded, b"\x00\x00\x00\x07inner")
    assert answer[:4] == b"\x00\x00\x00\x03"
    assert decode_envelope_response(answer[4:]) == (0, b"\x00\x00\x00\x07inner")


def test_a_wrong_token_or_a_plain_request_is_refused() -> None:
    frame = channel("b" * 64).envelope(offset_fetch_frame(), 1, Origin("User:admin", "127.0.0.1"))[4:]
    with pytest.raises(RequestDecodeError, match="wrong secret"):
        channel().unwrap(frame, table(), 1)
    with pytest.raises(RequestDecodeError, match="expected an Envelope"):
        channel().unwrap(offset_fetch_frame(), table(), 1)
    truncated = channel().envelope(offset_fetch_frame(), 1, Origin("User:admin", "127.0.0.1"))[4:-5]
    with pytest.raises(RequestDecodeError):
        channel().unwrap(truncated, table(), 1)


def test_channel_messages_reach_their_kind_handler_as_the_worker() -> None:
    receiver = channel()
    seen = []

    async def hello(meta, data):  # type: ignore[no-untyped-def]
        seen.append((meta["kind"], data))
        return b"state"

    receiver.kinds[HELLO] = hello
    frame = channel().envelope(b"payload", 5, Origin(INTERNAL_PRINCIPAL, "127.0.0.1"), HELLO)[4:]
    decoded = receiver.unwrap(frame, table(), 1)
    assert decoded.context.principal == INTERNAL_PRINCIPAL
    assert asyncio.run(decoded.spec.handler(decoded.context, decoded.body)) == b"state"
    assert seen == [("hello", b"payload")]
    unknown = channel().envelope(b"", 6, Origin(INTERNAL_PRINCIPAL, "127.0.0.1"), "sync")[4:]
    with pytest.raises(RequestDecodeError, match="unknown kind"):
        receiver.unwrap(unknown, table(), 1)


def test_hosts_travel_as_address_bytes() -> None:
    assert host_bytes("10.1.2.3") == bytes([10, 1, 2, 3])
    assert host_text(host_bytes("::1")) == "::1"
    assert host_bytes("not-an-address") == b"" and host_text(b"") == ""
    assert decode_envelope_response(encode_envelope_response(9, None, 35)[4:]) == (35, None)


# -- a replica following worker 0 -----------------------------------------------------------------------------


def acl(name: str) -> AclBinding:
    return AclBinding(
        ResourceType.TOPIC, name, PatternType.LITERAL, "User:alice", "*", Operation.READ, Permission.DENY
    )


class _Topology:
    index = 1
    count = 2

    def address(self, worker: int) -> tuple[str, int]:
        return "127.0.0.1", 1


def replica() -> SecuritySync:
    from coordinator.config import Config

    store = SecurityStore(Authorizer(), None)
    return SecuritySync(Config(), _Topology(), channel(), store)  # type: ignore[arg-type]


def sync(rep: SecuritySync, epoch: str, seq: int, records: list, full: bool = False) -> bytes:  # type: ignore[type-arg]
    meta = {"epoch": epoch, "seq": seq, "full": full}
    return asyncio.run(rep._sync(meta, encode_records(records)))


def test_a_replica_applies_writes_in_order_and_asks_for_the_whole_state_otherwise() -> None:
    rep = replica()
    store = rep.store
    a, b, c = (SecurityStore.acl_record(acl(n), True) for n in "abc")
    # Just started: nothing but a whole state will do.
    assert sync(rep, "e1", 1, [a]) == b"need_full"
    assert sync(rep, "e1", 1, [a, b], full=True) == b"ok"
    assert {x.resource_name for x in store.authorizer.acls()} == {"a", "b"}
    # The next write applies; one already applied is ignored; a gap asks for the whole state.
    assert sync(rep, "e1", 2, [c]) == b"ok"
    assert sync(rep, "e1", 2, [SecurityStore.acl_record(acl("c"), False)]) == b"ok"
    assert acl("c") in store.authorizer
    assert sync(rep, "e1", 4, [SecurityStore.acl_record(acl("a"), False)]) == b"need_full"
    assert acl("a") in store.authorizer
    # A whole state older than what the replica has is ignored; a new epoch (worker 0 restarted) starts over.
    assert sync(rep, "e1", 1, [a], full=True) == b"ok"
    assert acl("c") in store.authorizer
    assert sync(rep, "e2", 3, [SecurityStore.acl_record(acl("b"), False)]) == b"need_full"
    assert sync(rep, "e2", 1, [b], full=True) == b"ok"
    assert [x.resource_name for x in store.authorizer.acls()] == ["b"]


def test_records_survive_the_wire_form() -> None:
    records = [(b"acl\x00[1]", b"{}"), (b"scram\x00SCRAM-SHA-256\x00al\xc3\xafce", None)]
    assert decode_records(encode_records(records)) == records
    assert json.loads(encode_records([])) == []
