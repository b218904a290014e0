"""Choosing a partition for a record, exactly as Kafka's default partitioner does.

Keyed records go to ``toPositive(murmur2(key)) % num_partitions`` so a key lands on the same
partition whether a Kafka client or an ember client wrote it. Records without a key use the
*sticky* strategy: they all go to one partition until its batch is sent, then the next batch picks
a new partition, which gives large batches without skewing load over time.

:func:`partitions_for_keys` is the columnar twin for ``Producer.send_batch``: it hashes a whole
Arrow column with ``pyarrow.compute`` (grouped by key length) instead of a Python call per key.
"""
from __future__ import annotations

import random

import pyarrow as pa
import pyarrow.compute as pc

from ember.client._append import murmur2  # Kafka's Utils.murmur2, a signed 32-bit int (C, shared with send)

SEED = 0x9747B28C
M = 0x5BD1E995

__all__ = ["StickyPartitioner", "murmur2", "partition_for_key", "partitions_for_keys"]


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """Kafka's default partition for a keyed record."""
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


class StickyPartitioner:
    """The partition for records without a key, per topic; changes only when told a batch left."""

    def __init__(self) -> None:
        #: The current partition per topic (read by the producer's C send path, ember.client._append).
        self.current: dict[str, int] = {}

    def partition(self, topic: str, num_partitions: int) -> int:
        current = self.current.get(topic)
        if current is None or current >= num_partitions:
            current = self.current[topic] = random.randrange(num_partitions)
        return current

    def on_new_batch(self, topic: str, num_partitions: int, previous: int) -> None:
        """A batch for ``previous`` was sealed: move to another partition (if there is one)."""
        if num_partitions > 1 and self.current.get(topic) == previous:
            choice = random.randrange(num_partitions - 1)
            self.current[topic] = choice + (choice >= previous)


# -- columnar ---------------------------------------------------------------------------------

_U32 = pa.uint32()


def _u32(value: int) -> pa.Scalar:
    return pa.scalar(value, _U32)


_M, _SHIFT_24, _SHIFT_13, _SHIFT_15 = _u32(M), _u32(24), _u32(13), _u32(15)


def _words(fixed: pa.Array, width: int, value_type: pa.DataType) -> list[pa.Array]:
    """Split a fixed-width binary array (``width`` bytes per row) into per-position columns of
    ``value_type`` (uint32 words or uint8 bytes), without copying the data."""
    item = value_type.byte_width
    count = width // item
    data = fixed.buffers()[1]
    flat = pa.Array.from_buffers(value_type, (len(fixed) + fixed.offset) * count, [None, data])
    flat = flat.slice(fixed.offset * count, len(fixed) * count)
    lists = pa.FixedSizeListArray.from_arrays(flat, count)
    return [pc.list_element(lists, i) for i in range(count)]


def _murmur2_fixed(keys: pa.Array, length: int) -> pa.Array:
    """Vectorized murmur2 of keys that all have ``length`` bytes, as uint32."""
    h = pa.repeat(_u32(SEED ^ length), len(keys))
    n4 = length >> 2
    if n4:
        body = keys if length == 4 * n4 else pc.binary_slice(keys, 0, 4 * n4)
        for k in _words(body.cast(pa.binary(4 * n4)), 4 * n4, _U32):
            k = pc.multiply(k, _M)
            k = pc.bit_wise_xor(k, pc.shift_right(k, _SHIFT_24))
            h = pc.bit_wise_xor(pc.multiply(h, _M), pc.multiply(k, _M))
    tail = length & 3
    if tail:
        tail_bytes = _words(pc.binary_slice(keys, 4 * n4, length).cast(pa.binary(tail)), tail, pa.uint8())
        for i in reversed(range(tail)):
            h = pc.bit_wise_xor(h, pc.shift_left(tail_bytes[i].cast(_U32), _u32(8 * i)))
        h = pc.multiply(h, _M)
    h = pc.bit_wise_xor(h, pc.shift_right(h, _SHIFT_13))
    h = pc.multiply(h, _M)
    return pc.bit_wise_xor(h, pc.shift_right(h, _SHIFT_15))


def partitions_for_keys(keys: pa.Array, num_partitions: int) -> pa.Array:
    """Kafka's default partition of every key in ``keys`` (int32; null where the key is null).

    Rows are sorted by key length so that each length is one contiguous run hashed as
    fixed-width columns; the result is put back in row order with one permutation."""
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    if not pa.types.is_binary(keys.type):
        keys = keys.cast(pa.binary())
    lengths = pc.binary_length(keys)
    bounds = pc.min_max(lengths).as_py()
    if keys.null_count == 0 and bounds["min"] == bounds["max"] and len(keys):
        return _partitions(_murmur2_fixed(keys, bounds["min"]), num_partitions)
    order = pc.sort_indices(lengths).cast(pa.int64())  # nulls sort last
    sorted_keys, sorted_lengths = keys.take(order), lengths.take(order)
    runs = pc.run_end_encode(sorted_lengths)
    pieces, start = [], 0
    for end, length in zip(runs.run_ends.to_pylist(), runs.values.to_pylist()):
        if length is None:
            pieces.append(pa.nulls(end - start, _U32))
        else:
            pieces.append(_murmur2_fixed(sorted_keys.slice(start, end - start), length))
        start = end
    hashes = pa.concat_arrays(pieces) if pieces else pa.array([], _U32)
    return _partitions(hashes, num_partitions).take(pc.inverse_permutation(order))


def _partitions(hashes: pa.Array, num_partitions: int) -> pa.Array:
    positive = pc.bit_wise_and(hashes, _u32(0x7FFFFFFF))
    return pc.remainder(positive, _u32(num_partitions)).cast(pa.int32())
