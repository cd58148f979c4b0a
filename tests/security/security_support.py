"""Shared pieces of the security tests: the test CA (openssl CLI), servers started with e2e_server.start_server
(tests/e2e), whose `listeners NAME=HOST:PORT ...` line names every listener, and the default secured settings."""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support.server import ServerProcess, start_server  # noqa: E402

ALICE_SUBJECT = "/C=US/O=kgc/OU=test/CN=alice"
ALICE_PRINCIPAL = "User:CN=alice,OU=test,O=kgc,C=US"  # Kafka's RFC 2253 form: most specific RDN first
USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
_LISTENERS = re.compile(r"^listeners (?P<fields>.+)$")


@dataclasses.dataclass
class Pki:
    ca: Path
    server_key: Path
    server_cert: Path
    server_pem: Path  # key and certificate chain in one file (ssl.keystore.location)
    client_key: Path
    client_cert: Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@dataclasses.dataclass
class SecureServer:
    process: ServerProcess
    listeners: dict[str, str]  # listener name -> "127.0.0.1:PORT"

    @property
    def admin_url(self) -> str:
        return self.process.admin_url

    @property
    def data_dir(self) -> Path:
        return self.process.data_dir


class SecureServers:
    def __init__(self, base: Path) -> None:
        self._base = base
        self._count = 0
        self.started: list[ServerProcess] = []

    def __call__(self, settings: dict[str, Any], data_dir: Path | None = None) -> SecureServer:
        self._count += 1
        proc = start_server(self._base / f"server{self._count}", settings, data_dir=data_dir)
        self.started.append(proc)
        listeners: dict[str, str] = {}
        for line in proc.stdout_path.read_text().splitlines():
            match = _LISTENERS.match(line.strip())
            if match:
                listeners = dict(field.split("=", 1) for field in match["fields"].split())
        return SecureServer(proc, listeners)

    def stop(self, server: SecureServer) -> None:
        code = server.process.stop()
        assert code == 0, server.process.output()


def acl_server_settings(**extra: Any) -> dict[str, Any]:
    """A server with a SASL listener (first) and a PLAINTEXT one, Kafka's authorizer on, admin a super user."""
    settings: dict[str, Any] = {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin",
        "scram.bootstrap.users": ",".join(f"{u}:{p}" for u, p in USERS.items()),
        "admin.auth.token": "t0ken",
    }
    settings.update(extra)
    return settings


def make_pki(base: Path) -> Pki:
    if shutil.which("openssl") is None:
        pytest.fail("the security tests make their CA with the openssl command-line tool, which is missing")
    d = base
    _openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=kgc-test-ca",
        cwd=d,
    )
    (d / "server.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for name, subject, ext in (
        ("server", "/CN=localhost", ["-extfile", "server.ext"]),
        ("alice", ALICE_SUBJECT, []),
    ):
        _openssl(
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            f"{name}.key",
            "-out",
            f"{name}.csr",
            "-subj",
            subject,
            cwd=d,
        )
        _openssl(
            "x509",
            "-req",
            "-in",
            f"{name}.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            f"{name}.pem",
            "-days",
            "2",
            *ext,
            cwd=d,
        )
    (d / "server-keystore.pem").write_text((d / "server.key").read_text() + (d / "server.pem").read_text())
    return Pki(
        d / "ca.pem",
        d / "server.key",
        d / "server.pem",
        d / "server-keystore.pem",
        d / "alice.key",
        d / "alice.pem",
    )
