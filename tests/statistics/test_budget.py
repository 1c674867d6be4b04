"""What a budget finds, said before it is spent, against whole simulated comparisons: the
sweep's sequential protocol (specexp.core.sequential.simulate: its looks, runs-per-launch
plan and stopping rule) and Welch's test on launch means, seeded."""

from __future__ import annotations

import functools
import math

import numpy as np
from scipy import stats as scipy_stats

from specexp.analysis.calibration import Calibration
from specexp.core.schemas.multirun import JobOrder
from specexp.core.schemas.stats import StatsConfig
from specexp.core.sequential import Costs, SequentialDesign, simulate
from specexp.core.stats.verdicts import Verdict
from specexp.sweep import sequential
from specexp.sweep.plan import Plan, order_jobs
from specexp.sweep.sequential import (
    ASSUMED,
    Design,
    budget_power,
    fixed_detectable,
    sequential_detectable,
    sequential_pairs,
)
from tests.statistics.mutations import guards
from tests.unit.test_sweep_plan import planned

DEFAULTS = StatsConfig()
# A launch costs 23 runs (with 2 warm-ups): the cheapest information per server-second is
# then the configured 5 runs per launch, which the budget is judged at.
COSTS = Costs(launch_s=230.0, run_s=10.0, warmup_runs=2)


def default_design(max_launches: int) -> SequentialDesign:
    return SequentialDesign(
        alpha=round(1 - DEFAULTS.confidence, 12),
        threshold=DEFAULTS.threshold,
        design_effect=2 * DEFAULTS.threshold,
        power=DEFAULTS.power,
        min_launches=DEFAULTS.sequential.min_launches,
        max_launches=max_launches,
    )


def power(design: SequentialDesign, effect: float, n: int, seed: int) -> float:
    rng = np.random.default_rng(seed)
    outcomes = [
        simulate(
            design,
            between_cv=ASSUMED.between_cv,
            within_cv=ASSUMED.within_cv,
            effect=effect,
            costs=COSTS,
            first_runs=DEFAULTS.measured_runs,
            server_budget_s=math.inf,
            rng=rng,
        )
        for _ in range(n)
    ]
    return float(np.mean([o.verdict == Verdict.faster for o in outcomes]))


def test_the_default_budget_finds_what_it_says_and_not_the_readmes_two_percent():
    """Seeded, 400 sequences each, at the assumed 2% / 2% spreads, 5 runs per launch. The
    default budget (12 launches per arm) is printed as finding 3.4% with power 0.8; the
    simulated sequences find it with power 0.84 (SE 0.018). A 2% difference - the README's
    headline - they find with power 0.39 (SE 0.024): the defaults do not reach 0.8 there.
    With 60 launches per arm the printed effect is the design effect, 2%, found with power
    0.86 (SE 0.017). (Each look reads its t on the least favourable df of the variance
    ratio's 80% interval, never below max_launches - 1, which the line reads its last look
    on.)"""
    design = default_design(DEFAULTS.sequential.max_launches)
    printed = sequential_detectable(design, ASSUMED.launch_var(DEFAULTS.measured_runs))
    assert 0.02 < printed < 0.04
    # 0.8 less two standard errors of 400 sequences: the statement is "power 0.8".
    assert power(design, printed, 400, seed=7) >= 0.8 - 2 * 0.02
    assert power(design, 0.02, 400, seed=8) < 0.5
    larger = default_design(60)
    assert sequential_detectable(larger, ASSUMED.launch_var(5)) == 0.02
    assert power(larger, 0.02, 400, seed=9) >= 0.8 - 2 * 0.02


def test_a_fixed_launch_budget_finds_what_it_says():
    """Seeded, 20,000 vectorised comparisons of 3 launches x 5 runs per arm at 2% / 2%
    spreads, Welch's t on the launch means' logs: at the printed detectable effect
    (fixed_detectable, 8.0%) the power is 0.801 (SE 0.003)."""
    launches, runs, n = 3, 5, 20_000
    effect = fixed_detectable(Design.launches, ASSUMED, launches, runs, 0.05, 0.8)
    assert effect is not None
    rng = np.random.default_rng(11)
    sd = math.sqrt(ASSUMED.launch_var(runs))
    base = rng.normal(0.0, sd, (n, launches))
    cand = rng.normal(math.log1p(effect), sd, (n, launches))
    test = scipy_stats.ttest_ind(cand, base, axis=1, equal_var=False)
    found = float(np.mean((test.pvalue < 0.05) & (test.statistic > 0)))
    assert abs(found - 0.8) < 5 * 0.003


@functools.lru_cache(maxsize=1)
def faster_in_slow_sequences(effects: tuple[float, ...], n: int) -> tuple[float, ...]:
    """Of ``n`` whole sequences at each effect (seeded), the share called faster: 600 s
    launches, 25 s runs, 2 warm-ups, 5 runs per launch, 2% / 2% spreads, 120 server-min.
    Cached: the sequences do not depend on the line (tests/statistics/test_guards_fail.py
    reads the line again under its mutation)."""
    rng = np.random.default_rng(33)
    slow = Costs(launch_s=600.0, run_s=25.0, warmup_runs=2)
    design = default_design(DEFAULTS.sequential.max_launches)
    return tuple(
        float(
            np.mean(
                [
                    simulate(
                        design,
                        between_cv=ASSUMED.between_cv,
                        within_cv=ASSUMED.within_cv,
                        effect=effect,
                        costs=slow,
                        first_runs=DEFAULTS.measured_runs,
                        server_budget_s=120 * 60.0,
                        rng=rng,
                    ).verdict
                    == Verdict.faster
                    for _ in range(n)
                ]
            )
        )
        for effect in effects
    )


@guards(
    "the line's power read at the configured 12 launches, not those the minutes buy "
    '(sequential_power at design.max_launches, what "if 120 server-min allow" stood for)',
    sequential,
    "sequential_power",
    lambda power: (
        lambda design, launch_var, effect, launches: power(
            design, launch_var, effect, design.max_launches
        )
    ),
)
def test_the_power_the_budget_line_gives_its_server_minutes_is_what_they_buy():
    """The issue's case, through the budget line (budget_power, affordable) of a sweep whose
    server family's calibration measured 600 s launches and 25 s runs: 2 warm-ups, 5 runs
    per launch, 2% / 2% spreads, 120 server-minutes buy 4 launches per arm. The line's power:
    0.208 at the printed 3.4%, 0.055 at the 1% threshold (crossings either way). Whole
    sequences through simulate with that server budget, 600 seeded: "faster" in 0.248 at
    3.4% (2.4 SE of 0.017 from the line's; 0.24 in the issue's run), 0.013 at 1%; asserted
    within 3 SE at the printed effect and at most 3 SE above the line's at the threshold.

    Mutation: the line's power at the configured 12 launches (sequential_power at
    design.max_launches): 0.80 against 0.248, 33 SE off, and the test fails."""
    plan = Plan([planned(f"speculative={s}") for s in ("none", "draft")])
    order_jobs(plan, JobOrder.interleaved)
    pairs = sequential_pairs(plan, "speculative=none", JobOrder.interleaved, True)
    config = plan.jobs[0].job.config
    key = (plan.jobs[0].job.engine.name, config.model.name, config.stack.name, "1x cpu")
    measured = Calibration(
        ASSUMED.launch_var(DEFAULTS.measured_runs),
        ASSUMED.within_cv**2,
        float(DEFAULTS.measured_runs),
        10.0,
        ("abcdef123456",),
        launch_s=600.0,
        run_s=25.0,
    )
    line = budget_power(plan, "speculative=none", pairs, {key: measured}, "1x cpu")
    assert line is not None and line.detectable is not None and line.affordable is not None
    bought = line.affordable
    assert bought.launches == 4 and bought.measured
    found = faster_in_slow_sequences((line.detectable, DEFAULTS.threshold), 600)
    for said, simulated, at_effect in zip(
        (bought.at_effect, bought.at_threshold), found, (True, False), strict=True
    ):
        se = math.sqrt(said * (1 - said) / 600)
        # At the threshold the line's figure counts crossings either way (0.055, of which
        # some 0.025 the wrong way): an upper bound on "faster" there.
        assert simulated - said <= 3 * se and (not at_effect or abs(simulated - said) <= 3 * se)
