"""Listeners with Kafka's names (`listeners`, `listener.security.protocol.map`) and their TLS context.

`listeners=SASL_SSL://127.0.0.1:9093,PLAINTEXT://127.0.0.1:9092` gives one socket per entry; the name maps to a
security protocol (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL) through `listener.security.protocol.map`, whose
default maps each protocol name to itself. SSL listeners use the stdlib `ssl` module with a PEM key and
certificate (`ssl.keystore.location`, or `ssl.keystore.certificate.chain` + `ssl.keystore.key` as text) and PEM
CA certificates for client certificates (`ssl.truststore.location` / `ssl.truststore.certificates`);
`ssl.client.auth` is none, requested (a certificate is checked if sent) or required.

The principal of a TLS connection with a verified client certificate is `User:` + the subject's distinguished
name in RFC 2253 form, as Kafka's default principal builder (X500Principal.getName()) writes it: the RDNs
most-specific first (`CN=alice,OU=eng,O=example,C=US`), the standard keywords CN, C, L, ST, O, OU, STREET, DC, UID,
other attributes as dotted OIDs with hex-encoded values, and `,+"\\<>;` escaped. Without a client certificate the
principal is `User:ANONYMOUS`, as in Kafka.
"""

from __future__ import annotations

import dataclasses
import os
import ssl
import tempfile
from typing import Any

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


class ListenerConfigError(ValueError):
    pass


@dataclasses.dataclass(frozen=True, slots=True)
class ListenerSpec:
    name: str
    protocol: str
    host: str
    port: int

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")


def parse_listeners(entries: tuple[str, ...], protocol_map: tuple[str, ...]) -> list[ListenerSpec]:
    mapping: dict[str, str] = {}
    for item in protocol_map:
        name, sep, protocol = item.partition(":")
        if not sep or protocol.upper() not in PROTOCOLS:
            raise ListenerConfigError(f"listener.security.protocol.map: bad entry {item!r}")
        mapping[name.strip().upper()] = protocol.strip().upper()
    specs: list[ListenerSpec] = []
    for entry in entries:
        name, sep, address = entry.partition("://")
        if not sep:
            raise ListenerConfigError(f"listeners: expected NAME://HOST:PORT, got {entry!r}")
        name = name.strip().upper()
        if name not in mapping:
            raise ListenerConfigError(
                f"listeners: {name} has no security protocol in listener.security.protocol.map"
            )
        host, colon, port = address.rpartition(":")
        if not colon:
            raise ListenerConfigError(f"listeners: no port in {entry!r}")
        if any(s.name == name for s in specs):
            raise ListenerConfigError(f"listeners: {name} is listed twice")
        specs.append(ListenerSpec(name, mapping[name], host.strip("[]"), int(port)))
    return specs


def parse_advertised(entries: tuple[str, ...], listeners: list[ListenerSpec]) -> dict[str, tuple[str, int]]:
    """`advertised.listeners=NAME://HOST:PORT,...` -> {NAME: (HOST, PORT)}; every NAME must be a listener."""
    names = {spec.name for spec in listeners}
    out: dict[str, tuple[str, int]] = {}
    for entry in entries:
        name, sep, address = entry.partition("://")
        host, colon, port = address.rpartition(":")
        name = name.strip().upper()
        if not sep or not colon:
            raise ListenerConfigError(f"advertised.listeners: expected NAME://HOST:PORT, got {entry!r}")
        if name not in names:
            raise ListenerConfigError(f"advertised.listeners: {name} is not one of the listeners")
        out[name] = (host.strip("[]"), int(port))
    return out


def _pem_file(text: str, directory: str | None) -> str:
    fd, path = tempfile.mkstemp(suffix=".pem", dir=directory)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    return path


def server_ssl_context(config: Any) -> ssl.SSLContext:
    """The TLS context of the SSL listeners, from Kafka's ssl.* settings (PEM only)."""
    if (
        str(config["ssl.keystore.type"]).upper() != "PEM"
        or str(config["ssl.truststore.type"]).upper() != "PEM"
    ):
        raise ListenerConfigError("only ssl.keystore.type=PEM and ssl.truststore.type=PEM are supported")
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    password = config["ssl.key.password"] or None
    location = config["ssl.keystore.location"]
    chain, key = config["ssl.keystore.certificate.chain"], config["ssl.keystore.key"]
    if location:
        ctx.load_cert_chain(location, password=password)
    elif chain and key:
        # The ssl module loads keys from files only: write them to private temporary files, load, remove.
        paths = [_pem_file(chain, None), _pem_file(key, None)]
        try:
            ctx.load_cert_chain(paths[0], paths[1], password=password)
        finally:
            for path in paths:
                os.unlink(path)
    else:
        raise ListenerConfigError(
            "an SSL listener needs ssl.keystore.location or ssl.keystore.certificate.chain "
            "and ssl.keystore.key"
        )
    client_auth = str(config["ssl.client.auth"]).lower()
    if client_auth not in ("none", "requested", "required"):
        raise ListenerConfigError(f"ssl.client.auth must be none, requested or required, not {client_auth!r}")
    trust_location, trust_text = config["ssl.truststore.location"], config["ssl.truststore.certificates"]
    if trust_location:
        ctx.load_verify_locations(cafile=trust_location)
    elif trust_text:
        ctx.load_verify_locations(cadata=trust_text)
    elif client_auth != "none":
        raise ListenerConfigError(
            f"ssl.client.auth={client_auth} needs ssl.truststore.location or ssl.truststore.certificates"
        )
    ctx.verify_mode = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}[
        client_auth
    ]
    return ctx


_KEYWORDS = {
    "commonName": "CN",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}
# Attributes Java prints as OID=#hex(DER), with the DER tag of their usual string type.
_OIDS = {
    "emailAddress": ("1.2.840.113549.1.9.1", 0x16),
    "serialNumber": ("2.5.4.5", 0x13),
    "title": ("2.5.4.12", 0x0C),
    "givenName": ("2.5.4.42", 0x0C),
    "surname": ("2.5.4.4", 0x0C),
}


def _escape(value: str) -> str:
    out = []
    for i, ch in enumerate(value):
        if ch in ',+"\\<>;' or (i == 0 and ch in "# ") or (i == len(value) - 1 and ch == " "):
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def _der_hex(tag: int, value: str) -> str:
    data = value.encode("utf-8")
    if len(data) < 0x80:
        length = bytes([len(data)])
    else:
        n = (len(data).bit_length() + 7) // 8
        length = bytes([0x80 | n]) + len(data).to_bytes(n, "big")
    return "#" + (bytes([tag]) + length + data).hex()


def rfc2253_name(subject: tuple[tuple[tuple[str, str], ...], ...]) -> str:
    """A certificate subject as `ssl.SSLSocket.getpeercert()` gives it (RDNs in ASN.1 order) -> RFC 2253."""
    rdns = []
    for rdn in reversed(subject):
        parts = []
        for attr, value in rdn:
            if attr in _KEYWORDS:
                parts.append(f"{_KEYWORDS[attr]}={_escape(value)}")
            elif attr in _OIDS:
                oid, tag = _OIDS[attr]
                parts.append(f"{oid}={_der_hex(tag, value)}")
            else:
                parts.append(f"{attr}={_escape(value)}")
        rdns.append("+".join(parts))
    return ",".join(rdns)


def certificate_principal(ssl_object: Any) -> str | None:
    """`User:<DN>` for a verified client certificate on this TLS connection, else None."""
    if ssl_object is None:
        return None
    try:
        cert = ssl_object.getpeercert()
    except (ValueError, ssl.SSLError):
        return None
    if not cert or not cert.get("subject"):
        return None
    return "User:" + rfc2253_name(cert["subject"])
