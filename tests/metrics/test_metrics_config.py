"""metrics.listen / --metrics-listen: a bad address stops the broker before it starts, saying what
is allowed; port 0 is allowed (any free port)."""
from __future__ import annotations

import subprocess
import sys

import pytest

from ember.errors import InvalidConfig
from ember.ingest.broker_config import BrokerConfig


def test_metrics_are_off_unless_an_address_is_given() -> None:
    assert BrokerConfig.from_properties({}).metrics_listen is None
    assert BrokerConfig.from_properties({"metrics.listen": "127.0.0.1:0"}).metrics_listen == ("127.0.0.1", 0)


@pytest.mark.parametrize("value", ["9644", "localhost", "127.0.0.1:http", "127.0.0.1:70000"])
def test_a_metrics_address_without_host_and_port_is_refused(value: str) -> None:
    with pytest.raises(InvalidConfig, match=r"metrics.listen.*HOST:PORT"):
        BrokerConfig.from_properties({"metrics.listen": value})


def test_broker_start_refuses_a_bad_metrics_listen_flag(tmp_path) -> None:
    out = subprocess.run([sys.executable, "-m", "ember.cli", "broker", "start", "--id", "1", "--zookeeper",
                          "127.0.0.1:1", "--listen", "127.0.0.1:0", "--data", str(tmp_path),
                          "--metrics-listen", "nowhere"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    assert "InvalidConfig" in out.stderr and "metrics.listen" in out.stderr and "Traceback" not in out.stderr
