"""bench/vs_kafka/compare.py: the rule that flags a regressed row, old-format rows, the exit code."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

COMPARE = Path(__file__).resolve().parents[1] / "bench" / "vs_kafka" / "compare.py"


@pytest.fixture(scope="module")
def compare() -> ModuleType:
    spec = importlib.util.spec_from_file_location("vs_kafka_compare", COMPARE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module          # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def row(ember: list[float] | float, kafka: list[float] | float = 1.0, *, higher: bool = True,
        group: str = "Producer throughput (100 B records)", mode: str = "send_batch") -> dict[str, object]:
    data: dict[str, object] = {"group": group, "case": "acks=1 RF=1", "unit": "records/s" if higher else "ms",
                               "higher_is_better": higher, "ember_mode": mode, "kafka_mode": "produce"}
    if isinstance(ember, list):          # format 2: samples
        assert isinstance(kafka, list)
        data.update(ember_samples=ember, kafka_samples=kafka)
    else:                                # format 1: the best only
        data.update(ember=ember, kafka=kafka)
    return data


def flagged(compare: ModuleType, old: dict[str, object], new: dict[str, object]) -> bool:
    higher = bool(new["higher_is_better"])
    return compare.regressed(compare.figures(old, "ember"), compare.figures(new, "ember"), higher)


def test_a_fall_within_the_old_spread_is_not_flagged(compare: ModuleType) -> None:
    old = row([5.6, 3.5, 1.7, 4.0, 4.2], [1.0] * 5)      # the shared host's spread: min 1.7
    assert not flagged(compare, old, row([3.0, 2.9, 3.1, 2.0, 3.3], [1.0] * 5))


def test_a_median_below_the_old_min_and_beyond_the_iqr_is_flagged(compare: ModuleType) -> None:
    old = row([10.0, 10.2, 9.9, 10.1, 10.0], [1.0] * 5)
    assert flagged(compare, old, row([8.0, 8.1, 7.9, 8.2, 8.0], [1.0] * 5))


def test_below_the_old_min_but_within_the_minimum_tolerance_is_not_flagged(compare: ModuleType) -> None:
    old = row([10.0, 10.0, 10.0, 10.0, 10.0], [1.0] * 5)          # no spread at all: 5 % tolerance
    assert not flagged(compare, old, row([9.6] * 5, [1.0] * 5))
    assert flagged(compare, old, row([9.4] * 5, [1.0] * 5))


def test_below_the_iqr_band_but_not_below_the_old_min_is_not_flagged(compare: ModuleType) -> None:
    old = row([4.0, 9.0, 10.0, 10.5, 11.0], [1.0] * 5)           # q1 9, q3 10.5: 15 % band, min 4
    assert not flagged(compare, old, row([8.0] * 5, [1.0] * 5))


def test_lower_is_better_rows_flag_a_rise(compare: ModuleType) -> None:
    old = row([6.0, 6.2, 6.1, 5.9, 6.0], [5.0] * 5, higher=False)
    assert flagged(compare, old, row([9.0, 9.5, 8.8, 9.1, 9.0], [5.0] * 5, higher=False))
    assert not flagged(compare, old, row([5.0] * 5, [5.0] * 5, higher=False))


def test_old_format_rows_compare_best_with_best(compare: ModuleType) -> None:
    old = row(5_000_000.0, 1_000_000.0)                           # no samples: "no spread"
    assert compare.figures(old, "ember").stats is None
    assert not flagged(compare, old, row([4_600_000.0, 3_000_000.0, 1_000_000.0], [1.0] * 3))   # best -8 %
    assert flagged(compare, old, row([4_400_000.0, 3_000_000.0], [1.0] * 2))                   # best -12 %


def test_exit_code_is_one_only_for_a_headline_row(compare: ModuleType, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    def write(name: str, rows: list[dict[str, object]]) -> str:
        path = tmp_path / name
        path.write_text(json.dumps({"format": 2, "rows": rows}))
        return str(path)

    steady, fallen = [10.0, 10.1, 9.9, 10.0, 10.0], [5.0, 5.1, 4.9, 5.0, 5.0]
    send = {"mode": "send"}
    old = write("old.json", [row(steady, steady), row(steady, steady, **send)])
    assert compare.main([old, write("send.json", [row(steady, steady), row(fallen, steady, **send)])]) == 0
    assert "regressed" in capsys.readouterr().out
    assert compare.main([old, write("batch.json", [row(fallen, steady), row(steady, steady, **send)])]) == 1
    assert "REGRESSED" in capsys.readouterr().out
    assert compare.is_headline(row(steady, steady, group="Consumer throughput (116 B records, RF=1)",
                                   mode="kafka-client"))


def test_reads_the_committed_results(compare: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    """The committed vs_kafka.json (whatever its format) compares with itself: nothing regressed."""
    results = COMPARE.parents[1] / "results" / "vs_kafka.json"
    assert compare.main([str(results), str(results)]) == 0
    out = capsys.readouterr().out
    assert "0 headline row(s) regressed" in out and "Producer" in out
