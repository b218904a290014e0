"""bench/vs_kafka's workloads: the scale rows (which cases run, how much each sends, the values they send)
and the CPU accounting of the brokers."""
from __future__ import annotations

import os
import sys
import time
import zlib
from pathlib import Path

import pytest

VS_KAFKA = Path(__file__).resolve().parents[1] / "bench" / "vs_kafka"


@pytest.fixture(scope="module")
def workloads():  # type: ignore[no-untyped-def]
    sys.path[:0] = [str(VS_KAFKA), str(VS_KAFKA.parent)]
    try:
        import workloads
        yield workloads
    finally:
        del sys.path[:2]


def test_every_family_of_the_issue_has_its_cases(workloads) -> None:  # type: ignore[no-untyped-def]
    cases = workloads.scale_cases()
    families = list(dict.fromkeys(case.group for case in cases))
    assert len(families) == 3 and all(f.startswith("Scale: ") for f in families)
    assert [c.producers for c in cases if c.group == families[0]] == [1, 2, 4, 8]
    assert [c.value_size for c in cases if c.group == families[1]] == [10, 100, 1_000, 10_000, 100_000]
    assert [c.codec for c in cases if c.group == families[2]] == ["none", "gzip", "snappy", "lz4", "zstd"]


def test_a_run_sends_a_bounded_amount_whatever_the_record_size(workloads) -> None:  # type: ignore[no-untyped-def]
    for case in workloads.scale_cases():
        assert 100 <= case.records <= workloads.SCALE_RECORDS
        assert case.records * case.value_size <= max(workloads.SCALE_BYTES, 100 * case.value_size)


def test_the_codec_family_sends_compressible_values_and_the_others_random_ones(workloads) -> None:  # type: ignore[no-untyped-def]
    for case in workloads.scale_cases():
        value = workloads.scale_value(case)
        assert len(value) == case.value_size
        ratio = len(value) / len(zlib.compress(value))
        assert (ratio > 2) if case.text else (ratio < 1.1 or case.value_size < 100)
    assert [c.codec for c in workloads.scale_cases() if c.text] == ["none", "gzip", "snappy", "lz4", "zstd"]


def test_cpu_seconds_counts_what_a_process_spent(workloads) -> None:  # type: ignore[no-untyped-def]
    before = workloads.cpu_seconds(os.getpid())
    deadline = time.process_time() + 0.3
    while time.process_time() < deadline:
        pass
    spent = workloads.cpu_seconds(os.getpid()) - before
    assert 0.2 <= spent <= 5


def test_the_spark_cpu_counts_the_jvm_and_its_children(workloads) -> None:  # type: ignore[no-untyped-def]
    """tree_cpu_seconds adds a process's living descendants (Spark's Python workers are the JVM's
    children): a busy grandchild is counted, an idle tree is not."""
    import subprocess
    busy = "import time\nend = time.process_time() + 0.5\nwhile time.process_time() < end: pass\ntime.sleep(10)"  # then exits
    parent = subprocess.Popen([sys.executable, "-c",
                               f"import subprocess, sys, time\nsubprocess.Popen([sys.executable, '-c', {busy!r}])\n"
                               "time.sleep(30)"])
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and workloads.tree_cpu_seconds(parent.pid) < 0.5:
            time.sleep(0.1)
        total = workloads.tree_cpu_seconds(parent.pid)
        assert total >= 0.5 > workloads.cpu_seconds(parent.pid)
        assert workloads.client_cpu_s(parent.pid) >= workloads.client_cpu_s() + 0.5
    finally:
        parent.kill()
        parent.wait(10)


def test_the_partitions_rows_get_their_own_chart_and_stay_out_of_the_main_one(workloads) -> None:  # type: ignore[no-untyped-def]
    import report
    partitions = [workloads.Row(f"{report.PARTITIONS_PREFIX}{n:,} partitions (RF 3)", case, unit, [e], [k], higher)
                  for n, scale in ((6, 1), (1000, 10)) for case, unit, higher, e, k in (
                      ("create the topic", "s", False, 0.1 * scale, 0.2 * scale),
                      ("produce, acks=all", "records/s", True, 5e4 / scale, 4e4 / scale))]
    main = workloads.Row("Consumer", "from the beginning", "records/s", [1e5], [2e5], True)
    assert report.chart_families([*partitions, main]) == ([main], [], partitions)
    table = report.markdown([*partitions, main], "header")
    assert "| Partitions: 1,000 partitions (RF 3) | create the topic [s] | 1.00 s" in table


def test_the_round_trip_frames_are_listoffsets_for_the_earliest_and_latest_offset(workloads) -> None:  # type: ignore[no-untyped-def]
    import round_trips

    from ember.protocol.kafka.codec import FRAME_LENGTH, decode_request
    from ember.wire.api_keys import ApiKey
    for correlation_id, timestamp in enumerate((-2, -1)):
        frame = round_trips._frame(timestamp, correlation_id)
        assert FRAME_LENGTH.unpack_from(frame)[0] == len(frame) - FRAME_LENGTH.size
        request = decode_request(memoryview(frame)[FRAME_LENGTH.size:], lambda key, version: True)
        assert (request.api_key, request.api_version, request.correlation_id) == (ApiKey.LIST_OFFSETS, 7, correlation_id)
        [topic] = request.body.topics
        assert topic.name == round_trips.TOPIC
        assert [(p.partition_index, p.timestamp) for p in topic.partitions] == [(0, timestamp)]


def test_a_round_trip_run_refuses_error_answers(workloads) -> None:  # type: ignore[no-untyped-def]
    """Timing NOT_LEADER answers would measure the wrong thing: the run checks its first answers."""
    import round_trips

    from ember.errors import ErrorCode
    from ember.protocol.kafka.codec import encode_response
    from ember.protocol.kafka.list_offsets_response import encode_list_offsets
    system = type("System", (), {"name": "ember"})()

    def answer(code: int, offset: int) -> bytes:
        frame = encode_response(3, encode_list_offsets(round_trips.VERSION, [(round_trips.TOPIC, [(0, code, -1, offset)])]))
        return frame[4:]    # without its length, as _Connection.call returns it
    round_trips._check_answer(system, answer(0, 42))
    with pytest.raises(RuntimeError, match="ListOffsets answered"):
        round_trips._check_answer(system, answer(int(ErrorCode.NOT_LEADER_OR_FOLLOWER), -1))


def test_the_footprint_samples_rss_again_once_the_load_settled(workloads, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A broker whose load left 60 MB that it gives back a moment later: the row right after the
    load shows them, the settled row does not."""
    import subprocess

    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\nheld = bytearray(60 << 20)\n"
                               "print(flush=True)\ntime.sleep(1)\ndel held\ntime.sleep(60)"], stdout=subprocess.PIPE)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"\n"   # the 60 MB are held
        monkeypatch.setattr(workloads, "FOOTPRINT_SETTLE_S", 2.0)
        systems = [type("System", (), {"name": name, "processes": lambda self: {"broker 1": holder.pid},
                                       "restart_broker_s": lambda self: 1.0})() for name in ("ember", "kafka")]
        rows = {row.case: row for row in workloads.footprint(systems, {"ember": 2.0, "kafka": 9.0})}
    finally:
        holder.kill()
        holder.wait(10)
    after, settled = rows["RSS per broker after the load (mean)"], rows["RSS per broker 2 s after the load (mean)"]
    assert after.ember_samples[0] - settled.ember_samples[0] > 50
