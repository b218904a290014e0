"""conf/prometheus: the alert rules and the local-cluster config pass promtool's checks, and the
rules' unit tests (conf/prometheus/alerts_test.yml: each alert fires on its condition, not before
its `for:`, and not on a healthy fresh cluster or a dead broker's last samples) pass."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from ember.launcher.prometheus_config import ALERT_RULES, write_prometheus_config

CONF = Path(__file__).resolve().parents[2] / "conf" / "prometheus"

pytestmark = pytest.mark.skipif(shutil.which("promtool") is None,
                                reason="promtool (Debian's prometheus package) is missing: run `make setup`")


def promtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["promtool", *args], capture_output=True, text=True, timeout=60)


def test_alert_rules_are_valid() -> None:
    out = promtool("check", "rules", str(CONF / "alerts.yml"))
    assert out.returncode == 0, out.stdout + out.stderr


def test_every_alert_fires_on_its_condition_and_only_then() -> None:
    out = promtool("test", "rules", str(CONF / "alerts_test.yml"))
    assert out.returncode == 0, out.stdout + out.stderr


def test_every_alert_has_a_unit_test() -> None:
    alerts = set(re.findall(r"- alert: (\w+)", ALERT_RULES.read_text()))
    tested = set(re.findall(r"alertname: (\w+)", (CONF / "alerts_test.yml").read_text()))
    assert alerts == tested


def test_every_alert_is_asserted_quiet_on_a_healthy_fresh_cluster() -> None:
    """The last test of alerts_test.yml (a healthy cluster whose Prometheus just started) asserts
    that no alert fires: a new alert must be added to it."""
    alerts = set(re.findall(r"- alert: (\w+)", ALERT_RULES.read_text()))
    tests = (CONF / "alerts_test.yml").read_text()
    fresh = tests[tests.index("# A healthy fresh cluster"):]
    assert alerts <= set(re.findall(r"alertname: (\w+), exp_alerts: \[\]", fresh))
    assert "exp_labels" not in fresh


def test_the_shipped_and_the_generated_scrape_configs_are_valid(tmp_path: Path) -> None:
    generated = write_prometheus_config(tmp_path, {1: "127.0.0.1:9644", 2: "127.0.0.1:9645"}, interval_s=0.5)
    for config in (CONF / "prometheus.yml", generated):
        out = promtool("check", "config", str(config))
        assert out.returncode == 0, out.stdout + out.stderr
