"""Spark under faults: the ``stream_to_delta`` job (spark-submit, processingTime) streams a
replicated topic into Delta while a producer writes, the nemesis SIGKILLs brokers (one, the
controller, a leader, two at once), and the job's driver is SIGKILLed twice and restarted on the
same checkpoint. After a last availableNow run (in this process, same checkpoint) the Delta table
equals the topic: every (partition, offset) once, with the topic's value."""
from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .checker import bounded_operations
from .final_state import read_replicas, wait_settled
from .history import History
from .nemesis import ChaosBounds, Nemesis
from .runner import broker_config, create_topic
from .workload import ClientSettings, ProducerWorker

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "tests" / "jobs"), str(ROOT / "jobs")]
from job_helpers import spark_submit  # noqa: E402  (runs a job exactly as the docs say)

from stream_to_delta import parse_args, start_stream  # noqa: E402

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.timeout(900)]

TOPIC = "clicks"
PARTITIONS = 2
SESSION_TIMEOUT_MS = 3000
BROKER_KILLS = ("kill-broker", "kill-controller", "kill-leader", "kill-two")
DRIVER_KILLS = 2
WAIT_S = 240


def committed_batches(checkpoint: Path) -> set[int]:
    folder = checkpoint / "commits"
    return {int(f.name) for f in folder.iterdir() if f.name.isdigit()} if folder.is_dir() else set()


def wait_for_commit_after(driver: subprocess.Popen, checkpoint: Path, last: int, log: Path) -> int:
    """Until the driver commits a micro-batch after ``last`` (bounded; fails with its log)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        newer = [b for b in committed_batches(checkpoint) if b > last]
        if newer:
            return max(newer)
        if driver.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"stream_to_delta committed nothing after batch {last} (exit {driver.poll()}):\n"
                        + log.read_text(errors="replace")[-3000:])
        time.sleep(0.2)


def topic_rows(replicas: dict) -> list[tuple[int, int, bytes]]:
    """(partition, offset, value) of every record below the high watermark (one replica's files)."""
    rows = []
    for partition, by_broker in replicas.items():
        records = by_broker[min(by_broker)]
        rows += [(partition, offset, value) for offset, value in
                 zip(records.column("offset").to_pylist(), records.column("value").to_pylist())]
    return sorted(rows)


def test_delta_table_equals_the_topic_after_broker_and_driver_kills(make_cluster, spark, tmp_path) -> None:
    cluster = make_cluster(brokers=3, config=broker_config(SESSION_TIMEOUT_MS))
    create_topic(cluster.bootstrap, TOPIC, PARTITIONS)
    rng = random.Random(int(os.environ.get("CHAOS_SEED", "11")))
    settings = ClientSettings()
    history = History(settings.delivery_bound_s)
    producer = ProducerWorker(0, cluster.bootstrap, TOPIC, PARTITIONS, 200, history, settings, columnar=True, chunk=100)
    bounds = ChaosBounds(session_timeout_s=SESSION_TIMEOUT_MS / 1000)
    nemesis = Nemesis(cluster, TOPIC, PARTITIONS, history, rng, bounds, BROKER_KILLS)
    table, checkpoint, log = tmp_path / "table", tmp_path / "checkpoint", tmp_path / "spark-submit.log"
    job = ["--bootstrap", cluster.bootstrap, "--topic", TOPIC, "--table", str(table),
           "--checkpoint", str(checkpoint)]

    producer.start()
    nemesis.start()
    try:
        last = -1
        with open(log, "ab") as out:
            for _ in range(DRIVER_KILLS):
                driver = spark_submit("stream_to_delta.py", [*job, "--trigger", "processingTime", "--interval",
                                                             "1 second", "--max-records-per-trigger", "500"], out)
                try:
                    last = wait_for_commit_after(driver, checkpoint, last, log)
                    time.sleep(rng.uniform(0.0, 2.0))    # the kill lands anywhere in the next micro-batch
                finally:
                    with contextlib.suppress(ProcessLookupError):    # the driver may have failed and exited
                        os.killpg(driver.pid, signal.SIGKILL)
                    driver.wait(30)
    finally:
        nemesis.stop(4 * bounds.restart_s)
        producer.stop(settings.delivery_bound_s + settings.close_s)
    assert len(history.faults) >= 1 and producer.log.counts()["acked"] > 0
    high_watermarks = {p: d.high_watermark for p, d in
                       wait_settled(cluster.bootstrap, TOPIC, set(cluster.brokers), history, 120).items()}
    assert bounded_operations(history).ok, bounded_operations(history)

    # The same checkpoint once more, in this process: the interrupted batch again, then the rest.
    query = start_stream(spark, parse_args([*job, "--trigger", "availableNow"]))
    if not query.awaitTermination(WAIT_S):
        query.stop()
        pytest.fail(f"the availableNow run did not finish within {WAIT_S}s")
    assert query.exception() is None, query.exception()

    topic = topic_rows(read_replicas(cluster, TOPIC, high_watermarks))
    delta = sorted((r["partition"], r["offset"], bytes(r["value"]))
                   for r in spark.read.format("delta").load(str(table)).select("partition", "offset", "value").collect())
    assert len(topic) == sum(high_watermarks.values())
    assert delta == topic
