"""Small checkpoint files written atomically: a version line, an entry count, then the entries.

A checkpoint is written to ``<name>.tmp``, fsynced, renamed over the old file and the directory
fsynced, so after a crash a reader sees either the old or the new content, never a mix. A failed
write removes the temp file and leaves the old checkpoint in place (OSError); a failed fsync
raises ``UntrustedFiles``. A file
that is missing or does not parse reads as None: every checkpoint has a safe fallback (recover
more, trust less), so a damaged one must not stop a partition from opening.
"""
from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path
from typing import Optional, Sequence

from ember.log.disk import fsync

VERSION = 0
TMP_SUFFIX = ".tmp"

HIGH_WATERMARK = "high-watermark-checkpoint"
RECOVERY_POINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET = "log-start-offset-checkpoint"
LEADER_EPOCH = "leader-epoch-checkpoint"
CLEANER_OFFSET = "cleaner-offset-checkpoint"

_log = logging.getLogger(__name__)


def write_entries(path: Path, entries: Sequence[Sequence[int]], *, durable: bool = True) -> None:
    """Atomically replace ``path`` with ``entries`` (rows of integers). ``durable=False`` skips
    both fsyncs, for a file whose loss or tear after a power cut only costs work: a torn one no
    longer matches its entry count and reads as None."""
    lines = [str(VERSION), str(len(entries))] + [" ".join(map(str, row)) for row in entries]
    data = memoryview(("\n".join(lines) + "\n").encode())
    tmp = path.with_name(path.name + TMP_SUFFIX)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        try:
            while data:
                data = data[os.write(fd, data):]
            if durable:
                fsync(fd, tmp)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise
    if durable:
        fsync_dir(path.parent)


def read_entries(path: Path, width: int) -> Optional[list[tuple[int, ...]]]:
    """The rows of ``path`` (each ``width`` integers), or None if it is missing or malformed."""
    try:
        lines = path.read_text().split("\n")
        if lines[-1] == "":
            lines.pop()
        if int(lines[0]) != VERSION or int(lines[1]) != len(lines) - 2:
            raise ValueError("bad version or entry count")
        rows = [tuple(int(x) for x in line.split()) for line in lines[2:]]
        if any(len(row) != width for row in rows):
            raise ValueError(f"expected {width} numbers per entry")
        return rows
    except FileNotFoundError:
        return None
    except (ValueError, IndexError, UnicodeDecodeError) as e:
        _log.warning("ignoring malformed checkpoint %s: %s", path, e)
        return None


def write_offset(path: Path, offset: int) -> None:
    write_entries(path, [(offset,)])


def read_offset(path: Path) -> Optional[int]:
    rows = read_entries(path, 1)
    return rows[0][0] if rows and len(rows) == 1 else None


def fsync_dir(directory: Path) -> None:
    """Make renames and unlinks in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        fsync(fd, directory)
    finally:
        os.close(fd)
