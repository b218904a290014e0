"""JVM jars from Maven Central, resolved once into a local cache: Delta's jars and Spark's Kafka
connector for every SparkSession, Kafka's own command-line tools for the tests, Kafka's broker for
the benchmark.

Resolution runs Apache Ivy's command line from the ivy jar pyspark ships (the resolver behind
``spark.jars.packages``), with ``conf/ivysettings.xml`` (Maven Central only): no ``mvn``, no Spark
session. Each :class:`JarSet` lands in ``.cache/jars/<name>/``; a stamp naming its coordinates
marks it complete, so a set is fetched again only when its coordinates change. Downloads are kept
in ``.cache/jars/ivy-cache`` and shared between sets.

    python -m ember.jars fetch delta spark-kafka kafka-tools kafka-connect kafka-streams   # `make setup`
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from xml.sax.saxutils import escape

from ember.errors import EmberError

REPO_ROOT = Path(__file__).resolve().parents[1]
IVY_SETTINGS = REPO_ROOT / "conf" / "ivysettings.xml"
JAR_CACHE = Path(os.environ.get("EMBER_JAR_CACHE", REPO_ROOT / ".cache" / "jars"))
STAMP = ".resolved"
FETCH_TIMEOUT_S = 900.0

DELTA_VERSION = "4.4.0"     # Maven Central carries delta-spark_4.2_2.13 up to 4.4.0 (the Python package is 4.4.1)
KAFKA_VERSION = "4.2.0"     # the Kafka release bench/vs_kafka runs and whose tools the tests run
LOG4J_SLF4J = "org.apache.logging.log4j:log4j-slf4j-impl:2.25.3"   # the slf4j 1.x binding Kafka's distribution ships


class JarsMissing(EmberError):
    """A jar set was never fetched (or its coordinates changed since)."""
    hint = ("`make setup` fetches delta, spark-kafka, kafka-tools, kafka-connect and kafka-streams; "
            "bench/vs_kafka/setup.sh kafka-broker")


class JarFetchFailed(EmberError):
    """Ivy could not resolve a jar set from Maven Central."""
    hint = "check that Maven Central (repo1.maven.org) is reachable, then run `make setup` again"


@dataclass(frozen=True)
class JarSet:
    """Maven coordinates (``group:artifact:version``) resolved with their runtime dependencies;
    ``keep`` lists the artifact names to keep when the rest is already on Spark's classpath."""

    name: str
    coordinates: tuple[str, ...]
    keep: tuple[str, ...] = ()

    @property
    def directory(self) -> Path:
        return JAR_CACHE / self.name

    @property
    def classpath(self) -> str:
        """The set as one ``java -cp`` entry (the JVM expands ``dir/*``)."""
        self._check_fetched()
        return str(self.directory / "*")

    def _stamp(self) -> str:
        return "\n".join([*self.coordinates, "keep: " + " ".join(self.keep)]) + "\n"

    def is_fetched(self) -> bool:
        stamp = self.directory / STAMP
        return stamp.exists() and stamp.read_text() == self._stamp()

    def _check_fetched(self) -> None:
        if not self.is_fetched():
            raise JarsMissing(f"the {self.name} jars ({', '.join(self.coordinates)}) are not in {self.directory}: "
                              f"run `python -m ember.jars fetch {self.name}`")

    def jars(self) -> list[Path]:
        self._check_fetched()
        return sorted(self.directory.glob("*.jar"))

    def _ivy_module(self) -> str:
        """An Ivy module depending on the coordinates; with ``keep``, every other module is
        excluded from the graph, so nothing is downloaded only to be dropped."""
        dependencies = "".join(f'<dependency org="{g}" name="{a}" rev="{v}" conf="default->default"/>'
                               for g, a, v in (c.split(":") for c in self.coordinates))
        if self.keep:
            others = "^(?!(" + "|".join(re.escape(a) for a in self.keep) + ")$).*"
            dependencies += f'<exclude module="{escape(others)}" matcher="regexp"/>'
        return (f'<ivy-module version="2.0"><info organisation="ember" module="jars-{self.name}"/>'
                f'<configurations><conf name="default"/></configurations>'
                f'<dependencies>{dependencies}</dependencies></ivy-module>')

    def fetch(self, timeout_s: float = FETCH_TIMEOUT_S) -> list[Path]:
        """Resolve the set into its directory unless it is already there; atomic (a directory
        renamed into place), so an interrupted fetch leaves nothing half-done behind."""
        if self.is_fetched():
            return self.jars()
        staging = self.directory.with_name(self.name + ".tmp")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        say(f"resolving {', '.join(self.coordinates)} from Maven Central into {self.directory}")
        resolve(self._ivy_module(), staging, timeout_s)
        (staging / STAMP).write_text(self._stamp())
        shutil.rmtree(self.directory, ignore_errors=True)
        staging.rename(self.directory)
        fetched = self.jars()
        say(f"{self.name}: {len(fetched)} jar(s), {sum(j.stat().st_size for j in fetched) >> 20} MiB")
        return fetched


def say(message: str) -> None:
    print(f"[setup] {message}", flush=True)


def ivy_jar() -> Path:
    """The Apache Ivy jar that pyspark ships (Spark resolves ``spark.jars.packages`` with it)."""
    import pyspark

    found = sorted((Path(pyspark.__file__).parent / "jars").glob("ivy-*.jar"))
    if not found:
        raise JarFetchFailed(f"no ivy-*.jar in pyspark's jars ({pyspark.__file__}): reinstall pyspark")
    return found[-1]


def resolve(module: str, into: Path, timeout_s: float) -> None:
    """Retrieve an Ivy module's dependencies with theirs (Ivy's ``default`` conf of a Maven
    artifact: compile and runtime scopes, no provided/test/optional) into ``into``; one line
    printed per download, killed after ``timeout_s``."""
    (into / "ivy.xml").write_text(module)
    command = ["java", "-cp", str(ivy_jar()), "org.apache.ivy.Main", "-settings", str(IVY_SETTINGS),
               "-cache", str(JAR_CACHE / "ivy-cache"), "-ivy", str(into / "ivy.xml"),
               "-confs", "default", "-types", "jar", "bundle",
               "-retrieve", f"{into}/[artifact]-[revision](-[classifier]).[ext]"]
    started = time.monotonic()
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as ivy:
        assert ivy.stdout is not None
        timer = threading.Timer(timeout_s, ivy.kill)   # bounds a silent hang too
        timer.start()
        tail: list[str] = []
        try:
            for line in ivy.stdout:
                tail = [*tail[-19:], line.rstrip()]
                if "[SUCCESSFUL ]" in line:    # one per downloaded jar: "[SUCCESSFUL ] org#name;1.0!name.jar (120ms)"
                    print(f"  downloaded {line.split('!')[-1].strip()}", flush=True)
            ivy.wait()
        finally:
            timer.cancel()
    (into / "ivy.xml").unlink()
    if time.monotonic() - started >= timeout_s:
        raise JarFetchFailed(f"Ivy was killed after {timeout_s:.0f}s resolving {module}")
    if ivy.returncode != 0:
        raise JarFetchFailed(f"Ivy could not resolve {module} (exit {ivy.returncode}):\n" + "\n".join(tail))


DELTA = JarSet("delta", (f"io.delta:delta-spark_4.2_2.13:{DELTA_VERSION}",),
               # Delta's other transitive jars duplicate, in older versions, what Spark already ships
               keep=("delta-spark_4.2_2.13", "delta-storage"))
SPARK_KAFKA = JarSet("spark-kafka", (f"org.apache.spark:spark-sql-kafka-0-10_2.13:{version('pyspark')}",),
                     # the connector and what Spark does not ship itself
                     keep=("spark-sql-kafka-0-10_2.13", "spark-token-provider-kafka-0-10_2.13",
                           "kafka-clients", "commons-pool2"))
#: kafka-tools holds most kafka-*.sh tools; kafka-configs.sh (kafka.admin.ConfigCommand) is still in
#: Kafka's core jar (kafka_2.13, with Scala's library: ~13 MB more)
KAFKA_TOOLS = JarSet("kafka-tools", (f"org.apache.kafka:kafka-tools:{KAFKA_VERSION}",
                                     f"org.apache.kafka:kafka_2.13:{KAFKA_VERSION}", LOG4J_SLF4J))
KAFKA_BROKER = JarSet("kafka-broker", (f"org.apache.kafka:kafka_2.13:{KAFKA_VERSION}", LOG4J_SLF4J))
#: Kafka Connect's worker (connect-distributed.sh's ConnectDistributed) with the file connectors, and
#: Kafka Streams with its examples (WordCountDemo: a KTable count over a compacted changelog)
KAFKA_CONNECT = JarSet("kafka-connect", (f"org.apache.kafka:connect-runtime:{KAFKA_VERSION}",
                                         f"org.apache.kafka:connect-file:{KAFKA_VERSION}",
                                         f"org.apache.kafka:connect-json:{KAFKA_VERSION}", LOG4J_SLF4J))
KAFKA_STREAMS = JarSet("kafka-streams", (f"org.apache.kafka:kafka-streams-examples:{KAFKA_VERSION}", LOG4J_SLF4J))
JAR_SETS = {s.name: s for s in (DELTA, SPARK_KAFKA, KAFKA_TOOLS, KAFKA_BROKER, KAFKA_CONNECT, KAFKA_STREAMS)}


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] != "fetch" or not set(argv[1:]) <= JAR_SETS.keys():
        print(f"usage: python -m ember.jars fetch {{{','.join(JAR_SETS)}}}...", file=sys.stderr)
        return 2
    for name in argv[1:]:
        JAR_SETS[name].fetch()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
