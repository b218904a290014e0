"""The public Python client API of ember (kafka-python style names and keyword arguments).

    from ember.client import Admin, Producer, Consumer, TopicPartition
"""
from ember.ingest.admin import Admin, PartitionDescription, TopicDescription
from ember.ingest.client_types import (BatchMetadata, ConsumerRecord, OffsetAndTimestamp, RecordMetadata,
                                       TopicPartition)
from ember.ingest.consumer import Consumer
from ember.ingest.futures import FutureRecordMetadata
from ember.ingest.producer import Producer

__all__ = ["Admin", "Producer", "Consumer", "TopicPartition", "RecordMetadata", "ConsumerRecord",
           "OffsetAndTimestamp", "BatchMetadata", "FutureRecordMetadata", "TopicDescription",
           "PartitionDescription"]
