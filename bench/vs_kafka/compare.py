"""Compare two runs of the ember-vs-Kafka benchmark row by row and flag ember's regressions.

    .venv/bin/python bench/vs_kafka/compare.py OLD.json NEW.json
    bash bench/vs_kafka/run.sh --compare-to OLD.json        # a run, then this against it

OLD and NEW are ``vs_kafka.json`` files (or ``bench/results/history/*.json``). Rows are matched by
workload, case and ember's mode; each is printed side by side: ember's median (min–max) in OLD and
NEW, the change, and Kafka's medians as a control (when Kafka fell too, the machine was busier).

The rule (``regressed``): ember's row regressed when its NEW median is worse than every OLD sample
(below OLD's min for throughput, above OLD's max for latency, memory, time) **and** worse than OLD's
median by more than OLD's relative IQR ((q3 − q1) / median), at least 5 %. A row of the old format
(``vs_kafka.json`` before samples were kept: one best figure, "no spread") compares best with best
and is flagged when NEW's best is more than 10 % worse. Improvements are flagged by the mirrored rule.

Exit code 1 when a headline row regressed (``HEADLINE``: ember's columnar client and Kafka's
client against ember — the figures ember's design is judged by), 0 otherwise; 2 on bad input.
"""
from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))

from samples import Stats, stats  # noqa: E402

#: Smallest relative drop a spread-aware row can be flagged for (a row whose runs agree to 1 %
#: should not fail on a 2 % wobble).
MIN_TOLERANCE = 0.05
#: Old-format rows (best only, no spread): best against best, flagged beyond this.
NO_SPREAD_TOLERANCE = 0.10

#: (group prefix, ember mode) of the headline rows: both acks settings of the producer, the consumer.
HEADLINE = (
    ("Producer throughput", "send_batch"),
    ("Producer throughput", "kafka-client"),
    ("Consumer throughput", "poll_batches"),
    ("Consumer throughput", "kafka-client"),
)


@dataclass(frozen=True)
class Figures:
    """One system's figures in one row: ``stats`` None for an old-format row (only ``best``)."""

    best: float
    stats: Stats | None

    @property
    def headline(self) -> float:
        return self.stats.median if self.stats is not None else self.best


def figures(row: dict[str, Any], system: str) -> Figures:
    samples = row.get(f"{system}_samples")
    if samples:
        summary = stats([float(v) for v in samples], bool(row["higher_is_better"]))
        return Figures(summary.best, summary)
    return Figures(float(row[system]), None)     # format 1: the figure is the best run


def is_headline(row: dict[str, Any]) -> bool:
    return any(row["group"].startswith(group) and row.get("ember_mode") == mode for group, mode in HEADLINE)


def key(row: dict[str, Any]) -> tuple[str, str, str]:
    return row["group"], row["case"], row.get("ember_mode", "")


def worse(a: float, b: float, higher_is_better: bool) -> bool:
    """a is worse than b."""
    return a < b if higher_is_better else a > b


def regressed(old: Figures, new: Figures, higher_is_better: bool) -> bool:
    """The rule in the module docstring."""
    if old.stats is None or new.stats is None:            # no spread: best against best
        limit = old.best * (1 - NO_SPREAD_TOLERANCE if higher_is_better else 1 + NO_SPREAD_TOLERANCE)
        return worse(new.best, limit, higher_is_better)
    tolerance = max(old.stats.relative_iqr, MIN_TOLERANCE)
    edge = old.stats.low if higher_is_better else old.stats.high
    limit = old.stats.median * (1 - tolerance if higher_is_better else 1 + tolerance)
    median = new.stats.median
    return worse(median, edge, higher_is_better) and worse(median, limit, higher_is_better)


def improved(old: Figures, new: Figures, higher_is_better: bool) -> bool:
    """The mirror of ``regressed``: NEW is better beyond OLD's spread."""
    return regressed(new, old, higher_is_better)


def load(path: Path) -> dict[str, Any]:
    document = json.loads(path.read_text())
    if not isinstance(document, dict) or not isinstance(document.get("rows"), list):
        raise ValueError(f"{path}: not a vs_kafka.json (no rows)")
    return document


def describe(f: Figures, unit: str) -> str:
    if f.stats is None:
        return f"best {number(f.best, unit)} (no spread)"
    if f.stats.n == 1:
        return f"{number(f.stats.median, unit)} (one run)"
    return f"{number(f.stats.median, unit)} ({number(f.stats.low, unit)}–{number(f.stats.high, unit)})"


def number(value: float, unit: str) -> str:
    if math.isnan(value):
        return "nan"
    if unit == "records/s":
        return f"{value / 1e6:.3f}M"
    return f"{value:.2f}" if unit in ("ms", "s") else f"{value:,.0f}"


def change(old: Figures, new: Figures) -> str:
    both_spread = old.stats is not None and new.stats is not None
    a, b = (old.headline, new.headline) if both_spread else (old.best, new.best)
    return f"{(b / a - 1) * 100:+.0f}%" if a else "n/a"


def compare(old_doc: dict[str, Any], new_doc: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(report lines, headline rows that regressed)."""
    old_rows = {key(r): r for r in old_doc["rows"]}
    new_rows = {key(r): r for r in new_doc["rows"]}
    lines = [f"{name}: {doc.get('source', '(source not recorded)')} {doc.get('run_at_utc', '')} "
             f"(format {doc.get('format', 1)}{'' if doc.get('format') else ': best only, no spread'})"
             for name, doc in (("OLD", old_doc), ("NEW", new_doc))]
    for setting in ("records", "consume_records", "spark_records", "write_records", "latency_rate", "repeats"):
        a, b = old_doc.get("settings", {}).get(setting), new_doc.get("settings", {}).get(setting)
        if a != b:
            lines.append(f"note: {setting} differs: {a} vs {b} (figures are rates, but not strictly comparable)")
    lines += ["", "ember: median (min–max) OLD → NEW, change; Kafka's medians as a control. * = headline row",
              f"{'row':<84} {'ember OLD':>26} {'ember NEW':>26} {'change':>7}  {'Kafka OLD → NEW':>24}  verdict"]
    failed: list[str] = []
    for k, new in new_rows.items():
        name = f"{'*' if is_headline(new) else ' '} {k[0].split(' (')[0]}: {k[1]}" + (f" [{k[2]}]" if k[2] else "")
        old = old_rows.get(k)
        if old is None:
            lines.append(f"{name:<84} {'(not in OLD)':>26}")
            continue
        higher = bool(new["higher_is_better"])
        unit = new["unit"]
        old_e, new_e = figures(old, "ember"), figures(new, "ember")
        old_k, new_k = figures(old, "kafka"), figures(new, "kafka")
        verdict = ""
        if regressed(old_e, new_e, higher):
            verdict = "REGRESSED" if is_headline(new) else "regressed"
            if regressed(old_k, new_k, higher):
                verdict += " (Kafka fell too: a busier machine?)"
            if is_headline(new):
                failed.append(name.strip("* "))
        elif improved(old_e, new_e, higher):
            verdict = "improved"
        kafka = f"{number(old_k.headline, unit)} → {number(new_k.headline, unit)}"
        lines.append(f"{name:<84} {describe(old_e, unit):>26} {describe(new_e, unit):>26} {change(old_e, new_e):>7}  "
                     f"{kafka:>24}  {verdict}")
    for k in old_rows:
        if k not in new_rows:
            lines.append(f"  {k[0].split(' (')[0]}: {k[1]}" + (f" [{k[2]}]" if k[2] else "") + ": only in OLD")
    lines.append("")
    lines.append(f"{len(failed)} headline row(s) regressed" + (": " + "; ".join(failed) if failed else ""))
    return lines, failed


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2 or any(a in ("-h", "--help") for a in args):
        print(__doc__)
        return 0 if args and args[0] in ("-h", "--help") else 2
    try:
        old_doc, new_doc = (load(Path(a)) for a in args)
    except (OSError, ValueError) as error:
        print(f"compare.py: {error}", file=sys.stderr)
        return 2
    lines, failed = compare(old_doc, new_doc)
    print("\n".join(lines))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
