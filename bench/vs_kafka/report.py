"""Write the results of an ember-vs-Kafka run: a markdown table, a PNG chart and the raw JSON
(every sample of every row), plus a copy of the JSON under ``history/`` named by date and commit.

The table gives, for both systems, the median of the runs with their spread (min-max) and the best
run, and the ratio ember/Kafka of the medians; the "ember" column
of the verdict says whether that ratio is good for ember (higher throughput, or lower latency,
memory or start time). The chart plots, per row, how many times better ember is (>1) or worse
(<1), on a log scale, so a 2x win and a 2x loss are the same length. The scale rows (many cases of
one family each) get their own chart instead, ``vs_kafka_scale.png``: one panel per family, each
client's median records/s per case with its min-max, so a trend shows as a line.
"""
from __future__ import annotations

import json
import math
import os
import time
from dataclasses import asdict
from pathlib import Path
from typing import Sequence

from samples import Stats
from workloads import Row

#: Groups of the scale workload start with this (workloads.scale_cases).
SCALE_PREFIX = "Scale: "
#: Groups of the partitions workload (partitions.py; not imported: it needs the benchmark's clients).
PARTITIONS_PREFIX = "Partitions: "

#: Version of vs_kafka.json's layout: 2 = samples and stats per row (1, unversioned: best only).
FORMAT = 2


def format_figure(value: float, unit: str) -> str:
    if unit == "records/s":
        return f"{value:,.0f}"
    if unit in ("MB", "files"):
        return f"{value:,.0f} {unit}"
    if unit.startswith("%"):
        return f"{value:.1f} {unit}"
    if unit in ("ms", "s"):
        return f"{value:.2f} {unit}"
    return f"{value:g} {unit}"


def advantage(row: Row) -> float:
    """How many times better ember is than Kafka on this row (>1: ember wins)."""
    return row.ratio if row.higher_is_better else 1 / row.ratio


def format_spread(figures: Stats, unit: str) -> str:
    """min-max without the unit (the median next to it has it)."""
    if figures.n < 2:
        return "one run"
    low, high = (format_figure(v, unit).removesuffix(f" {unit}") for v in (figures.low, figures.high))
    return f"{low}–{high}"


def cell(figures: Stats, unit: str, mode: str, single: bool) -> str:
    """The median with its mode, then (min–max, best) on a second line."""
    text = format_figure(figures.median, unit) + (f" ({mode})" if mode else "")
    if single:
        return text
    return f"{text}<br>{format_spread(figures, unit)}, best {format_figure(figures.best, unit)}"


def markdown(rows: Sequence[Row], header: str) -> str:
    lines = [header, "",
             "| workload | case | ember: median (mode)<br>min–max, best | Kafka: median (mode)<br>min–max, best "
             "| ember / Kafka (medians) | better |",
             "|---|---|---:|---:|---:|---|"]
    for row in rows:
        ember = cell(row.ember_stats, row.unit, row.ember_mode, row.single)
        kafka = cell(row.kafka_stats, row.unit, row.kafka_mode, row.single)
        verdict = f"ember {advantage(row):.2f}x" if row.ember_wins else f"Kafka {1 / advantage(row):.2f}x"
        unit = "records/s" if row.unit == "records/s" else row.unit
        lines.append(f"| {row.group} | {row.case} [{unit}] | {ember} | {kafka} | {row.ratio:.2f} | {verdict} |")
    return "\n".join(lines) + "\n"


def row_json(row: Row) -> dict[str, object]:
    """A row with its samples and, for readers that do not recompute them, its stats; ``ember`` and
    ``kafka`` are the medians (format 1 held the best there)."""
    data: dict[str, object] = asdict(row)
    data["ember"], data["kafka"] = row.ember, row.kafka
    data["ember_stats"], data["kafka_stats"] = asdict(row.ember_stats), asdict(row.kafka_stats)
    return data


def commit_label(source: str | None) -> str:
    """The short commit of $EMBER_BENCH_SOURCE (run.sh sets "commit <10 hex>"), "worktree" otherwise."""
    words = (source or "").split()
    return words[1][:7] if len(words) == 2 and words[0] == "commit" else "worktree"


def history_path(out: Path, source: str | None, now: float | None = None) -> Path:
    """history/<UTC date and time>-<short commit>.json: one file per run, sorted by time."""
    stamp = time.strftime("%Y-%m-%dT%H%MZ", time.gmtime(now))
    return out / "history" / f"{stamp}-{commit_label(source)}.json"


def chart(rows: Sequence[Row], path: Path, title: str) -> None:
    """Horizontal bars of ember's advantage per row, log2 axis centred on 1 (parity)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{row.group.split(' (')[0]}: {row.case}" + (f" [{row.ember_mode}]" if row.ember_mode else "")
              for row in rows]
    values = [advantage(row) for row in rows]
    figure, axes = plt.subplots(figsize=(11, 0.42 * len(rows) + 1.6))
    positions = range(len(rows))[::-1]
    colours = ["#2b8a3e" if v >= 1 else "#c92a2a" for v in values]
    axes.barh(list(positions), [math.log2(v) for v in values], color=colours)
    for y, v in zip(positions, values):
        axes.text(math.log2(v), y, f" {v:.2f}x " if v >= 1 else f" 1/{1 / v:.2f} ", va="center",
                  ha="left" if v >= 1 else "right", fontsize=8)
    axes.set_yticks(list(positions), labels, fontsize=8)
    limit = max(1.0, max(abs(math.log2(v)) for v in values)) + 0.8
    axes.set_xlim(-limit, limit)
    ticks = range(-int(limit), int(limit) + 1)
    axes.set_xticks(list(ticks), [f"{2.0 ** t:g}x" if t >= 0 else f"1/{2 ** -t}" for t in ticks])
    axes.axvline(0, color="black", linewidth=0.8)
    axes.set_xlabel("ember advantage (right, green: ember better; left, red: Kafka better)")
    axes.set_title(title, fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def scale_chart(rows: Sequence[Row], path: Path) -> None:
    """One panel per scale family: median records/s per case (log axis) with min-max bars, a line per
    client (ember's modes, then Kafka's, which every ember mode's row repeats)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    families = list(dict.fromkeys(row.group for row in rows))
    figure, panels = plt.subplots(len(families), 1, figsize=(9, 3.3 * len(families)), squeeze=False)
    for axes, family in zip(panels[:, 0], families):
        members = [row for row in rows if row.group == family]
        cases = list(dict.fromkeys(row.case for row in members))
        series: dict[str, list[Stats]] = {}
        for mode in dict.fromkeys(row.ember_mode for row in members):
            series[f"ember: {mode}"] = [next(r for r in members if r.case == c and r.ember_mode == mode).ember_stats
                                        for c in cases]
        series[f"Kafka: {members[0].kafka_mode}"] = [next(r for r in members if r.case == c).kafka_stats for c in cases]
        for label, figures in series.items():
            medians = [f.median for f in figures]
            spread = [[f.median - f.low for f in figures], [f.high - f.median for f in figures]]
            axes.errorbar(range(len(cases)), medians, yerr=spread, marker="o", capsize=3, label=label,
                          color="#c92a2a" if label.startswith("Kafka") else None)
        axes.set_yscale("log")
        axes.set_xticks(range(len(cases)), cases, fontsize=8)
        axes.set_ylabel("records/s")
        axes.set_title(family.removeprefix(SCALE_PREFIX), fontsize=10)
        axes.grid(True, which="both", axis="y", alpha=0.3)
        axes.legend(fontsize=8)
    figure.suptitle("ember vs Apache Kafka: the cost per record (median, min-max)", fontsize=11)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def partitions_chart(rows: Sequence[Row], path: Path) -> None:
    """One panel per measure of the partitions workload: each system's median against the number
    of partitions (log axes), ember's read paths apart for Spark."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def partitions(row: Row) -> int:
        return int(row.group.removeprefix(PARTITIONS_PREFIX).split()[0].replace(",", ""))
    cases = list(dict.fromkeys(row.case for row in rows))
    figure, panels = plt.subplots((len(cases) + 1) // 2, 2, figsize=(11, 3.2 * ((len(cases) + 1) // 2)),
                                  squeeze=False)
    for axes, case in zip(panels.flat, cases):
        members = [row for row in rows if row.case == case]
        series: dict[str, list[tuple[int, float]]] = {}
        for row in members:
            series.setdefault(f"ember{f' {row.ember_mode}' if row.ember_mode else ''}", []).append(
                (partitions(row), row.ember))
            series.setdefault(f"Kafka{f' {row.kafka_mode}' if row.kafka_mode else ''}", []).append(
                (partitions(row), row.kafka))
        for label, points in series.items():
            points = sorted(set(points))
            axes.plot([p for p, _ in points], [v for _, v in points], marker="o", label=label,
                      color="#c92a2a" if label.startswith("Kafka") else None)
        axes.set_xscale("log")
        axes.set_yscale("log")
        axes.set_xlabel("partitions")
        axes.set_ylabel(members[0].unit)
        axes.set_title(case, fontsize=9)
        axes.grid(True, which="both", alpha=0.3)
        axes.legend(fontsize=7)
    for axes in list(panels.flat)[len(cases):]:
        axes.axis("off")
    figure.suptitle("ember vs Apache Kafka by partition count (RF 3, 3 brokers each, medians)", fontsize=11)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def chart_families(rows: Sequence[Row]) -> tuple[list[Row], list[Row], list[Row]]:
    """The rows of each chart: vs_kafka.png, vs_kafka_scale.png, vs_kafka_partitions.png."""
    scaled = [row for row in rows if row.group.startswith(SCALE_PREFIX)]
    by_partitions = [row for row in rows if row.group.startswith(PARTITIONS_PREFIX)]
    others = [row for row in rows if row not in scaled and row not in by_partitions]
    return others, scaled, by_partitions


def write(rows: Sequence[Row], out: Path, header: str, settings: dict[str, object]) -> Path:
    """Writes vs_kafka.{md,png,json} (vs_kafka_scale.png with scale rows, vs_kafka_partitions.png with
    partitions rows) and the history copy of
    the JSON; returns the history file."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "vs_kafka.md").write_text(markdown(rows, header))
    others, scaled, by_partitions = chart_families(rows)
    if others:
        chart(others, out / "vs_kafka.png", "ember vs Apache Kafka, same machine, same run (medians)")
    if scaled:
        scale_chart(scaled, out / "vs_kafka_scale.png")
    if by_partitions:
        partitions_chart(by_partitions, out / "vs_kafka_partitions.png")
    source = os.environ.get("EMBER_BENCH_SOURCE")
    document = json.dumps({"format": FORMAT, "source": source or "working tree",
                           "run_at_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                           "settings": settings, "rows": [row_json(r) for r in rows]}, indent=2) + "\n"
    (out / "vs_kafka.json").write_text(document)
    history = history_path(out, source)
    history.parent.mkdir(parents=True, exist_ok=True)
    history.write_text(document)
    return history
