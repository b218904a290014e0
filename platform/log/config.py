"""Topic-level log configuration under Kafka's property names.

``TOPIC_CONFIGS`` is the single table of known topic configs (name, type, default, doc, allowed
values); the broker's DescribeConfigs/AlterConfigs and the CLI read it, and ``LogConfig`` is
built and validated from it, so a name or range is defined in exactly one place.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional

from ember import errors
from ember.wire.config_def import INT32_MAX, INT64_MAX, ConfigDef


def _int(name: str, default: Optional[int], doc: str, minimum: int, maximum: int = INT32_MAX,
         **kw: Any) -> ConfigDef:
    return ConfigDef(name, "int" if maximum <= INT32_MAX else "long", default, doc,
                     minimum=minimum, maximum=maximum, **kw)


_DAY_MS = 24 * 3600 * 1000
TOPIC_CONFIGS: dict[str, ConfigDef] = {d.name: d for d in (
    _int("segment.bytes", 1 << 30, "Roll a new segment once the active one would exceed this size.", 14),
    _int("segment.ms", 7 * _DAY_MS, "Roll a new segment once its records span this much time.", 1,
         INT64_MAX),
    _int("segment.index.bytes", 10 * 1024 * 1024,
         "Maximum size of a segment's offset and time index; a full index rolls the segment.", 12),
    _int("index.interval.bytes", 4096, "Add an index entry after this many bytes of log.", 0),
    _int("retention.ms", 7 * _DAY_MS,
         "Delete sealed segments whose newest record is older than this; -1 keeps them forever.", -1,
         INT64_MAX),
    _int("retention.bytes", -1,
         "Delete the oldest sealed segments while the partition is larger than this; -1 = no limit.",
         -1, INT64_MAX),
    _int("flush.messages", None,
         "fsync after this many appended records; none = only on segment roll and the flush.ms timer.",
         1, INT64_MAX, nullable=True),
    _int("flush.ms", 1000, "fsync unflushed data when the broker's flush timer finds it this old.", 0,
         INT64_MAX),
    _int("max.message.bytes", 1048588, "Largest record batch (header included) the topic accepts.", 0),
    _int("file.delete.delay.ms", 60000,
         "How long a deleted segment's files linger (renamed .deleted) for in-flight reads.", 0,
         INT64_MAX),
    ConfigDef("message.timestamp.type", "string", "CreateTime",
              "CreateTime keeps the producer's timestamps; LogAppendTime stamps batches on append.",
              choices=("CreateTime", "LogAppendTime")),
    _int("min.insync.replicas", 1, "Fewest in-sync replicas an acks=all write needs.", 1),
    ConfigDef("unclean.leader.election.enable", "boolean", False,
              "Allow an out-of-sync replica to become leader (may lose acknowledged records)."),
    ConfigDef("cleanup.policy", "list", "delete",
              "delete: drop old segments by retention.ms / retention.bytes; compact: keep the latest record "
              "of each key (the log cleaner; records need keys); both: compact, and drop old segments too.",
              choices=("delete", "compact")),
    ConfigDef("min.cleanable.dirty.ratio", "double", 0.5,
              "Clean a compacted log once this share of it was written since its last cleaning.",
              minimum=0.0, maximum=1.0),
    _int("min.compaction.lag.ms", 0, "A record stays uncompacted at least this long after it was written.",
         0, INT64_MAX),
    _int("max.compaction.lag.ms", INT64_MAX,
         "A record is compacted at most this long after it was written, however clean the log is.", 1,
         INT64_MAX),
    _int("delete.retention.ms", _DAY_MS,
         "How long a tombstone (a record with a null value) stays after its log was cleaned, so a consumer "
         "reading from the start sees the delete.", 0, INT64_MAX),
    _int("producer.id.expiration.ms", 86_400_000,
         "Forget an idempotent producer this long after its last batch's timestamp; later retries "
         "of its batches are no longer deduplicated (Kafka's broker setting, per topic here).",
         1, INT64_MAX),
    ConfigDef("compression.type", "string", "producer",
              "Codec of stored batches; producer keeps what the producer sent (brokers never re-encode "
              "payloads, so broker-side recompression is not offered).",
              choices=("producer",), unsupported=("none", "lz4", "zstd", "gzip", "snappy", "uncompressed")),
)}


@dataclass(frozen=True)
class LogConfig:
    """Validated topic config of one partition log (field = property name with '_' for '.')."""
    segment_bytes: int = TOPIC_CONFIGS["segment.bytes"].default
    segment_ms: int = TOPIC_CONFIGS["segment.ms"].default
    segment_index_bytes: int = TOPIC_CONFIGS["segment.index.bytes"].default
    index_interval_bytes: int = TOPIC_CONFIGS["index.interval.bytes"].default
    retention_ms: int = TOPIC_CONFIGS["retention.ms"].default
    retention_bytes: int = TOPIC_CONFIGS["retention.bytes"].default
    flush_messages: Optional[int] = TOPIC_CONFIGS["flush.messages"].default
    flush_ms: int = TOPIC_CONFIGS["flush.ms"].default
    max_message_bytes: int = TOPIC_CONFIGS["max.message.bytes"].default
    file_delete_delay_ms: int = TOPIC_CONFIGS["file.delete.delay.ms"].default
    message_timestamp_type: str = TOPIC_CONFIGS["message.timestamp.type"].default
    min_insync_replicas: int = TOPIC_CONFIGS["min.insync.replicas"].default
    unclean_leader_election_enable: bool = TOPIC_CONFIGS["unclean.leader.election.enable"].default
    cleanup_policy: str = TOPIC_CONFIGS["cleanup.policy"].default
    min_cleanable_dirty_ratio: float = TOPIC_CONFIGS["min.cleanable.dirty.ratio"].default
    min_compaction_lag_ms: int = TOPIC_CONFIGS["min.compaction.lag.ms"].default
    max_compaction_lag_ms: int = TOPIC_CONFIGS["max.compaction.lag.ms"].default
    delete_retention_ms: int = TOPIC_CONFIGS["delete.retention.ms"].default
    producer_id_expiration_ms: int = TOPIC_CONFIGS["producer.id.expiration.ms"].default
    compression_type: str = TOPIC_CONFIGS["compression.type"].default

    def __post_init__(self) -> None:
        for name, definition in TOPIC_CONFIGS.items():
            definition.parse(getattr(self, _field(name)))

    @property
    def compact(self) -> bool:
        """cleanup.policy has compact: the log cleaner keeps each key's latest record."""
        return "compact" in self.cleanup_policy.split(",")

    @property
    def delete(self) -> bool:
        """cleanup.policy has delete: retention.ms and retention.bytes drop old segments."""
        return "delete" in self.cleanup_policy.split(",")

    @classmethod
    def from_properties(cls, properties: Optional[Mapping[str, Any]] = None) -> "LogConfig":
        """Defaults overridden by ``properties`` (Kafka names); unknown names or bad values raise
        ``InvalidConfig``."""
        values = {}
        for name, raw in (properties or {}).items():
            definition = TOPIC_CONFIGS.get(name)
            if definition is None:
                raise errors.InvalidConfig(
                    f"unknown topic config {name!r}; known: {', '.join(TOPIC_CONFIGS)}")
            values[_field(name)] = definition.parse(raw)
        return cls(**values)

    def to_properties(self) -> dict[str, Any]:
        """Every known config under its Kafka name."""
        return {name: getattr(self, _field(name)) for name in TOPIC_CONFIGS}

    def overridden(self, properties: Mapping[str, Any]) -> "LogConfig":
        """A copy with ``properties`` (Kafka names) applied on top of this config."""
        return LogConfig.from_properties({**self.to_properties(), **properties})


def _field(name: str) -> str:
    return name.replace(".", "_")
