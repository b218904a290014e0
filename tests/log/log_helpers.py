"""Helpers shared by the ember.log tests (a unique module name: test folders share sys.path)."""
from __future__ import annotations

import pyarrow as pa

from ember.record import build_batch


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


def numbered(start: int, count: int, size: int = 20) -> list[bytes]:
    """Values that name their intended position, padded to ``size`` bytes."""
    return [f"r{i}".encode().ljust(size, b".") for i in range(start, start + count)]
