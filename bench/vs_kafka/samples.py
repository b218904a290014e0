"""The summary of one system's runs of one case: median (the headline figure), min-max (the spread
the table shows), quartiles (compare.py's rule) and the best run. Pure Python: report.py, compare.py
and the tests use it without the benchmark's dependencies."""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class Stats:
    median: float
    low: float
    high: float
    q1: float
    q3: float
    best: float     # the highest sample when higher is better, else the lowest
    n: int

    @property
    def relative_iqr(self) -> float:
        """Interquartile range over the median (0 for a single sample)."""
        return (self.q3 - self.q1) / self.median if self.median else 0.0


def stats(samples: Sequence[float], higher_is_better: bool) -> Stats:
    """Quartiles by linear interpolation between the sorted samples (``method="inclusive"``: for 5
    samples q1 and q3 are the 2nd and 4th)."""
    values = sorted(samples)
    if not values:
        nan = float("nan")
        return Stats(nan, nan, nan, nan, nan, nan, 0)
    if len(values) == 1:
        q1 = q3 = values[0]
    else:
        q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return Stats(statistics.median(values), values[0], values[-1], q1, q3,
                 values[-1] if higher_is_better else values[0], len(values))


def median_and_range(samples: Sequence[float]) -> str:
    """"median (min-max)" with two decimals, as the single-purpose benches' tables show a figure."""
    return f"{statistics.median(samples):,.2f} ({min(samples):,.2f}-{max(samples):,.2f})"
