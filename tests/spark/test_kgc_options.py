"""kgc_spark without a JVM: option parsing, consumer settings, offsets JSON, and what survives pickling."""

from __future__ import annotations

import pickle

import pytest
from pyspark.sql.datasource import CaseInsensitiveDict

from kgc_spark.offsets import (
    EARLIEST,
    LATEST,
    DataLoss,
    OffsetSpec,
    Range,
    parse_spec,
    rate_limit,
    resolve,
    split_ranges,
)
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
    assert opts.starting == OffsetSpec("latest")
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


def test_starting_offsets_as_json_and_timestamps_with_sparks_precedence():
    spec = SourceOptions.parse(_options(startingOffsets='{"a": {"0": 5, "1": -2}, "b": {"0": -1}}')).starting
    assert spec.kind == "offsets" and spec.offsets == {("a", 0): 5, ("a", 1): -2, ("b", 0): -1}
    by_time = SourceOptions.parse(
        _options(startingOffsets="latest", startingOffsetsByTimestamp='{"a": {"0": 1000}}')
    ).starting
    assert by_time.kind == "timestamps" and by_time.offsets == {("a", 0): 1000}
    one = SourceOptions.parse(
        _options(
            startingOffsetsByTimestamp='{"a": {"0": 1000}}',
            startingTimestamp="2000",
            startingOffsetsByTimestampStrategy="LATEST",
        )
    ).starting
    assert one == OffsetSpec("timestamp", timestamp=2000, strategy="latest")


@pytest.mark.parametrize(
    "options, message",
    [
        ({"startingOffsets": "newest"}, "startingOffsets must be JSON"),
        ({"startingOffsets": '{"a": {"0": "x"}}'}, "not a whole number"),
        ({"startingOffsets": '{"a": {"0": -3}}'}, "use -2"),
        ({"startingTimestamp": "yesterday"}, "startingTimestamp"),
        ({"startingOffsetsByTimestampStrategy": "skip"}, "error or latest"),
        ({"endingOffsets": "latest"}, "not valid in streaming"),
        ({"maxOffsetsPerTrigger": "0"}, "maxOffsetsPerTrigger must be a positive"),
        ({"minPartitions": "many"}, "minPartitions"),
        ({"failOnDataLoss": "maybe"}, "failOnDataLoss must be true or false"),
    ],
)
def test_bad_offset_options_are_refused_with_their_name(options, message):
    with pytest.raises(ValueError, match=message):
        SourceOptions.parse(_options(**options))


def test_batch_reads_need_no_group_and_refuse_what_spark_refuses():
    options = {k: v for k, v in BASE.items() if k != "kafka.group.id"}
    opts = SourceOptions.parse(CaseInsensitiveDict(options), batch=True)
    assert opts.group_id.startswith("kgc-spark-batch-")
    assert opts.starting == OffsetSpec("earliest") and opts.ending == OffsetSpec("latest")
    for bad, message in (
        ({"startingOffsets": "latest"}, "can't be latest"),
        ({"startingOffsets": '{"a": {"0": -1}}'}, "can't be latest"),
        ({"endingOffsets": "earliest"}, "can't be earliest"),
        ({"endingOffsets": '{"a": {"0": -2}}'}, "can't be earliest"),
    ):
        with pytest.raises(ValueError, match=message):
            SourceOptions.parse(CaseInsensitiveDict({**options, **bad}), batch=True)
    ending = SourceOptions.parse(CaseInsensitiveDict({**options, "endingTimestamp": "5"}), batch=True).ending
    assert ending == OffsetSpec("timestamp", timestamp=5, strategy="latest")


def test_other_options_and_their_defaults():
    opts = SourceOptions.parse(_options())
    assert opts.max_offsets_per_trigger is None and opts.min_partitions is None
    assert opts.fail_on_data_loss is True and opts.include_headers is False
    opts = SourceOptions.parse(
        _options(maxOffsetsPerTrigger="100", minPartitions="8", failOnDataLoss="False", includeHeaders="true")
    )
    assert (opts.max_offsets_per_trigger, opts.min_partitions) == (100, 8)
    assert opts.fail_on_data_loss is False and opts.include_headers is True
    assert opts.reader_config()["auto.offset.reset"] == "error"  # a gone offset is reported, never skipped
    assert (
        KgcDataSource(_options(includeHeaders="true"))
        .schema()
        .endswith("headers array<struct<key: string, value: binary>>")
    )


# -- resolving offsets, rate limits, splits (kgc_spark.offsets) -----------------------------------------------

LOW = {("a", 0): 10, ("a", 1): 0, ("b", 0): 5}
HIGH = {("a", 0): 100, ("a", 1): 50, ("b", 0): 7}


def _resolve(spec, unnamed=EARLIEST, times=None):
    def by_time(stamps):
        return {tp: (times or {}).get((tp, ts), -1) for tp, ts in stamps.items()}

    return resolve(
        spec,
        LOW,
        lambda tps: {tp: LOW[tp] for tp in tps},
        lambda tps: {tp: HIGH[tp] for tp in tps},
        by_time,
        unnamed=unnamed,
    )


def test_resolve_earliest_latest_json_and_timestamps():
    assert _resolve(OffsetSpec("earliest")) == LOW
    assert _resolve(OffsetSpec("latest")) == HIGH
    spec = OffsetSpec("offsets", ((("a", 0), 42), (("a", 1), -1)))
    assert _resolve(spec) == {("a", 0): 42, ("a", 1): 50, ("b", 0): 5}  # b-0 unnamed: earliest
    assert _resolve(spec, unnamed=LATEST)[("b", 0)] == 7
    times = {(("a", 0), 1000): 60, (("a", 1), 1000): 20, (("b", 0), 1000): -1}
    with pytest.raises(ValueError, match="no offset of b\\[0\\] has a timestamp at or after 1000"):
        _resolve(OffsetSpec("timestamp", timestamp=1000), times=times)
    latest = _resolve(OffsetSpec("timestamp", timestamp=1000, strategy="latest"), times=times)
    assert latest == {("a", 0): 60, ("a", 1): 20, ("b", 0): 7}
    ending = _resolve(OffsetSpec("timestamps", ((("a", 0), 1000),)), unnamed=LATEST, times=times)
    assert ending == {("a", 0): 60, ("a", 1): 50, ("b", 0): 7}
    # An ending timestamp no record reaches means the latest offset (Spark has no strategy option for it).
    ending_spec = parse_spec(CaseInsensitiveDict({"endingTimestamp": "1000"}), "ending", "latest")
    assert _resolve(ending_spec, unnamed=LATEST, times=times)[("b", 0)] == 7


def test_rate_limit_prorates_like_spark():
    start = {("a", 0): 0, ("a", 1): 0, ("b", 0): 0}
    end = {("a", 0): 20, ("a", 1): 20, ("b", 0): 20}
    assert rate_limit(start, end, 10) == {("a", 0): 3, ("a", 1): 3, ("b", 0): 3}  # floor(10/3)
    assert rate_limit(start, end, 100) == end  # under the limit: everything
    assert rate_limit(start, end, None) == end
    skewed = rate_limit(start, {("a", 0): 1000, ("a", 1): 1, ("b", 0): 0}, 10)
    assert skewed == {("a", 0): 9, ("a", 1): 1, ("b", 0): 0}  # the small one is not starved
    assert rate_limit({("a", 0): 5}, {("a", 0): 5}, 1) == {("a", 0): 5}


def test_split_ranges_to_reach_min_partitions_as_spark_does():
    ranges = [Range("a", 0, 0, 90), Range("a", 1, 0, 10), Range("b", 0, 3, 3)]
    assert split_ranges(ranges, None) == ranges[:2]  # empty ranges are no task
    parts = split_ranges(ranges, 10)
    # a-1 (round(10/100 * 10) = 1 part) stays whole; a-0 gets the other 9 parts of its own 90 offsets.
    assert [(r.partition, r.start, r.end) for r in parts if r.partition == 1] == [(1, 0, 10)]
    a0 = [(r.start, r.end) for r in parts if r.partition == 0]
    assert a0 == [(i * 10, i * 10 + 10) for i in range(9)]
    assert split_ranges(ranges, 2) == ranges[:2]
    # Equal steps, the last part takes the remainder; 3 x 20 offsets for 7 partitions: round(2.33) = 2 each.
    even = split_ranges([Range("t", p, 0, 20) for p in range(3)], 7)
    assert [(r.partition, r.start, r.end) for r in even][:2] == [(0, 0, 10), (0, 10, 20)] and len(even) == 6
    odd = split_ranges([Range("t", 0, 0, 10)], 3)
    assert [(r.start, r.end) for r in odd] == [(0, 3), (3, 6), (6, 10)]


def test_data_loss_fails_or_warns():
    with pytest.raises(RuntimeError, match='failOnDataLoss" to "false"'):
        DataLoss(True).report("a-0: gone")
    loss = DataLoss(False)
    loss.report("a-0: gone")
    assert loss.warnings == ["a-0: gone"]


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
