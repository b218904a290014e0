"""A broker raises its soft limit on open files to the hard limit (a file per partition replica)."""
from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import resource
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
from ember.commands.broker import raise_open_file_limit
raise_open_file_limit()
print(resource.getrlimit(resource.RLIMIT_NOFILE)[0] == hard, hard)
"""


def test_the_soft_open_file_limit_is_raised_to_the_hard_limit() -> None:
    result = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60, check=True)
    raised, hard = result.stdout.split()
    assert raised == "True" and int(hard) > 256
