"""Every answer the coordinator gives encodes at every version of its API, through the project's codec, and
decodes back with the version-dependent values intact."""

from __future__ import annotations

import pytest
from kio.serial import entity_reader

from protocol.api import ApiTable, RequestContext, response_class
from protocol.errors import ErrorCode

from .context import (
    DELETE_GROUPS,
    DESCRIBE_GROUPS,
    HEARTBEAT,
    JOIN_GROUP,
    LEAVE_GROUP,
    LIST_GROUPS,
    OFFSET_COMMIT,
    OFFSET_DELETE,
    OFFSET_FETCH,
    SYNC_GROUP,
    GroupTestContext,
)

VERSIONS = {
    JOIN_GROUP: range(0, 10),
    SYNC_GROUP: range(0, 6),
    HEARTBEAT: range(0, 5),
    LEAVE_GROUP: range(0, 6),
    OFFSET_COMMIT: range(2, 10),
    OFFSET_FETCH: range(1, 8),
    OFFSET_DELETE: range(0, 1),
    DESCRIBE_GROUPS: range(0, 7),
    LIST_GROUPS: range(0, 6),
    DELETE_GROUPS: range(0, 3),
}


def encode_decode(api_key: int, version: int, answer):
    data = ApiTable().encode_response(RequestContext(api_key, version, 7, None), answer)
    cls = response_class(api_key, version)
    offset = 4 + (1 if cls.__flexible__ else 0)
    decoded, _ = entity_reader(cls)(data, offset)
    return decoded


@pytest.fixture(scope="module")
def answers():
    """A little of everything: a static rebalance, a rejoin, errors, commits, fetches, admin calls."""
    ctx = GroupTestContext()
    result = ctx.static_members_join_and_rebalance()
    out = {
        JOIN_GROUP: [
            ctx.join_group(member_id="nobody").response,
            ctx.join_group(group_instance_id="leader", version=9).response,
        ],
        SYNC_GROUP: [
            ctx.sync_group(
                member_id=result.follower_id, generation_id=1, group_instance_id="follower"
            ).response
        ],
        HEARTBEAT: [ctx.heartbeat(member_id="nobody", generation_id=1).response],
        LEAVE_GROUP: [ctx.leave_group(members=[("nobody", None)]).response],
        OFFSET_COMMIT: [ctx.commit("simple", {("t", 0): 1}).response],
        OFFSET_FETCH: [ctx.fetch("simple", {"t": [0, 1]}, version=7).response],
        OFFSET_DELETE: [
            ctx.send(
                "offset_delete",
                OFFSET_DELETE,
                0,
                "od",
                group_id="simple",
                topics=[{"name": "t", "partitions": [{"partition_index": 0}]}],
            ).response
        ],
        DESCRIBE_GROUPS: [
            ctx.send(
                "describe_groups",
                DESCRIBE_GROUPS,
                6,
                "d",
                groups=["group-id", "none"],
                include_authorized_operations=False,
            ).response
        ],
        LIST_GROUPS: [ctx.send("list_groups", LIST_GROUPS, 5, "l").response],
        DELETE_GROUPS: [ctx.send("delete_groups", DELETE_GROUPS, 2, "dg", groups_names=["x"]).response],
    }
    return out


@pytest.mark.parametrize("api_key", sorted(VERSIONS))
def test_every_answer_encodes_at_every_version(answers, api_key):
    for answer in answers[api_key]:
        for version in VERSIONS[api_key]:
            encode_decode(api_key, version, answer)


def test_v8_plus_offset_fetch_encodes():
    ctx = GroupTestContext()
    ctx.commit("g", {("t", 0): 5})
    answer = ctx.fetch("g", None, version=9).response
    for version in (8, 9):
        decoded = encode_decode(OFFSET_FETCH, version, answer)
        assert decoded.groups[0].topics[0].partitions[0].committed_offset == 5


def test_join_protocol_name_on_the_wire():
    ctx = GroupTestContext()
    for version in range(0, 10):
        answer = ctx.join_group(member_id="nobody", version=version).response
        decoded = encode_decode(JOIN_GROUP, version, answer)
        assert decoded.protocol_name == ("" if version < 7 else None)
        assert decoded.error_code == ErrorCode.unknown_member_id


def test_leave_v0_to_v2_on_the_wire():
    ctx = GroupTestContext()
    ctx.create_group()
    for version in range(0, 3):
        answer = ctx.leave_group(members=[("nobody", None)], version=version).response
        assert encode_decode(LEAVE_GROUP, version, answer).error_code == ErrorCode.unknown_member_id
