"""Spark through the front: both Spark paths (this project's format("kgc") source and Spark's own Kafka source
as a group member) and examples/pipeline.py, run against a server in front of a real 3-node Kafka cluster
(tests/support/kafka_cluster.py) instead of a standalone one. The tests are the standalone suite's own, collected
here again with `server` meaning the front."""

from __future__ import annotations

import pytest
from test_example_pipeline import (  # noqa: F401 - collected here, against the front
    test_example_pipeline_aggregates_per_key_and_minute_into_a_topic,
)
from test_kgc_source import (  # noqa: F401 - collected here, against the front
    test_one_query_reads_everything_and_commits_the_log_end,
    test_two_queries_split_the_partitions_and_read_each_record_once,
)
from test_spark_kafka_source import test_two_spark_kafka_queries_share_one_group  # noqa: F401

pytestmark = pytest.mark.spark


@pytest.fixture
def server(front):
    return front
