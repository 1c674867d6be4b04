"""Launch-to-launch variance is never ignored: A/A comparisons of single-launch arms (the
default protocol) on two-level noise, 2% between launches and 2% within."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from specexp.analysis.arms import (
    LAUNCH_TEST_ALPHA,
    Selector,
    baseline_pairs,
    calibrations,
    compare_arms,
    launch_test,
    make_arms,
    with_launches,
)
from specexp.analysis.results import JobRun, Tag
from specexp.core.notes import NoteKind
from specexp.core.stats import Verdict, variance_components
from tests import noise

ALPHA = 0.05
FAMILY = {"engine": "sglang", "model": "kimi-k2.5", "stack": "cu130", Tag.hardware: "8x H200"}
# The calibration a day before the arms: within its age limit.
CALIBRATED_UNIX, ARMS_UNIX = 1.7e9, 1.7e9 + 86400.0


def single_launch_arm(rng, name: str, before_h: float = 0.0, launch_cv: float = 0.02) -> JobRun:
    """A single-launch run of configuration ``name`` (its config fingerprint), ``before_h``
    hours before the arms: the arm itself at 0, an earlier launch of it otherwise."""
    (values,) = noise.launches(rng, 90, 1, 5, run_cv=0.02, launch_cv=launch_cv)
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


def aa(rng, calibrated: bool, launch_cv: float = 0.02, at: float = 0.0, launches: int = 1):
    """An A/A comparison of two single-launch arms, with a calibration of ``launch_cv``
    measured ``at`` seconds after CALIBRATED_UNIX (or none); each arm's configuration has
    had ``launches`` in all, the earlier ones an hour apart before it."""
    runs = [single_launch_arm(rng, name, h) for name in "ab" for h in range(launches)]
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
    return comparison


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
    """A right calibration, no earlier launch: false verdicts at most alpha + 3 SE; the
    calibration refused in 23 of 400 (5.75%: the run-spread check at 1% per arm, and a
    launch variance estimated 0 from its 5 launches), asserted at most 10%."""
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
    assert refused / trials <= 0.1, refused


def test_a_calibrated_comparison_plans_launches_not_just_runs():
    rng = np.random.default_rng(19)
    c = aa(rng, calibrated=True)
    assert c.plan is not None and c.plan.launches >= 2
    assert c.plan.cost_s == c.plan.launches * (600 + (2 + c.plan.runs) * 25)
    uncalibrated = aa(rng, calibrated=False)
    assert uncalibrated.plan is None and uncalibrated.runs_needed is not None


def test_a_calibration_with_a_quarter_of_the_launch_variance_and_no_earlier_launch_holds():
    """No earlier launch of either arm's configuration, so the calibration cannot be checked
    against the arms' launches; it measured a quarter of their launch variance (launch CV 1%
    against 2%, runs 2%, 5 launches). False verdicts 11 of 400 (2.75%, SE 0.8%; 1.9% of 800
    on seed 31), asserted at most 5% (the claim is 6%); the calibration refused in 101 of 400
    (95 of them a launch variance estimated 0). The price with a calibration that is right:
    0.5% false verdicts of 800, refused in 7%.

    Mutation: specexp/analysis/arms.py as at 2d2eba0 (no refusal of a zero launch variance,
    one margin of 2.5 whether checked or not): 41 of 400 (10.25%, SE 1.5%: 3.5 SE above the
    5% bound; 9.5% in the issue's run), and the test fails."""
    rng, trials = np.random.default_rng(20), 400
    false = sum(
        aa(rng, calibrated=True, launch_cv=0.01).verdict in (Verdict.faster, Verdict.slower)
        for _ in range(trials)
    )
    assert false / trials <= 0.05, false


def test_a_calibration_with_no_launch_variance_is_refused_with_the_reason():
    """The calibration run's launches do not vary (launch CV 0 against the arms' 2%): where
    it measured a launch variance of 0 (108 of 200) it is refused, saying so; false verdicts
    2 of 200 (1%, SE 0.7%), asserted at most 6%.

    Mutation: arms.py as at 2d2eba0 (such a calibration used, at 2.5 times 0): 33 of 200
    (16.5%, SE 2.6%: 4 SE above the bound; 18.2% in the issue's run), and the test fails."""
    rng, trials = np.random.default_rng(22), 200
    false = zero = 0
    for _ in range(trials):
        c = aa(rng, calibrated=True, launch_cv=0.0)
        false += c.verdict in (Verdict.faster, Verdict.slower)
        reasons = [n.message for n in c.notes if n.kind == NoteKind.calibration_refused]
        zero += any("launch-to-launch variance measured 0" in r for r in reasons)
        assert c.launches_only or not reasons
    assert zero / trials >= 0.4, zero
    assert false / trials <= 0.06, false


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
    calibration whose launch variance is half the truth: 4 false verdicts of 300 (1.3%, SE
    0.7%; 1.55% of 2,000 on another seed), the calibration refused in 67 (34 of them a launch
    variance estimated 0; the arm's own offset is among the launches tested, so a far-off
    arm is refused more often); asserted at most 2.5%.

    Mutation: the calibration checked by nothing (arms.py as at 2d2eba0 with launch_test
    returning None): 22 of 300 (7.3%, SE 1.5%: 3.2 SE above the bound; 9.67% in the issue's
    run), and the test fails. The launch test off alone leaves 6 of 300 (2%): the wider
    margin for unchecked calibrations then holds the rate."""
    rng, trials = np.random.default_rng(25), 300
    false = sum(
        aa(rng, calibrated=True, launch_cv=0.02 / math.sqrt(2), launches=3).verdict
        in (Verdict.faster, Verdict.slower)
        for _ in range(trials)
    )
    assert false / trials <= 0.025, false
