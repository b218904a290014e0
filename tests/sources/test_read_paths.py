"""The executor side of reads (``ember.sources.fetch``), called in-process without Spark: which
on-disk copies the direct path trusts, how far it reads them, and its typed failures."""
from __future__ import annotations

import threading
from pathlib import Path
from typing import Optional

import pyarrow as pa
import pytest
from spark_helpers import create_topic, produce

from ember.errors import EmberError, KafkaTimeoutError
from ember.log import Log, LogConfig, checkpoint
from ember.record import build_batch
from ember.sources.fetch import DirectReadError, FetchTimeout, read_task
from ember.sources.options import reader_options
from ember.sources.planning import OffsetRange, RangeGroup
from ember.sources.schema import arrow_schema

TOPIC = "direct"
NO_BROKER = "127.0.0.1:1"  # the direct path must never need it


def write_copy(data_dir: Path, broker_id: Optional[int], batches: list[list[str]], *,
               recovery_point: Optional[int] = None, segment_bytes: Optional[int] = None, partition: int = 0) -> Path:
    """A broker data dir (``meta.properties`` naming ``broker_id`` unless None) holding ``partition``
    of TOPIC with one batch of records per list of values; returns the partition dir. The log is
    closed (all flushed) unless ``recovery_point`` says how far its broker has flushed."""
    data_dir.mkdir(parents=True, exist_ok=True)
    if broker_id is not None:
        (data_dir / "meta.properties").write_text(f"version=0\nbroker.id={broker_id}\n")
    config = LogConfig() if segment_bytes is None else LogConfig(segment_bytes=segment_bytes)
    copy = data_dir / f"{TOPIC}-{partition}"
    log = Log.open(copy, config)
    for values in batches:
        log.append_as_leader(build_batch([(v.encode(), v.encode(), 1_000) for v in values]), 0)
    log.close()
    if recovery_point is not None:
        checkpoint.write_offset(copy / checkpoint.RECOVERY_POINT, recovery_point)
    return copy


def read(root: Path, start: int, end: int, replicas: tuple[int, ...], *, read_path: str = "direct",
         bootstrap: str = NO_BROKER, **options: str) -> list[tuple[int, str]]:
    """(offset, value) of every record ``read_task`` yields for [start, end) of partition 0."""
    opts = reader_options({"bootstrap": bootstrap, "topic": TOPIC, "readPath": read_path,
                           "storageRoot": str(root), **options}, streaming=False)
    batches = read_task(OffsetRange(TOPIC, 0, start, end, replicas), opts, arrow_schema(False))
    return [(r["offset"], r["value"].decode()) for b in batches for r in b.to_pylist()]


def test_direct_read_failures_are_typed_ember_errors(tmp_path) -> None:
    with pytest.raises(DirectReadError, match=r"offsets \[0, 3\).*readPath=auto") as failure:
        read(tmp_path, 0, 3, (1,))
    assert isinstance(failure.value, EmberError)


def test_fetch_timeout_is_a_typed_ember_error(shared_cluster, topic_name) -> None:
    create_topic(shared_cluster.bootstrap, topic_name, partitions=1)
    produce(shared_cluster.bootstrap, topic_name, {0: 2})
    opts = reader_options({"bootstrap": shared_cluster.bootstrap, "topic": topic_name, "readPath": "broker",
                           "fetchTimeoutMs": "300"}, streaming=False)
    with pytest.raises(FetchTimeout, match="at offset 2 within fetchTimeoutMs=300.*raise fetchTimeoutMs") as failure:
        list(read_task(OffsetRange(topic_name, 0, 0, 5), opts, arrow_schema(False)))
    assert isinstance(failure.value, KafkaTimeoutError) and isinstance(failure.value, EmberError)


def broker_calls(monkeypatch) -> list[int]:
    """Stub the broker path; returns the list of offsets it was asked to read from."""
    from ember.sources import fetch

    calls: list[int] = []

    def fake_read_broker(ranges, options, target):
        calls.extend(position for _, position in ranges)
        return iter(())

    monkeypatch.setattr(fetch, "_read_broker", fake_read_broker)
    return calls


def test_only_copies_of_in_sync_brokers_are_read(tmp_path, monkeypatch) -> None:
    """A stale former leader (broker 2, out of the ISR) holds different records below the high
    watermark: even as the only copy under storageRoot it is never read."""
    stale = write_copy(tmp_path / "broker-2", 2, [["stale0", "stale1", "stale2"]]).parent
    with pytest.raises(DirectReadError, match="broker 2 is not in the ISR"):
        read(tmp_path, 0, 3, (1, 3))
    with pytest.raises(DirectReadError, match="broker 2 is not in the ISR"):
        read(stale, 0, 3, (1,))  # storageRoot = that broker's data dir itself
    calls = broker_calls(monkeypatch)
    assert read(tmp_path, 0, 3, (1,), read_path="auto") == [] and calls == [0]  # all from the brokers

    write_copy(tmp_path / "broker-1", 1, [["v0", "v1", "v2"]])
    assert read(tmp_path, 0, 3, (1,)) == [(0, "v0"), (1, "v1"), (2, "v2")]


def test_storage_root_lists_several_directories(tmp_path) -> None:
    """Brokers with several log.dirs on separate mounts: storageRoot names them all, comma-separated,
    and a partition's copy is found in whichever of its broker's directories holds it."""
    disk1, disk2 = tmp_path / "mnt" / "disk1", tmp_path / "elsewhere" / "disk2"
    write_copy(disk2 / "ember", 1, [["v0", "v1"]])
    (disk1 / "ember").mkdir(parents=True)
    (disk1 / "ember" / "meta.properties").write_text("broker.id=1\n")
    assert read(Path(f"{disk1},{disk2}"), 0, 2, (1,)) == [(0, "v0"), (1, "v1")]


def test_a_copy_whose_owner_is_unknown_is_never_read(tmp_path) -> None:
    write_copy(tmp_path / "copied", None, [["a", "b"]])
    with pytest.raises(DirectReadError, match="owner is unknown"):
        read(tmp_path, 0, 2, (1,))


def test_direct_reads_stop_at_what_the_broker_has_flushed(tmp_path, monkeypatch) -> None:
    """Offsets above a copy's recovery point (its active segment's unflushed tail) may be missing or
    torn on a shared mount: auto reads them through the brokers, direct waits for the flush."""
    copy = write_copy(tmp_path / "broker-1", 1, [["a"], ["b", "c"]], recovery_point=1)
    seen: list[int] = []
    with pytest.raises(DirectReadError, match="flushed only up to offset 1.*waited fetchTimeoutMs=200"):
        opts = reader_options({"bootstrap": NO_BROKER, "topic": TOPIC, "readPath": "direct",
                               "storageRoot": str(tmp_path), "fetchTimeoutMs": "200"}, streaming=False)
        for batch in read_task(OffsetRange(TOPIC, 0, 0, 3, (1,)), opts, arrow_schema(False)):
            seen += batch.column("offset").to_pylist()
    assert seen == [0]
    calls = broker_calls(monkeypatch)
    assert read(tmp_path, 0, 3, (1,), read_path="auto") == [(0, "a")] and calls == [1]

    flush = threading.Timer(0.3, checkpoint.write_offset, (copy / checkpoint.RECOVERY_POINT, 3))
    flush.start()
    try:
        assert read(tmp_path, 0, 3, (1,)) == [(0, "a"), (1, "b"), (2, "c")]  # direct: waited for it
    finally:
        flush.join()


def test_sealed_segments_are_flushed_without_a_recovery_point(tmp_path, monkeypatch) -> None:
    copy = write_copy(tmp_path / "broker-1", 1, [[f"r{i}" * 20] for i in range(6)], recovery_point=0,
                      segment_bytes=2048)
    *_, newest = sorted(int(p.stem) for p in copy.glob("*.log"))
    assert 0 < newest < 6
    calls = broker_calls(monkeypatch)
    assert [o for o, _ in read(tmp_path, 0, 6, (1,), read_path="auto")] == list(range(newest))
    assert calls == [newest]


def corrupt_last_batch(copy: Path) -> None:
    segment = copy / "00000000000000000000.log"
    data = bytearray(segment.read_bytes())
    data[-20] ^= 0xFF  # inside the last batch's payload: its CRC no longer matches
    segment.write_bytes(bytes(data))


def test_a_corrupt_copy_is_skipped_for_the_next_copy_or_the_brokers(tmp_path, monkeypatch) -> None:
    batches = [["a"], ["b"], ["c", "d"]]
    corrupt_last_batch(write_copy(tmp_path / "broker-1", 1, batches))
    write_copy(tmp_path / "broker-2", 2, batches)
    everything = [(0, "a"), (1, "b"), (2, "c"), (3, "d")]
    assert read(tmp_path, 0, 4, (1, 2)) == everything  # offsets 2-3 from broker 2's copy
    assert read(tmp_path, 0, 4, (1, 2), read_path="auto") == everything

    corrupt_last_batch(tmp_path / "broker-2" / f"{TOPIC}-0")
    with pytest.raises(DirectReadError, match=r"offsets \[2, 4\).*unreadable at offset 2 \(CorruptSegment"):
        read(tmp_path, 0, 4, (1, 2))
    calls = broker_calls(monkeypatch)
    assert read(tmp_path, 0, 4, (1, 2), read_path="auto") == everything[:2] and calls == [2]


def test_two_ranges_of_one_partition_in_a_task_are_fetched_one_after_the_other(monkeypatch) -> None:
    """minPartitions can split a partition into neighbouring pieces that one packed task holds; a
    consumer has one position per partition, so the broker path reads them in turn (in one go,
    the second range replaced the first and its rows were lost)."""
    from ember.sources import fetch

    waves: list[list[tuple[int, int]]] = []

    def fake_read_broker(ranges, options, target):
        waves.append([(r.partition, position) for r, position in ranges])
        return iter(())

    monkeypatch.setattr(fetch, "_read_broker", fake_read_broker)
    opts = reader_options({"bootstrap": NO_BROKER, "topic": TOPIC, "readPath": "broker"}, streaming=False)
    group = RangeGroup((OffsetRange(TOPIC, 0, 2, 4), OffsetRange(TOPIC, 1, 0, 5), OffsetRange(TOPIC, 0, 0, 2)))
    assert list(read_task(group, opts, arrow_schema(False))) == []
    assert waves == [[(1, 0), (0, 0)], [(0, 2)]]


def test_a_packed_task_gives_its_ranges_in_its_order_whichever_path_answers_first(tmp_path, monkeypatch) -> None:
    """Exactly-once writes place a task's rows by their position in the task, so a re-run must see
    them in the same order: a stored range, or a range a broker answers first, waits for the ranges
    before it. (Found by the exactly-once re-run test: rows came in arrival order, a re-run cut
    other batches and the broker refused them with OutOfOrderSequenceNumber.)"""
    from ember.sources import fetch

    write_copy(tmp_path / "broker-1", 1, [["p1-a", "p1-b"]], partition=1)
    target = arrow_schema(False)

    def later_ranges_first(ranges, options, target):
        for r, position in reversed(ranges):
            rows = [{"key": None, "value": f"p{r.partition}-{o}".encode(), "topic": r.topic,
                     "partition": r.partition, "offset": o, "timestamp": None} for o in range(position, r.end)]
            yield r, pa.RecordBatch.from_pylist(rows, schema=target)
            yield r, None

    monkeypatch.setattr(fetch, "_read_broker", later_ranges_first)
    opts = reader_options({"bootstrap": NO_BROKER, "topic": TOPIC, "readPath": "auto",
                           "storageRoot": str(tmp_path)}, streaming=False)
    group = RangeGroup(tuple(OffsetRange(TOPIC, p, 0, 2, (1,)) for p in (0, 1, 2, 3)))
    values = [v for b in read_task(group, opts, target) for v in b.column("value").to_pylist()]
    assert values == [b"p0-0", b"p0-1", b"p1-a", b"p1-b", b"p2-0", b"p2-1", b"p3-0", b"p3-1"]
