"""Stream ember topics into a Delta table, exactly-once.

    spark-submit --properties-file conf/spark-defaults.conf jobs/stream_to_delta.py \
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
from typing import Sequence

TRIGGERS = ("availableNow", "processingTime")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Stream ember topics into a Delta table (exactly-once).")
    parser.add_argument("--bootstrap", required=True, help="HOST:PORT[,...] of the ember brokers")
    parser.add_argument("--topic", required=True, help="topic name(s), comma separated")
    parser.add_argument("--table", required=True, help="path of the Delta table")
    parser.add_argument("--checkpoint", required=True, help="checkpoint directory (offsets live here)")
    parser.add_argument("--trigger", choices=TRIGGERS, default="processingTime")
    parser.add_argument("--interval", default="5 seconds", help="processingTime trigger interval")
    parser.add_argument("--value-format", choices=("raw", "json"), default="raw",
                        help="raw keeps value as binary; json parses it with --schema into columns")
    parser.add_argument("--schema", help="DDL schema of JSON values, e.g. 'user STRING, ts LONG'")
    parser.add_argument("--partition-by", default="", help="comma-separated partition columns of the table")
    parser.add_argument("--starting-offsets", default="earliest", help="earliest, latest or JSON per partition")
    parser.add_argument("--max-records-per-trigger", type=int)
    parser.add_argument("--storage-root", help="broker data directory root readable here (direct segment reads)")
    args = parser.parse_args(argv)
    if args.value_format == "json" and not args.schema:
        parser.error("--value-format json needs --schema")
    return args


def source_options(args: argparse.Namespace) -> dict[str, str]:
    options = {"bootstrap": args.bootstrap, "topic": args.topic, "startingOffsets": args.starting_offsets}
    if args.max_records_per_trigger:
        options["maxRecordsPerTrigger"] = str(args.max_records_per_trigger)
    if args.storage_root:
        options["storageRoot"] = args.storage_root
    return options


def decoded(frame, args: argparse.Namespace):
    """Keep the record's coordinates; decode the value as asked."""
    from pyspark.sql import functions as F

    coordinates = [F.col("topic"), F.col("partition"), F.col("offset"), F.col("timestamp"),
                   F.col("key").cast("string").alias("key")]
    if args.value_format == "json":
        parsed = F.from_json(F.col("value").cast("string"), args.schema).alias("v")
        return frame.select(*coordinates, parsed).select(*[c for c in ("topic", "partition", "offset", "timestamp", "key")], "v.*")
    return frame.select(*coordinates, F.col("value"))


def start_stream(spark, args: argparse.Namespace):
    """Start the topic → Delta query and return it (the caller awaits or stops it)."""
    from ember.sources import register

    register(spark)
    reader = spark.readStream.format("ember")
    for key, value in source_options(args).items():
        reader = reader.option(key, value)
    writer = (decoded(reader.load(), args).writeStream.format("delta").outputMode("append")
              .option("checkpointLocation", args.checkpoint).queryName(f"ember-to-delta-{args.topic}"))
    if args.partition_by:
        writer = writer.partitionBy(*[c.strip() for c in args.partition_by.split(",") if c.strip()])
    if args.trigger == "availableNow":
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=args.interval)
    return writer.start(args.table)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    from ember.spark_env import spark_session

    spark = spark_session("ember-stream-to-delta")
    query = start_stream(spark, args)
    query.awaitTermination()
    progress = query.lastProgress or {}
    print(f"stream_to_delta: stopped after batch {progress.get('batchId', '-')}; table {args.table}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
