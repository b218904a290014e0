"""Spark's own log (the JVM's log4j2: Spark's and Delta's logging), written to a file for the
length of a ``with`` block, so a test can grep what Spark logged."""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

#: Spark's own console pattern: time, level, logger, message.
PATTERN = "%d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex"


@contextmanager
def spark_log_file(spark: Any, path: Path, level: str = "INFO") -> Iterator[Path]:
    """Every log4j2 event of ``level`` and above goes to ``path`` too while the block runs (the
    root logger is lowered to ``level`` meanwhile: Spark's default, INFO, unless a test lowered it)."""
    jvm = spark._jvm
    log4j = jvm.org.apache.logging.log4j
    context = log4j.LogManager.getContext(False)
    config = context.getConfiguration()
    root = config.getRootLogger()
    previous = root.getLevel()
    appender = (log4j.core.appender.FileAppender.newBuilder().withFileName(str(path)).setName(f"test-{path.name}")
                .setLayout(log4j.core.layout.PatternLayout.newBuilder().withPattern(PATTERN).build()).build())
    appender.start()
    config.addAppender(appender)
    root.addAppender(appender, None, None)
    root.setLevel(log4j.Level.toLevel(level))
    context.updateLoggers()
    try:
        yield path
    finally:
        root.removeAppender(appender.getName())
        root.setLevel(previous)
        context.updateLoggers()
        appender.stop()
