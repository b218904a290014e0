"""Unit tests of the source's pure parts: options, checkpoint offsets, planning, Arrow conversion."""
from __future__ import annotations

import pyarrow as pa
import pytest

from ember.errors import EmberError
from ember.record.batch import slice_offsets
from ember.sources.offsets import offsets_from_json, offsets_to_json
from ember.sources.options import OptionError, reader_options
from ember.sources.planning import (
    SIZE_SAMPLES,
    DataLossError,
    OffsetRange,
    RangeGroup,
    check_data_loss,
    limit_records,
    pack_ranges,
    plan_ranges,
    plan_tasks,
)
from ember.sources.schema import arrow_schema, to_spark_batch

A0, A1, B0 = ("a", 0), ("a", 1), ("b", 0)


def test_offsets_round_trip_in_checkpoint_shape() -> None:
    offsets = {A1: 7, A0: 3, B0: 0}
    as_json = offsets_to_json(offsets)
    assert as_json == {"a": {"0": 3, "1": 7}, "b": {"0": 0}}
    assert offsets_from_json(as_json) == offsets


def test_reader_options_defaults_and_errors() -> None:
    batch = reader_options({"bootstrap": "h:1", "topic": "a, b"}, streaming=False)
    assert batch.topics == ("a", "b") and batch.starting == "earliest" and batch.ending == "latest"
    assert batch.fail_on_data_loss and not batch.include_headers and batch.read_path == "auto"
    stream = reader_options({"bootstrap": "h:1", "topicPattern": "a.*", "startingOffsets": '{"a": {"0": -2}}'},
                            streaming=True)
    assert stream.starting == {A0: -2} and stream.subscribes("abc") and not stream.subscribes("xa")
    for bad in ({"topic": "a"}, {"bootstrap": "h:1"}, {"bootstrap": "h:1", "topic": "a", "topicPattern": "a"},
                {"bootstrap": "h:1", "topic": "a", "startingOffsets": "{nope"},
                {"bootstrap": "h:1", "topic": "a", "maxRecordsPerTrigger": "0"},
                {"bootstrap": "h:1", "topic": "a", "readPath": "direct"},
                {"bootstrap": "h:1", "topic": "a", "endingOffsets": "earliest"}):
        with pytest.raises(OptionError):
            reader_options(bad, streaming=False)
    with pytest.raises(OptionError, match="batch reads only"):
        reader_options({"bootstrap": "h:1", "topic": "a", "endingOffsets": "latest"}, streaming=True)


def test_source_errors_are_ember_errors_that_say_what_to_do() -> None:
    with pytest.raises(EmberError, match="readPath must be one of.*docs/spark.md") as option_error:
        reader_options({"bootstrap": "h:1", "topic": "a", "readPath": "nfs"}, streaming=False)
    assert isinstance(option_error.value, OptionError) and isinstance(option_error.value, ValueError)
    with pytest.raises(EmberError, match="Set failOnDataLoss=false") as loss:
        check_data_loss("t", 3, 10, 40, fail=True)
    assert isinstance(loss.value, DataLossError)


def test_plan_ranges_skips_empty_and_splits_for_min_partitions() -> None:
    start, end = {A0: 0, A1: 10, B0: 5}, {A0: 100, A1: 12, B0: 5}
    assert plan_ranges(start, end, {A0: (1, 2)}) == [OffsetRange("a", 0, 0, 100, (1, 2)), OffsetRange("a", 1, 10, 12)]
    split = plan_ranges(start, end, {}, min_partitions=5)
    assert [(r.partition, r.start, r.end) for r in split] == [
        (0, 0, 20), (0, 20, 40), (0, 40, 60), (0, 60, 80), (0, 80, 100), (1, 10, 12)]


def test_limit_records_is_proportional_and_always_progresses() -> None:
    start = {A0: 0, A1: 10}
    assert limit_records(start, {A0: 100, A1: 12}, 1000) == {A0: 100, A1: 12}
    limited = limit_records(start, {A0: 90, A1: 20}, 10)
    assert sum(limited[tp] - start[tp] for tp in start) == 10 and limited[A0] > limited[A1] - 10
    assert limit_records(start, {A0: 0, A1: 11}, 1) == {A0: 0, A1: 11}


def test_data_loss_fails_or_skips_ahead() -> None:
    assert check_data_loss("t", 3, 50, 40, fail=True) == 50
    with pytest.raises(DataLossError, match=r"offsets \[10, 40\) of topic 't' partition 3"):
        check_data_loss("t", 3, 10, 40, fail=True)
    assert check_data_loss("t", 3, 10, 40, fail=False) == 40


def test_decoded_batch_becomes_spark_layout() -> None:
    headers = pa.list_(pa.struct([pa.field("key", pa.string(), nullable=False), pa.field("value", pa.binary())]))
    log_batch = pa.record_batch({"offset": pa.array([7, 8], pa.int64()), "timestamp": pa.array([1_000, 2_000], pa.int64()),
                                 "key": pa.array([b"k", None], pa.binary()), "value": pa.array([b"v", b"w"], pa.binary()),
                                 "headers": pa.array([[{"key": "h", "value": b"x"}], None], headers)})
    decoded = slice_offsets(log_batch, 8, 100)
    target = arrow_schema(include_headers=True)
    batch = to_spark_batch(decoded, "t", 2, target)
    assert batch.schema.equals(target)
    row, = batch.to_pylist()
    assert (row["key"], row["value"], row["topic"], row["partition"], row["offset"], row["headers"]) == (
        None, b"w", "t", 2, 8, None)
    assert row["timestamp"].timestamp() == 2.0


def test_docs_options_table_describes_group_id_as_committing_offsets() -> None:
    """docs/spark.md's reader options table matches what groupId does (stream_reader.commit)."""
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "spark.md").read_text()
    row, = [line for line in doc.splitlines() if line.startswith("| `groupId` |")]
    assert "commit" in row and "offsets" in row and "future" not in row


def test_small_ranges_are_packed_in_order_and_a_big_one_stays_alone() -> None:
    ranges = [OffsetRange("a", p, 0, size) for p, size in enumerate([3, 4, 2, 50, 1, 1])]
    tasks = pack_ranges(ranges, max_records=8)
    assert tasks == [RangeGroup(tuple(ranges[0:2])), ranges[2], ranges[3], RangeGroup(tuple(ranges[4:6]))]
    assert [r for t in tasks for r in (t.ranges if isinstance(t, RangeGroup) else (t,))] == ranges


def test_plan_tasks_turns_max_partition_bytes_into_records_from_a_sample() -> None:
    start = {("t", p): 0 for p in range(100)}
    end = {("t", p): 10 for p in range(100)}
    sampled: list[dict] = []

    def record_bytes(positions: dict) -> float:
        sampled.append(positions)
        return 100.0
    tasks = plan_tasks(start, end, {}, None, 25_000, record_bytes)       # 250 records (25 partitions) per task
    assert len(sampled) == 1 and 0 < len(sampled[0]) <= SIZE_SAMPLES
    assert [len(t.ranges) for t in tasks if isinstance(t, RangeGroup)] == [25, 25, 25, 25]
    assert len(plan_tasks(start, end, {}, None, 0, record_bytes)) == 100   # 0: never packed
    assert len(sampled) == 1                                               # and nothing sampled
    assert len(plan_tasks(start, end, {}, 8, 25_000, record_bytes)) >= 8    # minPartitions still holds
