"""Change points over a configuration's history (Apache Otava's E-Divisive with its t test,
at p < 0.0005), seeded: stationary histories of 20-50 runs whose means vary 1% from run to
run, and the same with a 3% drop halfway, where what the runs ran with changed too."""

from __future__ import annotations

import math

import numpy as np
import pytest

from specexp.analysis.history import DifferenceKind, HistoryPoint, find_changes

NOISE = 0.01


def history(rng, n: int, drop_at: int | None = None, drop: float = 0.03) -> list[HistoryPoint]:
    points = []
    for i in range(n):
        after = drop_at is not None and i >= drop_at
        value = 100 * math.exp(rng.normal(0, NOISE) + (math.log1p(-drop) if after else 0))
        settings = {
            "effective.attention_backend": "triton" if after else "flashinfer",
            "stack.sglang": "0.5.9" if i >= n // 3 else "0.5.8",
            "config.speculative.method": "none",
        }
        points.append(HistoryPoint(f"run{i:02d}", f"run {i}", 1.7e9 + 600 * i, value, settings, {}))
    return points


@pytest.mark.parametrize("n", [20, 35, 50])
def test_stationary_histories_show_a_change_at_most_five_percent_of_the_time(n):
    rng, trials = np.random.default_rng(50 + n), 300
    false = sum(bool(find_changes(history(rng, n))) for _ in range(trials)) / trials
    assert false <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / trials), false


def test_a_three_percent_drop_is_found_with_its_interval_and_attributed():
    rng, trials, found = np.random.default_rng(60), 200, 0
    for _ in range(trials):
        changes = find_changes(history(rng, 30, drop_at=15))
        near = [c for c in changes if abs(c.index - 15) <= 1]
        if not near:
            continue
        found += 1
        (change,) = near[:1]
        assert change.ci_low < -0.03 < change.ci_high < 0 or change.ci_high < 0
        if change.index == 15:  # the split is exact: the effective setting comes first
            first = change.differences[0]
            assert first.kind == DifferenceKind.effective and first.clean
            assert (first.before, first.after) == ("flashinfer", "triton")
    assert found / trials >= 0.8
