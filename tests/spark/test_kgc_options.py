"""kgc_spark without a JVM: option parsing, consumer settings, offsets JSON, and what survives pickling."""

from __future__ import annotations

import pickle

import pytest
from pyspark.sql.datasource import CaseInsensitiveDict

from kgc_spark.source import (
    KafkaRange,
    KgcDataSource,
    KgcStreamReader,
    SourceOptions,
    instance_id_for,
    offsets_from_json,
    offsets_to_json,
)

pytestmark = pytest.mark.spark

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "a, b", "kafka.group.id": "g"}


def _options(**extra: str) -> CaseInsensitiveDict:
    # Spark hands a data source its options in a CaseInsensitiveDict (keys lower-cased).
    return CaseInsensitiveDict({**BASE, **extra})


def test_options_name_the_group_topics_and_static_member():
    opts = SourceOptions.parse(_options(queryName="Billing-V1", startingOffsets="LATEST"))
    assert opts.topics == ("a", "b")
    assert opts.group_id == "g"
    assert opts.instance_id == instance_id_for("Billing-V1") == "kgc-spark-Billing-V1"
    assert opts.starting_offsets == "latest"
    member = opts.member_config()
    assert member["group.id"] == "g" and member["group.instance.id"] == "kgc-spark-Billing-V1"
    assert member["bootstrap.servers"] == "127.0.0.1:9092"


def test_without_a_query_name_the_member_is_dynamic_and_an_explicit_instance_id_wins():
    assert SourceOptions.parse(_options()).instance_id is None
    assert "group.instance.id" not in SourceOptions.parse(_options()).member_config()
    explicit = SourceOptions.parse(_options(queryName="q", **{"kafka.group.instance.id": "mine"}))
    assert explicit.instance_id == "mine"


def test_executor_readers_never_join_or_commit():
    opts = SourceOptions.parse(
        _options(queryName="q", **{"kafka.session.timeout.ms": "10000", "kafka.fetch.max.bytes": "1048576"})
    )
    reader = opts.reader_config()
    assert "group.instance.id" not in reader and "session.timeout.ms" not in reader
    assert reader["enable.auto.commit"] is False and reader["enable.auto.offset.store"] is False
    assert reader["fetch.max.bytes"] == "1048576"
    assert opts.member_config()["session.timeout.ms"] == "10000"


@pytest.mark.parametrize(
    "drop, message",
    [("kafka.bootstrap.servers", "bootstrap"), ("subscribe", "subscribe"), ("kafka.group.id", "group.id")],
)
def test_missing_required_options_are_named(drop, message):
    options = dict(BASE)
    del options[drop]
    with pytest.raises(ValueError, match=message):
        SourceOptions.parse(CaseInsensitiveDict(options))


def test_starting_offsets_must_be_earliest_or_latest():
    with pytest.raises(ValueError, match="startingOffsets"):
        SourceOptions.parse(_options(startingOffsets='{"a": {"0": 5}}'))


def test_offsets_json_round_trip():
    offsets = {("a", 0): 5, ("a", 10): 7, ("b", 2): 0}
    doc = offsets_to_json(offsets)
    assert doc == {"a": {"0": 5, "10": 7}, "b": {"2": 0}}
    assert offsets_from_json(doc) == offsets
    assert offsets_from_json({}) == {} and offsets_from_json(None) == {}


def test_the_reader_pickles_without_its_group_member():
    reader = KgcStreamReader(_options(queryName="q"))
    reader._member = object()  # stands for the driver's live consumer and thread
    clone = pickle.loads(pickle.dumps(reader))
    assert clone._member is None
    assert clone.opts == reader.opts
    part = pickle.loads(pickle.dumps(KafkaRange("a", 3, 10, 20)))
    assert (part.topic, part.partition, part.start, part.end) == ("a", 3, 10, 20)


def test_the_data_source_is_format_kgc_with_kafka_like_rows():
    assert KgcDataSource.name() == "kgc"
    assert KgcDataSource(_options()).schema().startswith("topic string, partition int, offset long")
