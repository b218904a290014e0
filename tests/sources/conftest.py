"""The Spark session fixture for the ember source tests: one local session per test run."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def spark():
    """The one SparkSession of the run (local[2], 2 shuffle partitions), with ``ember`` registered."""
    from ember.sources import register
    from ember.spark_env import spark_session

    session = spark_session("ember-sources-tests", extra={"spark.sql.shuffle.partitions": "2",
                                                          "spark.default.parallelism": "2"})
    register(session)
    yield session
    session.stop()
