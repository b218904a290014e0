"""glibc malloc settings for a broker process, so that memory freed after a burst goes back to the
system instead of staying in the process (docs/operations.md, "Memory").

glibc serves requests of 128 KiB and more with their own ``mmap`` and returns them at ``free``; but
the first time such a block is freed it raises that threshold to the block's size (up to 32 MiB)
and its heap trim threshold to twice that, so from then on a broker's request and batch buffers
(hundreds of KiB to a few MiB) come from the heap and stay resident once freed (most of a broker's
RSS growth over a load was such free memory). Setting both thresholds
explicitly turns that adjustment off. Fewer arenas (glibc's default is 8 per core) keep the I/O
threads' frees from being spread over arenas that are never trimmed.

A variable of glibc's own (``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_``,
``MALLOC_ARENA_MAX``) set in the broker's environment wins over the setting here."""
from __future__ import annotations

import ctypes
import os
from collections.abc import Mapping
from dataclasses import dataclass

#: mallopt's parameter numbers (glibc's malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8


@dataclass(frozen=True)
class AllocatorSetting:
    name: str
    parameter: int
    value: int
    environment: str           # glibc's own variable for it: when set, glibc has applied it


BROKER_ALLOCATOR = (
    AllocatorSetting("mmap threshold", M_MMAP_THRESHOLD, 256 * 1024, "MALLOC_MMAP_THRESHOLD_"),
    AllocatorSetting("trim threshold", M_TRIM_THRESHOLD, 1024 * 1024, "MALLOC_TRIM_THRESHOLD_"),
    AllocatorSetting("arenas", M_ARENA_MAX, 2, "MALLOC_ARENA_MAX"),
)


def is_glibc() -> bool:
    try:
        return os.confstr("CS_GNU_LIBC_VERSION") is not None
    except (ValueError, OSError):
        return False


def tune_allocator(settings: tuple[AllocatorSetting, ...] = BROKER_ALLOCATOR,
                   environ: Mapping[str, str] = os.environ) -> dict[str, int]:
    """Apply each setting the environment does not set itself; what was applied (nothing off glibc)."""
    if not is_glibc():
        return {}
    mallopt = ctypes.CDLL(None).mallopt
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return {s.name: s.value for s in settings if s.environment not in environ and mallopt(s.parameter, s.value) == 1}
