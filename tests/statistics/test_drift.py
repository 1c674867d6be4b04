"""Time is a confounder: A/A comparisons on a server that drifts, measured in the sweep's
interleaved order and in blocks. The drift is the one seen on llama.cpp in a real A/A
(decode speed falling about 1% per run over a server's life), run noise 1%, five measured
runs per arm, 5 s per run; launches add 2% offsets where arms have launches of their own."""

from __future__ import annotations

import json
import random

import numpy as np

from specexp.analysis.arms import Selector, baseline_pairs, make_arms
from specexp.analysis.comparisons import compare_arms
from specexp.analysis.results import JobRun, Tag
from specexp.core.stats.comparison import Comparison, compare
from specexp.core.stats.verdicts import Verdict
from specexp.sweep.plan import balanced_rounds

ALPHA = 0.05
REPS = 400
MC_ERROR = 3 * (ALPHA * (1 - ALPHA) / REPS) ** 0.5
RUNS, RUN_S, DRIFT_PER_RUN, RUN_CV = 5, 5.0, -0.01, 0.01
SERVER = {Tag.server_url: "http://127.0.0.1:8080", Tag.server_started_at: "1764547200.000"}


def order(interleaved: bool, rng: random.Random) -> list[int]:
    """Which arm (0 = A, 1 = B) takes each turn on the server."""
    return balanced_rounds([RUNS, RUNS], rng) if interleaved else [0] * RUNS + [1] * RUNS


def shared_server_aa(rng: np.random.Generator, turns: list[int], effect: float = 0.0):
    """Two arms on one drifting server, run by run in the given turns; B is ``effect`` faster."""
    values: list[list[float]] = [[], []]
    times: list[list[float]] = [[], []]
    for slot, arm in enumerate(turns):
        log = np.log(100) + DRIFT_PER_RUN * slot + (effect if arm else 0) + rng.normal(0, RUN_CV)
        values[arm].append(float(np.exp(log)))
        times[arm].append(slot * RUN_S)
    label = "interleaved" if turns[:4] != [0, 0, 0, 0] else "blocked"
    runs = [
        JobRun.from_store(
            name,
            None,
            "FINISHED",
            {**SERVER, Tag.order: label, Tag.factors: json.dumps({"arm": name})},
            {},
            values[i],
            [],
            {},
            run_times=times[i],
        )
        for i, name in enumerate("ab")
    ]
    return runs


def verdicts(runs: list[JobRun]):
    arms, _ = make_arms(runs, label_tags=[], confidence=0.95, metric="tok_per_s")
    (checked,) = compare_arms(
        baseline_pairs(arms, Selector("arm=a")), confidence=0.95, threshold=0.01, power=0.8
    )
    unchecked = compare(runs[0].values, runs[1].values, confidence=0.95, threshold=0.01)
    return checked, unchecked


def rates(interleaved: bool, effect: float = 0.0, seed: int = 0):
    rng, order_rng = np.random.default_rng(seed), random.Random(seed)
    checked, unchecked = [], []
    for _ in range(REPS):
        runs = shared_server_aa(rng, order(interleaved, order_rng), effect)
        a, b = verdicts(runs)
        checked.append(a)
        unchecked.append(b)
    return checked, unchecked


def share(comparisons: list[Comparison], *wanted: Verdict) -> float:
    """The share of comparisons whose finding (the verdict a reader acts on) is wanted."""
    return sum(c.finding in wanted for c in comparisons) / len(comparisons)


def test_interleaved_aa_on_a_drifting_server_keeps_false_verdicts_at_alpha():
    checked, unchecked = rates(interleaved=True)
    assert share(checked, Verdict.faster, Verdict.slower) <= ALPHA + MC_ERROR
    # Balanced rounds leave no drift in the difference: the plain test is not fooled either.
    assert share(unchecked, Verdict.faster, Verdict.slower) <= ALPHA + MC_ERROR


def test_blocked_aa_would_have_failed_and_is_reported_as_confounded():
    checked, unchecked = rates(interleaved=False)
    # What specexp did before: all of A, then all of B - the drift becomes "slower".
    assert share(unchecked, Verdict.slower) > 0.9
    # With the drift fitted, the claim does not survive: no false verdict beyond alpha...
    assert share(checked, Verdict.faster, Verdict.slower) <= ALPHA + MC_ERROR
    # ...and the report says why instead of "inconclusive".
    assert sum(c.confounded for c in checked) / len(checked) > 0.8
    assert all(c.label == "confounded by drift" for c in checked if c.confounded)


def test_interleaved_order_still_finds_a_real_effect_through_the_drift():
    checked, _ = rates(interleaved=True, effect=np.log(1.03))
    assert share(checked, Verdict.faster) > 0.8


LAUNCHES, LAUNCH_CV, DRIFT_PER_LAUNCH, LAUNCH_S = 4, 0.02, -0.02, 300.0


def launch_level_aa(rng: np.random.Generator, turns: list[int]) -> list[JobRun]:
    """Two arms with launches of their own (each launch's mean of five runs is one value),
    launch after launch in the given turns, on a machine drifting 2% per launch."""
    means: list[list[float]] = [[], []]
    times: list[list[float]] = [[], []]
    for slot, arm in enumerate(turns):
        runs = rng.normal(0, RUN_CV, RUNS).mean()
        log = np.log(100) + DRIFT_PER_LAUNCH * slot + rng.normal(0, LAUNCH_CV) + runs
        means[arm].append(float(np.exp(log)))
        times[arm].append(slot * LAUNCH_S)
    return [
        JobRun.from_store(
            name,
            None,
            "FINISHED",
            {Tag.factors: json.dumps({"arm": name})},
            {},
            means[i],  # stands in for the runs; the launch means are the values compared
            means[i],
            {},
            launch_times=times[i],
        )
        for i, name in enumerate("ab")
    ]


def test_launches_alternating_keep_false_verdicts_at_alpha_where_blocks_fail():
    rng, order_rng = np.random.default_rng(1), random.Random(1)
    results: dict[bool, tuple[list[str], list[str]]] = {True: ([], []), False: ([], [])}
    for _ in range(REPS):
        for interleaved in (True, False):
            turns = (
                balanced_rounds([LAUNCHES, LAUNCHES], order_rng)
                if interleaved
                else [0] * LAUNCHES + [1] * LAUNCHES
            )
            checked, unchecked = verdicts(launch_level_aa(rng, turns))
            results[interleaved][0].append(checked)
            results[interleaved][1].append(unchecked)
    assert share(results[True][0], Verdict.faster, Verdict.slower) <= ALPHA + MC_ERROR
    assert (
        share(results[False][1], Verdict.faster, Verdict.slower) > 0.5
    )  # AAAA BBBB: drift taken for an effect
    assert share(results[False][0], Verdict.faster, Verdict.slower) <= ALPHA + MC_ERROR
