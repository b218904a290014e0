"""The 61-byte batch header every stored batch starts with, ember's (magic 1) and Kafka's (magic 2) alike.

Both formats put the same fields at the same places (Kafka's RecordBatch v2 layout), so the log validates,
assigns offsets, indexes and deduplicates a batch from its header alone, whatever its payload holds.
docs/log.md ("Batch format") has the table.
"""
from __future__ import annotations

import struct
from typing import NamedTuple, Optional, Union

MAGIC = 1          # ember's batches: an Arrow IPC payload, CRC-32 (zlib's)
KAFKA_MAGIC = 2    # Kafka's RecordBatch v2, stored as its producer sent it: CRC-32C
LOG_OVERHEAD = 12  # base_offset + batch_length: the bytes batch_length does not count
HEADER_SIZE = 61
CRC_START = 21  # first byte covered by the CRC (attributes)
NO_PRODUCER_ID = -1
NO_EPOCH = -1
NO_SEQUENCE = -1

_HEADER = struct.Struct(">qiibIhiqqqhii")
_BASE_OFFSET = struct.Struct(">q")
_LEADER_EPOCH = struct.Struct(">i")
_LEADER_EPOCH_POS = 12
assert _HEADER.size == HEADER_SIZE

CODECS = {"none": 0, "lz4": 1, "zstd": 2}
#: Kafka's ``compression.type`` values: the payload codec each is stored in and the Kafka codec bits it
#: sets. Arrow's IPC format compresses only with lz4 frames and zstd, so gzip is stored as zstd and
#: snappy as lz4; the header remembers gzip or snappy, and Kafka consumers get the batch back in it.
COMPRESSION_TYPES = {"none": ("none", 0), "gzip": ("zstd", 1), "snappy": ("lz4", 2), "lz4": ("lz4", 0),
                     "zstd": ("zstd", 0)}
ARROW_CODECS = {0: None, 1: "lz4", 2: "zstd"}
#: Kafka's codec numbers (attributes bits 0-2 of a magic-2 batch) and their ``compression.type`` names
KAFKA_CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
TRANSACTIONAL_FLAG = 0x10   # Kafka v2 attributes bit 4
CONTROL_FLAG = 0x20         # Kafka v2 attributes bit 5
CODEC_MASK = 0x07
LOG_APPEND_TIME_FLAG = 0x08
#: Bits 8-10 of an ember batch (magic 1): the Kafka codec (1 gzip .. 4 zstd) Kafka consumers get it in,
#: set by ember's producer for gzip and snappy (which Arrow cannot store); 0: served by its Arrow codec.
KAFKA_CODEC_SHIFT = 8

Buffer = Union[bytes, bytearray, memoryview]


class BatchHeader(NamedTuple):
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    first_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @classmethod
    def parse(cls, buf: Buffer, pos: int = 0) -> "BatchHeader":
        return cls._make(_HEADER.unpack_from(buf, pos))

    def pack(self) -> bytes:
        return _HEADER.pack(*self)

    @property
    def size(self) -> int:
        """Bytes the whole batch occupies, header included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def codec(self) -> int:
        return self.attributes & CODEC_MASK

    @property
    def kafka_codec(self) -> int:
        return (self.attributes >> KAFKA_CODEC_SHIFT) & CODEC_MASK

    @property
    def is_kafka(self) -> bool:
        """A Kafka RecordBatch v2, stored as its producer sent it (offsets and epoch patched)."""
        return self.magic == KAFKA_MAGIC

    @property
    def log_append_time(self) -> bool:
        return bool(self.attributes & LOG_APPEND_TIME_FLAG)

    @property
    def has_gaps(self) -> bool:
        """Whether offsets inside the batch skip some (a Kafka batch the log cleaner rewrote):
        record ``i`` is then not at ``base_offset + i``. Producers' batches never have gaps."""
        return self.last_offset_delta != self.record_count - 1

    @property
    def last_sequence(self) -> int:
        return increment_sequence(self.base_sequence, self.last_offset_delta)

    def problem(self) -> Optional[str]:
        """Why this header cannot describe a valid batch, or None; needs no payload bytes."""
        if self.magic not in (MAGIC, KAFKA_MAGIC):
            return f"unsupported magic {self.magic} (1: ember's Arrow batches, 2: Kafka's RecordBatch v2)"
        if self.batch_length < HEADER_SIZE - LOG_OVERHEAD:
            return f"invalid batch length {self.batch_length}"
        # a Kafka batch the log cleaner rewrote keeps its offsets: fewer records than its offset span,
        # none at all where it must stay for its offsets (a segment's end) or producer state
        if self.magic == KAFKA_MAGIC:
            spans = self.record_count >= 0 and self.last_offset_delta >= max(self.record_count - 1, 0)
        else:
            spans = self.record_count > 0 and self.last_offset_delta == self.record_count - 1
        if not spans:
            return (f"invalid record count {self.record_count} "
                    f"(last offset delta {self.last_offset_delta})")
        if self.codec not in (KAFKA_CODECS if self.magic == KAFKA_MAGIC else ARROW_CODECS):
            return f"unknown compression codec {self.codec}"
        if self.base_offset < 0:
            return f"negative base offset {self.base_offset}"
        return None


def increment_sequence(sequence: int, increment: int) -> int:
    """Producer sequences wrap to 0 after int32 max, as in Kafka."""
    return (sequence + increment) % (1 << 31)


def patch_base_offset(buf: Union[bytearray, memoryview], base_offset: int, pos: int = 0) -> None:
    """Set a batch's base offset in place (not covered by the CRC)."""
    _BASE_OFFSET.pack_into(buf, pos, base_offset)


def patch_leader_epoch(buf: Union[bytearray, memoryview], epoch: int, pos: int = 0) -> None:
    """Set a batch's partition leader epoch in place (not covered by the CRC)."""
    _LEADER_EPOCH.pack_into(buf, pos + _LEADER_EPOCH_POS, epoch)
