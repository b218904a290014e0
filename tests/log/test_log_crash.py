"""Crash safety: SIGKILL a writer at random moments, reopen, check every acknowledged append."""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
from crash_child import CONFIG, record_value

from ember.log import Log, read_offset_range
from ember.record import DECODED_SCHEMA, build_batch

CHILD = Path(__file__).with_name("crash_child.py")
ROUNDS = 5


def run_and_kill(directory: Path, round_no: int, rng: random.Random) -> list[tuple[int, ...]]:
    """Start a writer, SIGKILL it at a random moment; the appends it reported as returned."""
    child = subprocess.Popen([sys.executable, str(CHILD), str(directory), str(round_no)],
                             stdout=subprocess.PIPE, text=True)
    try:
        first = child.stdout.readline()  # the child is up and appending
        assert first, "crash child died before its first append"
        time.sleep(rng.uniform(0.0, 0.3))
        os.kill(child.pid, signal.SIGKILL)
        rest = child.stdout.read()
    finally:
        child.kill()
        child.wait(timeout=10)
    lines = (first + rest).split("\n")
    return [tuple(map(int, line.split())) for line in lines[:-1]]  # the last may be cut short


def tear_tail(directory: Path, rng: random.Random) -> None:
    """Leave a partly written batch at the end of the newest segment, as a crash mid-write can."""
    newest = max(directory.glob("*.log"))
    partial = build_batch([(b"torn", b"x" * 300)])
    with open(newest, "ab") as f:
        f.write(partial[:rng.randint(1, len(partial) - 1)])


def test_acknowledged_appends_survive_sigkill(tmp_path):
    rng = random.Random(42)
    directory = tmp_path / "crash-0"
    acknowledged = []
    log_end = 0
    for round_no in range(1, ROUNDS + 1):
        reports = run_and_kill(directory, round_no, rng)
        assert reports and reports[0][0] == log_end, "offsets must continue with no gap or overlap"
        acknowledged += reports
        if round_no % 2:
            tear_tail(directory, rng)
        log = Log.open(directory, CONFIG)
        assert log.log_end_offset >= reports[-1][1] + 1
        log_end = log.log_end_offset
        assert log.latest_epoch == round_no
        log.close()

    table = pa.Table.from_batches(list(read_offset_range(directory, 0, log_end)), schema=DECODED_SCHEMA)
    assert table.column("offset").to_pylist() == list(range(log_end))
    keys = [k.decode() for k in table.column("key").to_pylist()]
    assert len(set(keys)) == len(keys), "no record may be written twice"
    assert table.column("value").to_pylist() == [record_value(k) for k in keys]
    for first, last, round_no, i, n in acknowledged:
        assert last - first + 1 == n
        assert keys[first:last + 1] == [f"{round_no}:{i}:{j}" for j in range(n)]
    assert sorted(p.name for p in directory.iterdir() if p.name.endswith((".tmp", ".deleted"))) == []
