"""The free space a log directory keeps (``log.dir.min.free.bytes``).

An append that would leave less free space on the log directory's file system is refused as if
the disk were full: the partition's log goes offline (``Partition.write_failed``), leadership
moves, and the log comes back once the space is there (``offline_log_recovery`` probes for it).
What shares the file system keeps room that way: ZooKeeper in ``ember cluster up``'s default
layout, which dies at its first transaction on a full disk, and with it every failover (seen in
the fault tests: partitions whose followers were full kept acks=all producers waiting until their
request timeout), and the broker's own checkpoints.

Free space is read with ``statvfs`` at most every :data:`REFRESH_S` per directory; appends in
between are subtracted from the last reading, so one check costs no syscall.
"""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from ember.errors import StorageError

#: How long a free-space reading of a directory is trusted (appends in between are subtracted).
REFRESH_S = 0.25


class LogDirSpace:
    """Checks appends against ``min_free_bytes`` (0: no check); shared by a broker's partitions."""

    def __init__(self, min_free_bytes: int, refresh_s: float = REFRESH_S) -> None:
        self.min_free_bytes = min_free_bytes
        self.refresh_s = refresh_s
        self._readings: dict[Path, tuple[float, int]] = {}
        self._lock = threading.Lock()

    def check(self, partition_dir: Path, incoming: int) -> None:
        """Raise StorageError when writing ``incoming`` bytes into ``partition_dir`` would leave
        less than ``min_free_bytes`` free on its file system (blocking: called on the I/O pool)."""
        if self.min_free_bytes <= 0:
            return
        log_dir = partition_dir.parent
        with self._lock:
            free = self._free(log_dir)
            if free - incoming < self.min_free_bytes:
                self._readings.pop(log_dir, None)    # read again next time: space may come back
                raise StorageError(f"{log_dir}: {free} bytes free; an append of {incoming} bytes would leave less "
                                   f"than log.dir.min.free.bytes={self.min_free_bytes} (kept free for what shares "
                                   f"this file system, e.g. ZooKeeper)")
            self._readings[log_dir] = (self._readings[log_dir][0], free - incoming)

    def _free(self, log_dir: Path) -> int:
        now = time.monotonic()
        reading = self._readings.get(log_dir)
        if reading is None or now - reading[0] > self.refresh_s:
            try:
                usage = os.statvfs(log_dir)
            except OSError as exc:
                raise StorageError(f"{log_dir}: cannot read its free space: {exc}") from exc
            reading = (now, usage.f_bavail * usage.f_frsize)
            self._readings[log_dir] = reading
        return reading[1]
