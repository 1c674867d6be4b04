"""The statistics against ground truth: data from a noise model whose effect is known."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

from specexp.stats import (
    EQUIVALENT,
    FASTER,
    INCONCLUSIVE,
    SLOWER,
    compare,
    decide,
    holm,
    minimum_detectable_effect,
    runs_needed,
    summarize,
    variance_components,
    warnings_for,
)
from tests import noise

ALPHA = 0.05


def upper_bound(rate: float, trials: int) -> float:
    """alpha plus three binomial standard errors: the sampling error of an observed rate."""
    return rate + 3 * math.sqrt(rate * (1 - rate) / trials)


def test_aa_false_verdict_rate_stays_at_alpha():
    rng = np.random.default_rng(1)
    trials = 1500
    false = sum(
        compare(noise.runs(rng, 90, 5, 0.02), noise.runs(rng, 90, 5, 0.02)).verdict
        in (FASTER, SLOWER)
        for _ in range(trials)
    )
    assert false / trials <= upper_bound(ALPHA, trials)


def test_aa_never_claims_a_difference_at_low_noise_and_finds_equivalence_with_enough_runs():
    rng = np.random.default_rng(2)
    verdicts = [
        compare(noise.runs(rng, 90, 10, 0.002), noise.runs(rng, 90, 10, 0.002)).verdict
        for _ in range(200)
    ]
    assert verdicts.count(FASTER) + verdicts.count(SLOWER) <= upper_bound(ALPHA, 200) * 200
    assert verdicts.count(EQUIVALENT) / len(verdicts) > 0.9


def test_a_3_5_percent_effect_at_cv_0_5_percent_is_found_with_5_runs():
    rng = np.random.default_rng(3)
    trials = 300
    found = 0
    for _ in range(trials):
        result = compare(noise.runs(rng, 89.5, 5, 0.005), noise.runs(rng, 89.5 * 1.035, 5, 0.005))
        found += result.verdict == FASTER
        assert result.ci_low < result.ci_high
    assert found / trials > 0.99


def test_ci_covers_the_true_ratio_at_its_level():
    rng = np.random.default_rng(4)
    trials, true_ratio = 1000, 0.6045  # the reference's EAGLE-3 on cu128: 54.1 / 89.5
    covered = sum(
        c.ci_low <= true_ratio <= c.ci_high
        for c in (
            compare(noise.runs(rng, 89.5, 5, 0.02), noise.runs(rng, 54.1, 5, 0.02))
            for _ in range(trials)
        )
    )
    # Means of log-normals: the ratio of means equals the ratio of medians here, within 0.05%.
    assert covered / trials >= 0.95 - 3 * math.sqrt(0.05 * 0.95 / trials)


def test_slower_and_inconclusive():
    rng = np.random.default_rng(5)
    assert compare(noise.runs(rng, 89.5, 5, 0.01), noise.runs(rng, 54.1, 5, 0.01)).verdict == SLOWER
    small = compare(noise.runs(rng, 90, 3, 0.05), noise.runs(rng, 91, 3, 0.05))
    assert small.verdict == INCONCLUSIVE
    assert any("cannot detect effects below" in note for note in small.notes)


def test_holm_keeps_the_family_wise_error_at_alpha():
    rng = np.random.default_rng(6)
    trials, family = 600, 5
    any_false = 0
    for _ in range(trials):
        base = noise.runs(rng, 90, 5, 0.02)
        comparisons = [compare(base, noise.runs(rng, 90, 5, 0.02)) for _ in range(family)]
        decide(comparisons)
        any_false += any(c.verdict in (FASTER, SLOWER) for c in comparisons)
    assert any_false / trials <= upper_bound(ALPHA, trials)


def test_holm_adjustment_matches_the_definition():
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5]) == [0.5]


def test_per_launch_values_keep_the_error_rate_when_launches_vary():
    """Launch-to-launch variance makes runs within one launch dependent: pooling them as if
    independent inflates false verdicts; per-launch means do not."""
    rng = np.random.default_rng(7)
    trials = 400
    pooled_false = launch_false = 0
    for _ in range(trials):
        a = noise.launches(rng, 90, 4, 5, run_cv=0.005, launch_cv=0.02)
        b = noise.launches(rng, 90, 4, 5, run_cv=0.005, launch_cv=0.02)
        pooled = compare(sum(a, []), sum(b, []))
        per_launch = compare([np.mean(x) for x in a], [np.mean(x) for x in b])
        pooled_false += pooled.verdict in (FASTER, SLOWER)
        launch_false += per_launch.verdict in (FASTER, SLOWER)
    assert launch_false / trials <= upper_bound(ALPHA, trials)
    assert pooled_false / trials > 2 * ALPHA  # the trap this design avoids


def test_variance_components_recover_the_two_levels():
    rng = np.random.default_rng(8)
    groups = noise.launches(rng, 100, 60, 10, run_cv=0.01, launch_cv=0.03)
    components = variance_components(groups)
    assert components.within_launch == pytest.approx(1.0, rel=0.15)  # (100 * 0.01)^2
    assert components.between_launch == pytest.approx(9.0, rel=0.35)  # (100 * 0.03)^2


def test_planning_matches_the_textbook_numbers():
    # REFERENCE.md: CV 1% -> 17 runs for a 1% effect, 6 for 2%, 3 for 5%.
    assert [runs_needed(0.01, e) for e in (0.01, 0.02, 0.05)] == [17, 6, 3]
    mde = minimum_detectable_effect(0.01, 17)
    assert 0.009 < mde < 0.0101
    # The MDE and runs-needed agree with each other.
    assert runs_needed(0.01, minimum_detectable_effect(0.01, 8) * 1.001) <= 8


def test_bootstrap_interval_only_with_enough_values():
    rng = np.random.default_rng(9)
    assert compare(noise.runs(rng, 90, 5, 0.01), noise.runs(rng, 95, 5, 0.01)).bootstrap_ci is None
    c = compare(noise.runs(rng, 90, 12, 0.01), noise.runs(rng, 95, 12, 0.01))
    low, high = c.bootstrap_ci
    assert low < c.ratio < high and abs(low - c.ci_low) < 0.01


def test_summary_interval_and_warnings():
    s = summarize([10.0, 11.0, 12.0])
    half = scipy_stats.t.ppf(0.975, 2) * 1.0 / math.sqrt(3)
    assert (s.mean, s.std) == (11.0, 1.0) and s.ci_high - s.mean == pytest.approx(half)
    trend = warnings_for([10, 11, 12, 13, 14, 15, 16], cv_warn=0.5)
    assert any("rising" in w and "warmup" in w for w in trend)
    outlier = warnings_for([100, 101, 99, 100, 102, 100, 160], cv_warn=0.5)
    assert any("outliers: run 6 (160)" in w for w in outlier)
    assert any("CV" in w for w in warnings_for([1, 2, 3, 4, 5], cv_warn=0.05))
    assert warnings_for([100.0, 100.2, 99.9, 100.1, 100.0], cv_warn=0.05) == []


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="at least 2 values"):
        compare([1.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="positive"):
        compare([1.0, -1.0], [1.0, 2.0])
