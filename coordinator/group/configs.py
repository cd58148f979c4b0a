"""Kafka's group configs (`kafka-configs --entity-type groups`): DescribeConfigs and IncrementalAlterConfigs of
GROUP resources, read from and written to the per-group settings (coordinator.group.settings).

Kafka 4.x keeps a group's configs (GroupConfig: consumer.session.timeout.ms, consumer.heartbeat.interval.ms and the
share-group ones) as ConfigRecords of its controller; here they are GroupSettings records in the group's shard, like
every per-group setting, so the same values are seen and set through the admin API and through kafka-configs, and
this server's own per-group settings (the windows) can be set with kafka-configs too. As in Kafka a group need not
exist to have configs, and DeleteGroups forgets them.

Described: every per-group setting, its value in force; source GROUP_CONFIG when the group has its own value,
else DEFAULT_CONFIG (what `kafka-configs --describe` leaves out without `--all`), with the server's setting as
the synonym. Altered: SET and DELETE (APPEND and SUBTRACT are for lists: INVALID_CONFIG, as Kafka answers for an
INT config); a name that is not a group config is INVALID_CONFIG ("Unknown group config name"); the share-group
configs, which Kafka knows, are refused because this server serves no share groups; values are validated as the
admin API's are (Kafka's bounds group.consumer.min/max.*, the session above the heartbeat interval).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from coordinator.group.settings import (
    CONSUMER_HEARTBEAT_INTERVAL,
    CONSUMER_SESSION_TIMEOUT,
    EXPANSION_TIMEOUT,
    PER_GROUP_SETTINGS,
    REGISTRATION_TIMEOUT,
    GroupSettingsRegistry,
)
from protocol.errors import ErrorCode

GROUP_RESOURCE = 32  # ConfigResource.Type.GROUP
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3  # AlterConfigOp.OpType
SOURCE_DEFAULT, SOURCE_GROUP = 5, 8  # DescribeConfigs ConfigSource: DEFAULT_CONFIG, GROUP_CONFIG
TYPE_INT = 3  # DescribeConfigs ConfigType
INT32_MAX = 2**31 - 1

# Kafka's share-group configs: valid names there, refused here (no share groups).
SHARE_CONFIGS = frozenset(
    {
        "share.session.timeout.ms",
        "share.heartbeat.interval.ms",
        "share.record.lock.duration.ms",
        "share.auto.offset.reset",
    }
)
# The server setting each per-group setting overrides (the synonym a describe shows).
SERVER_SETTING = {
    CONSUMER_SESSION_TIMEOUT: "group.consumer.session.timeout.ms",
    CONSUMER_HEARTBEAT_INTERVAL: "group.consumer.heartbeat.interval.ms",
    REGISTRATION_TIMEOUT: REGISTRATION_TIMEOUT,
    EXPANSION_TIMEOUT: EXPANSION_TIMEOUT,
}
DOCS = {
    CONSUMER_SESSION_TIMEOUT: "The timeout to detect client failures when using the consumer group protocol.",
    CONSUMER_HEARTBEAT_INTERVAL: "The heartbeat interval given to the members of a consumer group.",
    REGISTRATION_TIMEOUT: "How long a static member whose session ended keeps its place and partitions (0: off).",
    EXPANSION_TIMEOUT: "How long joins to a settled group are gathered into one rebalance (0: off).",
}


def describe_result(
    registry: GroupSettingsRegistry,
    group_id: str,
    keys: Iterable[str] | None,
    include_synonyms: bool,
    include_documentation: bool,
) -> dict[str, Any]:
    """The DescribeConfigs result of one GROUP resource (`keys`: the configs asked for, None: all)."""
    if not group_id:
        return error_result(
            GROUP_RESOURCE, group_id, ErrorCode.invalid_request, "Group name must not be empty"
        )
    own = registry.own(group_id)
    wanted = set(PER_GROUP_SETTINGS) if keys is None else set(keys)
    configs = []
    for name in sorted(PER_GROUP_SETTINGS):
        if name not in wanted:
            continue
        value = str(registry.value(group_id, name))
        server_value = str(getattr(registry.settings, PER_GROUP_SETTINGS[name]))
        synonyms = []
        if include_synonyms:
            if name in own:
                synonyms.append({"name": name, "value": value, "source": SOURCE_GROUP})
            synonyms.append({"name": SERVER_SETTING[name], "value": server_value, "source": SOURCE_DEFAULT})
        configs.append(
            {
                "name": name,
                "value": value,
                "read_only": False,
                "config_source": SOURCE_GROUP if name in own else SOURCE_DEFAULT,
                "is_sensitive": False,
                "synonyms": synonyms,
                "config_type": TYPE_INT,
                "documentation": DOCS[name] if include_documentation else None,
            }
        )
    return {
        "error_code": ErrorCode.none,
        "error_message": None,
        "resource_type": GROUP_RESOURCE,
        "resource_name": group_id,
        "configs": configs,
    }


def alter_result(resource_type: int, name: str, code: ErrorCode, message: str | None) -> dict[str, Any]:
    """An IncrementalAlterConfigs result of one resource."""
    return {
        "error_code": code,
        "error_message": message,
        "resource_type": resource_type,
        "resource_name": name,
    }


def error_result(resource_type: int, name: str, code: ErrorCode, message: str | None) -> dict[str, Any]:
    """A DescribeConfigs result that is an error: no configs."""
    return alter_result(resource_type, name, code, message) | {"configs": []}


def not_served_message(resource_type: int) -> str:
    """Why a resource of a type other than GROUP is refused (INVALID_REQUEST)."""
    return (
        f"This server serves the configs of groups only (resource type {GROUP_RESOURCE}), not of type "
        f"{resource_type}."
    )


def not_served(resource_type: int, name: str) -> dict[str, Any]:
    return error_result(resource_type, name, ErrorCode.invalid_request, not_served_message(resource_type))


def alterations(configs: Iterable[Any]) -> tuple[dict[str, int | None], str | None]:
    """The per-group setting changes an IncrementalAlterConfigs resource asks for (None: back to the server's
    value), or why it is refused (INVALID_CONFIG)."""
    changes: dict[str, int | None] = {}
    for config in configs:
        name, op = config.name, int(config.config_operation)
        if name in SHARE_CONFIGS:
            return {}, f"{name}: this server serves no share groups"
        if name not in PER_GROUP_SETTINGS:
            return {}, f"Unknown group config name: {name}"
        if name in changes:
            return {}, f"Error due to duplicate config keys: {name}"
        if op == DELETE:
            changes[name] = None
        elif op == SET:
            try:
                value = int(str(config.value).strip())
            except ValueError:
                return {}, f"Invalid value {config.value} for configuration {name}: Not a number of type INT"
            if not 0 <= value <= INT32_MAX:
                return {}, f"Invalid value {value} for configuration {name}: must be from 0 to {INT32_MAX}"
            changes[name] = value
        elif op in (APPEND, SUBTRACT):
            return {}, f"Config value append is not allowed for config key: {name}"
        else:
            return {}, f"Unknown config operation {op} for {name}"
    return changes, None


def applied(own: Mapping[str, int], changes: Mapping[str, int | None]) -> dict[str, int]:
    """The group's own values once `changes` are applied."""
    new = dict(own)
    for name, value in changes.items():
        if value is None:
            new.pop(name, None)
        else:
            new[name] = value
    return new
