"""Seeded Monte Carlo of the capacity search: runs of the search itself against a known
attainment curve, with the noise of real runs - binomial requests, and run-to-run excess
(each run's load differs: its arrivals are a fresh Poisson draw, the machine is not the
same), which the quasi-binomial fit must carry into the interval.

The curve is logistic in log rate, through the target at 1 req/s: the truth is known, so
coverage is counted, not argued."""

from __future__ import annotations

import math

import numpy as np
import pytest

from specexp.core.capacity import RatePoint, estimate, next_rate
from specexp.core.schemas import CapacitySearchConfig

pytestmark = pytest.mark.statistics

TARGET, TRUE_CAPACITY = 0.9, 1.0


def searched(seed: int, excess: float, runs: int = 8, requests: int = 24, slope: float = -6.0):
    """One search of ``runs`` runs from a start up to 3.3x off the truth; its estimate."""
    rng = np.random.default_rng(seed)
    intercept = math.log(TARGET / (1 - TARGET)) - slope * math.log(TRUE_CAPACITY)
    search = CapacitySearchConfig(
        start_rate=float(TRUE_CAPACITY * math.exp(rng.uniform(-1.2, 1.2))),
        min_rate=0.01,
        max_rate=100.0,
    )
    points: list[RatePoint] = []
    for _ in range(runs):
        rate = next_rate(points, search, TARGET)
        logit = intercept + slope * math.log(rate) + rng.normal(0.0, excess)
        attained = int(rng.binomial(requests, 1 / (1 + math.exp(-logit))))
        points.append(RatePoint(rate, requests, attained))
    return estimate(points, TARGET, 0.95)


@pytest.mark.parametrize("excess", [0.0, 0.3])
def test_the_capacity_interval_covers_the_true_capacity_at_its_level(excess):
    """95% intervals from eight runs of 24 requests: coverage within Monte Carlo error of
    95% (unbounded intervals cover, and are counted: they must stay rare)."""
    trials = 300
    outcomes = [searched(seed, excess) for seed in range(trials)]
    assert all(c.rate is not None for c in outcomes)  # the search always brackets it
    bounded = [c for c in outcomes if c.ci_low is not None]
    covered = sum(c.ci_low <= TRUE_CAPACITY <= c.ci_high for c in bounded)
    coverage = (covered + trials - len(bounded)) / trials
    # 3 standard errors of a binomial proportion at 95% over 300 trials: +-0.038.
    assert 0.91 <= coverage <= 0.99, coverage
    assert len(bounded) >= 0.9 * trials
    # And it says something: the median interval spans less than +-20% of the capacity.
    widths = sorted(c.ci_high / c.ci_low for c in bounded)
    assert widths[len(widths) // 2] < 1.44


def test_the_point_estimate_is_close_and_unbiased_on_the_log_scale():
    estimates = [searched(seed, 0.3).rate for seed in range(300, 500)]
    logs = np.log([e for e in estimates if e is not None])
    assert abs(float(np.mean(logs))) < 0.03  # within 3% of the truth on average
    assert float(np.std(logs)) < 0.12
