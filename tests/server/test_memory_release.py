"""A broker gives the free memory glibc holds back to the system every memory.release.interval.ms
(ember.server.memory_release; docs/operations.md, "Broker memory")."""
from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from ember.server.memory_release import MemoryRelease, glibc_malloc_trim

#: Frees 300 KiB buffers after glibc's mmap threshold grew past them (so they came from the heap),
#: keeping the last one (the heap's top stays in use: nothing is returned by itself), then prints
#: the RSS (KiB) given back by ``glibc_malloc_trim()`` or, without "trim", by nothing.
SCRIPT = """
import sys
from ember.server.memory_release import glibc_malloc_trim
def rss():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
first = bytearray(300_000)
del first                                         # glibc's mmap threshold grows past 300 KB
buffers = [bytearray(300_000) for _ in range(300)]   # ~90 MB on the heap
del buffers[:-1]
before = rss()
if sys.argv[1] == "trim":
    glibc_malloc_trim()()
print(before - rss())
"""

needs_glibc = pytest.mark.skipif(glibc_malloc_trim() is None, reason="glibc's malloc_trim")


def released_kib(mode: str) -> int:
    done = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, timeout=60,
                          check=True)
    return int(done.stdout)


@needs_glibc
def test_a_trim_gives_freed_heap_buffers_back() -> None:
    assert released_kib("trim") > 50_000


@needs_glibc
def test_without_a_trim_glibc_keeps_them() -> None:
    """What the release is for: the same frees give nothing back by themselves."""
    assert released_kib("none") < 10_000


def trims_during(interval_ms: int, seconds: float) -> int:
    """How often a release with ``interval_ms`` trims in ``seconds``; none once it is stopped."""
    calls: list[int] = []

    async def run() -> None:
        release = MemoryRelease(interval_ms, lambda: calls.append(1))
        release.start()
        await asyncio.sleep(seconds)
        await release.stop()
        stopped = len(calls)
        await asyncio.sleep(0.05)
        assert len(calls) == stopped

    asyncio.run(run())
    return len(calls)


def test_the_release_trims_every_interval_until_stopped() -> None:
    assert trims_during(10, 0.2) >= 3


def test_an_interval_of_zero_never_trims() -> None:
    assert trims_during(0, 0.1) == 0


@needs_glibc
def test_a_broker_releases_memory_on_its_own_schedule(make_cluster) -> None:
    cluster = make_cluster(brokers=1, config={"memory.release.interval.ms": "2000"})
    broker = next(iter(cluster.brokers.values()))
    assert "releasing free heap memory to the system every 2000 ms" in broker.log_path.read_text()
