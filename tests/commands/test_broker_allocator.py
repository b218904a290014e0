"""A broker sets glibc's malloc thresholds explicitly, so buffers freed after a burst go back to the
system (docs/operations.md, "Broker memory"), and leaves alone what glibc's own variables set."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ember.commands.allocator import BROKER_ALLOCATOR, is_glibc, tune_allocator

pytestmark = pytest.mark.skipif(not is_glibc(), reason="glibc's mallopt")

#: Frees a 1 MiB buffer (glibc then raises its mmap threshold past 1 MiB unless it was set), allocates
#: another and prints how many bytes of mmap'd blocks that one added (mallinfo2's hblkhd).
SCRIPT = """
import ctypes, sys
from ember.commands.allocator import tune_allocator
if sys.argv[1] == "tuned":
    print(sorted(tune_allocator()))
class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                "fsmblks", "uordblks", "fordblks", "keepcost")]
mallinfo2 = ctypes.CDLL(None).mallinfo2
mallinfo2.restype = MallInfo2
first = bytearray(1 << 20)
del first
before = mallinfo2().hblkhd
second = bytearray(1 << 20)
print(mallinfo2().hblkhd - before)
"""


def run(mode: str, env: dict[str, str]) -> list[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    done = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, timeout=60,
                          check=True, env={**clean, **env})
    return done.stdout.split("\n")


def test_a_freed_megabyte_buffer_does_not_move_the_next_one_onto_the_heap() -> None:
    applied, mapped, _ = run("tuned", {})
    assert applied == str(sorted(s.name for s in BROKER_ALLOCATOR))
    assert int(mapped) >= 1 << 20            # its own mapping: unmapped again at free


def test_untuned_glibc_keeps_the_next_megabyte_buffer_on_the_heap() -> None:
    """The behaviour the setting is for: without it the second buffer is not mapped on its own."""
    mapped, _ = run("untuned", {})
    assert int(mapped) < 1 << 20


def test_glibc_variables_in_the_environment_win() -> None:
    environ = {"MALLOC_ARENA_MAX": "4", "MALLOC_MMAP_THRESHOLD_": "65536"}
    applied, _, _ = run("tuned", environ)
    assert applied == "['trim threshold']"
    assert tune_allocator(BROKER_ALLOCATOR, environ={s.environment: "1" for s in BROKER_ALLOCATOR}) == {}


def test_a_broker_logs_what_it_set(make_cluster) -> None:
    cluster = make_cluster(brokers=1)
    broker = next(iter(cluster.brokers.values()))
    assert "glibc malloc: mmap threshold 262,144, trim threshold 1,048,576, arenas 2" in broker.log_path.read_text()
