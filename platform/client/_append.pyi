"""Types of the C extension ember.client._append (platform/client/_append.c); see ember.client.accumulator."""
from concurrent.futures import Future
from threading import Lock
from typing import Any, Callable

def murmur2(data: bytes | bytearray | memoryview) -> int: ...

class RecordFuture:
    _batch: Future[Any]
    _index: int
    _timestamp: int
    def __init__(self, batch: Future[Any], index: int, timestamp: int) -> None: ...

class BatchRecords:
    keys: list[Any]
    values: list[Any]
    timestamps: list[int]
    headers: list[Any]
    future: Future[Any]
    size: int
    count: int

class RecordAppender:
    used: int
    closed: int
    def __init__(self, open: dict[Any, Any], lock: Lock, batch_size: int, buffer_memory: int,
                 future_type: type[RecordFuture]) -> None: ...
    def configure_send(self, partitions: dict[str, Any], sticky: dict[str, int], max_request_size: int,
                       record_overhead: int, batch_overhead: int, slow: Callable[..., Any]) -> None: ...
    def close(self) -> None: ...
    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...
