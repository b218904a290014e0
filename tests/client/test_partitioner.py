"""Kafka-compatible partitioning: murmur2 against Kafka's own test vectors, columnar twin, sticky."""
from __future__ import annotations

import random

import pyarrow as pa
import pytest

from ember.client.partitioner import StickyPartitioner, murmur2, partition_for_key, partitions_for_keys

# org.apache.kafka.common.utils.UtilsTest#testMurmur2, plus values Kafka's murmur2 gives for "1".."12345".
KAFKA_MURMUR2 = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
    b"1": -1993445489,
    b"12": 126087238,
    b"123": -267702483,
    b"1234": -1614185708,
    b"12345": -1188365604,
}


@pytest.mark.parametrize("key,expected", KAFKA_MURMUR2.items())
def test_murmur2_matches_kafka(key: bytes, expected: int) -> None:
    assert murmur2(key) == expected


def test_partition_is_to_positive_modulo() -> None:
    # toPositive(-973932308) = 1173551340; % 6 = 0; % 7 = 2
    assert partition_for_key(b"21", 6) == (-973932308 & 0x7FFFFFFF) % 6
    assert partition_for_key(b"foobar", 7) == (-790332482 & 0x7FFFFFFF) % 7


def test_empty_key_hashes() -> None:
    assert isinstance(murmur2(b""), int)


@pytest.mark.parametrize("partitions", [1, 6, 7, 100])
def test_columnar_partitions_match_scalar(partitions: int) -> None:
    rng = random.Random(7)
    keys = [bytes(rng.randrange(256) for _ in range(rng.randrange(0, 30))) for _ in range(3000)]
    keys += list(KAFKA_MURMUR2) + [None]
    rng.shuffle(keys)
    got = partitions_for_keys(pa.array(keys, pa.binary()), partitions).to_pylist()
    assert got == [None if k is None else partition_for_key(k, partitions) for k in keys]


@pytest.mark.parametrize("length", [0, 1, 3, 4, 8, 11])
def test_columnar_fixed_length_fast_path(length: int) -> None:
    rng = random.Random(length)
    keys = [bytes(rng.randrange(256) for _ in range(length)) for _ in range(500)]
    chunked = pa.chunked_array([pa.array(keys[:200], pa.binary()), pa.array(keys[200:], pa.binary())])
    assert partitions_for_keys(chunked, 6).to_pylist() == [partition_for_key(k, 6) for k in keys]


def test_columnar_accepts_strings_and_slices() -> None:
    keys = ["user-%d" % i for i in range(100)]
    arr = pa.array(keys).slice(10, 50)
    assert partitions_for_keys(arr, 5).to_pylist() == [partition_for_key(k.encode(), 5) for k in keys[10:60]]


def test_sticky_partition_holds_until_new_batch() -> None:
    sticky = StickyPartitioner()
    first = sticky.partition("t", 4)
    assert all(sticky.partition("t", 4) == first for _ in range(10))
    sticky.on_new_batch("t", 4, first)
    assert sticky.partition("t", 4) != first


def test_sticky_single_partition() -> None:
    sticky = StickyPartitioner()
    assert sticky.partition("t", 1) == 0
    sticky.on_new_batch("t", 1, 0)
    assert sticky.partition("t", 1) == 0
