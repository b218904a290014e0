"""A job never works silently for long: while a Spark action runs, ``progress`` prints what Spark
is doing every few seconds (a newcomer saw 22-36 s of silence while a job wrote its first Delta
table)."""
from __future__ import annotations

import time

from _common import progress


def test_a_long_spark_action_prints_a_line_every_interval(spark, capsys) -> None:
    with progress(spark, "job: counting", every_s=0.5, idle_every_s=0.5):
        spark.range(0, 2_000_000, numPartitions=4).selectExpr("sum(id)").collect()
        time.sleep(1.3)     # at least two intervals in all, whatever Spark's speed
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("job: counting")]
    assert lines[0] == "job: counting: running (a line every 0.5 s until it is done)"
    assert len(lines) >= 3, lines          # the start line and at least two progress lines
    assert all(" s, " in line for line in lines[1:]), lines


def test_an_idle_stream_gets_a_line_a_minute_not_one_every_interval(spark, capsys) -> None:
    with progress(spark, "job: idle", every_s=0.2, idle_every_s=60):
        time.sleep(1.5)     # no Spark stage runs: about 7 intervals
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("job: idle")]
    assert len(lines) == 2, lines          # the start line, one idle line
    assert "no Spark stage running" in lines[1]
