"""The public Python client API of ember (kafka-python style names and keyword arguments).

    from ember.client import Admin, Producer, Consumer, TopicPartition
"""
from ember.client.admin import Admin, ElectionResult, PartitionDescription, TopicDescription
from ember.client.consumer import Consumer, ConsumerRebalanceListener
from ember.client.futures import FutureRecordMetadata
from ember.client.group_admin import GroupDescription, GroupListing, MemberDescription, PartitionLag
from ember.client.group_metadata import ConsumerGroupMetadata
from ember.client.producer import Producer
from ember.wire.types import BatchMetadata, ConsumerRecord, OffsetAndMetadata, OffsetAndTimestamp, RecordMetadata, TopicPartition

__all__ = ["Admin", "Producer", "Consumer", "TopicPartition", "RecordMetadata", "ConsumerRecord",
           "OffsetAndTimestamp", "OffsetAndMetadata", "ConsumerRebalanceListener", "BatchMetadata",
           "FutureRecordMetadata", "TopicDescription", "PartitionDescription", "ElectionResult",
           "GroupListing", "GroupDescription", "MemberDescription", "PartitionLag", "ConsumerGroupMetadata"]
