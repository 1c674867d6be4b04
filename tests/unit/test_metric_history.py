"""Acceptance length and goodput along a configuration's history: their change points over
the runs that carry them, and an explicit state when too few do."""

from __future__ import annotations

import numpy as np

from specexp.analysis.history import (
    FOLLOWED_METRICS,
    MIN_POINTS,
    histories,
    metric_changes,
)
from specexp.analysis.results import JobRun, Metric, Tag
from specexp.core.records import unstructure
from specexp.history_command import history_markdown


def runs(lengths: list[float]) -> list[JobRun]:
    """One configuration's runs an hour apart, steady throughput, the acceptance lengths given."""
    rng = np.random.default_rng(5)
    made = []
    for i, length in enumerate(lengths):
        values = list(100.0 * (1 + 0.005 * rng.standard_normal(3)))
        times = [3600.0 * i + t for t in (0.0, 1.0, 2.0)]
        metrics = {Metric.acceptance_length_mean: length}
        made.append(
            JobRun.from_store(
                f"r{i:02d}",
                "draft-c1",
                "FINISHED",
                {Tag.hardware: "cpu"},
                {"speculative.method": "draft"},
                values,
                [],
                metrics,
                times,
            )
        )
    return made


def followed(lengths: list[float]):
    found = runs(lengths)
    (points,) = histories(found)
    by_id = {r.run_id: r for r in found}
    return [metric_changes(points, by_id, m) for m in FOLLOWED_METRICS]


def test_a_drop_in_acceptance_length_is_found_where_throughput_is_steady():
    rng = np.random.default_rng(11)
    lengths = [3.0 + 0.02 * x for x in rng.standard_normal(12)]
    lengths += [2.4 + 0.02 * x for x in rng.standard_normal(12)]
    length, goodput = followed(lengths)
    assert not length.too_little_data and length.points == 24
    (change,) = length.changes
    assert change.index == 12 and change.ci_high < -0.15
    assert "1 change(s) over 24 runs" in length.describe(0.0005)
    # No SLO, no goodput: said so, not "no change".
    assert goodput.too_little_data and goodput.points == 0
    assert "too little data" in goodput.describe(0.0005)
    assert unstructure(goodput)["too_little_data"] is True


def test_too_few_runs_are_too_little_data_not_no_change():
    (length, _) = followed([3.0] * (MIN_POINTS - 1))
    assert length.too_little_data and length.changes == []
    assert length.describe(0.0005).startswith(
        f"{Metric.acceptance_length_mean}: too little data (3 run(s)"
    )


def test_the_experiment_description_says_what_each_metric_did():
    found = runs([3.0] * 6)
    (points,) = histories(found)
    by_id = {r.run_id: r for r in found}
    followed = {points[0].run_id: [metric_changes(points, by_id, m) for m in FOLLOWED_METRICS]}
    text = history_markdown([(points, [])], 0.0005, followed)
    assert f"- {Metric.acceptance_length_mean}: no change at p < 0.0005 over 6 runs" in text
    assert "- goodput_rps_mean: too little data (0 run(s)" in text
