"""Job tests import the jobs (``jobs/`` is a folder of scripts, not a package) and the data helpers
of the source tests (``tests/sources/spark_helpers.py``)."""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
for folder in (ROOT / "jobs", ROOT / "tests" / "sources"):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
