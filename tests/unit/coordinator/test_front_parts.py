"""Pieces of coordinator.front that need no cluster: the SCRAM client against our SCRAM server, Produce's acks read
from a raw frame, undecoded (raw) requests in the API table, and the `upstream.` settings."""

from __future__ import annotations

import pytest

from coordinator.config import Config, ConfigError
from coordinator.front.connect import Connector, unused_settings
from coordinator.front.dataplane import produce_acks
from coordinator.security.scram import AuthenticationFailed, ScramClient, ScramCredential, ScramServer
from protocol.api import ApiTable, encode_request, request_class
from protocol.build import build


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_client_and_server_agree(mechanism):
    credential = ScramCredential.from_password(mechanism, "s3cret", iterations=4096)
    server = ScramServer(mechanism, lambda user: credential if user == "alice" else None)
    client = ScramClient(mechanism, "alice", "s3cret")
    server_first = server.step(client.first())
    server_final = server.step(client.final(server_first))
    client.verify(server_final)
    assert server.complete and server.username == "alice"


def test_scram_client_refuses_a_wrong_server_signature():
    credential = ScramCredential.from_password("SCRAM-SHA-256", "right", iterations=4096)
    server = ScramServer("SCRAM-SHA-256", lambda user: credential)
    client = ScramClient("SCRAM-SHA-256", "bob", "right")
    client.final(server.step(client.first()))
    with pytest.raises(AuthenticationFailed):
        client.verify(b"v=AAAA")


def _produce_frame(version: int, acks: int, transactional_id: str | None = None) -> bytes:
    body = build(
        request_class(0, version),
        {"transactional_id": transactional_id, "acks": acks, "timeout_ms": 1000, "topic_data": []},
    )
    return encode_request(body, 7, "client-x")[4:]


@pytest.mark.parametrize("version", [3, 8, 9, 11])
@pytest.mark.parametrize("acks", [0, 1, -1])
def test_produce_acks_from_the_raw_frame(version, acks):
    assert produce_acks(_produce_frame(version, acks), version) == acks
    assert produce_acks(_produce_frame(version, acks, "txn-1"), version) == acks


def test_raw_api_is_not_decoded():
    table = ApiTable()
    seen = []

    async def handler(ctx, frame):
        seen.append(frame)

    table.register_raw(0, 3, 9, handler)
    frame = _produce_frame(9, 1)
    decoded = table.decode(frame, "10.0.0.1", 5)
    assert decoded.body is frame and decoded.spec.raw
    assert decoded.context.client_id == "client-x" and decoded.context.correlation_id == 7
    assert table.decode(_produce_frame(11, 1)).body is None  # outside the range: UNSUPPORTED_VERSION


def test_upstream_settings():
    config = Config({"upstream.bootstrap.servers": "a:9092,b:9093", "upstream.client.id": "x"})
    assert config["upstream.bootstrap.servers"] == ("a:9092", "b:9093")
    assert unused_settings(config) == ["upstream.client.id"]
    with pytest.raises(ConfigError):
        Config({"upstreamish": "1"})
    jaas = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="u1" password="p\\"w";'
    connector = Connector(
        Config({"upstream.security.protocol": "SASL_PLAINTEXT", "upstream.sasl.jaas.config": jaas})
    )
    assert (connector._username, connector._password) == ("u1", 'p"w')
    with pytest.raises(ValueError):
        Connector(
            Config({"upstream.security.protocol": "SASL_PLAINTEXT", "upstream.sasl.mechanism": "GSSAPI"})
        )


def test_record_batches_round_trip():
    from coordinator.dataplane.batches import validate_batches
    from coordinator.front.records import decode_batches, encode_batch

    entries = [(b"k1", b"v1"), (b"k2", None), (b"", b"x" * 300)]
    batch = encode_batch(entries, 1_700_000_000_000)
    validate_batches(batch, max_batch_bytes=1 << 20)  # what the embedded data plane accepts from producers
    shifted = bytearray(batch)
    shifted[0:8] = (41).to_bytes(8, "big")  # as a broker stores it, at base offset 41
    decoded = list(decode_batches(bytes(shifted) + batch[:20]))  # a partial batch at the end is left out
    assert decoded == [(41 + i, k, v, 1_700_000_000_000) for i, (k, v) in enumerate(entries)]
    corrupt = bytearray(shifted)
    corrupt[-1] ^= 0xFF
    with pytest.raises(ValueError):
        list(decode_batches(bytes(corrupt)))
