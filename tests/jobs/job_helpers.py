"""Helpers of the job tests: JSON records, spark-submit runs, what a Delta table holds."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import IO

import pyarrow as pa

from ember.client import Producer

ROOT = Path(__file__).resolve().parents[2]
BASE_MS = 1_700_000_000_000
SCHEMA = "id INT, page STRING"


def produce_json(bootstrap: str, topic: str, per_partition: dict[int, int]) -> None:
    """``per_partition[p]`` records to partition p: record i has key u<i % 3>, value
    {"id": i, "page": "/p<p>/<i>", "extra": true}, timestamp BASE_MS + i s (offsets start at 0)."""
    with Producer(bootstrap_servers=bootstrap, acks="all") as producer:
        futures = []
        for partition, count in per_partition.items():
            table = pa.table({
                "key": pa.array([f"u{i % 3}".encode() for i in range(count)], pa.binary()),
                "value": pa.array([json.dumps({"id": i, "page": f"/p{partition}/{i}", "extra": True}).encode()
                                   for i in range(count)], pa.binary()),
                "timestamp": pa.array([BASE_MS + 1000 * i for i in range(count)], pa.int64())})
            futures.append(producer.send_batch(topic, table, partition=partition))
        for future in futures:
            future.result(timeout=30)


def decoded_rows(spark, table: str) -> list[tuple]:
    """(partition, offset, key, id, page) rows of a Delta table written with --value-format json, sorted."""
    return sorted(tuple(r) for r in spark.read.format("delta").load(table)
                  .select("partition", "offset", "key", "id", "page").collect())


def expected_decoded(ranges: dict[int, range]) -> list[tuple]:
    """What :func:`decoded_rows` holds for the :func:`produce_json` records of ``ranges`` (offset = id)."""
    return sorted((p, i, f"u{i % 3}", i, f"/p{p}/{i}") for p, offsets in ranges.items() for i in offsets)


def spark_submit(job: str, args: list[str], log: IO[bytes]) -> subprocess.Popen:
    """Start ``jobs/<job>`` under spark-submit exactly as the docs say, in its own process group."""
    command = [str(ROOT / ".venv" / "bin" / "spark-submit"), "--properties-file", "conf/spark-defaults.conf",
               f"jobs/{job}", *args]
    return subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True)
