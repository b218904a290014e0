"""ember.log — the partition log: segments, indexes, batch format, retention, recovery.

See docs/log.md. The broker uses ``Log``; clients build and decode batches with the ``batch``
helpers; Spark executors read committed data directly with ``read_offset_range``.
"""
from ember.log.batch import (DECODED_SCHEMA, HEADER_SIZE, RECORD_SCHEMA, BatchHeader, Record, build_batch,
                             decode_batches, iter_batches, to_table)
from ember.log.config import TOPIC_CONFIGS, ConfigDef, LogConfig
from ember.log.log import AppendResult, FetchSlice, Log
from ember.log.reader import read_offset_range

__all__ = [
    "DECODED_SCHEMA", "HEADER_SIZE", "RECORD_SCHEMA", "BatchHeader", "Record", "build_batch",
    "decode_batches", "iter_batches", "to_table", "TOPIC_CONFIGS", "ConfigDef", "LogConfig",
    "AppendResult", "FetchSlice", "Log", "read_offset_range",
]
