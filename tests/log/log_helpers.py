"""Helpers shared by the ember.log tests (a unique module name: test folders share sys.path)."""
from __future__ import annotations

import pyarrow as pa

from ember.record import build_batch, kafka_v2
from ember.record.header import KAFKA_MAGIC, NO_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE, BatchHeader
from ember.record.schema import HEADERS_TYPE, RECORD_SCHEMA


class FakeClock:
    """A settable millisecond clock so time-based behaviour needs no sleeping."""

    def __init__(self, now_ms: int = 1_700_000_000_000) -> None:
        self.now = now_ms

    def __call__(self) -> int:
        return self.now


def values_batch(values: list[bytes], *, timestamp: int = 1_000, **kw) -> bytes:
    """One raw batch whose records carry ``values`` (key = value, fixed timestamp)."""
    n = len(values)
    return build_batch(pa.table({"key": pa.array(values, pa.binary()),
                                 "value": pa.array(values, pa.binary()),
                                 "timestamp": pa.array([timestamp] * n, pa.int64())}), **kw)


def table_batch(records: pa.Table, *, timestamp: int = 1_000, **kw) -> bytes:
    """One ember batch of ``records`` (columns key and value) at a fixed timestamp."""
    return build_batch(records.append_column("timestamp", pa.array([timestamp] * records.num_rows, pa.int64())), **kw)


def kafka_batch(records: pa.Table, *, timestamp: int = 1_000, producer_id: int = NO_PRODUCER_ID,
                producer_epoch: int = NO_EPOCH, base_sequence: int = NO_SEQUENCE) -> bytes:
    """One Kafka RecordBatch v2 of ``records`` (columns key and value), as a Kafka producer sends it."""
    n = records.num_rows
    columns = pa.RecordBatch.from_arrays(
        [records.column("key").combine_chunks(), records.column("value").combine_chunks(),
         pa.array([timestamp] * n, pa.int64()), pa.nulls(n, HEADERS_TYPE)], schema=RECORD_SCHEMA)
    header = BatchHeader(0, 0, NO_EPOCH, KAFKA_MAGIC, 0, 0, 0, 0, 0, producer_id, producer_epoch, base_sequence, 0)
    return kafka_v2.encode_batch(header, columns, kafka_v2.NONE)


def numbered(start: int, count: int, size: int = 20) -> list[bytes]:
    """Values that name their intended position, padded to ``size`` bytes."""
    return [f"r{i}".encode().ljust(size, b".") for i in range(start, start + count)]
