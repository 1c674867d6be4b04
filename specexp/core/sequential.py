"""Measure until decided: a group-sequential comparison of two arms over server launches.

Each arm's values are launch means (log tok/s); a look after every round of launches tests
the difference with Welch's t (its degrees of freedom read where the arms' variance ratio
is least favourable, so that arms unlike in launch variance keep the level), and the
verdict is read off a *repeated confidence interval* (Jennison & Turnbull): the critical
value of each look comes from a Lan-DeMets error-spending function over the information
measured so far, computed exactly for the looks' correlation (recursive integration of the
score's Brownian motion), so that the intervals of all looks together hold with probability
1 - alpha. A verdict read at any look (faster, slower, or equivalent within the threshold)
is therefore as safe as one fixed test's, whatever look the sequence stopped at.

The sequence stops when the interval decides, or when the information planned for the
design effect (the threshold's double by default, with the power asked) is reached, or when
the budget of launches or server time is spent: then it is inconclusive. Runs per launch
are planned from the spreads the first look measured (the cheapest information per
server-second); launches are added one per arm per round, in ABBA order, so that drift adds
alike to both arms.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from enum import StrEnum
from functools import lru_cache
from typing import Optional, Sequence

import numpy as np
from scipy import optimize, special
from scipy import stats as scipy_stats

from specexp.core.stats.distributions import chi2_ppf, f_isf, f_ppf, normal_isf, t_isf
from specexp.core.stats.verdicts import Verdict, interval, read_verdict, sample_var, welch_log

_NO_BOUNDARY = 40.0
MAX_PLANNED_LAUNCHES = 10_000  # a critical value no data reaches (nothing spent at this look)
# Looks are at least this much information apart (estimated information can stand still
# or fall when a launch widens the spread), which bounds the integration's grid step.
MIN_INCREMENT = 0.01
_GRID_STEP = math.sqrt(MIN_INCREMENT) / 5
_TAIL_SD = 8.0  # paths farther out than this carry no mass worth integrating


class Spending(StrEnum):
    """How the error rate is spent over the information: Pocock-like spends much early
    (stops soonest on large effects), O'Brien-Fleming-like little (keeps the last look
    close to a fixed test's)."""

    pocock = "pocock"
    obrien_fleming = "obrien_fleming"


def spent(spending: Spending, fraction: float, alpha: float) -> float:
    """Error rate spent up to an information fraction (Lan & DeMets 1983)."""
    t = min(max(fraction, 0.0), 1.0)
    if t == 0:
        return 0.0
    if spending == Spending.pocock:
        return alpha * math.log(1 + (math.e - 1) * t)
    return float(2 * scipy_stats.norm.sf(scipy_stats.norm.isf(alpha / 2) / math.sqrt(t)))


def critical_values(fractions: Sequence[float], alpha: float, spending: Spending) -> list[float]:
    """Two-sided critical z of each look at these increasing information fractions, each
    spending what the spending function allots to it under no difference, given the looks
    before it (recursive integration over the paths not yet stopped)."""
    return list(_critical_values(tuple(round(f, 12) for f in fractions), alpha, spending))


@lru_cache(maxsize=8192)
def _critical_values(
    fractions: tuple[float, ...], alpha: float, spending: Spending
) -> tuple[float, ...]:
    return _looks_so_far(fractions, alpha, spending)[0]


@lru_cache(maxsize=8192)
def _looks_so_far(
    fractions: tuple[float, ...], alpha: float, spending: Spending
) -> tuple[tuple[float, ...], _Paths]:
    """Critical values of these looks and the paths left inside their boundaries; a
    sequence's looks extend one prefix at a time, so each look costs one step."""
    if not fractions:
        return (), _Paths()
    criticals, paths = _looks_so_far(fractions[:-1], alpha, spending)
    t = fractions[-1]
    target = spent(spending, t, alpha) - spent(spending, paths.t, alpha)
    if target <= 1e-15:
        c = _NO_BOUNDARY
    else:
        c = float(optimize.brentq(lambda c: paths.crossing(t, c) - target, 0.0, _NO_BOUNDARY))
    return (*criticals, c), paths.advanced(t, c)


def crossing_probability(
    fractions: Sequence[float], criticals: Sequence[float], drift: float
) -> float:
    """Probability that the standardised score, drifting by ``drift`` at full information,
    crosses a boundary at one of the looks: the design's power under that effect."""
    paths, crossed = _Paths(drift), 0.0
    for t, c in zip(fractions, criticals, strict=True):
        crossed += paths.crossing(t, c)
        paths = paths.advanced(t, c)
    return crossed


class _Paths:
    """The score S(t) ~ Brownian motion with ``drift`` in information time, on a grid: the
    density of the paths that have not crossed a boundary yet."""

    def __init__(
        self,
        drift: float = 0.0,
        t: float = 0.0,
        grid: Optional[np.ndarray] = None,
        density: Optional[np.ndarray] = None,
        step: float = 0.0,
    ) -> None:
        self.drift, self.t, self.grid, self.step = drift, t, grid, step
        self.density = np.zeros(0) if density is None else density

    def crossing(self, t: float, critical: float) -> float:
        """Probability of crossing |S(t)| >= critical * sqrt(t) at a look at ``t``."""
        edge, dt = critical * math.sqrt(t), t - self.t
        shift, sd = self.drift * dt, math.sqrt(dt)
        if self.grid is None:
            return float(special.ndtr((-edge - shift) / sd) + special.ndtr((shift - edge) / sd))
        outside = special.ndtr((-edge - self.grid - shift) / sd) + special.ndtr(
            (self.grid + shift - edge) / sd
        )
        return float((self.density * outside).sum() * self.step)

    def advanced(self, t: float, critical: float) -> _Paths:
        """The paths at ``t`` inside the boundary there."""
        edge, dt = min(critical, _TAIL_SD) * math.sqrt(t), t - self.t
        shift, sd = self.drift * dt, math.sqrt(dt)
        points = max(64, math.ceil(2 * edge / _GRID_STEP))
        step = 2 * edge / points
        grid = -edge + step * (np.arange(points) + 0.5)
        if self.grid is None:
            density = _normal_pdf(grid - shift, sd)
        else:
            density = (
                _normal_pdf(grid[:, None] - self.grid[None, :] - shift, sd) @ self.density
            ) * self.step
        return _Paths(self.drift, t, grid, density, step)


def _normal_pdf(x: np.ndarray, sd: float) -> np.ndarray:
    return np.exp(-0.5 * (x / sd) ** 2) / (sd * math.sqrt(2 * math.pi))


@lru_cache(maxsize=256)
def design_drift(alpha: float, power: float, spending: Spending, looks: int) -> float:
    """Standardised effect at full information (delta * sqrt(I_max)) that a design of
    ``looks`` equally spaced looks detects with ``power``: the fixed test's
    z_(1-alpha/2) + z_power, inflated for the looks."""
    fractions = [(k + 1) / looks for k in range(looks)]
    criticals = critical_values(fractions, alpha, spending)
    fixed = scipy_stats.norm.isf(alpha / 2) + scipy_stats.norm.ppf(power)
    return float(
        optimize.brentq(
            lambda d: crossing_probability(fractions, criticals, d) - power,
            fixed * 0.9,
            fixed * 2.0,
        )
    )


@dataclass(frozen=True)
class SequentialDesign:
    """The stopping rule of a sequential comparison."""

    alpha: float  # of the whole sequence, for this comparison (a family's share)
    threshold: float
    design_effect: float  # relative effect found with ``power`` when the sequence runs full
    power: float
    spending: Spending = Spending.pocock
    min_launches: int = 3
    max_launches: int = 20
    planned_looks: int = 5  # for the information the design needs; looks happen every round

    def launches_needed(self, launch_var: float) -> int:
        """Launches per arm at which the sequence has the power asked for the design
        effect, when one launch's mean log throughput varies by ``launch_var``: the fixed
        test's launches, inflated for the looks (``planned_looks`` of them, equally spaced)
        and for Welch's t at that many launches. The budget may stop it sooner."""
        drift = design_drift(self.alpha, self.power, self.spending, self.planned_looks)
        z = normal_isf(self.alpha / 2)
        delta = math.log1p(self.design_effect)
        launches = self.min_launches
        for _ in range(20):  # the t-quantile's degrees of freedom depend on the launches
            widen = t_isf(self.alpha / 2, max(2 * launches - 2, 1)) / z
            needed = math.ceil(2 * launch_var * (drift * widen / delta) ** 2)
            needed = min(max(needed, self.min_launches), MAX_PLANNED_LAUNCHES)
            if needed == launches:
                break
            launches = needed
        return launches


class StopReason(StrEnum):
    decided = "decided"
    failed = "an arm failed"
    information = "planned launches reached"
    launches = "launch budget spent"
    server_time = "server-time budget spent"


@dataclass(frozen=True)
class Look:
    """One look: what was measured by then, and what the repeated interval said."""

    launches_baseline: int
    launches_candidate: int
    fraction: float  # information fraction
    critical_z: float
    level: float  # the repeated interval's nominal level at this look
    ratio: float
    ci_low: float
    ci_high: float
    verdict: Verdict
    server_s: float = math.nan  # server time spent by then, both arms


@dataclass
class SequentialRecord:
    """A sequence's looks, what it spent and why it stopped."""

    design: SequentialDesign
    looks: list[Look] = field(default_factory=list)
    stop: Optional[StopReason] = None
    # Planned after the first look from the spreads it measured.
    runs_per_launch: Optional[int] = None
    planned_launches: Optional[int] = None

    @property
    def verdict(self) -> Verdict:
        return self.looks[-1].verdict if self.looks else Verdict.cannot_test


def reversed_record(record: SequentialRecord) -> SequentialRecord:
    """The record with its arms swapped: each look's ratio and interval inverted and its
    word turned round (the interval, and what it decides, are the same)."""
    turned = {Verdict.faster: Verdict.slower, Verdict.slower: Verdict.faster}

    def inverse(value: float) -> float:
        return 1 / value if value else math.inf

    looks = [
        dataclasses.replace(
            look,
            launches_baseline=look.launches_candidate,
            launches_candidate=look.launches_baseline,
            ratio=inverse(look.ratio),
            ci_low=inverse(look.ci_high),
            ci_high=inverse(look.ci_low),
            verdict=turned.get(look.verdict, look.verdict),
        )
        for look in record.looks
    ]
    return dataclasses.replace(record, looks=looks)


@dataclass(frozen=True)
class SequentialComparison:
    """A comparison a sweep measured sequentially: its arms (config fingerprints and
    labels) and the record of its looks."""

    baseline: str
    candidate: str
    baseline_label: str
    candidate_label: str
    record: SequentialRecord


def look(
    record: SequentialRecord,
    baseline: Sequence[float],
    candidate: Sequence[float],
    server_s: float = math.nan,
    final: bool = False,
) -> Look:
    """Test after a round: the repeated interval at this look's spent error rate (all that
    is left of it when ``final``), appended to the record; the record's stop is set when
    the interval decides or the planned information is reached."""
    design = record.design
    log_diff, se, _ = welch_log(np.asarray(baseline, float), np.asarray(candidate, float))
    df = least_favourable_df(baseline, candidate)
    launches = min(len(baseline), len(candidate))
    earlier = [lk.fraction for lk in record.looks]
    if earlier:  # launches planned from the launch means' spread so far
        record.planned_launches = design.launches_needed(
            _upper_bound(_pooled_log_var(baseline, candidate), 2 * launches - 2)
        )
        final = final or launches >= min(record.planned_launches, design.max_launches)
    # The budget's share of launches, not the estimated information: a fraction read off a
    # noisy spread would spend more error exactly when the interval is narrow by chance.
    fraction = 1.0 if final else min(1.0, launches / design.max_launches)
    fraction = max(fraction, (earlier[-1] + MIN_INCREMENT) if earlier else MIN_INCREMENT)
    z = critical_values([*earlier, fraction], design.alpha, design.spending)[-1]
    level = float(1 - 2 * special.ndtr(-z))
    if se > 0:
        # Unbounded above where the bound is beyond a float: a look on two launches per arm
        # (df 1) at a high confidence.
        low, high = interval(log_diff, se, df, 1 - level)
        verdict = read_verdict(low, high, design.threshold)
    else:
        low = high = math.nan
        verdict = Verdict.cannot_test
    result = Look(
        len(baseline),
        len(candidate),
        fraction,
        z,
        level,
        math.exp(log_diff),
        low,
        high,
        verdict,
        server_s,
    )
    record.looks.append(result)
    if verdict.decided:
        record.stop = StopReason.decided
    elif record.planned_launches is not None and launches >= record.planned_launches:
        record.stop = StopReason.information
    elif launches >= design.max_launches:
        record.stop = StopReason.launches
    return result


# The confidence interval of the arms' variance ratio whose least favourable end gives a
# look's degrees of freedom.
DF_RATIO_CONFIDENCE = 0.8


def least_favourable_df(baseline: Sequence[float], candidate: Sequence[float]) -> float:
    """Welch-Satterthwaite degrees of freedom at the end of the variance ratio's interval
    that gives the fewest. Welch's own df, read at the estimated ratio, is largest exactly
    when the wider arm's spread came out small - when the statistic is largest - so a look
    read on it is liberal; between Hsu's min(n) - 1 on few launches and Welch's on many."""
    logs = [np.log(np.asarray(v, float)) for v in (baseline, candidate)]
    (na, nb), (va, vb) = [x.size for x in logs], [float(sample_var(x)) for x in logs]
    if va <= 0 or vb <= 0:
        return float(min(na, nb) - 1)
    tail = (1 - DF_RATIO_CONFIDENCE) / 2
    ratio = va / vb
    ends = [
        ratio / f_isf(tail, na - 1, nb - 1),
        ratio / f_ppf(tail, na - 1, nb - 1),
    ]

    def welch_df(q: float) -> float:  # q: the baseline's variance over the candidate's
        a, b = q / na, 1 / nb
        return (a + b) ** 2 / (a**2 / (na - 1) + b**2 / (nb - 1))

    return float(min(welch_df(q) for q in ends))


def runs_per_launch(
    within_var: float,
    between_var: float,
    launch_s: float,
    run_s: float,
    warmup_runs: int,
    limits: tuple[int, int],
) -> int:
    """Measured runs per launch that buy the most information per server-second: a launch
    costs its start-up and warm-ups plus its runs, and its mean varies by between + within /
    runs, so the cost per unit of information is least at sqrt(within * fixed cost /
    (between * run cost)) runs (Kalibera & Jones' two-level optimum)."""
    fixed = launch_s + warmup_runs * run_s
    if within_var <= 0:
        return limits[0]
    if between_var <= 0 or run_s <= 0:
        return limits[1]
    best = math.sqrt(within_var * fixed / (between_var * run_s))
    # The integer on either side with the lower cost per information.
    candidates = {max(limits[0], min(limits[1], n)) for n in (math.floor(best), math.ceil(best))}
    return min(
        candidates,
        key=lambda n: (fixed + n * run_s) * (between_var + within_var / n),
    )


def after_round(
    record: SequentialRecord,
    baseline: Sequence[float],
    candidate: Sequence[float],
    *,
    server_s: float,
    next_round_s: float,
    server_budget_s: float,
) -> Look:
    """The look after a round of launches, final when another round would pass the
    budget of launches or server time; sets why the sequence stops (if it does)."""
    design = record.design
    out_of_launches = min(len(baseline), len(candidate)) >= design.max_launches
    out_of_time = server_s + next_round_s > server_budget_s
    result = look(record, baseline, candidate, server_s, final=out_of_launches or out_of_time)
    if record.stop is None and (out_of_launches or out_of_time):
        record.stop = StopReason.launches if out_of_launches else StopReason.server_time
    return result


@dataclass(frozen=True)
class Costs:
    """Seconds a launch takes to start and a run to measure."""

    launch_s: float
    run_s: float
    warmup_runs: int

    def launch(self, runs: int) -> float:
        return self.launch_s + (self.warmup_runs + runs) * self.run_s


@dataclass(frozen=True)
class Outcome:
    verdict: Verdict
    stop: StopReason
    launches: int  # per arm
    server_s: float  # both arms
    # The sequence's looks, and each arm's launch means (baseline's, candidate's): what a
    # sweep's report and its runs would hold.
    record: Optional[SequentialRecord] = None
    means: tuple[tuple[float, ...], tuple[float, ...]] = ((), ())


def simulate(
    design: SequentialDesign,
    *,
    between_cv: float,
    within_cv: float,
    effect: float,
    costs: Costs,
    first_runs: int,
    server_budget_s: float,
    rng: np.random.Generator,
    candidate_between_cv: Optional[float] = None,
) -> Outcome:
    """One whole sequence on log-normal noise with a known effect: what the protocol
    decides and spends (its operating characteristics, by repeating it). The candidate's
    launches vary by ``candidate_between_cv`` where given (arms unlike in launch variance),
    else by ``between_cv`` as the baseline's."""
    shift = math.log1p(effect)
    spreads = (between_cv, between_cv if candidate_between_cv is None else candidate_between_cv)
    means: tuple[list[float], list[float]] = ([], [])
    within: list[float] = []
    record = SequentialRecord(design)
    runs, server_s = first_runs, 0.0
    while record.stop is None:
        for arm, (offset, spread) in enumerate(zip((0.0, shift), spreads, strict=True)):
            values = offset + rng.normal(0, spread) + rng.normal(0, within_cv, runs)
            means[arm].append(math.exp(values.mean()))
            if runs > 1:
                within.append(float(sample_var(values)))
        server_s += 2 * costs.launch(runs)
        if len(means[0]) < design.min_launches:
            continue
        after_round(
            record,
            means[0],
            means[1],
            server_s=server_s,
            next_round_s=2 * costs.launch(runs),
            server_budget_s=server_budget_s,
        )
        if record.stop is None and record.runs_per_launch is None:
            plan_runs(record, means, within, runs, costs)
            runs = record.runs_per_launch or runs
    assert record.stop is not None
    return Outcome(
        record.verdict,
        record.stop,
        len(means[0]),
        server_s,
        record,
        (tuple(means[0]), tuple(means[1])),
    )


def plan_runs(
    record: SequentialRecord,
    means: Sequence[Sequence[float]],
    within: Sequence[float],
    runs: int,
    costs: Costs,
) -> None:
    """Runs per launch from the first look: the within-launch
    variance pooled over its launches' runs, the between-launch variance from the launch
    means' spread beyond it."""
    within_var = float(np.mean(within)) if within else 0.0
    spread = float(np.mean([np.var(np.log(m), ddof=1) for m in means]))
    between_var = max(spread - within_var / runs, 0.0)
    # At most four times the runs a launch had: a between-launch spread measured as none on
    # two launches is not known to be none.
    record.runs_per_launch = runs_per_launch(
        within_var, between_var, costs.launch_s, costs.run_s, costs.warmup_runs, (1, 4 * runs)
    )


# A plan from a spread measured on few launches is an underestimate as often as not; planned
# from this upper confidence bound of it, the sequence keeps its power.
PLANNING_CONFIDENCE = 0.6


def _upper_bound(variance: float, df: float) -> float:
    return variance * df / chi2_ppf(1 - PLANNING_CONFIDENCE, max(df, 1))


def _pooled_log_var(baseline: Sequence[float], candidate: Sequence[float]) -> float:
    return float(np.mean([sample_var(np.log(np.asarray(v, float))) for v in (baseline, candidate)]))
