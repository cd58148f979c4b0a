"""The connection from the front to one upstream broker: TCP, TLS (`upstream.ssl.*`), then SASL
(`upstream.sasl.*`: PLAIN or SCRAM), with the settings of the Kafka client whose names they borrow."""

from __future__ import annotations

import asyncio
import itertools
import logging
import re
import socket
import ssl
import struct
from typing import Any

from coordinator.config import UPSTREAM_PREFIX, Config
from coordinator.security.scram import HASHES, AuthenticationFailed, ScramClient
from protocol.api import decode_response, encode_request, request_class
from protocol.api_keys import ApiKey
from protocol.build import build
from protocol.framing import frame_length

log = logging.getLogger(__name__)

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", *HASHES)
# The upstream settings this server reads; any other `upstream.` name is accepted (a copied client config) and
# named at start as not used.
USED = frozenset(
    {
        "upstream.bootstrap.servers",
        "upstream.security.protocol",
        "upstream.sasl.mechanism",
        "upstream.sasl.username",
        "upstream.sasl.password",
        "upstream.sasl.jaas.config",
        "upstream.ssl.truststore.location",
        "upstream.ssl.keystore.location",
        "upstream.ssl.endpoint.identification.algorithm",
        "upstream.request.timeout.ms",
        "upstream.node.port.base",
        "coordinator.state.topic",
        "upstream.offsets.recommit.interval.ms",
    }
)
_JAAS = re.compile(r'(username|password)\s*=\s*"((?:[^"\\]|\\.)*)"')
_LEN = struct.Struct(">i")


class UpstreamAuthError(ConnectionError):
    """The upstream cluster refused this server's credentials (a configuration error, not a fault)."""


def unused_settings(config: Config) -> list[str]:
    return sorted(name for name, _ in config.items() if name.startswith(UPSTREAM_PREFIX) and name not in USED)


class Connector:
    """Opens connections to upstream brokers as the `upstream.` settings say."""

    def __init__(self, config: Config) -> None:
        self.protocol = str(config["upstream.security.protocol"]).upper()
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"upstream.security.protocol must be one of {', '.join(PROTOCOLS)}")
        self.mechanism = str(config["upstream.sasl.mechanism"]).upper()
        if self.protocol.startswith("SASL") and self.mechanism not in MECHANISMS:
            raise ValueError(f"upstream.sasl.mechanism must be one of {', '.join(MECHANISMS)}")
        username, password = config["upstream.sasl.username"], config["upstream.sasl.password"]
        if not username and config["upstream.sasl.jaas.config"]:
            found = dict(_JAAS.findall(config["upstream.sasl.jaas.config"]))
            username = found.get("username", "").replace('\\"', '"')
            password = found.get("password", "").replace('\\"', '"')
        self._username, self._password = username, password
        self._ssl: ssl.SSLContext | None = None
        if self.protocol in ("SSL", "SASL_SSL"):
            context = ssl.create_default_context(cafile=config["upstream.ssl.truststore.location"] or None)
            if config["upstream.ssl.keystore.location"]:
                context.load_cert_chain(config["upstream.ssl.keystore.location"])
            if not config["upstream.ssl.endpoint.identification.algorithm"]:
                context.check_hostname = False
            self._ssl = context
        self._ids = itertools.count(1)

    async def open(
        self, host: str, port: int, timeout_s: float
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        async with asyncio.timeout(timeout_s):
            reader, writer = await asyncio.open_connection(
                host, port, ssl=self._ssl, server_hostname=host if self._ssl else None, limit=2**20
            )
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # forwarded frames go out at once
        try:
            if self.protocol.startswith("SASL"):
                async with asyncio.timeout(timeout_s):
                    await self._authenticate(reader, writer)
        except BaseException:
            writer.close()
            raise
        return reader, writer

    async def _ask(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        api_key: int,
        version: int,
        body: Any,
    ) -> Any:
        cid = next(self._ids) & 0x7FFFFFFF
        writer.write(encode_request(build(request_class(api_key, version), body), cid, "kgc-front"))
        size = frame_length(await reader.readexactly(4), 1 << 24)
        frame = await reader.readexactly(size)
        return decode_response(api_key, version, frame, 4)

    async def _authenticate(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        answer = await self._ask(reader, writer, ApiKey.SASL_HANDSHAKE, 1, {"mechanism": self.mechanism})
        if answer.error_code:
            raise UpstreamAuthError(
                f"the upstream broker does not offer SASL {self.mechanism} (it offers {list(answer.mechanisms)})"
            )
        if self.mechanism == "PLAIN":
            await self._step(reader, writer, f"\0{self._username}\0{self._password}".encode())
            return
        scram = ScramClient(self.mechanism, self._username, self._password)
        server_first = await self._step(reader, writer, scram.first())
        try:
            server_final = await self._step(reader, writer, scram.final(server_first))
            scram.verify(server_final)
        except AuthenticationFailed as exc:
            raise UpstreamAuthError(f"SCRAM with the upstream broker failed: {exc}") from None

    async def _step(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, data: bytes) -> bytes:
        answer = await self._ask(reader, writer, ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": data})
        if answer.error_code:
            raise UpstreamAuthError(
                f"the upstream cluster refused SASL {self.mechanism} for {self._username!r}: "
                f"{answer.error_message or answer.error_code}"
            )
        return bytes(answer.auth_bytes)
