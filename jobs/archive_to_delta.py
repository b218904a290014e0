"""Archive a topic's committed records into Delta so history outlives retention, and read both as one.

    .venv/bin/spark-submit --properties-file conf/spark-defaults.conf jobs/archive_to_delta.py \
        --bootstrap 127.0.0.1:9092 --topic clicks --table data/archive/clicks \
        --checkpoint data/checkpoints/archive-clicks

Each run is an availableNow streaming query: it copies every record committed since the previous
run (the checkpoint holds where that run stopped) and ends, exactly-once, so running it from cron
keeps the archive complete as long as runs come more often than retention deletes segments. Rows
keep everything a record has: topic, partition, offset, timestamp, key, value, headers (bytes as
written).

:func:`read_archive_and_live` is the reading side: one batch DataFrame of archive + live log, each
offset exactly once, also after retention deleted the oldest live segments.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Mapping, Optional, Sequence

from _common import (
    add_source_args,
    job_session,
    progress,
    read_offsets,
    read_stream,
    resolve_offsets,
    run,
    source_options,
    write_delta_stream,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

ARCHIVE_COLUMNS = ("topic", "partition", "offset", "timestamp", "key", "value", "headers")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Copy a topic's new committed records into a Delta archive.")
    add_source_args(parser)
    parser.add_argument("--table", required=True, help="path of the Delta archive table")
    parser.add_argument("--checkpoint", required=True, help="checkpoint directory: where the previous run stopped")
    parser.add_argument("--max-records-per-trigger", type=int, help="split a large backlog into micro-batches")
    return parser.parse_args(argv)


def start_archive(spark: "SparkSession", args: argparse.Namespace) -> "StreamingQuery":
    """Start one incremental archive run (availableNow: it ends once it has caught up)."""
    from ember.sources import register

    register(spark)
    options = {**source_options(args), "startingOffsets": "earliest", "includeHeaders": "true"}
    if args.max_records_per_trigger:
        options["maxRecordsPerTrigger"] = str(args.max_records_per_trigger)
    frame = read_stream(spark, options).select(*ARCHIVE_COLUMNS)
    return write_delta_stream(frame, table=args.table, checkpoint=args.checkpoint, name=f"ember-archive-{args.topic}")


def archive_ends(archive: "DataFrame") -> dict[str, dict[str, int]]:
    """``{topic: {partition: last archived offset + 1}}``: where the live part of a union read starts."""
    from pyspark.sql import functions as F

    ends: dict[str, dict[str, int]] = {}
    for row in archive.groupBy("topic", "partition").agg(F.max("offset").alias("last")).collect():
        ends.setdefault(row["topic"], {})[str(row["partition"])] = row["last"] + 1
    return ends


def read_archive_and_live(spark: "SparkSession", table: str, bootstrap: str, topic: str, *,
                          storage_root: Optional[str] = None, fail_on_data_loss: bool = True,
                          security: Optional[Mapping[str, str]] = None) -> "DataFrame":
    """Archive rows of ``topic`` (comma list) plus the live log from the archive's end on, per partition.

    The archive is contiguous per partition (it is written in offset order from the log start), so
    ``offset <= max archived`` comes from Delta and ``offset > max archived`` from the brokers: no offset
    twice, none missing. The live part is pinned to the high watermarks at call time. Partitions the
    archive has never seen are read live from their log start. When retention deleted records the
    archive never got, the read fails (or, with ``fail_on_data_loss=False``, skips them), as the ember
    source does. ``security``: client properties such as ``security.protocol`` and ``ssl.*`` (what
    ``--command-config`` holds)."""
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    from ember.sources import register

    register(spark)
    topics = [name.strip() for name in topic.split(",") if name.strip()]
    archive = None
    if DeltaTable.isDeltaTable(spark, table):
        archive = spark.read.format("delta").load(table).where(F.col("topic").isin(topics)).select(*ARCHIVE_COLUMNS)
    options = {"bootstrap": bootstrap, "topic": ",".join(topics), "failOnDataLoss": str(fail_on_data_loss).lower(),
               **(security or {})}
    if storage_root:
        options["storageRoot"] = storage_root
    seam = json.dumps(archive_ends(archive)) if archive is not None else "earliest"
    start, end = resolve_offsets({**options, "startingOffsets": seam})
    live = read_offsets(spark, options, start, end).select(*ARCHIVE_COLUMNS)
    if start == end:  # nothing past the archive: do not plan a read of empty ranges
        live = spark.createDataFrame([], live.schema)
    return live if archive is None else archive.unionByName(live)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    spark = job_session("ember-archive-to-delta")
    query = start_archive(spark, args)
    with progress(spark, f"archive_to_delta: {args.topic} -> {args.table}"):
        query.awaitTermination()  # raises the query's failure: the exit code tells
    archived = sum(progress["numInputRows"] for progress in query.recentProgress)
    print(f"archive_to_delta: archived {archived} new records of {args.topic} into {args.table}")
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
