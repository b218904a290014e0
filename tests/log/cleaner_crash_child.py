"""Child process of the cleaner crash test: cleans the log in PARTITION_DIR and SIGKILLs itself at
its KILL_AT-th file-system step (rename, replace, fsync, mkdir, rmdir, utime), or prints how many
steps the whole cleaning took when it finishes first.

Usage: cleaner_crash_child.py PARTITION_DIR KILL_AT
"""
from __future__ import annotations

import os
import signal
import sys

from ember.log import Log, LogConfig, cleaner

#: delete.retention.ms 0: cleaned segments may be merged at once (no tombstone clock to keep)
CONFIG = LogConfig.from_properties({"segment.bytes": 1024, "cleanup.policy": "compact", "file.delete.delay.ms": 0,
                                    "delete.retention.ms": 0})
STEPS = ("rename", "replace", "fsync", "mkdir", "rmdir", "utime")


def main(directory: str, kill_at: int) -> None:
    log = Log.open(directory, CONFIG)
    taken = 0

    def counted(name: str):
        real = getattr(os, name)

        def step(*args, **kwargs):
            nonlocal taken
            taken += 1
            if taken == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
            return real(*args, **kwargs)
        return step
    for name in STEPS:
        setattr(os, name, counted(name))
    cleaner.clean(log, dedupe_buffer_bytes=1 << 30)
    sys.stdout.write(f"done {taken}\n")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
