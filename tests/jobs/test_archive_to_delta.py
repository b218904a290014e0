"""jobs/archive_to_delta.py: incremental exactly-once archive runs, and the archive + live union read
across a retention boundary."""
from __future__ import annotations

import time

import pytest
from spark_helpers import create_topic, expected, produce, rows

from archive_to_delta import parse_args, read_archive_and_live, start_archive
from ember.client import Admin, Consumer, TopicPartition

pytestmark = pytest.mark.spark

TOPIC = "archived"
PARTITIONS = {0: 5, 1: 5}  # records per partition and produce call: one batch each


def produce_rounds(bootstrap: str, first_round: int, rounds: int) -> None:
    for n in range(first_round, first_round + rounds):
        produce(bootstrap, TOPIC, PARTITIONS, first=5 * n)


def archive_run(spark, bootstrap: str, tmp) -> int:
    """One archive run; returns the records it archived."""
    query = start_archive(spark, parse_args(["--bootstrap", bootstrap, "--topic", TOPIC, "--table", str(tmp / "archive"),
                                             "--checkpoint", str(tmp / "checkpoint")]))
    query.awaitTermination(180)
    assert query.exception() is None, query.exception()
    return sum(p["numInputRows"] for p in query.recentProgress)


def wait_for_retention(bootstrap: str, timeout_s: float = 60) -> dict[int, int]:
    """Until retention has deleted the first segments of every partition and settled (the same log
    starts for a second); returns the log starts."""
    tps = [TopicPartition(TOPIC, p) for p in PARTITIONS]
    seen: list[dict[TopicPartition, int]] = []
    with Consumer(bootstrap_servers=bootstrap) as consumer:
        deadline = time.monotonic() + timeout_s
        while len(seen) < 5 or not all(seen[-1].values()) or any(s != seen[-1] for s in seen[-5:]):
            assert time.monotonic() < deadline, f"retention did not settle: log starts {seen[-5:]}"
            time.sleep(0.2)
            seen.append(consumer.beginning_offsets(tps))
    return {tp.partition: offset for tp, offset in seen[-1].items()}


def test_incremental_archive_and_union_across_retention(spark, make_cluster, tmp_path) -> None:
    cluster = make_cluster(brokers=1, config={"log.retention.check.interval.ms": "100"})
    bootstrap = cluster.bootstrap
    # the records are from 2023: retention.ms must not delete them before the test asks for it
    create_topic(bootstrap, TOPIC, partitions=2, config={"segment.bytes": "1024", "retention.ms": "-1"})
    produce_rounds(bootstrap, 0, 4)
    table = str(tmp_path / "archive")
    assert rows(read_archive_and_live(spark, table, bootstrap, TOPIC)) == expected({0: 20, 1: 20})  # no archive yet

    assert archive_run(spark, bootstrap, tmp_path) == 40
    produce_rounds(bootstrap, 4, 2)
    assert archive_run(spark, bootstrap, tmp_path) == 20  # only what is new since the first run
    archive = spark.read.format("delta").load(table)
    assert rows(archive) == expected({0: 30, 1: 30})
    assert {r["headers"][0]["key"] for r in archive.select("headers").collect()} == {"n"}

    produce_rounds(bootstrap, 6, 1)  # offsets 30-34: live only
    with Admin(bootstrap_servers=bootstrap) as admin:
        admin.alter_configs(TOPIC, {"retention.bytes": "1"})  # keep the active segment only
    log_starts = wait_for_retention(bootstrap)
    live = rows(spark.read.format("ember").option("bootstrap", bootstrap).option("topic", TOPIC).load())
    assert {p: min(o for q, o, _, _ in live if q == p) for p in PARTITIONS} == log_starts  # the oldest are gone

    union = read_archive_and_live(spark, table, bootstrap, TOPIC)
    assert rows(union) == expected({0: 35, 1: 35})  # each offset once: archive up to 29, live from 30

    assert archive_run(spark, bootstrap, tmp_path) == 10  # resumes at 30, past the deleted segments
    assert rows(spark.read.format("delta").load(table)) == expected({0: 35, 1: 35})
    assert rows(read_archive_and_live(spark, table, bootstrap, TOPIC)) == expected({0: 35, 1: 35})
