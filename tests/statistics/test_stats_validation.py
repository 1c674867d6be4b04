"""The statistics against ground truth: data from a noise model whose effect is known."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

from specexp.core.notes import NoteKind
from specexp.core.stats.comparison import compare, decide
from specexp.core.stats.planning import (
    minimum_detectable_effect,
    plan_repetitions,
    runs_needed,
    welch_power,
)
from specexp.core.stats.summaries import (
    grubbs_outlier,
    summarize,
    variance_components,
    warnings_for,
)
from specexp.core.stats.verdicts import Verdict
from tests import noise

ALPHA = 0.05


def upper_bound(rate: float, trials: int) -> float:
    """alpha plus three binomial standard errors: the sampling error of an observed rate."""
    return rate + 3 * math.sqrt(rate * (1 - rate) / trials)


def test_aa_false_verdict_rate_stays_at_alpha():
    rng = np.random.default_rng(1)
    trials = 750
    false = sum(
        compare(noise.runs(rng, 90, 5, 0.02), noise.runs(rng, 90, 5, 0.02)).verdict
        in (Verdict.faster, Verdict.slower)
        for _ in range(trials)
    )
    assert false / trials <= upper_bound(ALPHA, trials)


def test_aa_never_claims_a_difference_at_low_noise_and_finds_equivalence_with_enough_runs():
    rng = np.random.default_rng(2)
    verdicts = [
        compare(noise.runs(rng, 90, 10, 0.002), noise.runs(rng, 90, 10, 0.002)).verdict
        for _ in range(200)
    ]
    assert (
        verdicts.count(Verdict.faster) + verdicts.count(Verdict.slower)
        <= upper_bound(ALPHA, 200) * 200
    )
    assert verdicts.count(Verdict.equivalent) / len(verdicts) > 0.9


def test_a_3_5_percent_effect_at_cv_0_5_percent_is_found_with_5_runs():
    rng = np.random.default_rng(3)
    trials = 300
    found = 0
    for _ in range(trials):
        result = compare(noise.runs(rng, 89.5, 5, 0.005), noise.runs(rng, 89.5 * 1.035, 5, 0.005))
        found += result.verdict == Verdict.faster
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
    # The ratio of geometric means: for log-normal noise, the ratio of the true medians.
    assert covered / trials >= 0.95 - 3 * math.sqrt(0.05 * 0.95 / trials)


def test_slower_and_inconclusive():
    rng = np.random.default_rng(5)
    assert (
        compare(noise.runs(rng, 89.5, 5, 0.01), noise.runs(rng, 54.1, 5, 0.01)).verdict
        == Verdict.slower
    )
    small = compare(noise.runs(rng, 90, 3, 0.05), noise.runs(rng, 91, 3, 0.05))
    assert small.verdict == Verdict.inconclusive
    assert [n.kind for n in small.notes if n.kind == NoteKind.undetectable]
    assert any("cannot detect effects below" in note.message for note in small.notes)


def test_a_family_keeps_the_family_wise_error_and_its_intervals_hold_together():
    rng = np.random.default_rng(6)
    trials, family = 300, 5
    any_false = any_miss = 0
    for _ in range(trials):
        base = noise.runs(rng, 90, 5, 0.02)
        comparisons = [compare(base, noise.runs(rng, 90, 5, 0.02)) for _ in range(family)]
        decide(comparisons)
        any_false += any(c.verdict in (Verdict.faster, Verdict.slower) for c in comparisons)
        any_miss += any(not c.ci_low <= 1 <= c.ci_high for c in comparisons)
        assert all(c.family == family and c.ci_level == pytest.approx(0.99) for c in comparisons)
    assert any_false / trials <= upper_bound(ALPHA, trials)
    assert any_miss / trials <= upper_bound(ALPHA, trials)  # simultaneous, not one at a time


def test_the_interval_the_p_value_and_the_verdict_never_disagree():
    rng = np.random.default_rng(10)
    for trial in range(400):
        effect = rng.choice([1.0, 1.005, 1.01, 1.02, 0.98])
        family = [
            compare(noise.runs(rng, 90, 5, 0.01), noise.runs(rng, 90 * effect, 5, 0.01))
            for _ in range(1 + trial % 4)
        ]
        decide(family)
        for c in family:
            excludes_one = c.ci_low > 1 or c.ci_high < 1
            assert excludes_one == (c.p_welch_adjusted < ALPHA)
            assert c.ci_low <= c.ratio <= c.ci_high
            if c.verdict == Verdict.faster:
                assert c.ci_low > 1
            elif c.verdict == Verdict.slower:
                assert c.ci_high < 1
            elif c.verdict == Verdict.equivalent:
                assert 1 / 1.01 <= c.ci_low and c.ci_high <= 1.01
            else:
                assert c.ci_low <= 1 <= c.ci_high


def test_arms_without_spread_or_with_one_value_cannot_be_tested():
    same = compare([90.0] * 5, [95.0] * 5)
    assert same.verdict == Verdict.cannot_test and same.p_welch != same.p_welch  # nan, not 0
    assert "5 identical values: no spread to test against" in same.notes[0].message
    single = compare([90.0], [91.0, 92.0, 93.0])
    assert single.verdict == Verdict.cannot_test and "1 value(s)" in single.notes[0].message
    decide([same, single])  # left out of the family
    assert same.verdict == single.verdict == Verdict.cannot_test


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
        pooled_false += pooled.verdict in (Verdict.faster, Verdict.slower)
        launch_false += per_launch.verdict in (Verdict.faster, Verdict.slower)
    assert launch_false / trials <= upper_bound(ALPHA, trials)
    assert pooled_false / trials > 2 * ALPHA  # the trap this design avoids


def test_variance_components_recover_the_two_levels():
    rng = np.random.default_rng(8)
    groups = noise.launches(rng, 100, 60, 10, run_cv=0.01, launch_cv=0.03)
    components = variance_components(groups)
    assert components.within_launch == pytest.approx(1.0, rel=0.15)  # (100 * 0.01)^2
    assert components.between_launch == pytest.approx(9.0, rel=0.35)  # (100 * 0.03)^2


def test_variance_components_take_launches_of_one_run_as_a_sequence_measures_them():
    """After its first look a sequence may measure launches of fewer runs, even one: the two
    levels are still recovered (unbalanced ANOVA), not left out."""
    rng = np.random.default_rng(9)
    groups = noise.launches(rng, 100, 200, 3, run_cv=0.01, launch_cv=0.03)
    groups += [g[:1] for g in noise.launches(rng, 100, 200, 3, run_cv=0.01, launch_cv=0.03)]
    components = variance_components(groups)
    # Both within 3.5 standard errors (0.07 and 0.085, relative, over 2,000 seeds).
    assert components is not None and components.launches == 400
    assert components.within_launch == pytest.approx(1.0, rel=0.25)
    assert components.between_launch == pytest.approx(9.0, rel=0.3)
    assert variance_components([[100.0], [101.0]]) is None  # no run repeated in a launch


def test_planning_matches_the_textbook_numbers():
    # docs/reference/engines.md: CV 1% -> 17 runs for a 1% effect, 6 for 2%, 3 for 5%.
    assert [runs_needed(0.01, e) for e in (0.01, 0.02, 0.05)] == [17, 6, 3]
    mde = minimum_detectable_effect(0.01, 17)
    assert 0.009 < mde < 0.0101
    # The MDE and runs-needed agree with each other.
    assert runs_needed(0.01, minimum_detectable_effect(0.01, 8) * 1.001) <= 8
    # Two runs read at 99.999% find no effect short of a millionfold (an A/A's CV of 11%
    # overflowed the effect's exponential).
    assert minimum_detectable_effect(0.11, 2, 1e-5) is None


def test_outlier_and_trend_warnings_rarely_cry_wolf_and_say_what_they_catch():
    """False alarms on clean log-normal runs at n = 5 and 10, and the power docs/statistics.md states:
    one run 15% off among runs at 2% CV; a steady drift of 1% per run."""
    rng = np.random.default_rng(11)
    trials = 1000
    for n in (5, 10):
        clean = [warnings_for(noise.runs(rng, 90, n, 0.02), cv_warn=1) for _ in range(trials)]
        outliers = sum(any(w.startswith("outlier") for w in ws) for ws in clean) / trials
        trends = sum(any("keep" in w for w in ws) for ws in clean) / trials
        assert outliers <= upper_bound(ALPHA, trials) and trends <= upper_bound(ALPHA, trials)
    caught = 0
    for _ in range(trials):
        values = noise.runs(rng, 90, 10, 0.02)
        values[3] *= 0.85
        caught += grubbs_outlier(values) == 3
    assert caught / trials > 0.9
    drifting = sum(
        any(
            "falling" in w
            for w in warnings_for(
                [v * (1 - 0.01 * i) for i, v in enumerate(noise.runs(rng, 90, 10, 0.01))], 1
            )
        )
        for _ in range(trials)
    )
    assert drifting / trials > 0.9


def test_summary_interval_and_warnings():
    s = summarize([10.0, 11.0, 12.0])
    half = scipy_stats.t.ppf(0.975, 2) * 1.0 / math.sqrt(3)
    assert (s.mean, s.std) == (11.0, 1.0) and s.ci_high - s.mean == pytest.approx(half)
    trend = warnings_for([10, 11, 12, 13, 14, 15, 16], cv_warn=0.5)
    assert any("rising" in w and "warmup" in w for w in trend)
    outlier = warnings_for([100, 101, 99, 100, 102, 100, 160], cv_warn=0.5)
    assert any("outlier: run 6 (160), Grubbs' test p<0.05" in w for w in outlier)
    assert any("CV" in w for w in warnings_for([1, 2, 3, 4, 5], cv_warn=0.05))
    assert warnings_for([100.0, 100.2, 99.9, 100.1, 100.0], cv_warn=0.05) == []


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="positive"):
        compare([1.0, -1.0], [1.0, 2.0])


def _welch_rejects(rng, n: int, delta: float, sd: float, alpha: float, trials: int) -> float:
    a = rng.normal(0.0, sd, (trials, n))
    b = rng.normal(delta, sd, (trials, n))
    return float(np.mean(scipy_stats.ttest_ind(b, a, axis=1, equal_var=False).pvalue < alpha))


def test_welch_power_is_what_welchs_test_reaches():
    rng = np.random.default_rng(12)
    trials = 4000
    for n, delta in ((3, 0.05), (5, 0.03), (10, 0.02)):
        simulated = _welch_rejects(rng, n, delta, 0.02, ALPHA, trials)
        margin = 3 * math.sqrt(simulated * (1 - simulated) / trials) + 0.005
        assert welch_power(delta, 0.02, n, ALPHA) == pytest.approx(simulated, abs=margin)
    # The pooled-t formula is optimistic at small n: Welch's random df cost power.
    assert welch_power(math.log1p(0.05), 0.02, 3, ALPHA) < 0.55


def test_planned_launches_and_runs_reach_the_power_at_least_cost():
    """Two-level noise (launch and run CV 2% each): the plan's launch means, compared with
    Welch at the family's alpha, find the threshold effect with the asked power."""
    rng = np.random.default_rng(13)
    plan = plan_repetitions(
        within_cv=0.02,
        between_cv=0.02,
        effect=0.03,
        launch_s=600,
        run_s=25,
        warmup_runs=2,
        family=2,
    )
    assert plan is not None and plan.launches >= 2
    trials, found = 1500, 0
    for _ in range(trials):
        base = noise.launches(rng, 90, plan.launches, plan.runs, run_cv=0.02, launch_cv=0.02)
        cand = noise.launches(rng, 90 * 1.03, plan.launches, plan.runs, run_cv=0.02, launch_cv=0.02)
        a, b = (np.log([np.exp(np.mean(np.log(x))) for x in arm]) for arm in (base, cand))
        found += scipy_stats.ttest_ind(b, a, equal_var=False).pvalue < ALPHA / 2
    assert found / trials >= 0.8 - 3 * math.sqrt(0.8 * 0.2 / trials)
    # Nothing cheaper reaches the power: one launch fewer, or fewer runs per launch.
    delta = math.log1p(0.03)
    for launches, runs in ((plan.launches - 1, plan.runs), (plan.launches, plan.runs - 1)):
        if launches >= 2 and runs >= 1:
            sd = math.sqrt(0.02**2 + 0.02**2 / runs)
            assert welch_power(delta, sd, launches, ALPHA / 2) < 0.8
    # Launch variance makes runs stop paying: more launches, not many runs each.
    assert plan.runs <= 10
