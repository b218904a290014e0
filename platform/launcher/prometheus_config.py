"""A Prometheus set-up for a local cluster: a scrape config and its file of targets.

The config reads its targets from ``prometheus-targets.json`` beside it (``file_sd``, which
Prometheus re-reads when the file changes) and loads ember's alert rules from
``conf/prometheus/alerts.yml``. ``ember cluster up --metrics`` writes both into the cluster's
data directory; ``conf/prometheus/prometheus.yml`` is the same config for ``data/cluster``.
"""
from __future__ import annotations

import json
from pathlib import Path

ALERT_RULES = Path(__file__).resolve().parents[2] / "conf" / "prometheus" / "alerts.yml"
CONFIG_FILE = "prometheus.yml"
TARGETS_FILE = "prometheus-targets.json"
JOB = "ember"


def _duration(seconds: float) -> str:
    return f"{seconds:g}s" if seconds == int(seconds) else f"{int(seconds * 1000)}ms"


def scrape_config(interval_s: float = 15.0, rule_files: tuple[Path, ...] = (ALERT_RULES,)) -> str:
    rules = "".join(f"  - {path}\n" for path in rule_files)
    return (f"# Prometheus config for an ember cluster: targets from {TARGETS_FILE} beside this file.\n"
            f"global:\n  scrape_interval: {_duration(interval_s)}\n  evaluation_interval: {_duration(interval_s)}\n"
            f"rule_files:\n{rules}"
            f"scrape_configs:\n  - job_name: {JOB}\n    file_sd_configs:\n      - files: [{TARGETS_FILE}]\n")


def targets(metrics_addresses: dict[int, str]) -> str:
    """file_sd targets: one per broker, labelled with its id."""
    return json.dumps([{"targets": [address], "labels": {"broker": str(broker_id)}}
                       for broker_id, address in sorted(metrics_addresses.items())], indent=2) + "\n"


def write_prometheus_config(directory: Path, metrics_addresses: dict[int, str], interval_s: float = 15.0,
                            rule_files: tuple[Path, ...] = (ALERT_RULES,)) -> Path:
    """Write the targets and the config into ``directory``; returns the config's path."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / TARGETS_FILE).write_text(targets(metrics_addresses))
    config = directory / CONFIG_FILE
    config.write_text(scrape_config(interval_s, rule_files))
    return config
