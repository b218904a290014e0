"""Spark session set-up shared by jobs, tests and benchmarks: Delta's and the Kafka connector's
jars, the venv's Python.

The JVM jars are fetched once by set-up (:mod:`ember.jars`) into a local cache; every session
points ``spark.jars`` at the cached files, so nothing is downloaded per run.
"""
from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from ember.jars import DELTA, SPARK_KAFKA

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def configure_local_environment() -> None:
    """Spark's Python workers must run this interpreter, or they crash importing pyarrow; and a
    local session binds loopback only (Spark otherwise picks the first non-loopback interface)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def spark_session(app_name: str = "ember", master: str = "local[2]",
                  extra: dict[str, str] | None = None) -> SparkSession:
    """A local SparkSession with Delta and Spark's Kafka connector (``format("kafka")``, so Spark
    jobs written for Kafka read and write ember unchanged); ``ember.sources.register`` adds ember's."""
    configure_local_environment()
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.jars", ",".join(str(jar) for jar in [*DELTA.jars(), *SPARK_KAFKA.jars()]))
               .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
               .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "4")
               # Delta rebuilds table snapshots with 50 tasks by default: far too many on 2 cores.
               .config("spark.databricks.delta.snapshotPartitions", "2"))
    for key, value in (extra or {}).items():
        builder = builder.config(key, value)
    return builder.getOrCreate()

