"""Index lookups against a linear scan over random data, and their persistence."""
from __future__ import annotations

import random

import pyarrow as pa
import pytest

from ember.log.index import OffsetIndex, TimeIndex
from ember.record import build_batch


def test_offset_index_matches_linear_scan(tmp_path):
    rng = random.Random(1)
    index = OffsetIndex(tmp_path / "x.index", 1000, 1 << 20)
    entries, offset, position = [], 1000, 0
    for _ in range(500):
        offset += rng.randint(1, 50)
        position += rng.randint(1, 5000)
        index.append(offset, position)
        entries.append((offset, position))
    index.write_pending()
    reloaded = OffsetIndex(tmp_path / "x.index", 1000, 1 << 20)
    assert reloaded.load(log_size=position + 1)
    for target in [rng.randint(900, offset + 100) for _ in range(2000)]:
        expected = max((e for e in entries if e[0] <= target), default=(1000, 0))
        assert index.lookup(target) == reloaded.lookup(target) == expected


def test_time_index_matches_linear_scan(tmp_path):
    rng = random.Random(2)
    index = TimeIndex(tmp_path / "x.timeindex", 0, 1 << 20)
    entries, ts, offset = [], 0, 0
    for _ in range(500):
        ts += rng.randint(0, 3)  # equal timestamps must not add entries
        offset += rng.randint(1, 10)
        index.maybe_append(ts, offset)
        if not entries or ts > entries[-1][0]:
            entries.append((ts, offset))
    index.write_pending()
    reloaded = TimeIndex(tmp_path / "x.timeindex", 0, 1 << 20)
    assert reloaded.load() and list(reloaded.timestamps) == [e[0] for e in entries]
    for target in [rng.randint(-5, ts + 5) for _ in range(2000)]:
        expected = max((e for e in entries if e[0] <= target), default=(None, 0))[1]
        assert reloaded.lookup(target) == expected


def test_damaged_index_files_fail_sanity(tmp_path):
    index = OffsetIndex(tmp_path / "x.index", 0, 1 << 20)
    index.append(5, 100)
    index.append(3, 200)  # offsets going backwards
    index.write_pending()
    assert not OffsetIndex(tmp_path / "x.index", 0, 1 << 20).load(log_size=1000)
    good = OffsetIndex(tmp_path / "y.index", 0, 1 << 20)
    good.append(5, 100)
    good.write_pending()
    assert not OffsetIndex(tmp_path / "y.index", 0, 1 << 20).load(log_size=50)  # points past the log
    assert not OffsetIndex(tmp_path / "missing.index", 0, 1 << 20).load(log_size=50)


@pytest.mark.parametrize("interval", [0, 300, 4096])
def test_log_lookups_match_linear_scan(open_log, interval):
    """Offset → batch position, timestamp → first offset and the largest timestamp's first
    offset, on random batches and timestamps."""
    rng = random.Random(interval)
    log = open_log(index_interval_bytes=interval, segment_bytes=30_000)
    assert log.offset_of_max_timestamp() is None
    batches = []  # (first offset, last offset, timestamps)
    for _ in range(120):
        n = rng.randint(1, 8)
        base_ts = 10_000 + len(batches) * 5
        stamps = [base_ts + rng.randint(-40, 40) for _ in range(n)]
        raw = build_batch(pa.table({"value": [b"v" * rng.randint(1, 200)] * n,
                                    "timestamp": pa.array(stamps, pa.int64())}))
        result = log.append_as_leader(raw, 0)
        batches.append((result.first_offset, result.last_offset, stamps))
    assert len(log._segments) > 2
    records = [(o, ts) for first, _, stamps in batches for o, ts in zip(range(first, first + 99), stamps)]
    for target in range(0, log.log_end_offset):
        fetched = log.read(target, 1)
        expected_first = next(f for f, last, _ in batches if f <= target <= last)
        assert fetched.first_offset == expected_first
    for target in range(9_900, 10_000 + 120 * 5 + 60, 7):
        expected = next(((o, ts) for o, ts in records if ts >= target), None)
        assert log.offset_for_timestamp(target) == expected
    largest = max(ts for _, ts in records)
    assert log.offset_of_max_timestamp() == next((o, ts) for o, ts in records if ts == largest)
