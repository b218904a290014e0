"""Write the results of an ember-vs-Kafka run: a markdown table, a PNG chart and the raw JSON.

The table gives absolute figures for both systems and the ratio ember/Kafka; the "ember" column
of the verdict says whether that ratio is good for ember (higher throughput, or lower latency,
memory or start time). The chart plots, per row, how many times better ember is (>1) or worse
(<1), on a log scale, so a 2x win and a 2x loss are the same length.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path
from typing import Sequence

from workloads import Row


def format_figure(value: float, unit: str) -> str:
    if unit == "records/s":
        return f"{value:,.0f}"
    if unit == "MB":
        return f"{value:,.0f} MB"
    if unit in ("ms", "s"):
        return f"{value:.2f} {unit}"
    return f"{value:g} {unit}"


def advantage(row: Row) -> float:
    """How many times better ember is than Kafka on this row (>1: ember wins)."""
    return row.ratio if row.higher_is_better else 1 / row.ratio


def markdown(rows: Sequence[Row], header: str) -> str:
    lines = [header, "",
             "| workload | case | ember | Kafka | ember / Kafka | better |",
             "|---|---|---:|---:|---:|---|"]
    for row in rows:
        ember = format_figure(row.ember, row.unit) + (f" ({row.ember_mode})" if row.ember_mode else "")
        kafka = format_figure(row.kafka, row.unit) + (f" ({row.kafka_mode})" if row.kafka_mode else "")
        verdict = f"ember {advantage(row):.2f}x" if row.ember_wins else f"Kafka {1 / advantage(row):.2f}x"
        unit = "records/s" if row.unit == "records/s" else row.unit
        lines.append(f"| {row.group} | {row.case} [{unit}] | {ember} | {kafka} | {row.ratio:.2f} | {verdict} |")
    return "\n".join(lines) + "\n"


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


def write(rows: Sequence[Row], out: Path, header: str, settings: dict[str, object]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "vs_kafka.md").write_text(markdown(rows, header))
    chart(rows, out / "vs_kafka.png", "ember vs Apache Kafka, same machine, same run")
    (out / "vs_kafka.json").write_text(json.dumps({"settings": settings, "rows": [asdict(r) for r in rows]},
                                                  indent=2) + "\n")
