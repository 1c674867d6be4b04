"""Latency tails with honest intervals: percentiles of a time-ordered series with their
order-statistic (binomial) intervals on the effective number of values, seeded. Latencies
are log-normal; within a run they wander as AR(1) (a queue that builds and drains), which
the naive interval - n values taken as independent - does not cover at its level."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

from specexp.core.stats import percentile_estimates, values_needed

CONFIDENCE = 0.95


def series(rng: np.random.Generator, trials: int, n: int, rho: float) -> np.ndarray:
    """``trials`` log-normal series of ``n`` values, AR(1) with ``rho`` on the log scale,
    each started in its stationary state (the marginal is log-normal(0, 0.5) throughout)."""
    shocks = rng.normal(0.0, 1.0, (trials, n))
    logs = np.empty_like(shocks)
    logs[:, 0] = shocks[:, 0]
    for i in range(1, n):
        logs[:, i] = rho * logs[:, i - 1] + math.sqrt(1 - rho**2) * shocks[:, i]
    return np.exp(0.5 * logs)


def coverage(rng, trials: int, n: int, rho: float, percentile: float) -> tuple[float, int]:
    """(share of reported intervals covering the true percentile, how many were reported)."""
    truth = math.exp(0.5 * scipy_stats.norm.ppf(percentile / 100))
    covered = reported = 0
    for values in series(rng, trials, n, rho):
        (found,) = percentile_estimates(values.tolist(), (percentile,), CONFIDENCE)
        if found.ci_low is None or found.ci_high is None:
            continue
        reported += 1
        covered += found.ci_low <= truth <= found.ci_high
    return covered / max(reported, 1), reported


def test_the_values_an_interval_needs_are_guidellms():
    # An order-statistic 95% interval exists from 72 values at p95, 368 at p99, 3,688 at p99.9.
    assert [values_needed(p) for p in (95, 99, 99.9)] == [72, 368, 3688]
    assert values_needed(50) == 6


@pytest.mark.parametrize(("percentile", "n"), [(50, 200), (95, 400), (99, 2000)])
def test_independent_values_intervals_cover_the_true_percentile_at_their_level(percentile, n):
    """Independent log-normal values: coverage 0.967 (p50, 200 values), 0.965 (p95, 400),
    0.960 (p99, 2,000), measured over 2,000 series each (SE 0.004); asserted over 1,000 at
    least 0.95 - 3 SE (0.007). Exact order statistics overshoot by the binomial's steps."""
    rate, reported = coverage(np.random.default_rng(70 + percentile), 1000, n, 0.0, percentile)
    assert reported == 1000
    assert rate >= CONFIDENCE - 3 * math.sqrt(CONFIDENCE * (1 - CONFIDENCE) / 1000), rate


@pytest.mark.parametrize("rho", [0.5, 0.8])
def test_autocorrelated_values_keep_the_level_with_their_effective_number(rho):
    """AR(1) log latencies at rho 0.5 and 0.8, 2,000 values, p90: the naive interval (the
    values taken as independent) covers 0.85 at rho 0.5; on n(1 - rho)/(1 + rho) effective
    values it covers 0.986 and 0.992 (2,000 series each, SE 0.003; conservative, since the
    ranks' autocorrelation exceeds the tail indicator's); asserted over 1,000 at least
    0.95 - 3 SE (0.007)."""
    rate, reported = coverage(np.random.default_rng(80 + int(10 * rho)), 1000, 2000, rho, 90)
    assert reported == 1000
    assert rate >= CONFIDENCE - 3 * math.sqrt(CONFIDENCE * (1 - CONFIDENCE) / 1000), rate


def test_too_few_values_give_no_p99_but_say_how_many_it_needs():
    rng = np.random.default_rng(90)
    found = {e.name: e for e in percentile_estimates(series(rng, 1, 300, 0.0)[0].tolist())}
    assert found["p99"].value is None and found["p99"].needed == 368
    assert found["p95"].value is not None and found["p50"].value is not None
    # 2,000 values at rho 0.8 are 222 effective ones: too few for p99 as well.
    wandering = percentile_estimates(series(rng, 1, 2000, 0.8)[0].tolist(), (99,))[0]
    assert wandering.value is None and wandering.n_eff < 368
