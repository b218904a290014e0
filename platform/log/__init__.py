"""ember.log — the partition log: segments, indexes, retention, recovery (the storage engine).

See docs/log.md. The broker uses ``Log``; Spark executors read committed data directly with
``read_offset_range``. The batch format the log stores is ``ember.record``'s.
"""
from ember.log.config import TOPIC_CONFIGS, LogConfig
from ember.log.log import AppendResult, FetchSlice, FsyncNeeded, Log
from ember.log.reader import read_offset_range

__all__ = ["TOPIC_CONFIGS", "LogConfig", "AppendResult", "FetchSlice", "FsyncNeeded", "Log", "read_offset_range"]
