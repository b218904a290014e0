"""The broker process's logging: ``broker.log`` sits on the log disk, so a full disk must not
turn every log line into a traceback on stderr (which the launcher also writes to that disk)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = """
import errno, logging, os, sys
from pathlib import Path
from ember.commands.broker import setup_logging

class FullDisk:
    def write(self, text):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    def flush(self):
        pass

setup_logging(Path(sys.argv[1]))
for handler in logging.getLogger().handlers:
    if isinstance(handler, logging.FileHandler):
        handler.stream = FullDisk()
for i in range(3):
    logging.getLogger("ember.test").warning("line %d on a full disk", i)
"""


def test_lines_the_full_log_disk_refuses_are_dropped_without_a_traceback(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "Logging error" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.count("on a full disk") == 3     # stderr (another disk, maybe) still gets them
