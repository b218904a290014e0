"""Disk failures the log cannot undo.

A failed write is undone (the partial bytes truncated, the in-memory state restored) and
reported as a retriable error. Two failures cannot be undone: a failed ``fsync`` (the kernel may
already have dropped the dirty pages and marked them clean, so the page cache no longer tells what
is on disk, as PostgreSQL and Kafka learned) and a failed undo. They raise ``UntrustedFiles``,
after which the owning ``Log`` takes itself offline.
"""
from __future__ import annotations

import os


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
