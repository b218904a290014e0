"""The log cleaner's metrics, Kafka's names (max-dirty-percent, cleaner-recopy-percent, ...), read
from its state when scraped. Here, beside the broker's other collectors, and not in the cleaner:
only a broker with ``metrics.listen`` imports prometheus_client (and the http.server, urllib and
email modules it loads); the cleaner is in every broker."""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from ember.ingest.log_cleaner import LogCleaner

if TYPE_CHECKING:
    from prometheus_client import Metric


class LogCleanerCollector(Collector):
    def __init__(self, cleaner: LogCleaner) -> None:
        self.cleaner = cleaner

    def collect(self) -> Iterator["Metric"]:
        state = self.cleaner.state

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            family = GaugeMetricFamily(name, doc)
            family.add_metric([], value)
            return family
        yield gauge("ember_log_logcleanermanager_max_dirty_percent",
                    "Dirty share of the dirtiest compacted log (Kafka's max-dirty-percent).", state.max_dirty_percent)
        yield gauge("ember_log_logcleaner_cleaner_recopy_percent",
                    "Bytes written back of those read by the last cleaning (Kafka's cleaner-recopy-percent).",
                    state.last_recopy_percent)
        yield gauge("ember_log_logcleaner_max_clean_time_secs", "Longest cleaning so far (Kafka's max-clean-time-secs).",
                    state.max_clean_time_s)
        since = (time.monotonic() - state.last_run) * 1000 if state.last_run else 0.0
        yield gauge("ember_log_logcleaner_time_since_last_run_ms",
                    "Since the last cleaning ended; 0 before the first (Kafka's time-since-last-run-ms).", since)
        yield gauge("ember_log_logcleaner_dead_thread_count", "Cleaner workers that died (Kafka's DeadThreadCount).",
                    state.dead_workers)
        yield gauge("ember_log_logcleanermanager_uncleanable_partitions_count",
                    "Logs whose cleaning failed and that are skipped until reopened (Kafka's "
                    "uncleanable-partitions-count).", state.uncleanable)
        for name, doc, value in (("ember_log_logcleaner_read_bytes", "Bytes the cleaner read.", state.bytes_read),
                                 ("ember_log_logcleaner_written_bytes", "Bytes the cleaner wrote.", state.bytes_written),
                                 ("ember_log_logcleaner_cleanings", "Cleanings done.", state.cleanings),
                                 ("ember_log_logcleaner_removed_markers", "Transaction markers the cleaner removed "
                                  "(their transactions' records gone, delete.retention.ms past).",
                                  state.markers_removed)):
            counter = CounterMetricFamily(name, doc)
            counter.add_metric([], value)
            yield counter
