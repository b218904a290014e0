"""What ``ember top`` shows: per-broker and per-topic rates and per-group lag, from two scrapes of
every broker's ``/metrics`` (rates are the counters' growth between them)."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Optional

from ember.launcher.scrape import Samples, scrape

MB = 1_000_000
BYTES_IN = "ember_server_brokertopicmetrics_bytesin_total"
BYTES_OUT = "ember_server_brokertopicmetrics_bytesout_total"
MESSAGES_IN = "ember_server_brokertopicmetrics_messagesin_total"
REQUESTS = "ember_network_requestmetrics_requests_total"
LAG = "ember_consumergroup_lag"
CLEANINGS = "ember_log_logcleaner_cleanings_total"


@dataclass(frozen=True)
class Scrape:
    """Every broker's samples at one moment (None: its endpoint did not answer)."""
    at: float
    brokers: dict[str, Optional[Samples]]

    @classmethod
    def take(cls, addresses: list[str], timeout_s: float) -> "Scrape":
        brokers: dict[str, Optional[Samples]] = {}
        for address in addresses:
            host, _, port = address.rpartition(":")
            try:
                brokers[address] = scrape(host, int(port), timeout_s)
            except (OSError, ValueError):
                brokers[address] = None
        return cls(time.monotonic(), brokers)


def _rate(now: Samples, before: Optional[Samples], name: str, seconds: float, **labels: str) -> float:
    """Growth per second of the sum of ``name`` samples (0 for a broker that restarted meanwhile)."""
    if before is None or seconds <= 0:
        return 0.0
    return max(0.0, now.total(name, **labels) - before.total(name, **labels)) / seconds


def _topics(samples: Samples) -> set[str]:
    return {dict(key)["topic"] for key in samples.series(MESSAGES_IN)} | \
        {dict(key)["topic"] for key in samples.series(BYTES_OUT)}


def render(before: Scrape, now: Scrape) -> str:
    seconds = now.at - before.at
    lines = [f"ember top  {time.strftime('%H:%M:%S')}  {len(now.brokers)} broker(s), rates over {seconds:.1f} s", "",
             f"{'BROKER':<7}{'ADDRESS':<22}{'STATE':<10}{'REQ/S':>9}{'MSG IN/S':>11}{'MB IN/S':>9}{'MB OUT/S':>9}"
             f"{'LEADERS':>9}{'PARTS':>7}{'UNDER-REPL':>12}{'UNDER-MIN-ISR':>15}"]
    offline = 0
    for address, samples in now.brokers.items():
        if samples is None:
            lines.append(f"{'?':<7}{address:<22}{'DOWN':<10}")
            continue
        old = before.brokers.get(address)
        info = samples.series("ember_server_broker_info")
        broker_id = dict(next(iter(info)))["broker_id"] if info else "?"
        controller = samples.get("ember_controller_activecontrollercount") == 1
        offline += int(samples.total("ember_controller_offlinepartitionscount"))
        state = "ready" if samples.get("ember_server_ready") == 1 else "NOT READY"
        lines.append(
            f"{broker_id + ('*' if controller else ''):<7}{address:<22}{state:<10}"
            f"{_rate(samples, old, REQUESTS, seconds):>9.1f}{_rate(samples, old, MESSAGES_IN, seconds):>11.1f}"
            f"{_rate(samples, old, BYTES_IN, seconds) / MB:>9.2f}{_rate(samples, old, BYTES_OUT, seconds) / MB:>9.2f}"
            f"{samples.total('ember_server_replicamanager_leadercount'):>9.0f}"
            f"{samples.total('ember_server_replicamanager_partitioncount'):>7.0f}"
            f"{samples.total('ember_server_replicamanager_underreplicatedpartitions'):>12.0f}"
            f"{samples.total('ember_server_replicamanager_underminisrpartitioncount'):>15.0f}")
    lines += [f"(* controller)  offline partitions: {offline}", "",
              f"{'TOPIC':<30}{'MSG IN/S':>11}{'MB IN/S':>9}{'MB OUT/S':>9}"]
    up = {address: samples for address, samples in now.brokers.items() if samples is not None}
    for topic in sorted(set().union(*(_topics(s) for s in up.values()))):
        rates = [sum(_rate(s, before.brokers.get(a), name, seconds, topic=topic) for a, s in up.items())
                 for name in (MESSAGES_IN, BYTES_IN, BYTES_OUT)]
        lines.append(f"{topic:<30}{rates[0]:>11.1f}{rates[1] / MB:>9.2f}{rates[2] / MB:>9.2f}")
    lines += ["", f"{'TOPIC':<30}{'OPEN TXNS':>10}{'UNSTABLE':>10}   (transactions: open ones, offsets between the "
                  "last stable offset and the high watermark)"]
    transactions: dict[str, list[float]] = {}
    for samples in up.values():
        for key in samples.series("ember_log_log_opentransactions"):
            labels = dict(key)
            found = transactions.setdefault(labels["topic"], [0.0, 0.0])
            found[0] += samples.total("ember_log_log_opentransactions", **labels)
            found[1] += samples.total("ember_log_log_highwatermark", **labels) - \
                samples.total("ember_log_log_laststableoffset", **labels)
    for topic, (open_count, unstable) in sorted(transactions.items()):
        if open_count or unstable:
            lines.append(f"{topic:<30}{open_count:>10.0f}{unstable:>10.0f}")
    lines += ["", f"{'GROUP':<30}{'TOPIC':<30}{'LAG':>12}{'LAG/S':>10}"]
    lags: dict[tuple[str, str], tuple[float, float]] = {}
    for address, samples in up.items():
        old = before.brokers.get(address)
        for key in samples.series(LAG):
            labels = dict(key)
            group, topic = labels["group"], labels["topic"]
            lag = samples.total(LAG, group=group, topic=topic)
            change = (lag - old.total(LAG, group=group, topic=topic)) / seconds if old is not None and seconds > 0 \
                else 0.0
            lags[(group, topic)] = (lag, change)
    for (group, topic), (lag, change) in sorted(lags.items()):
        lines.append(f"{group:<30}{topic:<30}{lag:>12.0f}{change:>+10.1f}")
    lines += ["", f"{'CLEANER':<7}{'MAX DIRTY %':>12}{'CLEANINGS':>11}{'RECOPY %':>10}{'LONGEST S':>11}"
                  f"{'LAST RUN S AGO':>16}{'DEAD':>6}"]
    for samples in up.values():
        info = samples.series("ember_server_broker_info")
        broker_id = dict(next(iter(info)))["broker_id"] if info else "?"
        if samples.get(CLEANINGS) is None:
            lines.append(f"{broker_id:<7}{'off':>12}")      # log.cleaner.enable=false
            continue
        since = samples.total("ember_log_logcleaner_time_since_last_run_ms") / 1000
        lines.append(f"{broker_id:<7}{samples.total('ember_log_logcleanermanager_max_dirty_percent'):>12.1f}"
                     f"{samples.total(CLEANINGS):>11.0f}{samples.total('ember_log_logcleaner_cleaner_recopy_percent'):>10.1f}"
                     f"{samples.total('ember_log_logcleaner_max_clean_time_secs'):>11.2f}"
                     f"{since if samples.total(CLEANINGS) else float('nan'):>16.1f}"
                     f"{samples.total('ember_log_logcleaner_dead_thread_count'):>6.0f}")
    return "\n".join(lines) + "\n"
