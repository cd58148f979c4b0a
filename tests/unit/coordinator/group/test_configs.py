"""Kafka's group configs (kafka-configs --entity-type groups) on the shard: DescribeConfigs and
IncrementalAlterConfigs of GROUP resources over the per-group settings (coordinator.group.configs)."""

from __future__ import annotations

import dataclasses

from coordinator.group.configs import DELETE, GROUP_RESOURCE, SET, SOURCE_DEFAULT, SOURCE_GROUP
from coordinator.group.settings import (
    CONSUMER_HEARTBEAT_INTERVAL,
    CONSUMER_SESSION_TIMEOUT,
    EXPANSION_TIMEOUT,
    REGISTRATION_TIMEOUT,
)
from coordinator.records import GroupSettingsKey, GroupSettingsValue, decode_record
from protocol.errors import ErrorCode

from .context import GroupTestContext

GROUP = "g"
TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4


def describe(ctx: GroupTestContext, *resources: tuple[int, str], keys=None, synonyms=True):
    call = ctx.send(
        "describe_configs",
        32,
        4,
        "describe",
        resources=[
            {"resource_type": t, "resource_name": n, "configuration_keys": keys} for t, n in resources
        ],
        include_synonyms=synonyms,
        include_documentation=False,
    )
    return [dataclasses.asdict(r) for r in ctx.answers[call.token].results], call.result


def alter(
    ctx: GroupTestContext, group: str, *ops: tuple[str, int, str | None], validate_only=False, apply=True
):
    call = ctx.send(
        "incremental_alter_configs",
        44,
        1,
        "alter",
        apply=apply,
        resources=[
            {
                "resource_type": GROUP_RESOURCE,
                "resource_name": group,
                "configs": [{"name": n, "config_operation": op, "value": v} for n, op, v in ops],
            }
        ],
        validate_only=validate_only,
    )
    return call


def configs_of(result) -> dict[str, tuple[str, int]]:
    return {c["name"]: (c["value"], c["config_source"]) for c in result["configs"]}


def test_a_group_without_configs_of_its_own_shows_the_servers_values_as_defaults():
    ctx = GroupTestContext()
    (result,), _ = describe(ctx, (GROUP_RESOURCE, GROUP))
    assert result["error_code"] == ErrorCode.none and result["resource_name"] == GROUP
    assert configs_of(result) == {
        CONSUMER_SESSION_TIMEOUT: ("45000", SOURCE_DEFAULT),
        CONSUMER_HEARTBEAT_INTERVAL: ("5000", SOURCE_DEFAULT),
        REGISTRATION_TIMEOUT: ("0", SOURCE_DEFAULT),
        EXPANSION_TIMEOUT: ("0", SOURCE_DEFAULT),
    }
    session = next(c for c in result["configs"] if c["name"] == CONSUMER_SESSION_TIMEOUT)
    assert list(session["synonyms"]) == [
        {"name": "group.consumer.session.timeout.ms", "value": "45000", "source": SOURCE_DEFAULT}
    ]
    (only,), _ = describe(ctx, (GROUP_RESOURCE, GROUP), keys=[CONSUMER_SESSION_TIMEOUT])
    assert list(configs_of(only)) == [CONSUMER_SESSION_TIMEOUT]


def test_set_is_a_settings_record_shown_as_the_groups_own_and_delete_goes_back_to_the_server():
    ctx = GroupTestContext()
    call = alter(ctx, GROUP, (CONSUMER_SESSION_TIMEOUT, SET, "50000"), (EXPANSION_TIMEOUT, SET, "3000"))
    assert [dataclasses.asdict(r) for r in ctx.answers[call.token].responses] == [
        {"error_code": ErrorCode.none, "error_message": None, "resource_type": 32, "resource_name": GROUP}
    ]
    assert [decode_record(r) for r in call.result.records] == [
        (
            GroupSettingsKey(GROUP),
            GroupSettingsValue(((CONSUMER_SESSION_TIMEOUT, 50000), (EXPANSION_TIMEOUT, 3000))),
        )
    ]
    (result,), _ = describe(ctx, (GROUP_RESOURCE, GROUP))
    assert configs_of(result)[CONSUMER_SESSION_TIMEOUT] == ("50000", SOURCE_GROUP)
    assert configs_of(result)[EXPANSION_TIMEOUT] == ("3000", SOURCE_GROUP)
    session = next(c for c in result["configs"] if c["name"] == CONSUMER_SESSION_TIMEOUT)
    assert [s["source"] for s in session["synonyms"]] == [SOURCE_GROUP, SOURCE_DEFAULT]
    assert ctx.shard.effective_settings(GROUP)[CONSUMER_SESSION_TIMEOUT] == 50000  # the admin API's view too

    alter(ctx, GROUP, (CONSUMER_SESSION_TIMEOUT, DELETE, None))
    (result,), _ = describe(ctx, (GROUP_RESOURCE, GROUP))
    assert configs_of(result)[CONSUMER_SESSION_TIMEOUT] == ("45000", SOURCE_DEFAULT)
    restarted = ctx.restart()
    assert restarted.shard.group_settings.own(GROUP) == {EXPANSION_TIMEOUT: 3000}


def test_refused_changes_write_nothing():
    ctx = GroupTestContext()
    for ops, why in (
        ([("no.such.config", SET, "1")], "Unknown group config name: no.such.config"),
        ([("share.session.timeout.ms", SET, "50000")], "serves no share groups"),
        ([(CONSUMER_SESSION_TIMEOUT, SET, "soon")], "Not a number"),
        ([(CONSUMER_SESSION_TIMEOUT, SET, "1000")], "group.consumer.min.session.timeout.ms"),
        ([(CONSUMER_HEARTBEAT_INTERVAL, SET, "60000")], "group.consumer.max.heartbeat.interval.ms"),
        ([(CONSUMER_SESSION_TIMEOUT, 2, "1")], "append is not allowed"),
    ):
        call = alter(ctx, GROUP, *ops)
        (answer,) = [dataclasses.asdict(r) for r in ctx.answers[call.token].responses]
        assert answer["error_code"] == ErrorCode.invalid_config and why in answer["error_message"], answer
        assert call.result.records == []
    assert GROUP not in ctx.shard.group_settings


def test_validate_only_checks_and_writes_nothing():
    ctx = GroupTestContext()
    call = alter(ctx, GROUP, (CONSUMER_SESSION_TIMEOUT, SET, "50000"), validate_only=True)
    assert [dataclasses.asdict(r) for r in ctx.answers[call.token].responses][0][
        "error_code"
    ] == ErrorCode.none
    assert call.result.records == [] and GROUP not in ctx.shard.group_settings


def test_a_failed_append_undoes_the_change_and_answers_the_error():
    ctx = GroupTestContext()
    call = alter(ctx, GROUP, (CONSUMER_SESSION_TIMEOUT, SET, "50000"), apply=False)
    assert ctx.shard.group_settings.own(GROUP) == {
        CONSUMER_SESSION_TIMEOUT: 50000
    }  # applied in memory at once
    ctx.fail(call.result)
    (answer,) = [dataclasses.asdict(r) for r in ctx.answers[call.token].responses]
    assert answer["error_code"] == ErrorCode.coordinator_not_available
    assert GROUP not in ctx.shard.group_settings


def test_other_resource_types_and_an_empty_name_are_errors():
    ctx = GroupTestContext()
    results, _ = describe(ctx, (TOPIC_RESOURCE, "t"), (BROKER_RESOURCE, "1"), (GROUP_RESOURCE, ""))
    assert [r["error_code"] for r in results] == [ErrorCode.invalid_request] * 3
    assert "configs of groups only" in results[0]["error_message"]
