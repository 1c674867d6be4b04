"""Steps and autocorrelation on a shared timeline (one server, arms' runs in turn): a
throttle at the blocks' boundary, seen in the GPU clock, confounds the comparison instead
of making it slower; a step in the middle of interleaved runs is fitted; runs correlated in
time (AR(1)) do not narrow the interval. Ten measured runs per arm, 1% run noise."""

from __future__ import annotations

import json
import math
import random

import numpy as np

from specexp.analysis.arms import Selector, baseline_pairs, make_arms
from specexp.analysis.comparisons import compare_arms
from specexp.analysis.results import JobRun, Tag
from specexp.core.notes import NoteKind
from specexp.core.stats.comparison import Comparison
from specexp.core.stats.verdicts import Verdict
from specexp.sweep.plan import balanced_rounds

ALPHA = 0.05
RUNS, RUN_S, RUN_CV = 10, 5.0, 0.01
SERVER = {Tag.server_url: "http://127.0.0.1:8080", Tag.server_started_at: "1764547200.000"}


def bound(trials: int) -> float:
    return ALPHA + 3 * math.sqrt(ALPHA * (1 - ALPHA) / trials)


def timeline(turns: list[int], logs: np.ndarray, clocks: np.ndarray) -> list[JobRun]:
    """The arms' runs as the store gives them back: values, times and the GPU clock."""
    label = "blocked" if turns[: RUNS // 2] == [0] * (RUNS // 2) else "interleaved"
    runs = []
    for arm, name in enumerate("ab"):
        slots = [slot for slot, who in enumerate(turns) if who == arm]
        runs.append(
            JobRun.from_store(
                name,
                None,
                "FINISHED",
                {**SERVER, Tag.order: label, Tag.factors: json.dumps({"arm": name})},
                {},
                [float(np.exp(logs[s])) for s in slots],
                [],
                {},
                run_times=[s * RUN_S for s in slots],
                run_machine={"gpu_sm_clock_mhz_min": [float(clocks[s]) for s in slots]},
            )
        )
    return runs


def judged(runs: list[JobRun]) -> Comparison:
    arms, _ = make_arms(runs, label_tags=[], confidence=0.95, metric="tok_per_s")
    (comparison,) = compare_arms(
        baseline_pairs(arms, Selector("arm=a")), confidence=0.95, threshold=0.01, power=0.8
    )
    return comparison


def test_a_throttle_at_the_blocks_boundary_confounds_instead_of_slowing():
    rng, trials, said_slower = np.random.default_rng(41), 400, 0
    turns = [0] * RUNS + [1] * RUNS
    for _ in range(trials):
        throttled = np.arange(2 * RUNS) >= RUNS  # from B's first run on
        logs = (
            math.log(100) + np.where(throttled, math.log(0.92), 0) + rng.normal(0, RUN_CV, 2 * RUNS)
        )
        clocks = np.where(throttled, 1500.0, 1980.0) + rng.normal(0, 5, 2 * RUNS)
        c = judged(timeline(turns, logs, clocks))
        said_slower += c.finding == Verdict.slower
        assert c.step is not None and c.step.source == "gpu_sm_clock_mhz_min"
        assert c.label == "confounded by a step" and NoteKind.step in {n.kind for n in c.notes}
    assert said_slower == 0


def test_a_step_inside_interleaved_runs_is_fitted_and_no_a_a_is_called_different():
    rng, order_rng = np.random.default_rng(42), random.Random(42)
    trials, false = 400, 0
    for _ in range(trials):
        turns = balanced_rounds([RUNS, RUNS], order_rng)
        step = np.arange(2 * RUNS) >= RUNS  # halfway, whoever runs then
        logs = math.log(100) + np.where(step, math.log(0.92), 0) + rng.normal(0, RUN_CV, 2 * RUNS)
        c = judged(timeline(turns, logs, np.full(2 * RUNS, 1980.0)))
        false += c.finding in (Verdict.faster, Verdict.slower)
    assert false / trials <= bound(trials)


def test_autocorrelated_runs_in_blocks_do_not_narrow_the_interval():
    rng, trials, false = np.random.default_rng(43), 400, 0
    turns = [0] * RUNS + [1] * RUNS
    for _ in range(trials):
        noise = np.zeros(2 * RUNS)
        noise[0] = rng.normal(0, RUN_CV)
        for t in range(1, 2 * RUNS):  # AR(1), rho 0.5, stationary spread RUN_CV
            noise[t] = 0.5 * noise[t - 1] + rng.normal(0, RUN_CV * math.sqrt(1 - 0.25))
        c = judged(timeline(turns, math.log(100) + noise, np.full(2 * RUNS, 1980.0)))
        false += c.finding in (Verdict.faster, Verdict.slower)
    assert false / trials <= bound(trials), false / trials
