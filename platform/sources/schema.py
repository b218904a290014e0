"""Spark-facing columns of the ``ember`` source and the Arrow conversion from decoded log batches.

Log readers return ``ember.record.batch.DECODED_SCHEMA`` (offset, timestamp ms, key, value, headers);
Spark wants its own Arrow layout (timestamps in microseconds, UTC; list items named ``element``;
every field nullable). The conversion is columnar: a few Arrow casts per batch, no Python per row.
"""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, LongType, StringType, StructField, StructType, TimestampType

HEADERS_TYPE = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))

_BASE_FIELDS = [
    StructField("key", BinaryType()),
    StructField("value", BinaryType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
    StructField("timestamp", TimestampType()),
]


def spark_schema(include_headers: bool) -> StructType:
    """The source's columns, Kafka connector layout (``headers`` only with includeHeaders)."""
    fields = list(_BASE_FIELDS)
    if include_headers:
        fields.append(StructField("headers", HEADERS_TYPE))
    return StructType(fields)


def arrow_schema(include_headers: bool) -> pa.Schema:
    """The exact Arrow schema Spark checks ``read()`` batches against."""
    return to_arrow_schema(spark_schema(include_headers), timezone="UTC")


def to_spark_batch(decoded: pa.RecordBatch, topic: str, partition: int, target: pa.Schema) -> pa.RecordBatch:
    """One decoded log batch as a batch of the source's columns."""
    n = decoded.num_rows
    columns = {
        "key": decoded.column("key"),
        "value": decoded.column("value"),
        "topic": pa.repeat(pa.scalar(topic, pa.string()), n),
        "partition": pa.repeat(pa.scalar(partition, pa.int32()), n),
        "offset": decoded.column("offset"),
        "timestamp": pc.multiply(decoded.column("timestamp"), 1000).cast(pa.timestamp("us", tz="UTC")),
    }
    if "headers" in target.names:
        columns["headers"] = decoded.column("headers").cast(target.field("headers").type)
    return pa.RecordBatch.from_arrays([columns[name] for name in target.names], schema=target)
