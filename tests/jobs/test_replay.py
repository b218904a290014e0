"""jobs/replay.py: offset and timestamp ranges into Delta (overwrite, append) and into another topic."""
from __future__ import annotations

import json

import pytest
from job_helpers import BASE_MS, SCHEMA, decoded_rows, expected_decoded, produce_json
from spark_helpers import create_topic

from _common import JobError
from replay import parse_args, replay, resolve_range

pytestmark = pytest.mark.spark


@pytest.fixture
def source(shared_cluster, topic_name) -> tuple[str, str]:
    """(bootstrap, topic): two partitions of 10 JSON records each (offset i has timestamp BASE_MS + i s)."""
    create_topic(shared_cluster.bootstrap, topic_name, partitions=2)
    produce_json(shared_cluster.bootstrap, topic_name, {0: 10, 1: 10})
    return shared_cluster.bootstrap, topic_name


def test_offsets_into_delta_overwrite_then_append(spark, source, tmp_path) -> None:
    bootstrap, topic = source
    table = str(tmp_path / "fixed")
    common = ["--bootstrap", bootstrap, "--topic", topic, "--table", table, "--value-format", "json", "--schema", SCHEMA]
    assert replay(spark, parse_args([*common, "--from-offsets", json.dumps({topic: {"0": 2}}),
                                     "--to-offsets", json.dumps({topic: {"0": 7, "1": 3}})])) == 8
    assert decoded_rows(spark, table) == expected_decoded({0: range(2, 7), 1: range(3)})

    replay(spark, parse_args([*common, "--mode", "overwrite", "--to-offsets", json.dumps({topic: {"0": 1, "1": 1}})]))
    assert decoded_rows(spark, table) == expected_decoded({0: range(1), 1: range(1)})
    replay(spark, parse_args([*common, "--from-offsets", json.dumps({topic: {"0": 9, "1": 9}})]))
    assert decoded_rows(spark, table) == expected_decoded({0: [0, 9], 1: [0, 9]})


def test_timestamps_into_another_topic(spark, source, topic_name) -> None:
    bootstrap, topic = source
    target = f"{topic_name}-fixed"
    create_topic(bootstrap, target, partitions=1)
    replayed = replay(spark, parse_args([
        "--bootstrap", bootstrap, "--topic", topic, "--from-timestamp", str(BASE_MS + 3000),
        "--to-timestamp", str(BASE_MS + 6000), "--to-topic", target, "--value-format", "json", "--schema", "id INT"]))
    assert replayed == 6  # offsets 3, 4, 5 of both partitions
    written = spark.read.format("ember").option("bootstrap", bootstrap).option("topic", target).load().collect()
    values = [json.loads(bytes(r["value"])) for r in written]
    assert sorted((bytes(r["key"]).decode(), v["id"]) for r, v in zip(written, values)) == \
        sorted((f"u{i % 3}", i) for i in (3, 4, 5) for _ in range(2))
    assert all(set(v) == {"id"} for v in values)  # re-encoded with the replay's schema


def test_range_starting_after_its_end_is_rejected(source) -> None:
    bootstrap, topic = source
    args = parse_args(["--bootstrap", bootstrap, "--topic", topic, "--to-topic", "unused",
                       "--from-offsets", json.dumps({topic: {"1": 8}}), "--to-offsets", json.dumps({topic: {"1": 3}})])
    with pytest.raises(JobError, match=rf"starts after its end.*{topic}/1 from 8 to 3"):
        resolve_range(args)


def test_empty_range_replays_nothing(spark, source, tmp_path) -> None:
    bootstrap, topic = source
    args = parse_args(["--bootstrap", bootstrap, "--topic", topic, "--table", str(tmp_path / "none"),
                       "--from-offsets", "latest"])
    assert replay(spark, args) == 0
    assert not (tmp_path / "none").exists()
