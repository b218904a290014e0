"""Security tests reuse the Kafka-client helpers of ``tests/protocol/kafka`` (Kafka's Java tools) and
import the jobs (``jobs/`` is a folder of scripts) to run them against a secure cluster."""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
for folder in (ROOT / "tests" / "protocol" / "kafka", ROOT / "jobs"):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
