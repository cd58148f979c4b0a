"""The compatibility matrix through the front: the same scenarios, with the same clients, against a server in front
of a real 3-node Apache Kafka cluster (tests/support/kafka_cluster.py) instead of a standalone one. The tests are
the standalone matrix's own, collected here again with `server` meaning the front; their outcomes go to the
"through the front" column of the README's table (compat_matrix.MODE)."""

from __future__ import annotations

from collections.abc import Iterator

import compat_matrix
import pytest

# The tests (and the module fixtures they use), collected here against the front.
from test_client_matrix import (  # noqa: F401
    driver,
    franz_go_binary,
    kafkajs_dir,
    test_group_lifecycle,
    test_regex_subscription_picks_up_a_later_topic,
    test_rolling_upgrade_and_downgrade,
    test_static_membership,
)
from test_java_clients import (  # noqa: F401
    test_java_consumer_protocol_duplicate_instance_id_is_refused,
    test_java_consumer_protocol_regex_subscription_picks_up_a_later_topic,
    test_java_consumer_protocol_rolling_upgrade_and_downgrade,
    test_java_consumer_protocol_split_consume_exactly_once_and_take_over_a_leaver,
    test_java_consumer_protocol_static_member_restart_keeps_partitions,
    test_java_duplicate_instance_id_fences_the_older_member,
    test_java_members_split_consume_exactly_once_and_take_over_a_leaver,
    test_java_static_member_restart_keeps_partitions_without_rebalance,
)
from test_kafka_consumer_groups import kafka_tools, test_kafka_consumer_groups_list_describe_reset_delete  # noqa: F401
from test_kcat_groups import (  # noqa: F401
    kcats,
    test_kcat_balanced_consumers_split_commit_and_leave,
    test_kcat_static_member_restart_and_fencing,
)


@pytest.fixture
def server(front, request) -> Iterator[object]:
    request.node.compat_proxy = None  # no recording proxy: the API versions are the standalone run's
    compat_matrix.MODE = "front"
    try:
        yield front
    finally:
        compat_matrix.MODE = "server"
