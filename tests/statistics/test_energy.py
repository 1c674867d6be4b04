"""Energy per output token between arms, by seeded Monte Carlo through the sweep report as
the CLI compiles it (tests.energy_sweep.simulate -> compile_sweep_report): draft against
none over six levels (1-32 streams), 4 launches of 3 runs per arm and level, 1% run and 2%
launch noise (log-normal), launch means as values."""

from __future__ import annotations

import math

import numpy as np

from specexp.core.stats.verdicts import Verdict
from tests import energy_sweep

SIMULATIONS = 150
# The draft saves 20% energy per token at 1 stream, 0.1 less in log ratio per doubling.
ENERGY_CROSSOVER = 2 ** (math.log(1.25) / 0.1)  # 4.7 streams; speed's is 16.6


def simulate(seed: int, energy_ratio):
    return energy_sweep.simulate(np.random.default_rng(seed), energy_ratio, launch_cv=0.02)


def test_energys_crossover_covers_the_truth_and_its_disagreement_with_speed_is_found():
    """Energy stops paying at 4.7 streams, speed at 16.6. Over 150 seeded sweeps (measured
    at commit time): the energy crossover's 95% interval covers 4.7 in 97.3% (standard error
    1.3%), and the report says speed and energy disagree in 100% (every sweep)."""
    covered = disagreed = 0
    for seed in range(SIMULATIONS):
        report = simulate(seed, lambda c: 0.8 * math.exp(0.1 * math.log2(c)))
        (found,), (said,) = report.energy.crossovers, report.energy.agreements
        covered += found.ci_low <= ENERGY_CROSSOVER <= found.ci_high
        disagreed += bool(said.disagree)
    assert covered / SIMULATIONS >= 0.92
    assert disagreed / SIMULATIONS >= 0.95


def test_speed_and_energy_at_constant_power_are_rarely_said_to_disagree():
    """At constant power energy per token is 1 / tok/s: both crossovers are at 16.6 (each
    read from its own noise here, so the two intervals are independent). Over 150 seeded
    sweeps the report claims a disagreement in 0.0% (measured at commit time; non-overlap
    of two 95% intervals is a test at well under 5%)."""
    claimed = sum(
        bool(
            simulate(seed, lambda c: 1 / energy_sweep.speed_ratio(c)).energy.agreements[0].disagree
        )
        for seed in range(SIMULATIONS)
    )
    assert claimed / SIMULATIONS <= 0.05


def test_arms_of_equal_energy_are_rarely_called_different():
    """A/A on energy: the draft draws what none draws at every level. Over 150 seeded sweeps
    of six comparisons each (one family, Bonferroni), a sweep with any "more" or "less
    energy per token" verdict: 3.3% (standard error 1.5%, measured at commit time)."""
    wrong = 0
    for seed in range(SIMULATIONS):
        report = simulate(seed, lambda c: 1.0)
        wrong += any(
            c.verdict in (Verdict.faster, Verdict.slower) for c in report.energy.comparisons
        )
    assert wrong / SIMULATIONS <= 0.08
