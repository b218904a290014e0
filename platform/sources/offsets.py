"""Partition offsets as Spark checkpoints store them: ``{"topic": {"partition": next_offset}}``.

The same JSON shape is accepted by ``startingOffsets``/``endingOffsets`` (where -2 means earliest
and -1 latest, as in Kafka), so an offset copied out of a checkpoint can be pasted into an option.
"""
from __future__ import annotations

from typing import Mapping

TopicPartition = tuple[str, int]
PartitionOffsets = dict[TopicPartition, int]
#: The checkpoint form, ``{"topic": {"partition": next_offset}}``: what Spark's stream reader API passes around.
JsonOffsets = dict[str, dict[str, int]]

EARLIEST = -2
LATEST = -1


def offsets_to_json(offsets: Mapping[TopicPartition, int]) -> JsonOffsets:
    """The checkpoint form: topics and partitions sorted so equal offsets serialise equally."""
    result: JsonOffsets = {}
    for (topic, partition), offset in sorted(offsets.items()):
        result.setdefault(topic, {})[str(partition)] = int(offset)
    return result


def offsets_from_json(data: Mapping[str, Mapping[str, int]]) -> PartitionOffsets:
    """Inverse of :func:`offsets_to_json`; raises ValueError/TypeError on another shape."""
    if not isinstance(data, Mapping):
        raise TypeError("offsets must be a JSON object of topics")
    offsets: PartitionOffsets = {}
    for topic, partitions in data.items():
        if not isinstance(partitions, Mapping):
            raise TypeError(f"offsets of topic {topic!r} must be an object of partitions")
        for partition, offset in partitions.items():
            if isinstance(offset, bool) or not isinstance(offset, int):
                raise TypeError(f"offset of {topic}/{partition} must be an integer")
            offsets[(topic, int(partition))] = offset
    return offsets

