"""Options of the Spark data source ``ember``, parsed once and validated with clear messages.

Names follow Spark's Kafka connector where the meaning is the same, so a Kafka job moves over by
changing ``format("kafka")`` to ``format("ember")`` and ``kafka.bootstrap.servers`` to
``bootstrap``. Options are case-insensitive (Spark lower-cases them).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Mapping, Optional, Union

from ember.errors import EmberError, ErrorCode, InvalidConfig
from ember.security.client import ClientSecurity, options_from_properties
from ember.sources.offsets import EARLIEST, LATEST, PartitionOffsets, offsets_from_json

READ_PATHS = ("auto", "direct", "broker")

OffsetSpec = Union[str, PartitionOffsets]
"""``"earliest"``, ``"latest"`` or explicit offsets per partition (-2 earliest, -1 latest)."""


class OptionError(EmberError, ValueError):
    """An ember source or sink option is missing or malformed.

    An :class:`~ember.errors.EmberError` (so ``except EmberError`` catches every ember failure) and
    still a ``ValueError`` (what it was first), so existing ``except ValueError`` handlers keep working.
    """
    code = ErrorCode.INVALID_CONFIG
    hint = "fix the option and start the read or write again; docs/spark.md lists every option"


#: Default of the option maxPartitionBytes: about this much data per Spark task when small Kafka
#: partitions are packed together (tens of MB: a Python task's start-up is paid per chunk of data,
#: not per partition; bigger partitions are never merged, and minPartitions still splits them).
DEFAULT_MAX_PARTITION_BYTES = 32 * 1024 * 1024


@dataclass(frozen=True)
class ReaderOptions:
    bootstrap: str
    topics: tuple[str, ...]
    topic_pattern: Optional[str]
    starting: OffsetSpec
    ending: OffsetSpec
    starting_timestamp: Optional[int]
    max_records_per_trigger: Optional[int]
    max_bytes_per_trigger: Optional[int]
    min_partitions: Optional[int]
    #: About this many bytes per Spark task when small partitions are packed together (0: never).
    max_partition_bytes: int
    fail_on_data_loss: bool
    include_headers: bool
    group_id: Optional[str]
    read_path: str
    storage_root: Optional[str]
    fetch_timeout_ms: int
    #: batch reads: each key's latest record per partition, tombstones applied (a compacted topic as a table)
    latest_by_key: bool = False
    #: TLS settings of the clients the source creates (options ``security.protocol``, ``ssl.*``).
    security: ClientSecurity = ClientSecurity()
    #: read_committed (the default): up to each partition's last stable offset, aborted transactions
    #: left out; read_uncommitted: up to the high watermark, every record
    isolation_level: str = "read_committed"

    @property
    def committed(self) -> bool:
        return self.isolation_level == "read_committed"

    def subscribes(self, topic: str) -> bool:
        """Whether ``topic`` belongs to this source (listed, or matching ``topicPattern``)."""
        if self.topic_pattern is not None:
            return re.fullmatch(self.topic_pattern, topic) is not None
        return topic in self.topics

    def describe(self) -> str:
        return f"topicPattern {self.topic_pattern!r}" if self.topic_pattern else f"topic {','.join(self.topics)}"


@dataclass(frozen=True)
class WriterOptions:
    bootstrap: str
    topic: Optional[str]
    acks: str
    exactly_once: bool
    security: ClientSecurity = ClientSecurity()


def reader_options(options: Mapping[str, str], *, streaming: bool) -> ReaderOptions:
    """Parse reader options; batch and streaming differ only in defaults and ``endingOffsets``."""
    options = _lower(options)
    topics = tuple(t.strip() for t in options.get("topic", "").split(",") if t.strip())
    pattern = options.get("topicpattern")
    if bool(topics) == bool(pattern):
        raise OptionError("set exactly one of the options 'topic' (comma-separated names) and 'topicPattern' (a regex)")
    if pattern is not None:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise OptionError(f"topicPattern {pattern!r} is not a valid regular expression: {exc}") from None
    latest_by_key = _bool(options, "latestByKey", False)
    if streaming and latest_by_key:
        raise OptionError("latestByKey is for batch reads only (spark.read): a streaming query sees every update")
    if latest_by_key and "minpartitions" in options:
        raise OptionError("latestByKey reads each partition in one task (all records of a key are in its partition); "
                          "drop minPartitions")
    if streaming and "endingoffsets" in options:
        raise OptionError("endingOffsets is for batch reads only; a streaming query runs until stopped "
                          "(use trigger(availableNow=True) to stop at the current end)")
    read_path = options.get("readpath", "auto").lower()
    if read_path not in READ_PATHS:
        raise OptionError(f"readPath must be one of {', '.join(READ_PATHS)}, not {read_path!r}")
    if read_path == "direct" and not options.get("storageroot"):
        raise OptionError("readPath=direct needs the option storageRoot (the directory holding the brokers' data dirs)")
    ending = _offset_spec(options.get("endingoffsets", "latest"), "endingOffsets")
    if ending == "earliest" or (isinstance(ending, dict) and EARLIEST in ending.values()):
        raise OptionError("endingOffsets cannot be earliest (-2): use latest (-1) or an explicit offset")
    return ReaderOptions(
        bootstrap=_required(options, "bootstrap"),
        topics=topics,
        topic_pattern=pattern,
        starting=_offset_spec(options.get("startingoffsets", "latest" if streaming else "earliest"), "startingOffsets"),
        ending=ending,
        starting_timestamp=_optional_int(options, "startingTimestamp", minimum=0),
        max_records_per_trigger=_optional_int(options, "maxRecordsPerTrigger", minimum=1),
        max_bytes_per_trigger=_optional_int(options, "maxBytesPerTrigger", minimum=1),
        min_partitions=_optional_int(options, "minPartitions", minimum=1),
        max_partition_bytes=_max_partition_bytes(options),
        fail_on_data_loss=_bool(options, "failOnDataLoss", True),
        include_headers=_bool(options, "includeHeaders", False),
        group_id=options.get("groupid"),
        read_path=read_path,
        storage_root=options.get("storageroot"),
        fetch_timeout_ms=_optional_int(options, "fetchTimeoutMs", minimum=1) or 60_000,
        latest_by_key=latest_by_key,
        security=_security(options),
        isolation_level=_isolation_level(options),
    )


def _isolation_level(options: Mapping[str, str]) -> str:
    """Option ``isolationLevel`` (or ``kafka.isolation.level``, as a Kafka connector job sets it)."""
    value = options.get("isolationlevel", options.get("kafka.isolation.level", "read_committed")).strip().lower()
    if value not in ("read_committed", "read_uncommitted"):
        raise OptionError(f"isolationLevel must be read_committed or read_uncommitted, not {value!r}")
    return value


def _max_partition_bytes(options: Mapping[str, str]) -> int:
    value = _optional_int(options, "maxPartitionBytes", minimum=0)
    return DEFAULT_MAX_PARTITION_BYTES if value is None else value


def wants_headers(options: Mapping[str, str]) -> bool:
    """Whether the read schema has a ``headers`` column (needed before the other options are checked)."""
    return _bool(_lower(options), "includeHeaders", False)


def writer_options(options: Mapping[str, str]) -> WriterOptions:
    options = _lower(options)
    acks = options.get("acks", "all")
    if acks not in ("0", "1", "all", "-1"):
        raise OptionError(f"acks must be 0, 1 or all, not {acks!r}")
    return WriterOptions(bootstrap=_required(options, "bootstrap"), topic=options.get("topic"),
                         acks=acks, exactly_once=_bool(options, "exactlyOnce", True), security=_security(options))


def _security(options: Mapping[str, str]) -> ClientSecurity:
    """``security.protocol`` and ``ssl.*`` options (kafka-python's names with dots, e.g. ``ssl.cafile``,
    or Java's PEM names, e.g. ``ssl.truststore.location``) as the clients' TLS settings."""
    try:
        return ClientSecurity.from_options(options_from_properties(options, "ember source options"), "ember source")
    except InvalidConfig as exc:
        raise OptionError(str(exc)) from None


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {key.lower(): value for key, value in options.items()}


def _offset_spec(text: str, name: str) -> OffsetSpec:
    text = text.strip()
    if text.lower() in ("earliest", "latest"):
        return text.lower()
    try:
        offsets = offsets_from_json(json.loads(text))
    except (ValueError, TypeError, AttributeError):
        raise OptionError(f"{name} must be earliest, latest or JSON like "
                          f'{{"topic": {{"0": 23, "1": -2}}}}, not {text!r}') from None
    bad = {tp: o for tp, o in offsets.items() if o < LATEST - 1}
    if bad:
        raise OptionError(f"{name} has invalid offsets {bad}: use >= 0, -1 (latest) or -2 (earliest)")
    return offsets


def _required(options: Mapping[str, str], name: str) -> str:
    value = options.get(name.lower(), "").strip()
    if not value:
        raise OptionError(f"option {name!r} is required (HOST:PORT[,HOST:PORT...] of the ember brokers)")
    return value


def _optional_int(options: Mapping[str, str], name: str, *, minimum: int) -> Optional[int]:
    text = options.get(name.lower())
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        raise OptionError(f"option {name} must be an integer, not {text!r}") from None
    if value < minimum:
        raise OptionError(f"option {name} must be >= {minimum}, not {value}")
    return value


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    text = options.get(name.lower())
    if text is None:
        return default
    if text.strip().lower() not in ("true", "false"):
        raise OptionError(f"option {name} must be true or false, not {text!r}")
    return text.strip().lower() == "true"
