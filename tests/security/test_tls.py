"""TLS listeners with a CA made by the test: client certificates as principals (`User:` + RFC 2253 DN), required
and requested client authentication, SASL over TLS, and the admin HTTP API's write guard."""

from __future__ import annotations

import json
import ssl
import time
import urllib.error
import urllib.request
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AclOperation, AdminClient, ResourceType
from security_clients import binding, create_acls, create_topic, produce
from security_support import ALICE_PRINCIPAL, USERS, Pki, SecureServers, acl_server_settings

pytestmark = pytest.mark.e2e


def tls_settings(pki: Pki, client_auth: str, **extra: Any) -> dict[str, Any]:
    return acl_server_settings(
        **{
            "listeners": "SSL://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
            "ssl.keystore.location": str(pki.server_pem),
            "ssl.truststore.location": str(pki.ca),
            "ssl.client.auth": client_auth,
            **extra,
        }
    )


def ssl_conf(server: Any, pki: Pki, with_cert: bool) -> dict[str, Any]:
    conf = {
        "bootstrap.servers": server.listeners["SSL"],
        "security.protocol": "SSL",
        "ssl.ca.location": str(pki.ca),
    }
    if with_cert:
        conf |= {"ssl.certificate.location": str(pki.client_cert), "ssl.key.location": str(pki.client_key)}
    return conf


def sasl_ssl_admin(server: Any, pki: Pki) -> AdminClient:
    return AdminClient(
        {
            "bootstrap.servers": server.listeners["SASL_SSL"],
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(pki.ca),
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "admin",
            "sasl.password": USERS["admin"],
        }
    )


def first_error(conf: dict[str, Any], wait_s: float = 20.0) -> KafkaError | None:
    errors: list[KafkaError] = []
    producer = Producer({**conf, "error_cb": errors.append})
    deadline = time.monotonic() + wait_s
    while not errors and time.monotonic() < deadline:
        producer.poll(0.2)
    producer.flush(1)
    return errors[0] if errors else None


def test_client_certificate_principal_with_requested_auth(secure_servers: SecureServers, pki: Pki) -> None:
    server = secure_servers(tls_settings(pki, "requested"))
    root = sasl_ssl_admin(server, pki)  # SCRAM over TLS
    create_topic(root, "tls-topic")
    create_acls(root, binding(ResourceType.TOPIC, "tls-topic", ALICE_PRINCIPAL, AclOperation.WRITE))
    # alice's certificate makes her User:CN=alice,OU=test,O=kgc,C=US: the ACL for that principal applies.
    assert set(produce(ssl_conf(server, pki, with_cert=True), "tls-topic", 3)) == {None}
    # Without a certificate the TLS connection is User:ANONYMOUS, which has no ACL.
    denied = produce(ssl_conf(server, pki, with_cert=False), "tls-topic", 1)
    assert {e.code() for e in denied if e is not None} == {KafkaError.TOPIC_AUTHORIZATION_FAILED}
    # A client that does not trust the server's CA cannot connect at all.
    untrusted = {"bootstrap.servers": server.listeners["SSL"], "security.protocol": "SSL"}
    err = first_error(untrusted)
    assert err is not None and err.code() in (
        KafkaError._SSL,
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
    )


def test_required_client_auth_and_inline_pem(secure_servers: SecureServers, pki: Pki) -> None:
    server = secure_servers(
        tls_settings(
            pki,
            "required",
            **{
                "ssl.keystore.location": "",
                "ssl.keystore.certificate.chain": pki.server_cert.read_text(),
                "ssl.keystore.key": pki.server_key.read_text(),
                "allow.everyone.if.no.acl.found": "true",
            },
        )
    )
    assert set(produce(ssl_conf(server, pki, with_cert=True), "open-topic", 2)) == {None}
    err = first_error(ssl_conf(server, pki, with_cert=False))
    assert err is not None and err.code() in (
        KafkaError._SSL,
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
    )


def _request(
    url: str, method: str, token: str | None = None, context: ssl.SSLContext | None = None
) -> tuple[int, Any]:
    req = urllib.request.Request(
        url,
        method=method,
        data=b"{}" if method != "GET" else None,
        headers={"Content-Type": "application/json"},
    )
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=30, context=context) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        body = exc.read()
        exc.close()
        return exc.code, body


def test_admin_http_writes_need_token_or_certificate(secure_servers: SecureServers, pki: Pki) -> None:
    server = secure_servers(acl_server_settings())
    base = server.admin_url
    assert _request(base + "/metrics", "GET")[0] == 200
    assert _request(base + "/healthz", "GET")[0] == 200
    status, body = _request(base + "/v1/groups/g1", "DELETE")
    assert status == 401 and json.loads(body)["error"] == "unauthorized"
    assert _request(base + "/v1/groups/g1", "DELETE", token="wrong")[0] == 403
    status, _ = _request(base + "/v1/groups/g1", "DELETE", token="t0ken")
    assert status not in (401, 403)  # reaches the endpoint (the group does not exist)

    # Over TLS, a verified client certificate stands in for the token.
    tls = secure_servers(
        tls_settings(pki, "requested", **{"admin.ssl.enabled": "true", "admin.auth.token": ""})
    )
    https = tls.admin_url.replace("http://", "https://")
    anonymous_ctx = ssl.create_default_context(cafile=str(pki.ca))
    assert _request(https + "/v1/groups/g1", "DELETE", context=anonymous_ctx)[0] == 401
    cert_ctx = ssl.create_default_context(cafile=str(pki.ca))
    cert_ctx.load_cert_chain(str(pki.client_cert), str(pki.client_key))
    assert _request(https + "/v1/groups/g1", "DELETE", context=cert_ctx)[0] not in (401, 403)
    assert _request(https + "/metrics", "GET", context=anonymous_ctx)[0] == 200
