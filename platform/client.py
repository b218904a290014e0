"""The public Python client API of ember (kafka-python style names and keyword arguments).

    from ember.client import Admin, Producer, Consumer, TopicPartition
"""
from ember.groups.consumer import ConsumerRebalanceListener
from ember.groups.consumer import GroupConsumer as Consumer
from ember.ingest.admin import Admin, ElectionResult, PartitionDescription, TopicDescription
from ember.ingest.client_types import (BatchMetadata, ConsumerRecord, OffsetAndMetadata, OffsetAndTimestamp,
                                       RecordMetadata, TopicPartition)
from ember.ingest.futures import FutureRecordMetadata
from ember.ingest.producer import Producer

__all__ = ["Admin", "Producer", "Consumer", "TopicPartition", "RecordMetadata", "ConsumerRecord",
           "OffsetAndTimestamp", "OffsetAndMetadata", "ConsumerRebalanceListener", "BatchMetadata",
           "FutureRecordMetadata", "TopicDescription", "PartitionDescription", "ElectionResult"]
