"""The jar cache's bookkeeping (no download): which sets count as fetched, and which modules a
set with ``keep`` lets into Ivy's dependency graph."""
from __future__ import annotations

import re
from xml.etree import ElementTree

import pytest

from ember import jars
from ember.jars import JarSet, JarsMissing

CONNECTOR = JarSet("connector", ("org.example:connector:1.0",), keep=("connector", "kafka-clients"))


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setattr(jars, "JAR_CACHE", tmp_path)
    return tmp_path


def test_a_set_counts_as_fetched_only_with_the_stamp_of_its_coordinates(cache):
    with pytest.raises(JarsMissing, match="python -m ember.jars fetch connector"):
        CONNECTOR.jars()
    (cache / "connector").mkdir()
    (cache / "connector" / "connector-1.0.jar").write_bytes(b"")
    (cache / "connector" / jars.STAMP).write_text(CONNECTOR._stamp())
    assert CONNECTOR.jars() == [cache / "connector" / "connector-1.0.jar"]
    assert CONNECTOR.classpath == f"{cache / 'connector'}/*"
    newer = JarSet("connector", ("org.example:connector:2.0",), keep=CONNECTOR.keep)
    assert not newer.is_fetched()   # a version bump fetches again


def test_keep_excludes_every_other_module_from_the_graph():
    module = ElementTree.fromstring(CONNECTOR._ivy_module())
    [dependency] = module.iter("dependency")
    assert (dependency.get("org"), dependency.get("name"), dependency.get("rev")) == ("org.example", "connector", "1.0")
    [exclude] = module.iter("exclude")
    others = re.compile(exclude.get("module"))
    assert exclude.get("matcher") == "regexp"
    assert not others.match("connector") and not others.match("kafka-clients")
    assert others.match("kafka-clients-extra") and others.match("hadoop-client-runtime") and others.match("slf4j-api")
    assert not list(ElementTree.fromstring(jars.KAFKA_TOOLS._ivy_module()).iter("exclude"))
