"""ember.sources — the Spark data source ``ember`` (batch and streaming reader and writer).

    from ember.sources import register
    register(spark)
    spark.readStream.format("ember").option("bootstrap", "host:port").option("topic", "clicks").load()

See docs/spark.md for options, columns and delivery guarantees.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def register(spark: "SparkSession") -> None:
    """Make ``format("ember")`` available in ``spark`` (once per session; idempotent)."""
    from ember.sources.source import EmberDataSource

    spark.dataSource.register(EmberDataSource)
