"""Gives the free memory glibc's malloc holds back to the system every ``memory.release.interval.ms``
(docs/operations.md, "Broker memory").

glibc keeps what a load freed: once a block of 128 KiB or more has been freed it serves blocks up to
that size (up to 32 MiB) from the heap instead of their own mappings, and free heap pages below the
top are never returned by themselves, so a broker kept most of what a load's request and batch
buffers took. ``malloc_trim(0)`` returns the free pages of every arena, inside the heap too.
Fixing glibc's thresholds instead (``mallopt``) returned the memory at every ``free``, but then every
large buffer cost a fresh mapping and its page faults: acks=all ``send_batch`` lost a third of its
throughput. A trim every few seconds costs a few page faults per interval under load."""
from __future__ import annotations

import asyncio
import ctypes
import logging
import os
from typing import Callable, Optional

log = logging.getLogger(__name__)


def glibc_malloc_trim() -> Optional[Callable[[], int]]:
    """``malloc_trim(0)`` of this process's C library; None when it is not glibc."""
    try:
        if os.confstr("CS_GNU_LIBC_VERSION") is None:
            return None
        trim = ctypes.CDLL(None).malloc_trim
    except (ValueError, OSError, AttributeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return lambda: int(trim(0))


class MemoryRelease:
    """Calls ``trim`` on a worker thread every ``interval_ms`` (0: never) until :meth:`stop`."""

    def __init__(self, interval_ms: int, trim: Optional[Callable[[], object]] = None) -> None:
        self.interval_ms = interval_ms
        self.trim = trim
        self._task: Optional[asyncio.Task[None]] = None

    def start(self) -> None:
        if self.interval_ms <= 0 or self.trim is None:
            return
        self._task = asyncio.create_task(self._run(), name="memory release")
        log.info("releasing free heap memory to the system every %d ms (memory.release.interval.ms)",
                 self.interval_ms)

    async def _run(self) -> None:
        assert self.trim is not None
        while True:
            await asyncio.sleep(self.interval_ms / 1000)
            await asyncio.to_thread(self.trim)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
