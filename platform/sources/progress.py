"""Records a streaming query has not read yet, from its progress (``query.lastProgress``).

Spark's Kafka source puts ``minOffsetsBehindLatest``/``maxOffsetsBehindLatest``/
``avgOffsetsBehindLatest`` into each progress's ``sources[].metrics``. A Python data source cannot:
in pyspark 4.2 ``PythonMicroBatchStream`` does not implement ``ReportsSourceMetrics`` and the
Python streaming-source protocol has no call for source metrics, so that map stays empty. What
it can report is the latest offset (``reportLatestOffset``: the high watermarks the micro-batch
was planned against), which Spark puts in ``sources[].latestOffset`` beside ``endOffset``; the
difference is how far behind the latest offset each partition was when the batch ended.
For lag over time in Prometheus, read with ``groupId`` (docs/operations.md).
"""
from __future__ import annotations

import json
from typing import Any, Mapping

from ember.sources.offsets import offsets_from_json


def _offsets(value: Any) -> dict[tuple[str, int], int]:
    if value is None:
        return {}
    return offsets_from_json(json.loads(value) if isinstance(value, str) else value)


def offsets_behind_latest(progress: Mapping[str, Any]) -> dict[tuple[str, int], int]:
    """``{(topic, partition): records}`` between each partition's end offset in this micro-batch
    and the latest offset its source saw, over the sources whose offsets have ember's shape."""
    behind: dict[tuple[str, int], int] = {}
    for source in progress.get("sources", []):
        try:
            end, latest = _offsets(source.get("endOffset")), _offsets(source.get("latestOffset"))
        except (TypeError, ValueError):
            continue   # another kind of source in the same query
        for tp, offset in latest.items():
            if tp in end:
                behind[tp] = max(0, offset - end[tp])
    return behind
