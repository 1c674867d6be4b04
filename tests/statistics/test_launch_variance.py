"""Launch-to-launch variance is never ignored: A/A comparisons of single-launch arms (the
default protocol) on two-level noise, 2% between launches and 2% within."""

from __future__ import annotations

import math

import numpy as np

from specexp.analysis.arms import Selector, baseline_pairs, calibrations, compare_arms, make_arms
from specexp.analysis.results import JobRun, Tag
from specexp.core.notes import NoteKind
from specexp.core.stats import Verdict, variance_components
from tests import noise

ALPHA = 0.05
FAMILY = {"engine": "sglang", "model": "kimi-k2.5", "stack": "cu130", Tag.hardware: "8x H200"}


def single_launch_arm(rng, name: str) -> JobRun:
    (values,) = noise.launches(rng, 90, 1, 5, run_cv=0.02, launch_cv=0.02)
    tags = {**FAMILY, Tag.factors: f'{{"arm": "{name}"}}'}
    costs = {"server_ready_s": 600.0, "wall_s": 25.0}  # a 10-minute launch, 25 s runs
    return JobRun.from_store(
        name, None, "FINISHED", tags, {"stats.warmup_runs": "2"}, values, [], costs
    )


def calibration_run(rng, launches: int = 5) -> JobRun:
    groups = noise.launches(rng, 90, launches, 5, run_cv=0.02, launch_cv=0.02)
    components = variance_components(groups)
    metrics = {
        "launches": float(launches),
        "measured_runs": float(launches * 5),
        "tok_per_s_mean": float(np.mean(groups)),
        "tok_per_s_var_within_launch": components.within_launch,
        "tok_per_s_var_between_launch": components.between_launch,
    }
    launch_means = [float(np.mean(g)) for g in groups]
    return JobRun.from_store(
        "calib", None, "FINISHED", FAMILY, {}, sum(groups, []), launch_means, metrics
    )


def aa(rng, calibrated: bool):
    arms, _ = make_arms(
        [single_launch_arm(rng, "a"), single_launch_arm(rng, "b")],
        label_tags=[],
        confidence=0.95,
        metric="tok_per_s",
    )
    known = calibrations([calibration_run(rng)]) if calibrated else {}
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
    assert refused / trials <= 0.02 + 3 * math.sqrt(0.02 / trials)


def test_a_calibrated_comparison_plans_launches_not_just_runs():
    rng = np.random.default_rng(19)
    c = aa(rng, calibrated=True)
    assert c.plan is not None and c.plan.launches >= 2
    assert c.plan.cost_s == c.plan.launches * (600 + (2 + c.plan.runs) * 25)
    uncalibrated = aa(rng, calibrated=False)
    assert uncalibrated.plan is None and uncalibrated.runs_needed is not None
