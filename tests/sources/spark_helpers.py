"""Data helpers of the ember source tests: create topics, produce known records, compare rows."""
from __future__ import annotations

import pyarrow as pa

from ember.client import Admin, Producer


def records(partition: int, count: int, *, first: int = 0, base_ms: int = 1_700_000_000_000) -> pa.Table:
    """``count`` distinct records for ``partition``: key k<p>-<i>, value v<p>-<i>, timestamp base+i s,
    one header per record."""
    ids = range(first, first + count)
    headers = pa.list_(pa.struct([pa.field("key", pa.string(), nullable=False), pa.field("value", pa.binary())]))
    return pa.table({
        "key": pa.array([f"k{partition}-{i}".encode() for i in ids], pa.binary()),
        "value": pa.array([f"v{partition}-{i}".encode() for i in ids], pa.binary()),
        "timestamp": pa.array([base_ms + 1000 * i for i in ids], pa.int64()),
        "headers": pa.array([[{"key": "n", "value": str(i).encode()}] for i in ids], headers),
    })


def create_topic(bootstrap: str, topic: str, partitions: int, replication_factor: int = 1,
                 config: dict[str, str] | None = None) -> None:
    admin = Admin(bootstrap_servers=bootstrap)
    try:
        admin.create_topic(topic, partitions=partitions, replication_factor=replication_factor, config=config)
    finally:
        admin.close()


def produce(bootstrap: str, topic: str, per_partition: dict[int, int], *, first: int = 0) -> None:
    """Append ``per_partition[p]`` records (see :func:`records`) to each partition, acks=all."""
    with Producer(bootstrap_servers=bootstrap, acks="all") as producer:
        futures = [producer.send_batch(topic, records(p, n, first=first), partition=p)
                   for p, n in per_partition.items() if n]
        producer.flush()
        for future in futures:
            future.result(timeout=30)


def rows(df) -> list[tuple]:
    """A DataFrame of the source's columns as sorted (partition, offset, key, value) tuples."""
    return sorted((r["partition"], r["offset"], bytes(r["key"]) if r["key"] is not None else None, bytes(r["value"]))
                  for r in df.select("partition", "offset", "key", "value").collect())


def expected(per_partition: dict[int, int], *, first: int = 0) -> list[tuple]:
    """What :func:`rows` returns for records produced with :func:`produce` (record i at offset i)."""
    return sorted((p, i, f"k{p}-{i}".encode(), f"v{p}-{i}".encode())
                  for p, n in per_partition.items() for i in range(first, first + n))

