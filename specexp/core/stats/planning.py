"""Planning from the measured spread: the power of Welch's test on log values (exact up to
quadrature, not the pooled-t formula), the runs per arm needed for an effect, the minimum
detectable effect of the runs made, and the cheapest launches x runs per arm of a two-level
design (Kalibera & Jones).

Look here for the "cannot detect effects below" and "to find" figures of a comparison.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Optional

import numpy as np
from scipy import optimize, special
from scipy import stats as scipy_stats

from specexp.core.stats.distributions import normal_ppf


def runs_needed(
    cv: float, effect: float, alpha: float = 0.05, power: float = 0.8, limit: int = 10000
) -> Optional[int]:
    """Values per arm for Welch's two-sided test on logs to find a relative ``effect`` with
    ``power``, at this CV."""
    if not (cv > 0 and effect > 0):
        return None
    delta = math.log1p(effect)
    n = _first_count(cv, delta, alpha, power)
    while n <= limit:
        if _reaches(delta / (cv * math.sqrt(2 / n)), n, alpha, power):
            return n
        n += 1
    return None


def _reaches(shift: float, n: int, alpha: float, power: float) -> bool:
    """``welch_power`` at ``shift`` reaches ``power``: power rises with the shift, so a
    shift clear of the detectable one (found once per count) answers without the quadrature,
    which is asked only within a hair of it."""
    detectable = _detectable_shift(n, alpha, power)
    if detectable is not None and abs(shift - detectable) > 1e-6 * (1 + detectable):
        return shift > detectable
    return _welch_rejection(shift, n, alpha) >= power


def _first_count(cv: float, delta: float, alpha: float, power: float) -> int:
    """Where :func:`runs_needed` starts: just below the normal approximation (Welch's test
    needs more), from where it steps up with Welch's power; never above its answer."""
    z = normal_ppf(1 - alpha / 2) + normal_ppf(power)
    return max(2, int(2 * (z * cv / delta) ** 2) - 2)


def welch_power(delta: float, sd: float, n: int, alpha: float) -> float:
    """Power of Welch's two-sided test with ``n`` values per arm, both of spread ``sd``, for a
    difference ``delta``. Exact up to quadrature: the test's random degrees of freedom and
    standard error are integrated over both sample variances (scaled chi-square, independent
    of the difference of means), which the pooled-t formula ignores - at n = 3 it claims 0.79
    where Welch reaches 0.68."""
    if n < 2 or sd <= 0:
        return 0.0
    return _welch_rejection(delta / (sd * math.sqrt(2 / n)), n, alpha)


# A search for an effect or a count asks again for what it asked already: a power at no
# difference (the bracket's end), the bracket's other end, the count it settled on.
@lru_cache(maxsize=1024)
def _welch_rejection(shift: float, n: int, alpha: float) -> float:
    """Welch's power at a difference of ``shift`` standard deviations of the difference."""
    critical, grid = _welch_critical(n, alpha)
    rejected = special.ndtr(shift - critical) + special.ndtr(-shift - critical)
    # The mean over the whole grid, in its order: the sum np.mean takes, bit for bit.
    return float(np.add.reduce(rejected[grid]) / grid.size)


@lru_cache(maxsize=4096)
def _welch_critical(n: int, alpha: float, nodes: int = 48) -> tuple[np.ndarray, np.ndarray]:
    """Welch's rejection threshold for the difference of means, in units of its standard
    deviation, at a grid of the two sample variances' quantiles (midpoint rule): its
    distinct values (the grid is symmetric in the two variances, so one triangle of it;
    power is asked of it tens of thousands of times in a simulation) and the index of each
    grid point's value among them, row by row."""
    k = n - 1
    ratios = scipy_stats.chi2.ppf((np.arange(nodes) + 0.5) / nodes, k) / k  # s^2 / sd^2
    r1, r2 = np.meshgrid(ratios, ratios)
    df = (r1 + r2) ** 2 / ((r1**2 + r2**2) / k)
    critical = special.stdtrit(df, 1 - alpha / 2) * np.sqrt((r1 + r2) / 2)
    rows, cols = np.triu_indices(nodes)
    where = np.empty((nodes, nodes), dtype=np.intp)
    where[rows, cols] = where[cols, rows] = np.arange(rows.size)
    return critical[rows, cols], where.ravel()


@dataclass(frozen=True)
class RepetitionPlan:
    """Launches and measured runs per launch, for each arm, and what they cost."""

    launches: int
    runs: int
    cost_s: float  # per arm: each launch's start-up, warm-ups and measured runs
    power: float


def plan_repetitions(
    *,
    within_cv: float,
    between_cv: float,
    effect: float,
    launch_s: float,
    run_s: float,
    warmup_runs: int = 0,
    alpha: float = 0.05,
    family: int = 1,
    power: float = 0.8,
    max_launches: int = 200,
    max_runs: int = 50,
) -> Optional[RepetitionPlan]:
    """The cheapest launches x runs per arm that find a relative ``effect`` with ``power``
    (Kalibera & Jones' two-level design). Each launch's mean is one value of Welch's test at
    the family's Bonferroni alpha; its spread is sqrt(between^2 + within^2 / runs), so more
    runs per launch stop paying once the launch-to-launch spread dominates. None when no
    plan within the limits reaches the power."""
    if not (effect > 0 and within_cv >= 0 and between_cv >= 0 and within_cv + between_cv > 0):
        return None
    delta = math.log1p(effect)
    # No number of runs needs fewer launches than the launch spread alone would (runs_needed
    # starts no lower than this there, and higher at a wider spread), so once that many
    # launches of this many runs cost what the best plan costs, no later plan is cheaper.
    fewest_launches = _first_count(between_cv, delta, alpha / family, power)
    best: Optional[RepetitionPlan] = None
    for runs in range(1, max_runs + 1):
        launch_cost = launch_s + (warmup_runs + runs) * run_s
        if best is not None and run_s >= 0 and launch_cost >= 0:
            if fewest_launches * launch_cost >= best.cost_s:
                break
        sd = math.sqrt(between_cv**2 + within_cv**2 / runs)
        launches = runs_needed(sd, effect, alpha / family, power, limit=max_launches)
        if launches is None:
            continue
        cost = launches * launch_cost
        if best is None or cost < best.cost_s:
            reached = welch_power(delta, sd, launches, alpha / family)
            best = RepetitionPlan(launches, runs, cost, reached)
    return best


def minimum_detectable_effect(
    cv: float, n: int, alpha: float = 0.05, power: float = 0.8
) -> Optional[float]:
    """Smallest relative effect that ``n`` runs per arm find with ``power``, at this CV."""
    if not (cv > 0 and n >= 2):
        return None
    shift = _detectable_shift(n, alpha, power)
    log_effect = shift * cv * math.sqrt(2 / n) if shift is not None else math.inf
    # Beyond a millionfold (and before expm1 overflows) no count of these runs finds it.
    return math.expm1(log_effect) if log_effect <= math.log1p(1e6) else None


@lru_cache(maxsize=1024)
def _detectable_shift(n: int, alpha: float, power: float) -> Optional[float]:
    """The difference, in standard deviations of the difference of means, that Welch's test
    with ``n`` values per arm finds with ``power``: whatever the spread, so found once (a
    simulation asks for it at every comparison)."""
    high = 1.0
    while _welch_rejection(high, n, alpha) < power:
        high *= 2
        if high > 1e6:
            return None
    return float(
        optimize.brentq(
            lambda shift: _welch_rejection(shift, n, alpha) - power, 0.0, high, xtol=1e-9
        )
    )
