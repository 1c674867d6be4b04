"""Launch-to-launch variance is never ignored: A/A comparisons of single-launch arms (the
default protocol) on two-level noise, 2% between launches and 2% within."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Optional

import numpy as np
from scipy import stats as scipy_stats

from specexp.analysis import calibration
from specexp.analysis.arms import Selector, baseline_pairs, make_arms
from specexp.analysis.calibration import (
    LAUNCH_TEST_ALPHA,
    Calibration,
    calibrations,
    launch_test,
    with_launches,
)
from specexp.analysis.comparisons import compare_arms
from specexp.analysis.results import JobRun, Tag
from specexp.core.notes import NoteKind
from specexp.core.stats.comparison import Comparison
from specexp.core.stats.summaries import variance_components
from specexp.core.stats.verdicts import Verdict
from tests import noise
from tests.statistics.mutations import guards

ALPHA = 0.05
FAMILY = {"engine": "sglang", "model": "kimi-k2.5", "stack": "cu130", Tag.hardware: "8x H200"}
# The calibration a day before the arms: within its age limit.
CALIBRATED_UNIX, ARMS_UNIX = 1.7e9, 1.7e9 + 86400.0


def single_launch_arm(
    rng, name: str, before_h: float = 0.0, launch_cv: float = 0.02, mean: float = 90.0
) -> JobRun:
    """A single-launch run of configuration ``name`` (its config fingerprint), ``before_h``
    hours before the arms: the arm itself at 0, an earlier launch of it otherwise."""
    (values,) = noise.launches(rng, mean, 1, 5, run_cv=0.02, launch_cv=launch_cv)
    tags = {**FAMILY, Tag.factors: f'{{"arm": "{name}"}}', Tag.config_fingerprint: name}
    costs = {"server_ready_s": 600.0, "wall_s": 25.0}  # a 10-minute launch, 25 s runs
    times = [ARMS_UNIX - 3600.0 * before_h + 60.0 * i for i in range(len(values))]
    return JobRun.from_store(
        f"{name}-{before_h:g}h",
        name,
        "FINISHED",
        tags,
        {"stats.warmup_runs": "2"},
        values,
        [],
        costs,
        times,
    )


def calibration_run(rng, launches: int = 5, launch_cv: float = 0.02, at: float = 0.0) -> JobRun:
    """A run of ``launches`` launches, its launch spread ``launch_cv``, ``at`` seconds after
    CALIBRATED_UNIX."""
    groups = noise.launches(rng, 90, launches, 5, run_cv=0.02, launch_cv=launch_cv)
    components = variance_components(groups)
    metrics = {
        "launches": float(launches),
        "measured_runs": float(launches * 5),
        "tok_per_s_mean": float(np.mean(groups)),
        "tok_per_s_var_within_launch": components.within_launch,
        "tok_per_s_var_between_launch": components.between_launch,
    }
    launch_means = [float(np.mean(g)) for g in groups]
    times = [CALIBRATED_UNIX + at + 600.0 * i for i in range(launches)]
    return JobRun.from_store(
        "calib", None, "FINISHED", FAMILY, {}, sum(groups, []), launch_means, metrics, (), times
    )


def aa(rng, calibrated: bool, **options: Any) -> Comparison:
    """An A/A comparison of two single-launch arms (A/B where b is ``effect`` faster), with a
    calibration of ``launch_cv`` measured ``at`` seconds after CALIBRATED_UNIX (or none);
    each arm's configuration has had ``launches`` in all, the earlier ones an hour apart
    before it (:func:`calibrated_comparison`'s options)."""
    return calibrated_comparison(rng, calibrated, **options)[0]


def calibrated_comparison(
    rng,
    calibrated: bool,
    launch_cv: float = 0.02,
    at: float = 0.0,
    launches: int = 1,
    effect: float = 0.0,
) -> tuple[Comparison, Optional[Calibration]]:
    """:func:`aa`'s comparison, with the calibration it was given (None without)."""
    runs = [
        single_launch_arm(rng, name, h, mean=90.0 * (1 + effect if name == "b" else 1))
        for name in "ab"
        for h in range(launches)
    ]
    arms, _ = make_arms(
        [runs[0], runs[launches]], label_tags=[], confidence=0.95, metric="tok_per_s"
    )
    known = (
        with_launches(calibrations([calibration_run(rng, launch_cv=launch_cv, at=at)]), runs)
        if calibrated
        else {}
    )
    (comparison,) = compare_arms(
        baseline_pairs(arms, Selector("arm=a")),
        confidence=0.95,
        threshold=0.01,
        power=0.8,
        calibration=known,
    )
    return comparison, next(iter(known.values()), None)


def test_without_calibration_no_verdict_says_faster_or_slower():
    rng = np.random.default_rng(17)
    trials = 300
    verdicts = [aa(rng, calibrated=False) for _ in range(trials)]
    apart = [c for c in verdicts if c.within_launch in (Verdict.faster, Verdict.slower)]
    # Ignoring launches, the run-level test calls A/A different this often...
    assert len(apart) / trials > 4 * ALPHA
    # ...so that is kept apart, as what these launches' runs say, and no verdict says it.
    assert not any(c.verdict in (Verdict.faster, Verdict.slower) for c in verdicts)
    assert all(c.launches_only and c.label == "inconclusive" for c in verdicts if c.testable)
    assert all(NoteKind.launches_only in {n.kind for n in c.notes} for c in verdicts)


def test_with_calibration_the_false_verdict_rate_stays_at_alpha():
    """A right calibration, no earlier launch: false verdicts 8 of 400 (2%), asserted at most
    alpha + 3 SE; the calibration refused in 47 of 400 (11.75%: the run-spread check at 1% per
    arm, and no launch variance shown by its 5 launches at 19%), asserted at most 20%."""
    rng = np.random.default_rng(18)
    trials = 400
    false = 0
    refused = 0
    for _ in range(trials):
        c = aa(rng, calibrated=True)
        # The calibration is checked first: where an arm's run-to-run spread is not its
        # own (an F test at 1% per arm), it is not used, and says why.
        kinds = {n.kind for n in c.notes}
        assert c.launches_only == (NoteKind.calibration_refused in kinds)
        refused += c.launches_only
        false += c.verdict in (Verdict.faster, Verdict.slower)
        # What finding the 1% threshold would take, in launches x runs at the measured costs.
        assert c.plan is None or (c.plan.launches >= 2 and c.plan.power >= 0.8)
    assert false / trials <= ALPHA + 3 * math.sqrt(ALPHA * (1 - ALPHA) / trials)
    assert refused / trials <= 0.2, refused


def test_a_calibrated_comparison_plans_launches_not_just_runs():
    rng = np.random.default_rng(19)
    c = aa(rng, calibrated=True)
    assert c.plan is not None and c.plan.launches >= 2
    assert c.plan.cost_s == c.plan.launches * (600 + (2 + c.plan.runs) * 25)
    uncalibrated = aa(rng, calibrated=False)
    assert uncalibrated.plan is None and uncalibrated.runs_needed is not None


# The calibration used wherever it estimated a launch variance above 0, as measured: the
# shown-launch-variance test at the p-value of F = 1 on the harness's 4 and 20 degrees of
# freedom (the "exact" calibration of benchmarks/calibration_margin.py).
USED_WHEREVER_ABOVE_ZERO = guards(
    "the calibration used wherever its launch variance is estimated above 0, as measured "
    "(LAUNCH_VARIANCE_SHOWN_ALPHA at the p-value of F = 1: no margin)",
    calibration,
    "LAUNCH_VARIANCE_SHOWN_ALPHA",
    lambda _: float(scipy_stats.f.sf(1.0, 4, 20)),
)


def shown_refusals(c: Comparison) -> bool:
    return any(
        "do not spread more than their runs explain" in n.message
        for n in c.notes
        if n.kind == NoteKind.calibration_refused
    )


@USED_WHEREVER_ABOVE_ZERO
def test_a_calibration_with_a_quarter_of_the_launch_variance_and_no_earlier_launch_holds():
    """No earlier launch of either arm's configuration, so the calibration cannot be checked
    against the arms' launches; it measured a quarter of their launch variance (launch CV 1%
    against 2%, runs 2%, 5 launches). False verdicts 15 of 400 (3.75%), asserted at most 5% +
    2 SE (benchmarks/calibration_margin.py, seed 62: 3.78% of 10,000, SE 0.19%); the
    calibration refused as showing no launch variance beyond its runs' in 198 of 400 (49.5%),
    asserted at least 33%.

    Mutation: the calibration used wherever it estimated a launch variance above 0 (no
    margin): refused so in 95 of 400 (24%), 34 false verdicts (8.5%; 7.6% in the issue's run), and the test
    fails."""
    rng, trials = np.random.default_rng(20), 400
    false = refused = 0
    for _ in range(trials):
        c = aa(rng, calibrated=True, launch_cv=0.01)
        false += c.verdict in (Verdict.faster, Verdict.slower)
        refused += shown_refusals(c)
    assert false / trials <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / trials), false
    assert refused / trials >= 0.33, refused


@USED_WHEREVER_ABOVE_ZERO
def test_a_calibration_with_no_launch_variance_is_refused_with_the_reason():
    """The calibration run's launches do not vary (launch CV 0 against the arms' 2%): where
    its launch means do not spread more than its runs explain (F test at 19%) it is
    refused, saying so: 155 of 200 (77.5%), asserted at least 70%; false verdicts 4 of 200
    (2%), asserted at most 5% (benchmarks/calibration_margin.py, seed 62: 2.47% of 10,000;
    5.68% of the 4,352 whose launch variance was estimated above 0, SE 0.35%).

    Mutation: the calibration used wherever it estimated a launch variance above 0 (no
    margin): refused in 108 of 200 (54%), 10 false verdicts (5%; 7.6% of those used in the issue's run), and
    the test fails."""
    rng, trials = np.random.default_rng(22), 200
    false = refused = 0
    for _ in range(trials):
        c = aa(rng, calibrated=True, launch_cv=0.0)
        false += c.verdict in (Verdict.faster, Verdict.slower)
        refused += shown_refusals(c)
        assert c.launches_only or not shown_refusals(c)
    assert refused / trials >= 0.7, refused
    assert false / trials <= 0.05, false


def test_an_old_calibration_is_refused_with_its_age():
    """Measured eight days before the arms: not used, and the note says why."""
    c = aa(np.random.default_rng(21), calibrated=True, at=-8 * 86400.0)
    assert c.launches_only and c.verdict not in (Verdict.faster, Verdict.slower)
    refusal = next(n.message for n in c.notes if n.kind == NoteKind.calibration_refused)
    assert "measured 9 days before" in refusal and "7-day limit" in refusal


def test_an_old_calibration_run_is_not_pooled_with_a_new_one():
    """A calibration run 30 days older than the family's newest: left out of the pool, so
    its launch spread does not pass for today's under the newest run's age."""
    rng = np.random.default_rng(22)
    old = dataclasses.replace(calibration_run(rng, at=-30 * 86400.0), run_id="old")
    new = dataclasses.replace(calibration_run(rng), run_id="new")
    (known,) = calibrations([old, new]).values()
    assert known.runs == ("new",) and known.measured_unix == CALIBRATED_UNIX + 4 * 600.0


# The launch test: a calibration's launch variance against the spread of an arm's
# configuration's launches in the store (the arm and its earlier runs), k launches in all.


def launch_test_refusals(rng, launches: int, times_calibrated: float, trials: int):
    """How often the launch test refuses a 5-launch calibration (2% / 2%) when the arms'
    launch variance is ``times_calibrated`` its truth, and the power it states (mean)."""
    refused, stated = 0, []
    for _ in range(trials):
        runs = [
            single_launch_arm(rng, "a", h, launch_cv=0.02 * math.sqrt(times_calibrated))
            for h in range(launches)
        ]
        (known,) = with_launches(calibrations([calibration_run(rng)]), runs).values()
        test = launch_test(known, runs[0])
        assert test is not None and test.launches == launches
        refused += not test.consistent
        stated.append(test.power)
    return refused / trials, float(np.mean(stated))


def test_the_launch_test_refuses_a_right_calibration_at_most_at_its_alpha():
    """A calibration that is right: refused 4.15% of 4,000 at 3 launches, 3.87% at 6 (SE
    0.3%; the F test on its 4 degrees of freedom is a little conservative, since the run
    noise in its prediction is known better than that); asserted over 800 each."""
    rng, trials = np.random.default_rng(23), 800
    for launches in (3, 6):
        rate, _ = launch_test_refusals(rng, launches, 1.0, trials)
        bound = LAUNCH_TEST_ALPHA + 3 * math.sqrt(LAUNCH_TEST_ALPHA * 0.95 / trials)
        assert rate <= bound, (launches, rate)


def test_the_launch_test_has_the_power_it_states():
    """The power the note states (to see a doubled launch variance, from the F distribution)
    is the power it has: at 3 launches 0.110 stated, 0.120 measured; at 6, 0.118 and 0.119
    (4,000 each, SE 0.5%); at four times the launch variance 0.24 and 0.29. Low, and said so:
    a calibration of 5 launches has 4 degrees of freedom. Asserted over 800 each: measured
    within 3 SE + 0.02 of stated at twice, and more at four times."""
    rng, trials = np.random.default_rng(24), 800
    for launches in (3, 6):
        doubled, stated = launch_test_refusals(rng, launches, 2.0, trials)
        assert abs(doubled - stated) <= 3 * math.sqrt(stated * (1 - stated) / trials) + 0.02
        quadrupled, _ = launch_test_refusals(rng, launches, 4.0, trials)
        assert quadrupled > doubled + 0.05, (launches, doubled, quadrupled)


def test_with_the_launch_test_a_calibration_with_half_the_launch_variance_keeps_under_six_percent():
    """The whole comparison, with 3 launches of each arm's configuration in the store and a
    calibration whose launch variance is half the truth: 6 false verdicts of 300 (2%, SE
    0.8%), the calibration refused as showing no launch variance in 79; asserted at most 5%.
    With the launch test off (launch_test returning None) 9 of 300 (3%): the calibration's
    own test of its launch variance holds the rate without it, so this test guards no
    mutation of it."""
    rng, trials = np.random.default_rng(25), 300
    false = sum(
        aa(rng, calibrated=True, launch_cv=0.02 / math.sqrt(2), launches=3).verdict
        in (Verdict.faster, Verdict.slower)
        for _ in range(trials)
    )
    assert false / trials <= 0.05, false
