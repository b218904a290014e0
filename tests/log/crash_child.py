"""Child process of the crash test: appends forever, reporting each returned offset range.

Usage: crash_child.py PARTITION_DIR ROUND. Each append of ``n`` records carries keys
``ROUND:i:j``; a line ``first last ROUND i n`` goes to stdout once ``append_as_leader`` returned.
"""
from __future__ import annotations

import random
import sys

import pyarrow as pa

from ember.log import Log, LogConfig
from ember.record import build_batch

CONFIG = LogConfig.from_properties({"segment.bytes": 64 * 1024, "index.interval.bytes": 1024})


def record_value(key: str) -> bytes:
    """A value the parent can recompute from the key alone."""
    return key.encode() * (1 + sum(map(ord, key)) % 13)


def main(directory: str, round_no: int) -> None:
    rng = random.Random(round_no)
    log = Log.open(directory, CONFIG)
    for i in range(1_000_000):  # bounded; the parent kills us long before
        n = rng.randint(1, 40)
        keys = [f"{round_no}:{i}:{j}" for j in range(n)]
        raw = build_batch(pa.table({"key": [k.encode() for k in keys],
                                    "value": [record_value(k) for k in keys]}))
        result = log.append_as_leader(raw, leader_epoch=round_no)
        sys.stdout.write(f"{result.first_offset} {result.last_offset} {round_no} {i} {n}\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
