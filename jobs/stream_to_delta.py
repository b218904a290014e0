"""Stream ember topics into a Delta table, exactly-once.

    .venv/bin/spark-submit --properties-file conf/spark-defaults.conf jobs/stream_to_delta.py \
        --bootstrap 127.0.0.1:9092 --topic clicks --table data/delta/clicks \
        --checkpoint data/checkpoints/clicks --value-format json \
        --schema 'user STRING, page STRING, action STRING, ts LONG' --trigger availableNow

Exactly-once: the ember source's offsets live in the query's checkpoint and the Delta sink commits
each micro-batch idempotently (Delta records the query id and batch id in its transaction log), so
a query killed at any point and restarted with the same checkpoint writes every record once.
"""
from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Sequence

from _common import (
    add_decoding_args,
    add_source_args,
    check_decoding_args,
    decoded,
    job_session,
    partition_columns,
    progress,
    read_stream,
    run,
    write_delta_stream,
)
from _common import source_options as common_source_options

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery

TRIGGERS = ("availableNow", "processingTime")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Stream ember topics into a Delta table (exactly-once).")
    add_source_args(parser)
    parser.add_argument("--table", required=True, help="path of the Delta table")
    parser.add_argument("--checkpoint", required=True, help="checkpoint directory (offsets live here)")
    parser.add_argument("--trigger", choices=TRIGGERS, default="processingTime")
    parser.add_argument("--interval", default="5 seconds", help="processingTime trigger interval")
    add_decoding_args(parser)
    parser.add_argument("--partition-by", default="", help="comma-separated partition columns of the table")
    parser.add_argument("--starting-offsets", default="earliest",
                        help="earliest, latest or JSON per partition (a new checkpoint only)")
    parser.add_argument("--starting-timestamp", type=int, help="ms since the epoch; wins over --starting-offsets")
    parser.add_argument("--max-records-per-trigger", type=int)
    args = parser.parse_args(argv)
    check_decoding_args(parser, args)
    return args


def source_options(args: argparse.Namespace) -> dict[str, str]:
    options = {**common_source_options(args), "startingOffsets": args.starting_offsets}
    if args.starting_timestamp is not None:
        options["startingTimestamp"] = str(args.starting_timestamp)
    if args.max_records_per_trigger:
        options["maxRecordsPerTrigger"] = str(args.max_records_per_trigger)
    return options


def start_stream(spark: "SparkSession", args: argparse.Namespace) -> "StreamingQuery":
    """Start the topic → Delta query and return it (the caller awaits or stops it)."""
    from ember.sources import register

    register(spark)
    frame = decoded(read_stream(spark, source_options(args)), args)
    return write_delta_stream(frame, table=args.table, checkpoint=args.checkpoint,
                              name=f"ember-to-delta-{args.topic}", trigger=args.trigger,
                              interval=args.interval, partition_by=partition_columns(args.partition_by))


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    spark = job_session("ember-stream-to-delta")
    query = start_stream(spark, args)
    with progress(spark, f"stream_to_delta: {args.topic} -> {args.table}"):
        query.awaitTermination()  # raises the query's failure: the exit code tells
    last = query.lastProgress or {}
    print(f"stream_to_delta: stopped after batch {last.get('batchId', '-')}; table {args.table}")
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
