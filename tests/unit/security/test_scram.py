"""SCRAM (RFC 5802 / RFC 7677) and PLAIN on the server side, and the security store's persistence."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import secrets
from pathlib import Path

import pytest

from coordinator.security.acl import AclBinding, Authorizer, Operation, PatternType, Permission, ResourceType
from coordinator.security.scram import (
    PLAIN_FAILURE,
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    AuthenticationFailed,
    ScramCredential,
    ScramServer,
    plain_authenticate,
)
from coordinator.security.store import SecurityStore


def test_rfc7677_sha256_vector() -> None:
    """The example exchange of RFC 7677 section 3, byte for byte."""
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    cred = ScramCredential.from_password(SCRAM_SHA_256, "pencil", 4096, salt)
    server = ScramServer(
        SCRAM_SHA_256, lambda user: cred if user == "user" else None, nonce="%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
    )
    first = server.step(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert first == b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    final = server.step(
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    assert final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert server.complete and server.username == "user"


def _client_exchange(server: ScramServer, mechanism: str, user: str, password: str) -> bytes:
    """A client following RFC 5802, written independently of the server code."""
    hash_name = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}[mechanism]
    cnonce = secrets.token_hex(12)
    bare = f"n={user},r={cnonce}"
    server_first = server.step(("n,," + bare).encode()).decode()
    attrs = dict(part.split("=", 1) for part in server_first.split(","))
    salted = hashlib.pbkdf2_hmac(hash_name, password.encode(), base64.b64decode(attrs["s"]), int(attrs["i"]))
    client_key = hmac.new(salted, b"Client Key", hash_name).digest()
    stored = hashlib.new(hash_name, client_key).digest()
    without_proof = f"c=biws,r={attrs['r']}"
    auth = f"{bare},{server_first},{without_proof}".encode()
    signature = hmac.new(stored, auth, hash_name).digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    return server.step(f"{without_proof},p={base64.b64encode(proof).decode()}".encode())


@pytest.mark.parametrize("mechanism", [SCRAM_SHA_256, SCRAM_SHA_512])
def test_scram_round_trip_and_wrong_password(mechanism: str) -> None:
    cred = ScramCredential.from_password(mechanism, "s3cret", 4096)
    assert b"s3cret" not in repr(cred).encode() and cred.iterations == 4096
    ok = ScramServer(mechanism, lambda u: cred if u == "alice" else None)
    assert _client_exchange(ok, mechanism, "alice", "s3cret").startswith(b"v=")
    assert ok.complete
    bad = ScramServer(mechanism, lambda u: cred if u == "alice" else None)
    with pytest.raises(AuthenticationFailed, match=f"invalid credentials with SASL mechanism {mechanism}"):
        _client_exchange(bad, mechanism, "alice", "wrong")
    unknown = ScramServer(mechanism, lambda u: None)
    with pytest.raises(AuthenticationFailed):
        unknown.step(b"n,,n=mallory,r=abc")


@pytest.mark.parametrize("message", [b"", b"garbage", b"p=tls-unique,,n=a,r=b", b"n,,r=abc", b"\xff\xfe"])
def test_scram_garbage_fails_cleanly(message: bytes) -> None:
    server = ScramServer(SCRAM_SHA_256, lambda u: None)
    with pytest.raises(AuthenticationFailed):
        server.step(message)


def test_credential_from_salted_password_matches_kafka_admin_upsertion() -> None:
    """AlterUserScramCredentials carries Hi(password); the server derives the same keys as from the password."""
    salt = b"0123456789abcdef"
    salted = hashlib.pbkdf2_hmac("sha512", b"pw", salt, 8192)
    assert ScramCredential.from_salted_password(
        SCRAM_SHA_512, salt, 8192, salted
    ) == ScramCredential.from_password(SCRAM_SHA_512, "pw", 8192, salt)


def test_plain() -> None:
    cred = ScramCredential.from_password(SCRAM_SHA_256, "pw")

    def check(user: str, password: str) -> bool:
        return user == "alice" and cred.check_password(password)

    assert plain_authenticate(b"\x00alice\x00pw", check) == "alice"
    assert plain_authenticate(b"alice\x00alice\x00pw", check) == "alice"
    with pytest.raises(AuthenticationFailed, match=PLAIN_FAILURE):
        plain_authenticate(b"\x00alice\x00nope", check)
    with pytest.raises(AuthenticationFailed, match="authorization id"):
        plain_authenticate(b"bob\x00alice\x00pw", check)
    with pytest.raises(AuthenticationFailed):
        plain_authenticate(b"alice", check)


def test_store_persists_acls_and_credentials_without_passwords(tmp_path: Path) -> None:
    binding = AclBinding(
        ResourceType.GROUP,
        "spark-kafka-source-",
        PatternType.PREFIXED,
        "User:alice",
        "*",
        Operation.READ,
        Permission.ALLOW,
    )
    cred = ScramCredential.from_password(SCRAM_SHA_256, "hunter2-password")

    async def write() -> None:
        store = SecurityStore(Authorizer(), str(tmp_path))
        store.open()
        await store.write(
            [store.acl_record(binding, True), store.credential_record("alice", SCRAM_SHA_256, cred)]
        )
        store.close()

    asyncio.run(write())
    raw = b"".join(p.read_bytes() for p in (tmp_path / "security").glob("*.log"))
    assert b"hunter2-password" not in raw
    store = SecurityStore(Authorizer(), str(tmp_path))
    assert store.open() == 2
    assert store.authorizer.acls() == [binding]
    assert store.credential(SCRAM_SHA_256, "alice") == cred
    assert store.check_password("alice", "hunter2-password") and not store.check_password("alice", "x")

    async def delete() -> None:
        await store.write([store.acl_record(binding, False)])

    asyncio.run(delete())
    store.close()
    again = SecurityStore(Authorizer(), str(tmp_path))
    again.open()
    assert again.authorizer.acls() == []
    again.close()
