"""SASL mechanisms on the server side: SCRAM-SHA-256/512 (RFC 5802, RFC 7677) and PLAIN (RFC 4616). Pure.

Credentials are what RFC 5802 says a server keeps: salt, iteration count, StoredKey = H(HMAC(SaltedPassword,
"Client Key")) and ServerKey = HMAC(SaltedPassword, "Server Key"); never the password. Kafka's
AlterUserScramCredentials carries SaltedPassword = Hi(password, salt, i) (the client salts and hashes), from which
`ScramCredential.from_salted_password` derives the two keys. The primitives are Python's hashlib (PBKDF2 for Hi)
and hmac; nothing here is hand-written crypto.

PLAIN has no stored form of its own: a PLAIN login is checked against the user's SCRAM credentials (Hi of the
offered password with the stored salt and iterations must give the StoredKey), so one credential store serves both
mechanisms and no password is kept anywhere (Kafka keeps PLAIN passwords in clear in its JAAS file instead).

Failure messages are Kafka's: PLAIN says "Authentication failed: Invalid username or password"; SCRAM failures are
reported as Kafka's SaslServerAuthenticator reports any SaslException, "Authentication failed during authentication
due to invalid credentials with SASL mechanism SCRAM-SHA-256".
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import secrets

SCRAM_SHA_256 = "SCRAM-SHA-256"
SCRAM_SHA_512 = "SCRAM-SHA-512"
PLAIN = "PLAIN"

# Kafka's ScramMechanism codes (DescribeUserScramCredentials / AlterUserScramCredentials).
MECHANISM_CODES = {SCRAM_SHA_256: 1, SCRAM_SHA_512: 2}
MECHANISM_NAMES = {code: name for name, code in MECHANISM_CODES.items()}
HASHES = {SCRAM_SHA_256: "sha256", SCRAM_SHA_512: "sha512"}
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384  # Kafka's ScramMechanism.maxIterations


class AuthenticationFailed(Exception):
    """The exchange failed; the message is sent to the client in SaslAuthenticate's error_message."""


def scram_failure(mechanism: str) -> AuthenticationFailed:
    return AuthenticationFailed(
        "Authentication failed during authentication due to invalid credentials with SASL "
        f"mechanism {mechanism}"
    )


def _hmac(key: bytes, msg: bytes, hash_name: str) -> bytes:
    return hmac.new(key, msg, hash_name).digest()


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """Hi(password, salt, i) of RFC 5802: PBKDF2 with HMAC of the mechanism's hash."""
    return hashlib.pbkdf2_hmac(HASHES[mechanism], password.encode("utf-8"), salt, iterations)


@dataclasses.dataclass(frozen=True, slots=True)
class ScramCredential:
    mechanism: str
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    @classmethod
    def from_salted_password(
        cls, mechanism: str, salt: bytes, iterations: int, salted: bytes
    ) -> ScramCredential:
        hash_name = HASHES[mechanism]
        client_key = _hmac(salted, b"Client Key", hash_name)
        return cls(
            mechanism,
            bytes(salt),
            iterations,
            hashlib.new(hash_name, client_key).digest(),
            _hmac(salted, b"Server Key", hash_name),
        )

    @classmethod
    def from_password(
        cls, mechanism: str, password: str, iterations: int = MIN_ITERATIONS, salt: bytes | None = None
    ) -> ScramCredential:
        salt = salt if salt is not None else secrets.token_bytes(32)
        return cls.from_salted_password(
            mechanism, salt, iterations, salted_password(mechanism, password, salt, iterations)
        )

    def check_password(self, password: str) -> bool:
        other = ScramCredential.from_password(self.mechanism, password, self.iterations, self.salt)
        return hmac.compare_digest(other.stored_key, self.stored_key)

    def to_json(self) -> dict[str, object]:
        return {
            "mechanism": self.mechanism,
            "salt": base64.b64encode(self.salt).decode(),
            "iterations": self.iterations,
            "stored_key": base64.b64encode(self.stored_key).decode(),
            "server_key": base64.b64encode(self.server_key).decode(),
        }

    @classmethod
    def from_json(cls, data: dict[str, object]) -> ScramCredential:
        return cls(
            str(data["mechanism"]),
            base64.b64decode(str(data["salt"])),
            int(str(data["iterations"])),
            base64.b64decode(str(data["stored_key"])),
            base64.b64decode(str(data["server_key"])),
        )


def _attributes(message: str) -> list[tuple[str, str]]:
    out = []
    for part in message.split(","):
        if len(part) < 2 or part[1] != "=":
            raise ValueError(f"bad SCRAM attribute {part!r}")
        out.append((part[0], part[2:]))
    return out


def _unescape_username(name: str) -> str:
    if "=" in name.replace("=2C", "").replace("=3D", ""):
        raise ValueError("bad escape in SCRAM user name")
    return name.replace("=2C", ",").replace("=3D", "=")


class ScramServer:
    """One SCRAM exchange: `step(client_message)` answers the client-first and client-final messages;
    `complete` and `username` tell the outcome. `lookup(user)` gives the user's credential for this mechanism
    or None."""

    def __init__(self, mechanism: str, lookup, nonce: str | None = None) -> None:  # type: ignore[no-untyped-def]
        self.mechanism = mechanism
        self._lookup = lookup
        self._hash = HASHES[mechanism]
        self._server_nonce = nonce if nonce is not None else secrets.token_urlsafe(24)
        self._state = "first"
        self._credential: ScramCredential | None = None
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self._gs2_header = ""
        self.username: str | None = None
        self.complete = False

    def step(self, message: bytes) -> bytes:
        try:
            text = message.decode("utf-8")
            if self._state == "first":
                return self._first(text)
            if self._state == "final":
                return self._final(text)
        except (ValueError, UnicodeDecodeError):
            pass
        self._state = "failed"
        raise scram_failure(self.mechanism)

    def _first(self, text: str) -> bytes:
        flag, sep, rest = text.partition(",")
        authzid, sep2, bare = rest.partition(",")
        if not sep or not sep2 or flag not in ("n", "y"):  # "p=" (channel binding) is not supported, as Kafka
            raise ValueError("bad gs2 header")
        self._gs2_header = f"{flag},{authzid},"
        attrs = _attributes(bare)
        if len(attrs) < 2 or attrs[0][0] != "n" or attrs[1][0] != "r" or not attrs[1][1]:
            raise ValueError("bad client-first message")
        username = _unescape_username(attrs[0][1])
        if authzid and authzid != f"a={attrs[0][1]}":
            raise ValueError("authorization id differs from the user name")
        credential = self._lookup(username)
        if credential is None:
            raise ValueError("unknown user")
        self._credential = credential
        self.username = username
        self._client_first_bare = bare
        self._nonce = attrs[1][1] + self._server_nonce
        self._server_first = (
            f"r={self._nonce},s={base64.b64encode(credential.salt).decode()},i={credential.iterations}"
        )
        self._state = "final"
        return self._server_first.encode()

    def _final(self, text: str) -> bytes:
        assert self._credential is not None
        without_proof, sep, proof_attr = text.rpartition(",p=")
        if not sep:
            raise ValueError("no proof")
        attrs = dict(_attributes(without_proof))
        if base64.b64decode(attrs.get("c", ""), validate=True) != self._gs2_header.encode():
            raise ValueError("channel binding differs from the gs2 header")
        if attrs.get("r") != self._nonce:
            raise ValueError("nonce mismatch")
        proof = base64.b64decode(proof_attr, validate=True)
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        client_signature = _hmac(self._credential.stored_key, auth_message, self._hash)
        if len(proof) != len(client_signature):
            raise ValueError("bad proof length")
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature, strict=True))
        if not hmac.compare_digest(hashlib.new(self._hash, client_key).digest(), self._credential.stored_key):
            raise ValueError("invalid proof")
        server_signature = _hmac(self._credential.server_key, auth_message, self._hash)
        self._state = "done"
        self.complete = True
        return b"v=" + base64.b64encode(server_signature)


PLAIN_FAILURE = "Authentication failed: Invalid username or password"


def plain_authenticate(message: bytes, check) -> str:  # type: ignore[no-untyped-def]
    """Check a PLAIN message (authzid NUL authcid NUL password); return the user name or raise
    AuthenticationFailed with Kafka's messages. `check(user, password)` verifies the password."""
    parts = message.split(b"\x00")
    if len(parts) != 3:
        raise AuthenticationFailed("Invalid SASL/PLAIN response: expected 3 tokens, got " + str(len(parts)))
    try:
        authzid, user, password = (p.decode("utf-8") for p in parts)
    except UnicodeDecodeError:
        raise AuthenticationFailed(PLAIN_FAILURE) from None
    if not user:
        raise AuthenticationFailed("Authentication failed: username not specified")
    if not password:
        raise AuthenticationFailed("Authentication failed: password not specified")
    if authzid and authzid != user:
        raise AuthenticationFailed(
            "Authentication failed: Client requested an authorization id that is different from username"
        )
    if not check(user, password):
        raise AuthenticationFailed(PLAIN_FAILURE)
    return user


class ScramClient:
    """The client side of one SCRAM exchange (RFC 5802, no channel binding): `first()`, then `final(server_first)`,
    then `verify(server_final)`; raises AuthenticationFailed when the server's answer is wrong. Used by the front
    to authenticate to an upstream cluster (coordinator.front)."""

    def __init__(self, mechanism: str, username: str, password: str, nonce: str | None = None) -> None:
        self.mechanism = mechanism
        self._hash = HASHES[mechanism]
        self._password = password
        name = username.replace("=", "=3D").replace(",", "=2C")
        self._nonce = nonce if nonce is not None else secrets.token_urlsafe(24)
        self._first_bare = f"n={name},r={self._nonce}"
        self._auth_message = b""
        self._salted = b""

    def first(self) -> bytes:
        return f"n,,{self._first_bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        text = server_first.decode("utf-8")
        attrs = dict(_attributes(text))
        nonce, salt, iterations = attrs.get("r", ""), attrs.get("s", ""), attrs.get("i", "")
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce) or not salt or not iterations:
            raise scram_failure(self.mechanism)
        self._salted = salted_password(
            self.mechanism, self._password, base64.b64decode(salt), int(iterations)
        )
        without_proof = f"c={base64.b64encode(b'n,,').decode()},r={nonce}"
        self._auth_message = f"{self._first_bare},{text},{without_proof}".encode()
        client_key = _hmac(self._salted, b"Client Key", self._hash)
        stored_key = hashlib.new(self._hash, client_key).digest()
        signature = _hmac(stored_key, self._auth_message, self._hash)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> None:
        server_key = _hmac(self._salted, b"Server Key", self._hash)
        expected = b"v=" + base64.b64encode(_hmac(server_key, self._auth_message, self._hash))
        if not hmac.compare_digest(server_final, expected):
            raise scram_failure(self.mechanism)
