"""The ember sink stays exactly-once when the whole Spark driver dies: a topic A -> topic B query runs
in its own Python process (its own JVM), is SIGKILLed after a committed micro-batch while more
remain, and is restarted on the same checkpoint; B then holds every record of A exactly once, in
A's order per partition."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from spark_helpers import create_topic, produce
from test_sink_exactly_once import stored_partitions

pytestmark = pytest.mark.spark

PER_PARTITION = {0: 100, 1: 100}
MAX_PER_TRIGGER = 20      # 200 records: about 10 micro-batches
WAIT_S = 180

# The driver: topic A -> topic B, each row to the partition it came from (so B's order per partition
# is A's), exactly-once (the default) with acks=all.
DRIVER = '''
import sys

from ember.sources import register
from ember.spark_env import spark_session

bootstrap, source, sink, checkpoint, trigger, max_per_trigger = sys.argv[1:]
spark = spark_session("ember-sink-driver-kill", extra={"spark.sql.shuffle.partitions": "2",
                                                       "spark.default.parallelism": "2"})
register(spark)
writer = (spark.readStream.format("ember").option("bootstrap", bootstrap).option("topic", source)
          .option("startingOffsets", "earliest").option("maxRecordsPerTrigger", max_per_trigger).load()
          .select("key", "value", "partition")
          .writeStream.format("ember").option("bootstrap", bootstrap).option("topic", sink)
          .option("acks", "all").option("checkpointLocation", checkpoint))
writer = writer.trigger(availableNow=True) if trigger == "availableNow" else writer.trigger(processingTime="1 second")
query = writer.start()
query.awaitTermination()
if query.exception() is not None:
    raise SystemExit(f"query failed: {query.exception()}")
print("DRIVER DONE", flush=True)
'''


def start_driver(script: Path, args: list[str], log) -> subprocess.Popen:
    """The driver in its own process group (the Python driver and its JVM die together)."""
    return subprocess.Popen([sys.executable, str(script), *args], stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)


def batch_ids(folder: Path) -> set[int]:
    return {int(f.name) for f in folder.iterdir() if f.name.isdigit()} if folder.is_dir() else set()


def wait_mid_stream(process: subprocess.Popen, checkpoint: Path, log: Path) -> int:
    """Until a micro-batch has committed and the next one is planned (so more remain); returns the
    last committed batch id. Bounded; fails with the driver's log."""
    deadline = time.monotonic() + WAIT_S
    while True:
        commits = batch_ids(checkpoint / "commits")
        if commits and max(commits) + 1 in batch_ids(checkpoint / "offsets"):
            return max(commits)
        if process.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"the driver never committed a micro-batch (exit {process.poll()}):\n"
                        + log.read_text(errors="replace")[-3000:])
        time.sleep(0.1)


def test_killed_driver_restarts_exactly_once(shared_cluster, topic_name, tmp_path) -> None:
    bootstrap = shared_cluster.bootstrap
    source, sink = f"{topic_name}-a", f"{topic_name}-b"
    create_topic(bootstrap, source, partitions=2)
    create_topic(bootstrap, sink, partitions=2)
    produce(bootstrap, source, PER_PARTITION)
    script = tmp_path / "sink_driver.py"
    script.write_text(DRIVER)
    checkpoint = tmp_path / "checkpoint"
    args = [bootstrap, source, sink, str(checkpoint)]
    log = tmp_path / "driver.log"

    with open(log, "wb") as out:
        process = start_driver(script, [*args, "processingTime", str(MAX_PER_TRIGGER)], out)
        try:
            wait_mid_stream(process, checkpoint, log)
        finally:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(30)
    assert process.returncode == -signal.SIGKILL
    committed = max(batch_ids(checkpoint / "commits"))
    written = sum(len(v) for v in stored_partitions(bootstrap, sink, 2).values())
    assert MAX_PER_TRIGGER <= written < sum(PER_PARTITION.values()), "the kill must land mid-way"

    with open(log, "ab") as out:   # same checkpoint: re-runs the interrupted batch, then the rest
        process = start_driver(script, [*args, "availableNow", str(MAX_PER_TRIGGER)], out)
        try:
            process.wait(WAIT_S)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(30)
    assert process.returncode == 0, log.read_text(errors="replace")[-3000:]
    assert max(batch_ids(checkpoint / "commits")) > committed

    stored = stored_partitions(bootstrap, sink, 2)
    wanted = {p: [f"v{p}-{i}".encode() for i in range(n)] for p, n in PER_PARTITION.items()}
    assert sorted(v for p in stored for v in stored[p]) == sorted(v for p in wanted for v in wanted[p])
    assert stored == wanted   # and A's order within each partition
