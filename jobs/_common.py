"""Pieces every job shares: source and decoding arguments, value decoding, offset-range resolution and
pinned batch reads, the exactly-once topic → Delta stream, the Spark session and error exits. Jobs
import this module; it is not a job itself."""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Iterator

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

VALUE_FORMATS = ("raw", "json")
COORDINATES = ("topic", "partition", "offset", "timestamp")
#: Client properties that configure security; a job passes them to the ember source and sink.
SECURITY_PREFIXES = ("security.", "ssl.", "sasl.")
DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
#: A job that works longer than this without printing says what it is doing (seconds).
PROGRESS_EVERY_S = 5.0
#: ... and while no Spark stage runs (a streaming query waiting for data), once a minute.
IDLE_PROGRESS_EVERY_S = 60.0

Offsets = dict[tuple[str, int], int]
"""Offsets per (topic, partition)."""


class JobError(RuntimeError):
    """A job cannot run as configured (the message says what to change)."""


def add_source_args(parser: argparse.ArgumentParser) -> None:
    """The options every job reads a topic with."""
    parser.add_argument("--bootstrap", required=True, help="HOST:PORT[,...] of the ember brokers")
    parser.add_argument("--topic", required=True, help="topic name(s), comma separated")
    parser.add_argument("--storage-root", help="broker data directory root readable here (direct segment reads)")
    parser.add_argument("--fail-on-data-loss", choices=("true", "false"), default="true",
                        help="fail (true) or skip with a warning (false) when retention deleted needed offsets")
    parser.add_argument("--command-config", default=os.environ.get("EMBER_CLIENT_CONFIG"), metavar="FILE",
                        help="client properties with Kafka's names (security.protocol, ssl.*, sasl.*), e.g. the "
                             "client.properties `ember cluster up --secure` prints; default $EMBER_CLIENT_CONFIG. "
                             "Secrets belong in this file, never on the command line")


def add_decoding_args(parser: argparse.ArgumentParser) -> None:
    """How record values become columns (shared so a replay decodes exactly as the stream did)."""
    parser.add_argument("--value-format", choices=VALUE_FORMATS, default="raw",
                        help="raw keeps value as binary; json parses it with --schema into columns")
    parser.add_argument("--schema", help="DDL schema of JSON values, e.g. 'user STRING, ts LONG'")


def check_decoding_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.value_format == "json" and not args.schema:
        parser.error("--value-format json needs --schema")


def source_options(args: argparse.Namespace) -> dict[str, str]:
    """Options of the ember source that come from :func:`add_source_args`."""
    options = {"bootstrap": args.bootstrap, "topic": args.topic, "failOnDataLoss": args.fail_on_data_loss,
               **security_options(args)}
    if args.storage_root:
        options["storageRoot"] = args.storage_root
    return options


def security_options(args: argparse.Namespace) -> dict[str, str]:
    """The security properties of ``--command-config`` as ember source/sink options (the source takes
    Kafka's client property names), checked here so a mistake stops the job before Spark starts."""
    from ember.errors import InvalidConfig
    from ember.security.client import ClientSecurity, options_from_properties
    from ember.wire.config_def import read_properties

    if not args.command_config:
        return {}
    path = Path(args.command_config)
    if not path.is_file():
        raise JobError(f"--command-config {path}: no such file (or unset $EMBER_CLIENT_CONFIG)")
    properties = {name: value for name, value in read_properties(path).items()
                  if name.lower().startswith(SECURITY_PREFIXES)}
    try:
        ClientSecurity.from_options(options_from_properties(properties, str(path)), "job")
    except InvalidConfig as exc:
        raise JobError(str(exc)) from None
    return properties


def partition_columns(text: str) -> list[str]:
    """``"a, b"`` → ``["a", "b"]`` (an empty string means an unpartitioned table)."""
    return [column.strip() for column in text.split(",") if column.strip()]


def parsed_value(args: argparse.Namespace) -> "Column":
    """The value parsed as JSON with ``--schema`` (a struct; null fields where a record does not parse)."""
    from pyspark.sql import functions as F

    return F.from_json(F.col("value").cast("string"), args.schema)


def decoded(frame: "DataFrame", args: argparse.Namespace) -> "DataFrame":
    """The record's coordinates and string key, then the value: binary (raw) or one column per JSON field."""
    from pyspark.sql import functions as F

    coordinates = [F.col(name) for name in COORDINATES] + [F.col("key").cast("string").alias("key")]
    if args.value_format == "json":
        return frame.select(*coordinates, parsed_value(args).alias("v")).select(*COORDINATES, "key", "v.*")
    return frame.select(*coordinates, F.col("value"))


def read_stream(spark: "SparkSession", options: dict[str, str]) -> "DataFrame":
    """A streaming DataFrame of the ember source with ``options``."""
    reader = spark.readStream.format("ember")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def write_delta_stream(frame: "DataFrame", *, table: str, checkpoint: str, name: str, trigger: str = "availableNow",
                       interval: str = "5 seconds", partition_by: Iterable[str] = ()) -> "StreamingQuery":
    """Start ``frame`` → Delta. Exactly-once: the source's offsets live in ``checkpoint`` and Delta's sink
    commits each micro-batch idempotently (query id + batch id in its log), so a restart never duplicates."""
    writer = (frame.writeStream.format("delta").outputMode("append")
              .option("checkpointLocation", checkpoint).queryName(name))
    columns = list(partition_by)
    if columns:
        writer = writer.partitionBy(*columns)
    writer = writer.trigger(availableNow=True) if trigger == "availableNow" else writer.trigger(processingTime=interval)
    return writer.start(table)


def resolve_offsets(options: dict[str, str], *, to_timestamp: int | None = None) -> tuple[Offsets, Offsets]:
    """``[start, end)`` of every partition a batch read with these ember options would read, asked of the
    brokers once, so a job can print (and pin) the exact range it reads. ``to_timestamp`` ends each
    partition before its first record at or after it. With ``failOnDataLoss=false`` the start is moved
    past what retention has deleted, so the range holds only readable offsets."""
    from ember.sources.metadata import ClusterView, ending_offsets, starting_offsets
    from ember.sources.options import reader_options

    reader = reader_options(options, streaming=False)
    with ClusterView(reader) as cluster:
        partitions = sorted(cluster.replicas())
        start = starting_offsets(cluster, reader, partitions)
        if to_timestamp is None:
            end = ending_offsets(cluster, reader, partitions)
        else:
            end = cluster.offsets_for_time(partitions, to_timestamp)
        log_start = cluster.earliest(partitions)
    reversed_ = {tp: (start[tp], end[tp]) for tp in partitions if start[tp] > end[tp]}
    if reversed_:
        raise JobError("offset range starts after its end (ends are capped at the high watermark): "
                       + ", ".join(f"{t}/{p} from {s} to {e}" for (t, p), (s, e) in reversed_.items()))
    if not reader.fail_on_data_loss:
        start = {tp: min(max(offset, log_start[tp]), end[tp]) for tp, offset in start.items()}
    return start, end


def read_offsets(spark: "SparkSession", options: dict[str, str], start: Offsets, end: Offsets) -> "DataFrame":
    """A batch read of exactly ``[start, end)`` per partition (headers included) with the ember ``options``."""
    from ember.sources.offsets import offsets_to_json

    reader = spark.read.format("ember")
    pinned = {**options, "includeHeaders": "true", "startingOffsets": json.dumps(offsets_to_json(start)),
              "endingOffsets": json.dumps(offsets_to_json(end))}
    for key, value in pinned.items():
        reader = reader.option(key, value)
    return reader.load()


def job_session(app_name: str) -> "SparkSession":
    """The job's SparkSession (the job registers ``ember`` itself, as its functions also run in tests).

    Under spark-submit the submit command configures Spark (``--properties-file conf/spark-defaults.conf``,
    ``--master``...), so nothing is overridden here; run with plain ``python`` the job gets
    :func:`ember.spark_env.spark_session` (local mode, Delta jars, the venv's Python)."""
    if "PYSPARK_GATEWAY_PORT" in os.environ:  # set by spark-submit for the driver it launches
        from pyspark.sql import SparkSession

        spark = SparkSession.builder.appName(app_name).getOrCreate()
        if DELTA_EXTENSION not in spark.conf.get("spark.sql.extensions", ""):
            raise JobError("Delta is not configured: run spark-submit from the repository root with "
                           "--properties-file conf/spark-defaults.conf")
    else:
        from ember.spark_env import spark_session

        spark = spark_session(app_name)
    spark.sparkContext.setLogLevel("WARN")
    return spark


@contextlib.contextmanager
def progress(spark: "SparkSession", label: str, every_s: float = PROGRESS_EVERY_S,
             idle_every_s: float = IDLE_PROGRESS_EVERY_S) -> Iterator[None]:
    """Print what Spark is doing every ``every_s`` while the block runs, and every ``idle_every_s``
    while no Spark stage runs (a job's first write of a Delta table takes tens of seconds; nobody
    should stare at a silent terminal that long, nor at a line every 5 s from an idle stream)."""
    print(f"{label}: running (a line every {every_s:g} s until it is done)", flush=True)
    started, done = time.monotonic(), threading.Event()

    def report() -> None:
        tracker = spark.sparkContext.statusTracker()
        said_idle = 0.0
        while not done.wait(every_s):
            stages = [info for info in (tracker.getStageInfo(s) for s in tracker.getActiveStageIds()) if info]
            now = time.monotonic()
            if not stages and now - said_idle < idle_every_s:
                continue    # a streaming query between batches: a line a minute, not every few seconds
            said_idle = now if not stages else 0.0
            work = ", ".join(f"stage {st.stageId} {st.name.split(' at ')[0]}: {st.numCompletedTasks}/{st.numTasks} tasks"
                             for st in stages) or "no Spark stage running (planning, committing or waiting for data)"
            print(f"{label}: {now - started:.0f} s, {work}", flush=True)

    reporter = threading.Thread(target=report, name="job-progress", daemon=True)
    reporter.start()
    try:
        yield
    finally:
        done.set()
        reporter.join(every_s)


def run(main: Callable[[], int]) -> int:
    """Run a job's ``main``: a configuration mistake exits 2 with its message instead of a traceback."""
    from ember.sources.options import OptionError

    try:
        return main()
    except (JobError, OptionError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
