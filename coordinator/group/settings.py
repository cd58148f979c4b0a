"""The group coordinator's settings, and the per-group values that override some of them.

`GroupCoordinatorSettings` holds Kafka's broker settings for classic groups and offsets (Kafka's names, Kafka's
defaults) and this coordinator's own ones. `GroupSettingsRegistry` holds per-group overrides of the settings in
`PER_GROUP_SETTINGS`, durable as GroupSettings records (coordinator.records); the shard's admin handler applies a
change at once and undoes it if its append fails, and replay applies the records while the log loads.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from coordinator.records import CoordinatorRecord, GroupSettingsValue, new_group_settings_record


@dataclasses.dataclass(frozen=True)
class GroupCoordinatorSettings:
    """Kafka's broker settings for classic groups and offsets, with Kafka's defaults."""

    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1800000
    group_initial_rebalance_delay_ms: int = 3000
    group_max_size: int = 2**31 - 1
    group_new_member_join_timeout_ms: int = 5 * 60 * 1000  # not a broker setting in Kafka either
    offset_metadata_max_bytes: int = 4096
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    # Ours, off (0) by default; per-group values override them (GroupSettingsRegistry).
    group_static_registration_timeout_ms: int = 0
    group_expansion_timeout_ms: int = 0
    # Kafka's consumer groups (KIP-848): the server's values of the group configs a group may override
    consumer_session_timeout_ms: int = 45000
    consumer_heartbeat_interval_ms: int = 5000

    _KAFKA_NAMES = {
        "group.min.session.timeout.ms": "group_min_session_timeout_ms",
        "group.max.session.timeout.ms": "group_max_session_timeout_ms",
        "group.initial.rebalance.delay.ms": "group_initial_rebalance_delay_ms",
        "group.max.size": "group_max_size",
        "offset.metadata.max.bytes": "offset_metadata_max_bytes",
        "group.static.registration.timeout.ms": "group_static_registration_timeout_ms",
        "group.expansion.timeout.ms": "group_expansion_timeout_ms",
        "group.consumer.session.timeout.ms": "consumer_session_timeout_ms",
        "group.consumer.heartbeat.interval.ms": "consumer_heartbeat_interval_ms",
    }

    @classmethod
    def from_config(cls, config: Any) -> GroupCoordinatorSettings:
        """From anything indexed by Kafka's names (coordinator.config.Config, a dict of properties)."""
        values: dict[str, int] = {}
        for kafka_name, field in cls._KAFKA_NAMES.items():
            try:
                values[field] = int(config[kafka_name])
            except KeyError:
                pass
        try:
            values["offsets_retention_ms"] = int(config["offsets.retention.minutes"]) * 60 * 1000
        except KeyError:
            pass
        return cls(**values)


REGISTRATION_TIMEOUT = "group.static.registration.timeout.ms"
EXPANSION_TIMEOUT = "group.expansion.timeout.ms"
CONSUMER_SESSION_TIMEOUT = "consumer.session.timeout.ms"
CONSUMER_HEARTBEAT_INTERVAL = "consumer.heartbeat.interval.ms"
PER_GROUP_SETTINGS = {
    REGISTRATION_TIMEOUT: "group_static_registration_timeout_ms",
    EXPANSION_TIMEOUT: "group_expansion_timeout_ms",
    # Kafka's group configs of consumer groups (kafka-configs --entity-type groups), within the server's
    # group.consumer.min/max.session.timeout.ms and group.consumer.min/max.heartbeat.interval.ms
    CONSUMER_SESSION_TIMEOUT: "consumer_session_timeout_ms",
    CONSUMER_HEARTBEAT_INTERVAL: "consumer_heartbeat_interval_ms",
}
"""The settings a group may override: config name -> GroupCoordinatorSettings field."""
MAX_SETTING_VALUE = 2**31 - 1


class GroupSettingsRegistry:
    """Per-group values of the settings in PER_GROUP_SETTINGS, by group id (a group need not exist to have
    them)."""

    def __init__(self, settings: GroupCoordinatorSettings) -> None:
        self.settings = settings
        self.by_group: dict[str, dict[str, int]] = {}

    def __contains__(self, group_id: object) -> bool:
        return group_id in self.by_group

    def own(self, group_id: str) -> dict[str, int]:
        """The group's own values (a copy)."""
        return dict(self.by_group.get(group_id, {}))

    def value(self, group_id: str, name: str) -> int:
        """The value in force for the group: its own, else the server's."""
        own = self.by_group.get(group_id)
        if own is not None and name in own:
            return own[name]
        return int(getattr(self.settings, PER_GROUP_SETTINGS[name]))

    def effective(self, group_id: str) -> dict[str, int]:
        return {name: self.value(group_id, name) for name in PER_GROUP_SETTINGS}

    def to_json(self, group_id: str) -> dict[str, Any]:
        return {
            "settings": dict(sorted(self.by_group.get(group_id, {}).items())),
            "effective_settings": self.effective(group_id),
        }

    def set(self, group_id: str, values: Mapping[str, int]) -> None:
        if values:
            self.by_group[group_id] = dict(values)
        else:
            self.by_group.pop(group_id, None)

    def forget(self, group_id: str) -> list[CoordinatorRecord]:
        """The tombstone of the group's values, removed from memory now (DeleteGroups)."""
        if self.by_group.pop(group_id, None) is None:
            return []
        return [new_group_settings_record(group_id, {})]

    def replay(self, group_id: str, value: GroupSettingsValue | None) -> None:
        self.set(group_id, {} if value is None else dict(value.settings))


def validate_setting_changes(changes: Mapping[str, int | None]) -> str | None:
    """Why a change of per-group settings is refused (a message for people), or None."""
    for name, value in changes.items():
        if name not in PER_GROUP_SETTINGS:
            return f"{name!r} is not a per-group setting (known: {', '.join(sorted(PER_GROUP_SETTINGS))})"
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SETTING_VALUE
        ):
            return f"{name} must be an integer from 0 to {MAX_SETTING_VALUE} or null"
    return None
