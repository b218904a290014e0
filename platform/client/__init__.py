"""The public Python client API of ember (kafka-python style names and keyword arguments).

    from ember.client import Admin, Producer, Consumer, TopicPartition

``Consumer`` is the group-aware consumer of ``ember.groups.consumer``, which itself builds on
``ember.client.consumer``; it is imported on first use (PEP 562) so that importing either
package first works without a circular import.
"""
from typing import Any

from ember.client.admin import Admin, ElectionResult, PartitionDescription, TopicDescription
from ember.client.futures import FutureRecordMetadata
from ember.client.producer import Producer
from ember.client.types import (BatchMetadata, ConsumerRecord, OffsetAndMetadata, OffsetAndTimestamp,
                                RecordMetadata, TopicPartition)

__all__ = ["Admin", "Producer", "Consumer", "TopicPartition", "RecordMetadata", "ConsumerRecord",
           "OffsetAndTimestamp", "OffsetAndMetadata", "ConsumerRebalanceListener", "BatchMetadata",
           "FutureRecordMetadata", "TopicDescription", "PartitionDescription", "ElectionResult"]

_GROUP_CONSUMER_NAMES = {"Consumer": "GroupConsumer", "ConsumerRebalanceListener": "ConsumerRebalanceListener"}


def __getattr__(name: str) -> Any:
    if name in _GROUP_CONSUMER_NAMES:
        from ember.groups import consumer
        return getattr(consumer, _GROUP_CONSUMER_NAMES[name])
    raise AttributeError(f"module 'ember.client' has no attribute {name!r}")
