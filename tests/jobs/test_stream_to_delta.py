"""jobs/stream_to_delta.py: availableNow runs are incremental; a killed query restarts exactly-once."""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from job_helpers import SCHEMA, decoded_rows, expected_decoded, produce_json, spark_submit
from spark_helpers import create_topic, expected, produce, rows

from stream_to_delta import parse_args, start_stream

pytestmark = pytest.mark.spark


def stream_args(bootstrap: str, topic: str, tmp: Path, *extra: str) -> list[str]:
    return ["--bootstrap", bootstrap, "--topic", topic, "--table", str(tmp / "table"),
            "--checkpoint", str(tmp / "checkpoint"), *extra]


def run_available_now(spark, argv: list[str]):
    query = start_stream(spark, parse_args([*argv, "--trigger", "availableNow"]))
    query.awaitTermination(180)
    assert query.exception() is None, query.exception()
    return query


def test_available_now_round_trip_is_incremental(spark, shared_cluster, topic_name, tmp_path) -> None:
    create_topic(shared_cluster.bootstrap, topic_name, partitions=2)
    produce_json(shared_cluster.bootstrap, topic_name, {0: 6, 1: 4})
    argv = stream_args(shared_cluster.bootstrap, topic_name, tmp_path,
                       "--value-format", "json", "--schema", SCHEMA, "--partition-by", "partition")
    run_available_now(spark, argv)
    table = str(tmp_path / "table")
    assert decoded_rows(spark, table) == expected_decoded({0: range(6), 1: range(4)})

    produce_json(shared_cluster.bootstrap, topic_name, {1: 2})  # offsets 4, 5 of partition 1
    query = run_available_now(spark, argv)
    assert sum(p["numInputRows"] for p in query.recentProgress) == 2
    got = decoded_rows(spark, table)
    assert [(p, o) for p, o, *_ in got] == [(0, o) for o in range(6)] + [(1, o) for o in range(6)]
    assert spark.read.format("delta").load(table).inputFiles()[0].split("/")[-2].startswith("partition=")


def wait_for_first_commit(process, checkpoint: Path, log: Path, timeout_s: float = 240) -> None:
    """Until the query has committed micro-batch 0 (bounded; fails with the job's log)."""
    deadline = time.monotonic() + timeout_s
    while not (checkpoint / "commits" / "0").exists():
        if process.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"stream_to_delta never committed a batch (exit {process.poll()}):\n"
                        + log.read_text(errors="replace")[-3000:])
        time.sleep(0.2)


def test_killed_stream_restarts_exactly_once(spark, shared_cluster, topic_name, tmp_path) -> None:
    create_topic(shared_cluster.bootstrap, topic_name, partitions=2)
    produce(shared_cluster.bootstrap, topic_name, {0: 100, 1: 100})
    argv = stream_args(shared_cluster.bootstrap, topic_name, tmp_path, "--max-records-per-trigger", "20")
    log = tmp_path / "spark-submit.log"
    with open(log, "wb") as out:
        process = spark_submit("stream_to_delta.py", [*argv, "--trigger", "processingTime", "--interval", "1 second"], out)
        try:
            wait_for_first_commit(process, tmp_path / "checkpoint", log)
        finally:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(30)
    table = str(tmp_path / "table")
    assert 20 <= spark.read.format("delta").load(table).count() < 200, "the kill must land mid-way"

    run_available_now(spark, argv)  # same checkpoint: re-runs the interrupted batch, then the rest
    written = spark.read.format("delta").load(table)
    assert written.count() == 200
    assert written.select("partition", "offset").distinct().count() == 200
    assert rows(written.selectExpr("partition", "offset", "CAST(key AS BINARY) AS key", "value")) == expected({0: 100, 1: 100})
