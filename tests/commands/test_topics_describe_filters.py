"""``ember topics describe [TOPIC] --under-replicated-partitions | --unavailable-partitions |
--under-min-isr-partitions | --at-min-isr-partitions`` list only the matching partitions, across every
topic without a TOPIC, as kafka-topics.sh does; a healthy cluster lists none and says so on stderr."""
from __future__ import annotations

import subprocess
import sys
import time
from typing import Callable

import pytest

from ember.client import Admin
from ember.launcher.local import LocalCluster

pytestmark = pytest.mark.integration


def describe(cluster: LocalCluster, *args: str) -> subprocess.CompletedProcess[str]:
    out = subprocess.run([sys.executable, "-m", "ember.cli", "topics", "describe", *args,
                          "--bootstrap", cluster.bootstrap], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "Traceback" not in out.stderr, out
    return out


def listed(out: subprocess.CompletedProcess[str]) -> dict[str, list[int]]:
    """{topic: partition numbers} of a filtered listing."""
    found: dict[str, list[int]] = {}
    topic = ""
    for line in out.stdout.splitlines():
        words = line.split()
        if words[0] == "topic":
            topic = words[1]
            found[topic] = []
        elif words[0].isdigit():
            found[topic].append(int(words[0]))
    return found


def test_filters_list_only_the_partitions_that_match(make_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_cluster(brokers=3, config={"replica.lag.time.max.ms": "2000"})   # the ISR shrinks quickly
    with Admin(cluster.bootstrap) as admin:
        admin.create_topic("strict", partitions=2, replication_factor=3, config={"min.insync.replicas": "3"})
        admin.create_topic("single", partitions=3, replication_factor=1)
        on_broker_3 = [p.partition for p in admin.describe_topic("single").partitions if p.replicas == (3,)]
    assert len(on_broker_3) == 1
    healthy = describe(cluster, "--under-replicated-partitions")
    assert healthy.stdout == "" and "no partitions whose ISR is smaller than their replicas" in healthy.stderr
    assert listed(describe(cluster, "strict", "--at-min-isr-partitions")) == {"strict": [0, 1]}

    cluster.stop_broker(3)
    deadline = time.monotonic() + 60
    while listed(describe(cluster, "--under-replicated-partitions")) != {"strict": [0, 1]}:
        assert time.monotonic() < deadline, describe(cluster, "--under-replicated-partitions")
        time.sleep(1)
    unavailable = describe(cluster, "--unavailable-partitions")
    assert listed(unavailable) == {"single": on_broker_3}
    assert listed(describe(cluster, "strict", "--unavailable-partitions")) == {}
    under_min = describe(cluster, "--under-min-isr-partitions")
    assert listed(under_min) == {"strict": [0, 1], "single": on_broker_3}     # no leader counts as under
    assert "min.insync.replicas 3" in under_min.stdout
    assert listed(describe(cluster, "strict", "--at-min-isr-partitions")) == {}
