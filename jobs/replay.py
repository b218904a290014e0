"""Reprocess a topic between two offsets or timestamps into a Delta table or another topic.

The "fix the parser, then consume again" job: the log still holds the raw records, so a corrected
schema (or a corrected downstream table) is one replay away.

    .venv/bin/spark-submit --properties-file conf/spark-defaults.conf jobs/replay.py \
        --bootstrap 127.0.0.1:9092 --topic clicks --from-offsets earliest --to-offsets latest \
        --value-format json --schema 'user STRING, page STRING, ts LONG' \
        --table data/delta/clicks-fixed --mode overwrite

The range is ``[from, to)`` per partition, resolved once on the driver and printed; ``to`` is capped
at the high watermark (only committed records are read). ``--from-timestamp``/``--to-timestamp``
(ms since the epoch) mean the first offset whose timestamp is >= the value, as Kafka's
``offsetsForTimes``. A replay into Delta is one atomic Delta commit; a replay into a topic goes
through the ember sink, which is at-least-once (a retried Spark task sends its rows again).
"""
from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Sequence

from _common import (
    Offsets,
    add_decoding_args,
    add_source_args,
    check_decoding_args,
    decoded,
    job_session,
    parsed_value,
    partition_columns,
    progress,
    read_offsets,
    resolve_offsets,
    run,
    security_options,
    source_options,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Replay a topic's offset or time range into Delta or a topic.")
    add_source_args(parser)
    start = parser.add_mutually_exclusive_group()
    start.add_argument("--from-offsets", default="earliest", help="earliest, latest or JSON {topic: {partition: offset}}")
    start.add_argument("--from-timestamp", type=int, help="ms since the epoch: first offset with timestamp >= it")
    end = parser.add_mutually_exclusive_group()
    end.add_argument("--to-offsets", default="latest", help="latest or JSON {topic: {partition: offset}} (exclusive)")
    end.add_argument("--to-timestamp", type=int, help="ms since the epoch: stop before the first offset with timestamp >= it")
    sink = parser.add_mutually_exclusive_group(required=True)
    sink.add_argument("--table", help="path of the Delta table to write")
    sink.add_argument("--to-topic", help="topic to write the records to (key, value, headers)")
    parser.add_argument("--mode", choices=("append", "overwrite"), default="append",
                        help="Delta write mode; overwrite also replaces the table's schema")
    parser.add_argument("--partition-by", default="", help="comma-separated partition columns of the table")
    add_decoding_args(parser)
    args = parser.parse_args(argv)
    check_decoding_args(parser, args)
    if args.to_topic and (args.partition_by or args.mode != "append"):
        parser.error("--mode and --partition-by apply to --table only (topics are append-only)")
    return args


def resolve_range(args: argparse.Namespace) -> tuple[Offsets, Offsets]:
    """The ``[from, to)`` offsets of every partition the arguments select."""
    options = {**source_options(args), "startingOffsets": args.from_offsets, "endingOffsets": args.to_offsets}
    if args.from_timestamp is not None:
        options["startingTimestamp"] = str(args.from_timestamp)
    return resolve_offsets(options, to_timestamp=args.to_timestamp)


def for_topic(frame: "DataFrame", args: argparse.Namespace) -> "DataFrame":
    """Records for the ember sink: key and headers as read; value as read (raw) or re-encoded with the schema (json)."""
    from pyspark.sql import functions as F

    value = F.to_json(parsed_value(args)) if args.value_format == "json" else F.col("value")
    return frame.select("key", value.alias("value"), "headers")


def write(frame: "DataFrame", args: argparse.Namespace) -> None:
    if args.to_topic:
        (for_topic(frame, args).write.format("ember").mode("append")
         .options(bootstrap=args.bootstrap, topic=args.to_topic, **security_options(args)).save())
        return
    writer = decoded(frame, args).write.format("delta").mode(args.mode)
    if args.mode == "overwrite":
        writer = writer.option("overwriteSchema", "true")  # a fixed parser may change the columns
    columns = partition_columns(args.partition_by)
    if columns:
        writer = writer.partitionBy(*columns)
    writer.save(args.table)


def replay(spark: "SparkSession", args: argparse.Namespace) -> int:
    """Run the replay; returns the number of records replayed (offsets are contiguous per partition)."""
    from ember.sources import register

    register(spark)
    start, end = resolve_range(args)
    for (topic, partition) in sorted(start):
        print(f"replay: {topic}/{partition} [{start[(topic, partition)]}, {end[(topic, partition)]})")
    records = sum(end[tp] - start[tp] for tp in start)
    if records:
        with progress(spark, f"replay: writing {records} records into {args.table or 'topic ' + args.to_topic}"):
            write(read_offsets(spark, source_options(args), start, end), args)
    return records


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    records = replay(job_session("ember-replay"), args)
    print(f"replay: {records} records from {args.topic} into {args.table or 'topic ' + args.to_topic}")
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
