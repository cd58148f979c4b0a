"""Raw-frame Kafka group members for the benchmark: kio encodes/decodes bodies (tests/support/wire.py does the
headers and framing), this module adds version negotiation, an asyncio connection that pipelines, and a classic
group member (JoinGroup with MEMBER_ID_REQUIRED, SyncGroup, Heartbeat with rejoin on REBALANCE_IN_PROGRESS).

Versions: for each API the highest version both this server and the target support (ApiVersions), so every
target gets the same requests wherever it can parse them; the versions used are recorded in the results.
"""

from __future__ import annotations

import asyncio
import struct
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.wire import WireClient, decode_response, encode_request, make, request_class  # noqa: E402

API_VERSIONS, FIND_COORDINATOR, JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 18, 10, 11, 12, 13, 14
OFFSET_COMMIT, OFFSET_FETCH, METADATA = 8, 9, 3
# The highest version of each group API this server serves (README "What it serves").
OURS = {
    FIND_COORDINATOR: (0, 6),
    JOIN_GROUP: (0, 9),
    SYNC_GROUP: (0, 5),
    HEARTBEAT: (0, 4),
    LEAVE_GROUP: (0, 5),
    OFFSET_COMMIT: (2, 9),
    OFFSET_FETCH: (1, 9),
}
# kio knows these (FindCoordinator v4+ uses coordinator_keys).
NAMES = {
    FIND_COORDINATOR: "FindCoordinator",
    JOIN_GROUP: "JoinGroup",
    SYNC_GROUP: "SyncGroup",
    HEARTBEAT: "Heartbeat",
    LEAVE_GROUP: "LeaveGroup",
    OFFSET_COMMIT: "OffsetCommit",
    OFFSET_FETCH: "OffsetFetch",
}

NONE, COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR = 0, 14, 15, 16
REBALANCE_IN_PROGRESS, UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, MEMBER_ID_REQUIRED = 27, 25, 22, 79
INVALID_REQUEST = 42
RETRIABLE = {COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR}


class BenchError(RuntimeError):
    pass


def negotiate(bootstrap: str) -> dict[int, int]:
    """{api_key: version}: the highest version both sides support, for the group APIs."""
    host, port = bootstrap.rsplit(":", 1)
    with WireClient(host, int(port), timeout=10) as c:
        resp = c.request(make(request_class(API_VERSIONS, 0), {}))
    theirs = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in resp.api_keys}
    out = {}
    for key, (lo, hi) in OURS.items():
        if key not in theirs:
            raise BenchError(f"target does not serve {NAMES[key]}")
        tlo, thi = theirs[key]
        v = min(hi, thi)
        if v < max(lo, tlo):
            raise BenchError(f"no common {NAMES[key]} version: ours {lo}-{hi}, theirs {tlo}-{thi}")
        out[key] = v
    # librdkafka's mock (2.16) advertises flexible versions it then cannot parse (it closes the connection):
    # walk a member's requests once and step down the version of whichever request loses the connection.
    while not _probe(host, int(port), out):
        pass
    return out


def _probe(host: str, port: int, v: dict[int, int]) -> bool:
    # A fresh group each time: a rejoin into an existing group makes the mock wait session.timeout.ms - 1 s.
    group = f"bench-probe-{time.time_ns()}"
    steps = [
        (FIND_COORDINATOR, lambda m: find_coordinator_request(v, group)),
        (
            JOIN_GROUP,
            lambda m: join_request(v, group, m.get("id", ""), None, 10_000, 10_000, ["bench-probe"]),
        ),
        (
            JOIN_GROUP,
            lambda m: (
                join_request(v, group, m.get("id", ""), None, 10_000, 10_000, ["bench-probe"])
                if m.get("need_rejoin")
                else None
            ),
        ),
        (
            SYNC_GROUP,
            lambda m: sync_request(
                v, group, m.get("gen", -1), m.get("id", ""), None, [(m.get("id", ""), assignment({}))]
            ),
        ),
        (HEARTBEAT, lambda m: heartbeat_request(v, group, m.get("gen", -1), m.get("id", ""), None)),
        (
            OFFSET_COMMIT,
            lambda m: commit_request(v, group, m.get("gen", -1), m.get("id", ""), None, "bench-probe", 1, 0),
        ),
        (OFFSET_FETCH, lambda m: fetch_request(v, group, "bench-probe", 1)),
        (LEAVE_GROUP, lambda m: leave_request(v, group, m.get("id", ""), None)),
    ]
    state: dict[str, Any] = {}
    with WireClient(host, port, timeout=30) as c:
        for key, build in steps:
            body = build(state)
            if body is None:
                continue
            try:
                resp = c.request(body)
            except Exception:  # noqa: BLE001 - closed connection or an answer kio cannot parse
                if v[key] <= OURS[key][0]:
                    raise BenchError(
                        f"the target closes the connection on every {NAMES[key]} version"
                    ) from None
                v[key] -= 1
                return False
            if key == JOIN_GROUP:
                state["need_rejoin"] = int(resp.error_code) == MEMBER_ID_REQUIRED
                if resp.member_id:
                    state["id"] = resp.member_id
                state["gen"] = resp.generation_id
    return True


# -- consumer protocol bytes (Subscription / Assignment v0) -------------------------------------------------


def _str(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def subscription(topics: list[str]) -> bytes:
    return struct.pack(">hi", 0, len(topics)) + b"".join(_str(t) for t in topics) + struct.pack(">i", -1)


def assignment(parts: dict[str, list[int]]) -> bytes:
    out = struct.pack(">hi", 0, len(parts))
    for topic, ps in parts.items():
        out += _str(topic) + struct.pack(">i", len(ps)) + b"".join(struct.pack(">i", p) for p in ps)
    return out + struct.pack(">i", -1)


# -- requests -----------------------------------------------------------------------------------------------


def req(versions: dict[int, int], key: int, values: dict[str, Any]) -> Any:
    return make(request_class(key, versions[key]), values)


async def coordinator_of(bootstrap: str, group: str, timeout_s: float = 120.0) -> tuple[str, int]:
    """(host, port) of `group`'s coordinator, asked of the bootstrap broker until it names one."""
    versions = negotiate(bootstrap)
    host, port = bootstrap.rsplit(":", 1)
    conn = await Conn.open(host, int(port))
    try:
        return coordinator_address(
            await retry_call(conn, lambda: find_coordinator_request(versions, group), timeout_s)
        )
    finally:
        conn.close()


CONSUMER_GROUP_HEARTBEAT = 68


def consumer_group_heartbeat_request(
    group: str, member_id: str, epoch: int, topics: tuple[str, ...], owned: tuple[dict, ...] | None
) -> Any:
    """ConsumerGroupHeartbeat v1 (the version librdkafka pins) as librdkafka sends it: the subscription and the
    rebalance timeout on the join (epoch 0) only; `owned` the partitions the member lists, None when unchanged."""
    joining = epoch == 0
    return make(
        request_class(CONSUMER_GROUP_HEARTBEAT, 1),
        {
            "group_id": group,
            "member_id": member_id,
            "member_epoch": epoch,
            "instance_id": None,
            "rack_id": None,
            "rebalance_timeout": 60_000 if joining else -1,
            "subscribed_topic_names": topics if joining else None,
            "subscribed_topic_regex": None,
            "server_assignor": None,
            "topic_partitions": owned,
        },
    )


def join_request(
    v,
    group: str,
    member_id: str,
    instance_id: str | None,
    session_ms: int,
    rebalance_ms: int,
    topics: list[str],
) -> Any:
    return req(
        v,
        JOIN_GROUP,
        {
            "group_id": group,
            "session_timeout": session_ms,
            "rebalance_timeout": rebalance_ms,
            "member_id": member_id,
            "group_instance_id": instance_id,
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": subscription(topics)}],
            "reason": None,
        },
    )


def sync_request(
    v,
    group: str,
    generation: int,
    member_id: str,
    instance_id: str | None,
    assignments: list[tuple[str, bytes]],
) -> Any:
    return req(
        v,
        SYNC_GROUP,
        {
            "group_id": group,
            "generation_id": generation,
            "member_id": member_id,
            "group_instance_id": instance_id,
            "protocol_type": "consumer",
            "protocol_name": "range",
            "assignments": [{"member_id": m, "assignment": a} for m, a in assignments],
        },
    )


def heartbeat_request(v, group: str, generation: int, member_id: str, instance_id: str | None) -> Any:
    return req(
        v,
        HEARTBEAT,
        {
            "group_id": group,
            "generation_id": generation,
            "member_id": member_id,
            "group_instance_id": instance_id,
        },
    )


def commit_request(
    v,
    group: str,
    generation: int,
    member_id: str,
    instance_id: str | None,
    topic: str,
    partitions: int,
    offset: int,
) -> Any:
    parts = [
        {
            "partition_index": p,
            "committed_offset": offset + p,
            "committed_leader_epoch": -1,
            "committed_metadata": "",
            "commit_timestamp": -1,
        }
        for p in range(partitions)
    ]
    return req(
        v,
        OFFSET_COMMIT,
        {
            "group_id": group,
            "generation_id_or_member_epoch": generation,
            "generation_id": generation,
            "member_id": member_id,
            "group_instance_id": instance_id,
            "retention_time": -1,
            "topics": [{"name": topic, "partitions": parts}],
        },
    )


def fetch_request(v, group: str, topic: str, partitions: int) -> Any:
    topics = [{"name": topic, "partition_indexes": list(range(partitions))}]
    return req(
        v,
        OFFSET_FETCH,
        {
            "group_id": group,
            "topics": topics,
            "require_stable": False,
            "groups": [{"group_id": group, "member_id": None, "member_epoch": -1, "topics": topics}],
        },
    )


def leave_request(v, group: str, member_id: str, instance_id: str | None) -> Any:
    return req(
        v,
        LEAVE_GROUP,
        {
            "group_id": group,
            "member_id": member_id,
            "members": [{"member_id": member_id, "group_instance_id": instance_id, "reason": None}],
        },
    )


def coordinator_address(resp: Any) -> tuple[str, int]:
    """(host, port) of a FindCoordinator answer, any version."""
    coordinators = getattr(resp, "coordinators", None)
    if coordinators:
        return str(coordinators[0].host), int(coordinators[0].port)
    return str(resp.host), int(resp.port)


def find_coordinator_request(v, group: str) -> Any:
    return req(v, FIND_COORDINATOR, {"key": group, "key_type": 0, "coordinator_keys": [group]})


def response_errors(resp: Any) -> list[int]:
    """Every error code in a group/offset response (top level, per group, per partition)."""
    out = []
    ec = getattr(resp, "error_code", None)
    if ec is not None:
        out.append(int(ec))
    for g in getattr(resp, "groups", None) or ():
        ec = getattr(g, "error_code", None)
        if ec is not None:
            out.append(int(ec))
        for t in getattr(g, "topics", None) or ():
            out.extend(int(p.error_code) for p in t.partitions)
    for t in getattr(resp, "topics", None) or ():
        out.extend(int(p.error_code) for p in t.partitions)
    for c in getattr(resp, "coordinators", None) or ():
        out.append(int(c.error_code))
    return out


def first_error(resp: Any) -> int:
    return next((e for e in response_errors(resp) if e), 0)


class Undecodable:
    """An answer kio cannot parse: the mock answers a follower's SyncGroup v3 with a null assignment (-1 length)
    where the schema has non-nullable bytes. Members that need nothing from the body read the error code."""

    def __init__(self, raw: bytes, exc: Exception) -> None:
        self.raw, self.exc = raw, exc

    @property
    def error_code(self) -> int:
        raise BenchError(f"answer not decodable: {self.exc}")

    def error_code_after_throttle(self) -> int:
        # correlation id (4), throttle_time_ms (4), error_code (2): non-flexible v1+ responses
        return int.from_bytes(self.raw[8:10], "big", signed=True)


# -- asyncio connection ---------------------------------------------------------------------------------------


class Conn(asyncio.Protocol):
    """One TCP connection; `call` pipelines (answers come back in request order); `blast` mode keeps a window of
    identical pre-encoded frames in flight, counting answers and decoding one in `check_every`."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.waiters: deque[tuple[asyncio.Future, int, int]] = deque()
        self.correlation = 0
        self.blast_frame: bytes | None = None
        self.blast_key = self.blast_version = 0
        self.answers = 0
        self.errors = 0
        self.checked = 0
        self.check_every = 64
        self.closed: asyncio.Future | None = None
        self.error_codes: dict[int, int] = {}

    @classmethod
    async def open(cls, host: str, port: int) -> Conn:
        loop = asyncio.get_running_loop()
        _t, proto = await loop.create_connection(cls, host, port)
        return proto

    def connection_made(self, transport) -> None:  # type: ignore[override]
        self.transport = transport
        self.closed = asyncio.get_running_loop().create_future()
        sock = transport.get_extra_info("socket")
        if sock is not None:
            import socket

            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc) -> None:  # type: ignore[override]
        err = exc or ConnectionError("connection closed")
        while self.waiters:
            fut, _k, _v = self.waiters.popleft()
            if not fut.done():
                fut.set_exception(err)
        if self.closed and not self.closed.done():
            self.closed.set_result(None)
        self.blast_frame = None

    def data_received(self, data: bytes) -> None:  # type: ignore[override]
        buf = self.buf
        buf += data
        pos = 0
        n = len(buf)
        while n - pos >= 4:
            size = int.from_bytes(buf[pos : pos + 4], "big")
            if n - pos - 4 < size:
                break
            start = pos + 4
            pos = start + size
            if self.waiters:
                fut, key, version = self.waiters.popleft()
                if not fut.done():
                    raw = bytes(buf[start:pos])
                    try:
                        fut.set_result(decode_response(key, version, raw)[1])
                    except Exception as exc:  # noqa: BLE001
                        fut.set_result(Undecodable(raw, exc))
                continue
            self.answers += 1
            if self.answers % self.check_every == 0:
                self.checked += 1
                errs = response_errors(
                    decode_response(self.blast_key, self.blast_version, bytes(buf[start:pos]))[1]
                )
                bad = [e for e in errs if e]
                if bad:
                    self.errors += 1
                    self.error_codes[bad[0]] = self.error_codes.get(bad[0], 0) + 1
            if self.blast_frame is not None and self.transport is not None:
                self.transport.write(self.blast_frame)
        if pos:
            del buf[:pos]

    def call(self, body: Any) -> asyncio.Future:
        assert self.transport is not None
        self.correlation += 1
        fut = asyncio.get_running_loop().create_future()
        self.waiters.append((fut, body.__api_key__, body.__version__))
        self.transport.write(encode_request(body, self.correlation, "bench"))
        return fut

    def start_blast(self, body: Any, window: int) -> None:
        assert self.transport is not None
        self.blast_key, self.blast_version = body.__api_key__, body.__version__
        self.blast_frame = encode_request(body, 1, "bench")
        self.transport.write(self.blast_frame * window)

    def stop_blast(self) -> None:
        self.blast_frame = None

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


async def retry_call(conn: Conn, make_body, timeout_s: float = 120.0) -> Any:
    """Call until the answer is not a retriable coordinator error."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        resp = await conn.call(make_body())
        err = first_error(resp)
        if err not in RETRIABLE or loop.time() > deadline:
            return resp
        await asyncio.sleep(0.1)


class Member:
    """A classic-protocol consumer member over raw frames (the leader assigns nothing: idle members)."""

    def __init__(
        self,
        conn: Conn,
        versions: dict[int, int],
        group: str,
        topic: str,
        session_ms: int,
        rebalance_ms: int,
        instance_id: str | None = None,
    ) -> None:
        self.conn, self.v, self.group, self.topic = conn, versions, group, topic
        self.session_ms, self.rebalance_ms, self.instance_id = session_ms, rebalance_ms, instance_id
        self.member_id = ""
        self.generation = -1
        self.joins = 0
        self.rebalances_seen = 0
        self.undecodable = 0
        self.invalid_syncs = 0

    async def find_coordinator(self) -> None:
        """Ask for the group's coordinator and move to it, as clients do (a target with several brokers, such as
        this server's workers, coordinates groups on different ones)."""
        resp = await retry_call(self.conn, lambda: find_coordinator_request(self.v, self.group))
        if first_error(resp) != 0:
            return
        address = coordinator_address(resp)
        peer = self.conn.transport.get_extra_info("peername") if self.conn.transport is not None else None
        if peer is not None and (str(peer[0]), int(peer[1])) != address:
            old, self.conn = self.conn, await Conn.open(*address)
            old.close()

    async def join(self, timeout_s: float = 300.0) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while loop.time() < deadline:
            self.joins += 1
            resp = await self.conn.call(
                join_request(
                    self.v,
                    self.group,
                    self.member_id,
                    self.instance_id,
                    self.session_ms,
                    self.rebalance_ms,
                    [self.topic],
                )
            )
            err = int(resp.error_code)
            if err == MEMBER_ID_REQUIRED:
                self.member_id = resp.member_id
                continue
            if err in RETRIABLE or err == REBALANCE_IN_PROGRESS:
                await asyncio.sleep(0.1)
                continue
            if err == UNKNOWN_MEMBER_ID:
                self.member_id = ""
                continue
            if err:
                raise BenchError(f"JoinGroup {self.group}: error {err}")
            self.member_id, self.generation = resp.member_id, resp.generation_id
            plan: list[tuple[str, bytes]] = []
            if resp.leader == resp.member_id:
                plan = [(m.member_id, assignment({})) for m in resp.members]
            sresp = await self.conn.call(
                sync_request(self.v, self.group, self.generation, self.member_id, self.instance_id, plan)
            )
            if isinstance(sresp, Undecodable):
                if self.v[SYNC_GROUP] < 1 or self.v[SYNC_GROUP] >= 4:
                    raise BenchError(f"SyncGroup answer not decodable: {sresp.exc}")
                self.undecodable += 1
                serr = sresp.error_code_after_throttle()
            else:
                serr = int(sresp.error_code)
            if serr == 0:
                return
            if serr in (REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION) or serr in RETRIABLE:
                continue
            if (
                serr == INVALID_REQUEST
            ):  # the mock's answer to a SyncGroup that reaches it outside its sync phase
                self.invalid_syncs += 1
                await asyncio.sleep(0.1)
                continue
            if serr == UNKNOWN_MEMBER_ID:
                self.member_id = ""
                continue
            raise BenchError(f"SyncGroup {self.group}: error {serr}")
        raise BenchError(f"member of {self.group} did not join within {timeout_s:.0f}s")

    async def heartbeat(self) -> int:
        resp = await self.conn.call(
            heartbeat_request(self.v, self.group, self.generation, self.member_id, self.instance_id)
        )
        return int(resp.error_code)

    async def heartbeat_or_rejoin(self) -> int:
        err = await self.heartbeat()
        if err in (REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID):
            self.rebalances_seen += 1
            if err == UNKNOWN_MEMBER_ID:
                self.member_id = ""
            await self.join()
        return err
