"""Security tests reuse the Kafka-client helpers of ``tests/kafka_protocol`` (Kafka's Java tools)."""
from __future__ import annotations

import sys
from pathlib import Path

KAFKA_TESTS = Path(__file__).resolve().parents[1] / "kafka_protocol"
if str(KAFKA_TESTS) not in sys.path:
    sys.path.insert(0, str(KAFKA_TESTS))
