"""``ember topics create``: Kafka's ``--if-not-exists`` (an existing topic is left alone, one line,
exit 0) and help text naming the defaults."""
from __future__ import annotations

import subprocess
import sys

import pytest

from ember.launcher.local import LocalCluster


def _ember(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ember.cli", *args], capture_output=True, text=True, timeout=60)


def test_create_help_names_the_defaults() -> None:
    out = _ember("topics", "create", "--help")
    assert out.returncode == 0, out
    help_text = " ".join(out.stdout.split())
    assert "--partitions N number of partitions (default 1)" in help_text
    assert "on distinct brokers (default 1)" in help_text and "--if-not-exists" in help_text


@pytest.mark.integration
def test_if_not_exists_leaves_an_existing_topic_quietly(shared_cluster: LocalCluster, topic_name: str) -> None:
    bootstrap = ("--bootstrap", shared_cluster.bootstrap)
    created = _ember("topics", "create", topic_name, "--partitions", "2", "--if-not-exists", *bootstrap)
    assert created.returncode == 0 and created.stdout.startswith(f"created topic {topic_name} "), created
    again = _ember("topics", "create", topic_name, "--partitions", "3", "--if-not-exists", *bootstrap)
    assert (again.returncode, again.stderr) == (0, ""), again
    assert again.stdout.splitlines() == [f"topic {topic_name} already exists (--if-not-exists: left as it is)"]
    refused = _ember("topics", "create", topic_name, *bootstrap)
    assert refused.returncode == 1 and "TopicAlreadyExists" in refused.stderr, refused
    described = _ember("topics", "describe", topic_name, *bootstrap)
    assert f"topic {topic_name}  partitions 2" in described.stdout, described
