"""A look of a sequence measured until decided (specexp.core.sequential.look) on the few
launches a look can come after: its repeated interval, never an arithmetic error."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

from specexp.core.sequential import (
    Costs,
    SequentialDesign,
    SequentialRecord,
    StopReason,
    least_favourable_df,
    look,
    simulate,
)
from specexp.core.stats.verdicts import Verdict, welch_log

# The undecidable A/A of the process tests: a threshold of 0.01% read at 99.999%.
DESIGN = SequentialDesign(
    alpha=1e-5, threshold=1e-4, design_effect=2e-4, power=0.8, min_launches=2, max_launches=4
)


@pytest.mark.parametrize(
    ("baseline", "candidate"),
    [
        ([930.0, 850.0], [950.0, 940.0]),  # stats.sequential.min_launches=2: df 1
        ([100.0, 103.0, 98.0], [101.0, 97.0]),  # an arm a launch short: df 1
    ],
)
def test_a_look_whose_bound_is_beyond_a_float_is_unbounded_not_an_error(baseline, candidate):
    """Issue 60: a resumed sequential sweep exited 70 with OverflowError at its first look -
    at 99.999% on one degree of freedom the upper bound is e^(thousands)."""
    record = SequentialRecord(DESIGN)
    result = look(record, baseline, candidate)
    assert result.ci_low == 0.0 and result.ci_high == math.inf
    assert result.verdict == Verdict.inconclusive and record.stop is None
    assert result.ratio == pytest.approx(
        math.exp(np.log(candidate).mean() - np.log(baseline).mean())
    )


def test_a_look_in_range_is_students_t_interval_at_its_level():
    """The interval of a look whose bounds are floats: Student's t at the look's level on
    the least favourable df (scipy's quantile, independently of the code under test)."""
    baseline, candidate = [100.0, 103.0, 98.0, 101.0], [101.0, 97.0, 99.0, 100.5]
    record = SequentialRecord(DESIGN)
    result = look(record, baseline, candidate)
    log_diff, se, _ = welch_log(np.asarray(baseline), np.asarray(candidate))
    half = scipy_stats.t.ppf(0.5 + result.level / 2, least_favourable_df(baseline, candidate))
    assert 0 < result.ci_low < result.ratio < result.ci_high < math.inf
    assert result.ci_low == pytest.approx(math.exp(log_diff - half * se), rel=1e-9)
    assert result.ci_high == pytest.approx(math.exp(log_diff + half * se), rel=1e-9)


def test_a_sequence_from_two_launches_per_arm_runs_to_its_end():
    """Whole sequences looked at from two launches per arm, at 99.999%, end with a reason
    and a look after every round from the second."""
    rng = np.random.default_rng(60)
    for _ in range(5):
        outcome = simulate(
            DESIGN,
            between_cv=0.05,
            within_cv=0.02,
            effect=0.0,
            costs=Costs(1.0, 1.0, 0),
            first_runs=2,
            server_budget_s=math.inf,
            rng=rng,
        )
        assert outcome.record is not None
        assert outcome.stop in (StopReason.launches, StopReason.information)
        assert len(outcome.record.looks) == outcome.launches - DESIGN.min_launches + 1
