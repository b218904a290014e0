"""The Arrow columns of a batch: what producers give (RECORD_SCHEMA) and what readers get (DECODED_SCHEMA)."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

HEADERS_TYPE = pa.list_(pa.struct([pa.field("key", pa.string(), nullable=False),
                                   pa.field("value", pa.binary())]))
RECORD_SCHEMA = pa.schema([
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("timestamp", pa.int64(), nullable=False),
    pa.field("headers", HEADERS_TYPE),
])
"""Columns of a batch payload."""

DECODED_SCHEMA = pa.schema([pa.field("offset", pa.int64(), nullable=False),
                            RECORD_SCHEMA.field("timestamp"), RECORD_SCHEMA.field("key"),
                            RECORD_SCHEMA.field("value"), RECORD_SCHEMA.field("headers")])
"""Columns readers get back: the payload plus each record's offset."""

_arange = pa.array([0], pa.int64())  # 0, 1, 2, ... grown on demand; immutable, so thread-safe


def record_offsets(base_offset: int, n: int) -> pa.Array:
    """base_offset + [0, n): one vectorized add over a cached range (pass pa scalars: pyarrow's
    inference of a Python int costs ten times the add)."""
    global _arange
    while len(_arange) < n:
        _arange = pa.concat_arrays([_arange, pc.add(_arange, pa.scalar(len(_arange), pa.int64()))])
    return pc.add(_arange.slice(0, n), pa.scalar(base_offset, pa.int64()))
