"""The streaming reader's offset decisions on the driver, against a scripted cluster (no Spark
query): partitions whose high watermark fell below the query's offsets (re-created topics)."""
from __future__ import annotations

import logging

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from ember.errors import EmberError
from ember.sources import stream_reader
from ember.sources.options import reader_options
from ember.sources.planning import DataLossError, OffsetRange
from ember.sources.stream_reader import EmberStreamReader

T0, T1 = ("t", 0), ("t", 1)


class ScriptedCluster:
    """Answers ``latest`` from a list of answers (the last one repeats), ``earliest`` from a dict."""

    def __init__(self, latest: list[dict], earliest: dict) -> None:
        self.answers, self.log_start = latest, earliest

    def replicas(self) -> dict:
        return {tp: (1,) for tp in self.log_start}

    def latest(self, partitions) -> dict:
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        return {tp: answer[tp] for tp in partitions}

    def earliest(self, partitions) -> dict:
        return {tp: self.log_start[tp] for tp in partitions}

    def average_record_bytes(self, positions) -> float:
        return 100.0    # for maxPartitionBytes (off in these tests: they look at the ranges themselves)


def stream(cluster: ScriptedCluster, fail_on_data_loss: bool, monkeypatch) -> EmberStreamReader:
    monkeypatch.setattr(stream_reader, "LATEST_RETRY_INTERVAL_S", 0)
    reader = EmberStreamReader(reader_options({"bootstrap": "h:1", "topic": "t", "maxPartitionBytes": "0",
                                               "failOnDataLoss": str(fail_on_data_loss).lower()}, streaming=True))
    reader._cluster = cluster
    return reader


CHECKPOINT = {"t": {"0": 10, "1": 4}}  # partition 0 was re-created: 3 records now, below offset 10


def test_recreated_partition_fails_the_query_naming_its_offsets(monkeypatch) -> None:
    reader = stream(ScriptedCluster([{T0: 3, T1: 6}], {T0: 0, T1: 0}), True, monkeypatch)
    with pytest.raises(DataLossError, match="topic 't' partition 0 now ends at offset 3, below the query's "
                                            "offset 10.*failOnDataLoss=false") as failure:
        reader.latestOffset(CHECKPOINT, ReadAllAvailable())
    assert isinstance(failure.value, EmberError) and "partition 1" not in str(failure.value)


def test_recreated_partition_is_read_again_from_earliest_without_fail_on_data_loss(monkeypatch, caplog) -> None:
    reader = stream(ScriptedCluster([{T0: 3, T1: 6}], {T0: 0, T1: 0}), False, monkeypatch)
    end = reader.latestOffset(CHECKPOINT, ReadAllAvailable())
    assert end == {"t": {"0": 3, "1": 6}}
    with caplog.at_level(logging.WARNING, logger=stream_reader.__name__):
        assert reader.partitions(CHECKPOINT, end) == [OffsetRange("t", 0, 0, 3, (1,)), OffsetRange("t", 1, 4, 6, (1,))]
    assert "partition 0 was planned to end at offset 3, below the query's offset 10" in caplog.text
    # rate limits count the re-read partition from its earliest offset: 2 records of 5 admitted
    limited = stream(ScriptedCluster([{T0: 3, T1: 6}], {T0: 0, T1: 0}), False, monkeypatch)
    end = limited.latestOffset(CHECKPOINT, ReadMaxRows(2))
    assert end["t"]["0"] < 10 and end["t"]["0"] + end["t"]["1"] - 4 == 2


def test_a_high_watermark_trailing_for_a_moment_is_asked_again(monkeypatch) -> None:
    """After a leader failover the new leader's high watermark may trail the old one's briefly."""
    reader = stream(ScriptedCluster([{T0: 3, T1: 6}, {T0: 8, T1: 6}, {T0: 12, T1: 6}], {T0: 0, T1: 0}),
                    True, monkeypatch)
    assert reader.latestOffset(CHECKPOINT, ReadAllAvailable()) == {"t": {"0": 12, "1": 6}}
