"""Disk failures the log cannot undo.

A failed write is undone (the partial bytes truncated, the in-memory state restored) and
reported as a retriable error. Two failures cannot be undone: a failed ``fsync`` (the kernel may
already have dropped the dirty pages and marked them clean, so the page cache no longer tells what
is on disk, as PostgreSQL and Kafka learned) and a failed undo. They raise ``UntrustedFiles``,
after which the owning ``Log`` takes itself offline.

Whether the disk works again is told by :func:`probe` (the broker's offline-log recovery asks
before it reopens such a log): a real write, fsync and delete in the log's directory.
"""
from __future__ import annotations

import os
from pathlib import Path


class UntrustedFiles(Exception):
    """The files may no longer match the log's in-memory state; ``cause`` is the OSError."""

    def __init__(self, message: str, cause: OSError) -> None:
        super().__init__(f"{message}: {cause}")
        self.cause = cause


def fsync(fd: int, what: object) -> None:
    """``os.fsync`` whose failure is ``UntrustedFiles`` (``what`` names the file)."""
    try:
        os.fsync(fd)
    except OSError as e:
        raise UntrustedFiles(f"fsync of {what} failed", e) from e


#: The probe file :func:`probe` writes; the ``.tmp`` suffix makes a log's recovery delete one a
#: crash left behind (``recovery.clean_directory``).
PROBE_FILE = "disk-probe.tmp"
#: Bytes the probe writes: one page, so the file system must really allocate a block.
PROBE_BYTES = 4096


def probe(directory: Path, min_free_bytes: int) -> str | None:
    """Whether ``directory``'s disk works again: None if ``min_free_bytes`` are free and a probe
    file can be written, fsynced and deleted there (the directory fsynced too), else why not.
    Blocking; a leftover probe file from a failed round is removed by the next one."""
    path = directory / PROBE_FILE
    try:
        usage = os.statvfs(directory)
        free = usage.f_bavail * usage.f_frsize
        if free < min_free_bytes:
            return f"{free} bytes free, under the {min_free_bytes} needed"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            written = os.write(fd, b"\0" * PROBE_BYTES)
            if written != PROBE_BYTES:
                return f"wrote {written} of {PROBE_BYTES} bytes to {path}"
            os.fsync(fd)
        finally:
            os.close(fd)
            path.unlink(missing_ok=True)
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError as e:
        return f"{path}: {e}"
    return None
