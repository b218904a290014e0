"""The Java twin of :mod:`txn_producer` (``TxnProducer.java``: Kafka's own ``KafkaProducer``,
kafka-clients 4.2.0), compiled on first use and started as a plain class.

The jars are the ``kafka-streams`` set of :mod:`ember.jars` (``make setup``; only kafka-clients and
its compression and logging jars are put on the classpath). The class is compiled with ``javac``
into ``.cache/chaos-java/`` (staged, then renamed into place, so a concurrent or interrupted compile
leaves nothing half-written) and again only when the source is newer than the class: a producer
start costs a JVM start (about 1 s), not a compilation (about 5-10 s: the single-file source
launcher would pay that at every restart of a SIGKILLed producer).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from ember.errors import EmberError

SOURCE = Path(__file__).with_name("TxnProducer.java")
CLASSES = Path(__file__).resolve().parents[2] / ".cache" / "chaos-java"
MAIN_CLASS = "TxnProducer"
COMPILE_TIMEOUT_S = 180.0
#: the jars of the kafka-streams set the producer needs (the rest, Streams and RocksDB, it does not)
NEEDED = ("kafka-clients-", "slf4j-api-", "log4j-api-", "log4j-core-", "log4j-slf4j-impl-", "lz4-java-",
          "snappy-java-", "zstd-jni-")
#: small heap, serial GC, C1 only: the machine's cores are the cluster's under chaos
JVM_OPTIONS = ("-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xss512k")
#: warnings and errors on stderr (the producer's txn-producer-N.log), plus the transaction
#: manager's state changes (epoch bumps, abortable and fatal errors) at INFO
LOG4J2 = """status = error
appender.console.type = Console
appender.console.name = stderr
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss.SSS} %-5p [%c{1}] %m%n
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = stderr
logger.txn.name = org.apache.kafka.clients.producer.internals.TransactionManager
logger.txn.level = info
"""


class JavaProducerUnavailable(EmberError):
    """The Java transactional producer cannot be compiled or started."""
    hint = "`make setup` fetches the kafka-streams jars (kafka-clients 4.2.0); javac comes with a JDK 17"


def classpath_jars() -> list[Path]:
    from ember.jars import KAFKA_STREAMS

    jars = [jar for jar in KAFKA_STREAMS.jars() if jar.name.startswith(NEEDED)]
    if not any(jar.name.startswith("kafka-clients-") for jar in jars):
        raise JavaProducerUnavailable(f"no kafka-clients jar in {KAFKA_STREAMS.directory}")
    return jars


def compiled() -> Path:
    """The directory holding ``TxnProducer.class`` (and its log4j2 configuration), compiled from
    the source when missing or older than it."""
    target = CLASSES / f"{MAIN_CLASS}.class"
    if target.exists() and target.stat().st_mtime >= SOURCE.stat().st_mtime:
        return CLASSES
    javac = shutil.which("javac")
    if javac is None:
        raise JavaProducerUnavailable("javac is not on PATH: the Java transactional producer needs a JDK 17")
    jars = classpath_jars()
    CLASSES.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="chaos-java.", dir=CLASSES.parent))
    try:
        try:
            done = subprocess.run([javac, "-nowarn", "-d", str(staging), "-cp",
                                   os.pathsep.join(map(str, jars)), str(SOURCE)],
                                  capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S)
        except subprocess.TimeoutExpired as exc:
            raise JavaProducerUnavailable(f"javac did not compile {SOURCE} within {COMPILE_TIMEOUT_S:.0f}s") from exc
        if done.returncode != 0:
            raise JavaProducerUnavailable(f"javac could not compile {SOURCE} (exit {done.returncode}):\n"
                                          f"{done.stdout[-2000:]}{done.stderr[-4000:]}")
        (staging / "log4j2.properties").write_text(LOG4J2)
        old = CLASSES.with_name(CLASSES.name + f".old.{os.getpid()}")
        if CLASSES.exists():
            CLASSES.rename(old)          # two renames: the class directory is never half-written
        try:
            staging.rename(CLASSES)
        except OSError:                  # another process's compile got there first
            if not (target.exists() and target.stat().st_mtime >= SOURCE.stat().st_mtime):
                raise
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return CLASSES


def command(args: list[str]) -> list[str]:
    """``java ... TxnProducer <args>`` (txn_producer.py's flags), compiling first if needed."""
    classes = compiled()
    classpath = os.pathsep.join([str(classes), *map(str, classpath_jars())])
    return ["java", *JVM_OPTIONS, f"-Dlog4j2.configurationFile={classes / 'log4j2.properties'}",
            "-cp", classpath, MAIN_CLASS, *args]
