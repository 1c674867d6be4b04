"""The statistics specexp trusts, small and explicit.

* A configuration: mean, std, CV and a Student-t interval; warnings when the values cannot
  be trusted (high CV, a trend left in the measured runs, outliers).
* Two configurations: the speedup as a ratio of geometric means with a confidence interval
  from Welch's t on log values (Kalibera & Jones report the ratio with a CI; logs make it
  symmetric), a Mann-Whitney U p-value as a second opinion, and a verdict read off the
  interval with a practical threshold: faster / slower / equivalent (inside the threshold) /
  inconclusive, or "cannot test" (an arm with one value, or without spread). The
  comparisons of a sweep are one family: their intervals are simultaneous (Bonferroni).
* Drift: when both arms were measured on one timeline (one shared server, or launches
  alternating in time), a common linear trend in time is fitted with them (ANCOVA on
  logs) and the comparison is made with it taken out; where the values as measured would
  have said something else, the verdict is "confounded by drift".
* Planning: runs per arm needed for an effect, and the minimum detectable effect of the runs
  made, from the measured CV.

Values passed in must be independent: per launch when a configuration had several server
launches, per measured run otherwise (requests inside one run are not independent).
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from functools import lru_cache
from typing import Any, Optional, Sequence

import numpy as np
from scipy import optimize, special
from scipy import stats as scipy_stats

from specexp.core.notes import Note, NoteKind
from specexp.core.records import History, Record, Version


class Verdict(StrEnum):
    """What a comparison's interval says of candidate against baseline."""

    faster = "faster"
    slower = "slower"
    equivalent = "equivalent"  # inside the practical threshold either way
    inconclusive = "inconclusive"
    cannot_test = "cannot test"  # an arm without two values or without spread

    @property
    def decided(self) -> bool:
        return self in (Verdict.faster, Verdict.slower, Verdict.equivalent)


class Confounder(StrEnum):
    """What the timeline holds that a difference cannot be told from."""

    drift = "drift"
    step = "a step"


class Standing(StrEnum):
    """What a job's verdict tag says in place of a verdict: it is the baseline, or the
    difference is not the factor's (Comparison.label)."""

    baseline = "baseline"
    not_attributable = "not attributable"
    confounded_by_drift = "confounded by drift"
    confounded_by_step = "confounded by a step"


_CONFOUNDED = {
    Confounder.drift: Standing.confounded_by_drift,
    Confounder.step: Standing.confounded_by_step,
}


@dataclass(frozen=True)
class Summary:
    n: int
    mean: float
    std: float
    cv: float
    ci_low: float
    ci_high: float
    median: float
    minimum: float
    maximum: float
    confidence: float

    def as_dict(self, prefix: str) -> dict[str, float]:
        return {f"{prefix}_{k}": float(v) for k, v in asdict(self).items() if k != "confidence"}


def _clean(values: Sequence[float]) -> np.ndarray:
    return np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)


def summarize(values: Sequence[float], confidence: float = 0.95) -> Optional[Summary]:
    """Student-t interval of the mean; None without data; NaN bounds for a single value."""
    data = _clean(values)
    if data.size == 0:
        return None
    mean = float(data.mean())
    std = float(data.std(ddof=1)) if data.size > 1 else 0.0
    if data.size > 1:
        half = float(t_ppf(0.5 + confidence / 2, data.size - 1) * std / math.sqrt(data.size))
        low, high = mean - half, mean + half
    else:
        low = high = float("nan")
    return Summary(
        n=int(data.size),
        mean=mean,
        std=std,
        cv=std / mean if mean else float("nan"),
        ci_low=low,
        ci_high=high,
        median=float(np.median(data)),
        minimum=float(data.min()),
        maximum=float(data.max()),
        confidence=confidence,
    )


def percentiles(values: Sequence[float], qs: Sequence[int] = (50, 90, 99)) -> dict[str, float]:
    data = _clean(values)
    if data.size == 0:
        return {}
    return {f"p{q}": float(np.percentile(data, q)) for q in qs}


# The percentiles a job reports of its latency series, each with an interval or not at all.
TAIL_PERCENTILES = (50, 90, 95, 99)


@dataclass(frozen=True)
class PercentileEstimate:
    """A percentile of a series with its distribution-free interval: order statistics whose
    ranks a binomial count places around the percentile (no shape assumed). ``n_eff`` is the
    effective number of values the interval rests on (:func:`effective_values`): values of
    one request move together, and values in one run are autocorrelated, so neither counts
    as independent. Without enough for the interval (the percentile's extreme order
    statistics not covering it at the level: 72 values at p95, 368 at p99 for 95%),
    ``value`` is None and ``needed`` says how many it takes; ``requests_bound``: the
    requests, not the values, were too few (more requests, not longer ones, give more)."""

    percentile: float
    n: int
    n_eff: float
    needed: int
    requests: int
    requests_bound: bool
    value: Optional[float] = None
    ci_low: Optional[float] = None
    ci_high: Optional[float] = None

    @property
    def name(self) -> str:
        return f"p{self.percentile:g}"


def values_needed(percentile: float, confidence: float = 0.95) -> int:
    """Fewest independent values with an order-statistic interval of the percentile: the
    extreme values must miss it with probability at most (1 - confidence) / 2 each side."""
    q = percentile / 100
    tail = (1 - confidence) / 2
    return int(math.ceil(math.log(tail) / math.log(max(q, 1 - q)) - 1e-9))


def _centred_ranks(data: np.ndarray) -> np.ndarray:
    """Ranks of the values less their mean: latencies have heavy tails that one stall
    would dominate."""
    ranks = scipy_stats.rankdata(data)
    return ranks - ranks.mean()


def lag1_autocorrelation(centred: np.ndarray) -> float:
    """Lag-1 autocorrelation of a time-ordered series' centred ranks, clipped to [0, 0.95]."""
    spread = float(centred @ centred)
    if centred.size < 4 or spread == 0:
        return 0.0
    return min(max(float(centred[:-1] @ centred[1:]) / spread, 0.0), 0.95)


def request_effective_values(centred: np.ndarray, request: np.ndarray, tail: float) -> float:
    """Effective number of values whose centred ranks come from requests (``request``: each
    value's request, 0..k-1), the requests as clusters: n times the variance of the mean
    rank were the values independent over its cluster-robust variance (the requests' rank
    sums, k/(k-1) sum S_j^2 / n^2), times (z/t)^2 at ``tail`` with k - 1 degrees of freedom
    (the variance rests on k requests). n with one value per request (nothing clusters);
    0 with one request: one request's values say nothing of the next's."""
    k = int(request.max()) + 1
    if k == centred.size:
        return float(k)
    if k < 2:
        return 0.0
    sums = np.bincount(request, weights=centred, minlength=k)
    clustered = k / (k - 1) * float(sums @ sums)
    independent = float(centred @ centred)
    if clustered <= 0:
        return float(centred.size)
    few = (normal_ppf(1 - tail) / t_isf(tail, k - 1)) ** 2
    return min(float(centred.size), centred.size * independent / clustered * few)


def effective_values(data: np.ndarray, request: np.ndarray, tail: float) -> tuple[float, bool]:
    """(Effective number of values, whether the requests set it) of a time-ordered series,
    ``request`` each value's request (0..k-1, in order): the smaller of its length deflated
    for the lag-1 autocorrelation of its ranks, n(1 - rho)/(1 + rho) (a queue that builds and
    drains), and :func:`request_effective_values` (a request's own level: 30 requests x 47
    gaps at intraclass correlation 0.5 are some 60 values, where the lag-1 rule counted
    800)."""
    if not data.size:
        return 0.0, False
    centred = _centred_ranks(data)
    rho = lag1_autocorrelation(centred)
    in_time = data.size * (1 - rho) / (1 + rho)
    by_requests = request_effective_values(centred, request, tail)
    return min(in_time, by_requests), by_requests < in_time


def percentile_estimates(
    blocks: Sequence[Sequence[float]],
    percentiles_asked: Sequence[float] = TAIL_PERCENTILES,
    confidence: float = 0.95,
) -> list[PercentileEstimate]:
    """Each percentile of a time-ordered series, given as its requests' values (one block
    per request, in order), with its order-statistic interval at ``confidence`` on the
    effective number of values (:func:`effective_values`); None where there are too few.
    The ranks bounding the interval come from Binomial(n_eff, q), placed on the sorted
    series at the same fractions (the count of values below the percentile varies as
    that of n_eff independent ones)."""
    tail = (1 - confidence) / 2
    values = np.fromiter(
        (np.nan if v is None else v for block in blocks for v in block), dtype=float
    )
    kept = np.isfinite(values)
    data = values[kept]
    # Requests without a value left drop out; the rest are numbered 0..k-1 in order.
    _, request = np.unique(
        np.repeat(np.arange(len(blocks)), [len(block) for block in blocks])[kept],
        return_inverse=True,
    )
    n_eff, requests_bound = effective_values(data, request, tail)
    ordered = np.sort(data)
    found = []
    for percentile in percentiles_asked:
        q = percentile / 100
        needed = values_needed(percentile, confidence)
        estimate = PercentileEstimate(
            percentile,
            int(data.size),
            n_eff,
            needed,
            int(request.max()) + 1 if request.size else 0,
            requests_bound,
        )
        m = int(math.floor(n_eff))
        if m >= needed:
            # Ranks (1-based, of m independent values) l and u with P(l <= B < u) >= level,
            # B the count below the percentile: l - 1 the largest count with cdf <= tail.
            low_rank = int(scipy_stats.binom.ppf(tail, m, q))
            if scipy_stats.binom.cdf(low_rank, m, q) > tail:
                low_rank -= 1
            high_rank = int(scipy_stats.binom.isf(tail, m, q)) + 1
            scale = data.size / m

            def at(rank: float) -> float:
                return float(ordered[min(max(int(rank), 0), data.size - 1)])

            estimate = dataclasses.replace(
                estimate,
                value=float(np.percentile(data, percentile)),
                ci_low=at(math.floor((low_rank + 1) * scale) - 1),
                ci_high=at(math.ceil(high_rank * scale) - 1),
            )
        found.append(estimate)
    return found


@dataclass(frozen=True)
class VarianceComponents:
    """Variance of a two-level design (launches x runs), as one-way random-effects ANOVA."""

    launches: int
    runs_per_launch: float
    within_launch: float  # run-to-run variance inside one server launch
    between_launch: float  # extra variance from relaunching the server (>= 0)


def variance_components(
    values_by_launch: Sequence[Sequence[float]],
) -> Optional[VarianceComponents]:
    """One-way random-effects ANOVA by the method of moments, unbalanced designs included
    (a sequence's launches after its first look may hold fewer runs, even one): the
    within-launch variance pooled over the launches with two or more runs, the between-launch
    variance from every launch's mean. None without two launches and one repeated run."""
    groups = [g for g in map(_clean, values_by_launch) if g.size]
    sizes = np.array([g.size for g in groups], dtype=float)
    k, total = len(groups), float(sizes.sum())
    if k < 2 or total - k < 1:
        return None
    means = np.array([g.mean() for g in groups])
    within = float(sum(((g - g.mean()) ** 2).sum() for g in groups) / (total - k))
    grand = float((sizes * means).sum() / total)
    between_mean_square = float((sizes * (means - grand) ** 2).sum() / (k - 1))
    # The effective runs per launch (n0): the plain count when every launch has as many runs.
    effective = float((total - (sizes**2).sum() / total) / (k - 1))
    return VarianceComponents(
        launches=k,
        runs_per_launch=float(sizes.mean()),
        within_launch=within,
        between_launch=max(0.0, (between_mean_square - within) / effective),
    )


# Notes a comparison's decision writes; deciding again replaces them.
DECISION_NOTES = frozenset(
    {
        NoteKind.below_threshold,
        NoteKind.rank_disagrees,
        NoteKind.undetectable,
        NoteKind.drift_fitted,
        NoteKind.confounded,
        NoteKind.robust,
        NoteKind.step,
    }
)


# What makes a level's values too unsteady to place a crossover on (few values widen the
# interval, which already says so; one outlier is shown, not disqualifying).
UNSTEADY = (NoteKind.high_cv, NoteKind.trend)


def notes_for(values: Sequence[float], cv_warn: float, alpha: float = 0.05) -> list[Note]:
    """Reasons not to trust a set of measured values, in words a person can act on."""
    data = _clean(values)
    notes = []
    if data.size >= 2:
        cv = float(data.std(ddof=1) / data.mean()) if data.mean() else float("nan")
        if cv > cv_warn:
            notes.append(
                Note(
                    NoteKind.high_cv,
                    f"CV {cv:.1%} is above {cv_warn:.0%}: small differences cannot be resolved",
                )
            )
    if data.size >= 5:
        tau, p = scipy_stats.kendalltau(np.arange(data.size), data)
        if p < alpha:
            direction = "rising" if tau > 0 else "falling"
            notes.append(
                Note(
                    NoteKind.trend,
                    f"values keep {direction} across the measured runs (Kendall tau {tau:.2f}, "
                    f"p={p:.3f}): warm-up may not be over; add stats.warmup_runs",
                )
            )
    if data.size >= 3:
        outlier = grubbs_outlier(data.tolist(), alpha)
        if outlier is not None:
            notes.append(
                Note(
                    NoteKind.outlier,
                    f"outlier: run {outlier} ({data[outlier]:.4g}), Grubbs' test p<{alpha:g}",
                )
            )
    if data.size < 5:
        notes.append(
            Note(
                NoteKind.few_values,
                f"only {data.size} values: intervals are wide and rank tests weak",
            )
        )
    return notes


def warnings_for(values: Sequence[float], cv_warn: float, alpha: float = 0.05) -> list[str]:
    """The messages of :func:`notes_for`."""
    return [note.message for note in notes_for(values, cv_warn, alpha)]


def grubbs_outlier(values: Sequence[float], alpha: float = 0.05) -> Optional[int]:
    """Index of the value farthest from the others if Grubbs' two-sided test calls it an
    outlier at ``alpha`` (on log values), else None. For normal (here: log-normal) data it
    raises a false alarm with probability alpha, whatever the number of values."""
    logs = np.log(_clean(values))
    n = logs.size
    spread = logs.std(ddof=1) if n >= 3 else 0.0
    if spread == 0:
        return None
    deviations = np.abs(logs - logs.mean()) / spread
    index = int(np.argmax(deviations))
    t = t_ppf(1 - alpha / (2 * n), n - 2)
    critical = (n - 1) / math.sqrt(n) * math.sqrt(t * t / (n - 2 + t * t))
    return index if deviations[index] > critical else None


def sample_var(x: np.ndarray) -> np.float64:
    """``x.var(ddof=1)`` of a 1-D float array, bit for bit (the same sums, mean and squares)
    without np.var's dispatch, which takes most of its time on the few values of a look."""
    n = x.size
    if n < 2 or x.ndim != 1 or x.dtype != np.float64:
        return np.float64(x.var(ddof=1))
    deviations = x - np.add.reduce(x) / n
    return np.float64(np.add.reduce(deviations * deviations) / (n - 1))


def welch_log(a: np.ndarray, b: np.ndarray) -> tuple[float, float, float]:
    """(difference of mean logs b - a, its standard error, Welch-Satterthwaite df)."""
    la, lb = np.log(a), np.log(b)
    va, vb = sample_var(la) / a.size, sample_var(lb) / b.size
    se = math.sqrt(va + vb)
    df = (
        (va + vb) ** 2 / (va**2 / (a.size - 1) + vb**2 / (b.size - 1))
        if se > 0
        else float(a.size + b.size - 2)
    )
    return float(lb.mean() - la.mean()), se, df


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


# Quantiles at a few distinct arguments (an alpha, a power, counts of launches), asked for
# at every plan and look - tens of thousands of times in a simulation - remembered:
# scipy.stats spends some 50 microseconds checking its arguments on each call.
@lru_cache(maxsize=256)
def normal_ppf(q: float) -> float:
    return float(scipy_stats.norm.ppf(q))


@lru_cache(maxsize=256)
def normal_isf(q: float) -> float:
    return float(scipy_stats.norm.isf(q))


@lru_cache(maxsize=8192)
def t_isf(q: float, df: float) -> float:
    return float(scipy_stats.t.isf(q, df))


@lru_cache(maxsize=8192)
def f_isf(q: float, dfn: float, dfd: float) -> float:
    return float(scipy_stats.f.isf(q, dfn, dfd))


@lru_cache(maxsize=8192)
def f_ppf(q: float, dfn: float, dfd: float) -> float:
    return float(scipy_stats.f.ppf(q, dfn, dfd))


@lru_cache(maxsize=8192)
def chi2_ppf(q: float, df: float) -> float:
    return float(scipy_stats.chi2.ppf(q, df))


# Student's t at one point, its degrees of freedom a measured (unrepeated) value: inside the
# support scipy.stats.t returns what these special functions return (t.ppf(q, df) is
# stdtrit(df, q) * 1 + 0) after some 100 microseconds of checking its arguments, so they are
# called directly there; at the edges and on invalid arguments scipy.stats answers.
def t_ppf(q: float, df: float) -> float:
    if 0 < q < 1 and df > 0:
        return float(special.stdtrit(df, q)) + 0.0  # + 0.0: scipy's -0.0 * 1 + 0 is 0.0
    return float(scipy_stats.t.ppf(q, df))


def t_sf(x: float, df: float) -> float:
    if math.isfinite(x) and df > 0:
        return float(special.stdtr(df, -x))
    return float(scipy_stats.t.sf(x, df))


def t_cdf(x: float, df: float) -> float:
    if math.isfinite(x) and df > 0:
        return float(special.stdtr(df, x))
    return float(scipy_stats.t.cdf(x, df))


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


@dataclass(frozen=True)
class TimeDrift:
    """One linear trend in time shared by two arms' log values, fitted with a level per arm
    (ANCOVA): how fast the server drifted, and the comparison with the trend taken out."""

    slope_per_min: float  # change of log throughput per minute
    slope_se: float
    shift_s: float  # the candidate's mean time minus the baseline's
    log_diff: float  # candidate - baseline on logs, the trend taken out
    se: float
    df: float

    @property
    def bias(self) -> float:
        """What the drift alone adds to the unadjusted log ratio."""
        return self.slope_per_min * self.shift_s / 60


def fit_time_drift(
    baseline: Sequence[float],
    baseline_times: Sequence[float],
    candidate: Sequence[float],
    candidate_times: Sequence[float],
) -> Optional[TimeDrift]:
    """The trend and the adjusted difference, or None when they cannot be estimated (fewer
    than 4 values, or no spread of time inside the arms)."""
    groups = [
        (np.log(np.asarray(v, float)), np.asarray(t, float) / 60)
        for v, t in ((baseline, baseline_times), (candidate, candidate_times))
    ]
    n = sum(y.size for y, _ in groups)
    if n < 4 or any(y.size != t.size or y.size < 2 for y, t in groups):
        return None
    centred = [(y - y.mean(), t - t.mean()) for y, t in groups]
    spread = sum(float(t @ t) for _, t in centred)
    if spread <= 0:
        return None
    slope = sum(float(t @ y) for y, t in centred) / spread
    residual = sum(float(((y - slope * t) ** 2).sum()) for y, t in centred)
    variance = residual / (n - 3)
    (yb, tb), (yc, tc) = groups
    shift = float(tc.mean() - tb.mean())
    return TimeDrift(
        slope_per_min=slope,
        slope_se=math.sqrt(variance / spread),
        shift_s=shift * 60,
        log_diff=float(yc.mean() - yb.mean()) - slope * shift,
        se=math.sqrt(variance * (1 / yb.size + 1 / yc.size + shift**2 / spread)),
        df=float(n - 3),
    )


@dataclass(frozen=True)
class TimeStep:
    """A step on the arms' shared timeline: when, what showed it, how large, and the
    comparison with it fitted (a level before and after, beside each arm's), or none when
    the step falls where the arms change (blocked order): then it cannot be told from them."""

    at_unix: float
    source: str  # the telemetry series that stepped, or "tok/s" (residuals of the arms)
    size: float  # relative change of that series across the step
    p_value: float  # permutation p of the largest split statistic
    log_diff: Optional[float] = None
    se: Optional[float] = None
    df: Optional[float] = None

    @property
    def separable(self) -> bool:
        return self.se is not None


# Share trimmed from each end by the robust test: 20%, Wilcox's recommendation for Yuen's test.
ROBUST_TRIM = 0.2


@dataclass(frozen=True)
class RobustEstimate:
    """Yuen's test on log values: the difference of 20%-trimmed means with winsorized
    variances and Welch's degrees of freedom. A few slow runs do not move it, and its error
    rate holds on clean values (checked by Monte Carlo)."""

    log_diff: float
    se: float
    df: float
    trim: float = ROBUST_TRIM
    ratio: float = math.nan
    ci_low: float = math.nan
    ci_high: float = math.nan
    p_value: float = math.nan
    verdict: Verdict = Verdict.inconclusive


def _single_launch_verdict_apart(record: dict[str, Any]) -> dict[str, Any]:
    """A comparison from before ``within_launch``, whose verdict held for one launch per arm
    only, read as :meth:`Comparison.hold_for_launches_only` has it since."""
    held = record.get("launches_only") and record["verdict"] != Verdict.cannot_test
    if "within_launch" in record or not held:
        return record
    return {**record, "within_launch": record["verdict"], "verdict": Verdict.inconclusive.value}


@dataclass
class Comparison(Record):
    """Candidate against baseline: the ratio of geometric means (candidate / baseline), its
    interval, tests and verdict - one model for all of them: Welch's t on log values, or
    with the arms' time drift fitted, the drift-adjusted difference (ANCOVA)."""

    HISTORY = History(
        "comparison",
        (
            Version(
                1,
                "the comparison, its interval, tests and verdict; robust, step, "
                "confounded_by and within_launch came later within format 1",
                ("robust", "step", "confounded_by"),
            ),
            Version(
                2,
                "within_launch: a format 1 verdict on one launch per arm from before it is read "
                "as held for those launches (in within_launch; the verdict inconclusive)",
                ("within_launch",),
                upgrade=_single_launch_verdict_apart,
            ),
        ),
    )
    DERIVED = ("change", "finding", "label")

    baseline: str
    candidate: str
    n_baseline: int
    n_candidate: int
    mean_baseline: float
    mean_candidate: float
    ratio: float
    # Interval of the ratio at ``ci_level``: simultaneous over the ``family`` of comparisons
    # decided together (Bonferroni), so the verdict can be read off it.
    ci_low: float
    ci_high: float
    p_welch: float
    p_mannwhitney: float
    p_equivalence: float
    confidence: float
    threshold: float
    log_diff: float = math.nan
    se: float = math.nan
    df: float = math.nan
    family: int = 1
    ci_level: float = math.nan
    p_welch_adjusted: Optional[float] = None
    p_equivalence_adjusted: Optional[float] = None
    verdict: Verdict = Verdict.inconclusive
    mde: Optional[float] = None
    runs_needed: Optional[int] = None
    power: float = 0.8
    # With both arms' launch and run variance known: the cheapest launches x runs per arm.
    plan: Optional[RepetitionPlan] = None
    # One launch per arm, and no launch-to-launch variance known to widen the interval
    # with: what the runs say holds for the launches measured only. It is kept here, never
    # as the verdict, which is then inconclusive.
    launches_only: bool = False
    within_launch: Optional[Verdict] = None
    # The arms' common trend in time, when they were measured on one timeline.
    drift: Optional[TimeDrift] = None
    # A step on the shared timeline (the machine changed state, or the values did).
    step: Optional[TimeStep] = None
    # With the drift (or a step) left in, the interval would say something else, or the step
    # falls where the arms change: the difference cannot be told from the timeline's,
    # whatever ``verdict`` says. ``confounded_by`` names which.
    confounded: bool = False
    confounded_by: Confounder = Confounder.drift
    # The arms differ in more than the factor compared (it did not engage in one of them):
    # the difference is not the factor's.
    attributable: bool = True
    # Beside the verdict: a test that a few slow runs do not sway (values as measured, no
    # drift or launch variance model), with at least 5 values per arm.
    robust: Optional[RobustEstimate] = None
    notes: list[Note] = field(default_factory=list)

    @property
    def change(self) -> float:
        return self.ratio - 1.0

    @property
    def testable(self) -> bool:
        return self.verdict != Verdict.cannot_test

    @property
    def finding(self) -> Verdict:
        """The verdict a reader may act on: inconclusive where drift confounds it or the
        difference is not the factor's."""
        if self.verdict.decided and (self.confounded or not self.attributable):
            return Verdict.inconclusive
        return self.verdict

    @property
    def label(self) -> Verdict | Standing:
        """The verdict, or what keeps it from being the factor's (the verdict tag)."""
        if not self.attributable:
            return Standing.not_attributable
        if self.confounded:
            return _CONFOUNDED[self.confounded_by]
        return self.verdict

    def note(self, kind: NoteKind, message: str) -> None:
        self.notes.append(Note(kind, message))

    def hold_for_launches_only(self) -> None:
        """What the interval says moves to ``within_launch``; the verdict is inconclusive."""
        self.launches_only = True
        if self.verdict != Verdict.cannot_test:
            self.within_launch, self.verdict = self.verdict, Verdict.inconclusive
        self.robust = None  # of these launches' runs too


def _alpha(confidence: float) -> float:
    """1 - confidence without the float residue (0.05, not 0.050000000000000044)."""
    return round(1 - confidence, 12)


def _why_untestable(a: np.ndarray, b: np.ndarray, names: tuple[str, str]) -> Optional[str]:
    for values, name in zip((a, b), names, strict=True):
        if values.size < 2:
            return f"{name} has {values.size} value(s): its noise cannot be estimated"
        if np.ptp(np.log(values)) == 0:
            return f"{name} has {values.size} identical values: no spread to test against"
    return None


def compare(
    baseline: Sequence[float],
    candidate: Sequence[float],
    *,
    confidence: float = 0.95,
    threshold: float = 0.01,
    power: float = 0.8,
    baseline_name: str = "baseline",
    candidate_name: str = "candidate",
) -> Comparison:
    """Compare two independent samples of a higher-is-better metric (e.g. tok/s). An arm with
    fewer than two values or none of their spread gives the verdict "cannot test"."""
    a, b = _clean(baseline), _clean(candidate)
    if (a <= 0).any() or (b <= 0).any():
        raise ValueError("values must be positive (ratios are taken on logs)")
    nan = math.nan
    result = Comparison(
        baseline=baseline_name,
        candidate=candidate_name,
        n_baseline=int(a.size),
        n_candidate=int(b.size),
        mean_baseline=float(a.mean()) if a.size else nan,
        mean_candidate=float(b.mean()) if b.size else nan,
        ratio=nan,
        ci_low=nan,
        ci_high=nan,
        p_welch=nan,
        p_mannwhitney=nan,
        p_equivalence=nan,
        confidence=confidence,
        threshold=threshold,
        power=power,
    )
    reason = _why_untestable(a, b, (baseline_name, candidate_name))
    if a.size and b.size:
        result.ratio = math.exp(float(np.log(b).mean() - np.log(a).mean()))
    if reason:
        result.verdict = Verdict.cannot_test
        result.note(NoteKind.cannot_test, f"cannot test: {reason}")
        return result
    result.log_diff, result.se, result.df = welch_log(a, b)
    if min(a.size, b.size) >= 5:
        yuen = scipy_stats.ttest_ind(np.log(b), np.log(a), equal_var=False, trim=ROBUST_TRIM)
        low, high = yuen.confidence_interval(0.5)  # its centre and spread, from scipy
        centre, half = (low + high) / 2, (high - low) / 2
        se = half / t_ppf(0.75, float(yuen.df))
        if se > 0:
            result.robust = RobustEstimate(float(centre), float(se), float(yuen.df))
    _test(result)
    result.p_mannwhitney = float(scipy_stats.mannwhitneyu(b, a, alternative="two-sided").pvalue)
    decide([result])
    return result


def _test(c: Comparison) -> None:
    """The difference's p-value and the equivalence (TOST) p-value from its estimate (see
    :func:`_estimate`)."""
    log_diff, se, df = _estimate(c)
    c.p_welch = 2 * t_sf(abs(log_diff) / se, df)
    bound = math.log1p(c.threshold)
    c.p_equivalence = float(
        max(
            t_sf((log_diff + bound) / se, df),
            t_cdf((log_diff - bound) / se, df),
        )
    )


def use_launch_level_error(c: Comparison, variance: float, df: float) -> None:
    """Test a comparison of single-launch arms against the variance of the difference of
    their means as launches vary (``variance`` on logs, estimated with ``df`` degrees of
    freedom by calibration runs), not against the run-to-run spread inside the two launches,
    which leaves the launches' own offsets out. Call :func:`decide` afterwards."""
    if not c.testable or variance <= 0:
        return
    c.se, c.df = math.sqrt(variance), df
    c.robust = None  # the run-level test leaves the launches out
    _test(c)


def decide(comparisons: Sequence[Comparison]) -> None:
    """Interval, adjusted p-values and verdict of each comparison, as one family of ``m``
    testable comparisons: each interval is at level 1 - alpha/m (Bonferroni), so the
    intervals hold together with probability >= 1 - alpha, and the verdict is read off the
    interval - faster (above 1), slower (below 1), equivalent (inside the threshold either
    way, which takes precedence), else inconclusive. A p-value below alpha after adjustment
    and an interval that excludes 1 are the same statement. With the arms' time drift
    fitted, all of them come from the drift-adjusted estimate (see :func:`_judge_drift`)."""
    testable = [c for c in comparisons if c.testable]
    family = len(testable)
    for c in testable:
        alpha = _alpha(c.confidence)
        log_diff, se, df = _estimate(c)
        _test(c)
        c.ratio = math.exp(log_diff)
        c.family, c.ci_level = family, 1 - alpha / family
        c.ci_low, c.ci_high = interval(log_diff, se, df, alpha / family)
        c.p_welch_adjusted = min(1.0, family * c.p_welch)
        c.p_equivalence_adjusted = min(1.0, 2 * family * c.p_equivalence)
        # Effects the family's test finds with the asked power, at the spread measured.
        cv = float(se / math.sqrt(1 / c.n_baseline + 1 / c.n_candidate))
        n = min(c.n_baseline, c.n_candidate)
        c.mde = minimum_detectable_effect(cv, n, alpha / family, c.power)
        c.runs_needed = runs_needed(cv, c.threshold, alpha / family, c.power)
        c.notes = [n for n in c.notes if n.kind not in DECISION_NOTES]
        c.verdict = read_verdict(c.ci_low, c.ci_high, c.threshold)
        c.confounded = False
        if c.verdict in (Verdict.faster, Verdict.slower):
            if abs(c.change) < c.threshold:
                c.note(
                    NoteKind.below_threshold,
                    f"difference below the practical threshold ({c.threshold:.1%})",
                )
            if c.p_mannwhitney >= alpha and c.drift is None:  # ranks of drifting values mislead
                c.note(
                    NoteKind.rank_disagrees,
                    f"rank test disagrees (Mann-Whitney p={c.p_mannwhitney:.3f}; with few runs it "
                    f"cannot reach {alpha:g})",
                )
        elif c.verdict == Verdict.inconclusive and c.mde is not None and c.mde > c.threshold:
            c.note(
                NoteKind.undetectable,
                f"cannot detect effects below {c.mde:.1%} with these runs; "
                f"{c.runs_needed or 'many'} runs per arm would find {c.threshold:.1%}",
            )
        if c.drift is not None and not (c.step and c.step.separable):
            _judge_drift(c, c.drift, alpha / family)
            c.robust = None  # the values as measured carry the drift
        if c.step is not None:
            _judge_step(c, c.step, alpha / family)
            c.robust = None
        if c.robust is not None:
            c.robust = _judge_robust(c, c.robust, alpha / family)
        if c.launches_only:
            c.hold_for_launches_only()


def _judge_robust(c: Comparison, robust: RobustEstimate, alpha: float) -> RobustEstimate:
    """The robust test at the family's level; a note where it says something the verdict
    does not (slow runs hiding a difference, or making one)."""
    low, high = interval(robust.log_diff, robust.se, robust.df, alpha)
    judged = dataclasses.replace(
        robust,
        ratio=math.exp(robust.log_diff),
        ci_low=low,
        ci_high=high,
        p_value=2 * t_sf(abs(robust.log_diff) / robust.se, robust.df),
        verdict=read_verdict(low, high, c.threshold),
    )
    if judged.verdict != c.verdict and (judged.verdict.decided or c.verdict.decided):
        c.note(
            NoteKind.robust,
            f"robust test (Yuen, {robust.trim:.0%} trimmed means) says {judged.verdict}: "
            f"{judged.ratio:.4f} [{low:.4f}, {high:.4f}]; a few runs far from the others "
            "sway one of the two (see the outlier notes of the arms)",
        )
    return judged


def _judge_step(c: Comparison, step: TimeStep, alpha: float) -> None:
    """A step the arms straddle unevenly: fitted where it can be told from the arms (the
    verdict then comes from the fit, and is confounded if the values as measured say
    otherwise), else the comparison is confounded by it whatever it says."""
    what = (
        f"a step in {step.source} ({step.size:+.1%}"
        if step.source != "cpu_other_cores"
        else f"a step in other work on the machine ({step.size:+.1f} cores"
    ) + f", permutation p={step.p_value:.3f}) at {_clock(step.at_unix)}"
    if not step.separable:
        c.note(
            NoteKind.step,
            f"{what} falls where the arms change (blocked order): it cannot be told from the "
            "difference between them",
        )
        if c.verdict in (Verdict.faster, Verdict.slower):
            c.confounded, c.confounded_by = True, Confounder.step
            c.note(
                NoteKind.confounded,
                f"confounded: {c.verdict} across {what}; interleave the arms "
                "(multirun.order=interleaved) or measure again on a steady machine",
            )
        return
    low, high = interval(c.log_diff, c.se, c.df, alpha)
    unadjusted = read_verdict(low, high, c.threshold)
    c.note(
        NoteKind.step,
        f"{what}, fitted as a level before and after it: {math.exp(c.log_diff):.4f} "
        f"[{low:.4f}, {high:.4f}] ({unadjusted}) without it",
    )
    if unadjusted.decided and unadjusted != c.verdict:
        c.confounded, c.confounded_by = True, Confounder.step
        c.note(NoteKind.confounded, f"confounded: {unadjusted} only across {what}")


def _clock(unix: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(unix))


def _estimate(c: Comparison) -> tuple[float, float, float]:
    """(log ratio, standard error, degrees of freedom) that the interval, p-values and
    verdict rest on: with a step fitted, the step-adjusted ones; with the arms' time drift
    fitted, the drift-adjusted ones."""
    if c.step is not None and c.step.separable:
        assert c.step.log_diff is not None and c.step.se is not None and c.step.df is not None
        return c.step.log_diff, c.step.se, c.step.df
    if c.drift is not None:
        return c.drift.log_diff, c.drift.se, c.drift.df
    return c.log_diff, c.se, c.df


def interval(log_diff: float, se: float, df: float, alpha: float) -> tuple[float, float]:
    """Two-sided 1 - alpha Student-t interval of a log ratio, as a ratio: unbounded above
    where the bound is beyond a float (a high confidence on one or two degrees of freedom)."""
    half = t_ppf(1 - alpha / 2, df) * se
    high = log_diff + half
    return math.exp(log_diff - half), math.exp(high) if high < _LOG_FLOAT_MAX else math.inf


_LOG_FLOAT_MAX = math.log(sys.float_info.max)


def read_verdict(low: float, high: float, threshold: float) -> Verdict:
    """Equivalent (inside the threshold either way, which takes precedence), faster (above
    1), slower (below 1), else inconclusive."""
    limit = 1 + threshold
    if 1 / limit <= low and high <= limit:
        return Verdict.equivalent
    if low > 1:
        return Verdict.faster
    if high < 1:
        return Verdict.slower
    return Verdict.inconclusive


def _judge_drift(c: Comparison, drift: TimeDrift, alpha: float) -> None:
    """The verdict comes from the drift-adjusted interval; if the interval without the
    adjustment claims something else, the difference between the arms cannot be told from
    the server's drift: "confounded by drift", with the figures."""
    low, high = interval(c.log_diff, c.se, c.df, alpha)
    unadjusted = read_verdict(low, high, c.threshold)
    c.note(
        NoteKind.drift_fitted,
        f"time drift {math.expm1(drift.slope_per_min):+.2%}/min (se {drift.slope_se:.2%}), taken "
        f"out of the ratio; the arms' mean times are {drift.shift_s:+.0f} s apart, which moved "
        f"it by {math.expm1(drift.bias):+.2%}: {math.exp(c.log_diff):.4f} [{low:.4f}, {high:.4f}] "
        f"({unadjusted}) before",
    )
    if unadjusted.decided and unadjusted != c.verdict:
        c.note(
            NoteKind.confounded,
            f"confounded: {unadjusted} only with the drift left in, so the difference cannot be "
            "told from the server's drift over time (interleave the arms: multirun.order=interleaved)",
        )
        c.confounded = True


# Timelines: steps and autocorrelation ------------------------------------------------------

# Telemetry series whose steps mark a machine that changed state (a throttled or re-clocked
# GPU, other work taking cores): per measured run, logged with the run.
MACHINE_SERIES = ("cpu_other_cores", "gpu_sm_clock_mhz_min")
# A change in such a series smaller than this (relative, or cores) is no event.
MACHINE_STEP_MIN = {"cpu_other_cores": 0.5, "gpu_sm_clock_mhz_min": 0.02}
_PERMUTATIONS = 999


def _split_statistic(series: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each permutation row of ``series``, the largest two-sample t over the splits
    into a before and an after of at least two values, and where it is."""
    n = series.shape[-1]
    best, where = np.zeros(series.shape[0]), np.zeros(series.shape[0], dtype=int)
    for k in range(2, n - 1):
        before, after = series[:, :k], series[:, k:]
        pooled = (
            before.var(axis=1, ddof=1) * (k - 1) + after.var(axis=1, ddof=1) * (n - k - 1)
        ) / (n - 2)
        t = np.abs(after.mean(axis=1) - before.mean(axis=1)) / np.sqrt(
            np.maximum(pooled, 1e-300) * (1 / k + 1 / (n - k))
        )
        better = t > best
        best, where = np.where(better, t, best), np.where(better, k, where)
    return best, where


def find_step(series: Sequence[float], alpha: float, seed: int = 0) -> Optional[tuple[int, float]]:
    """(index of the first value after the step, permutation p) of the most likely single
    step in a time-ordered series, if the largest split statistic beats its permutations at
    ``alpha``; None otherwise (or with fewer than 6 values, or no spread)."""
    values = np.asarray(series, float)
    if values.size < 6 or np.ptp(values) == 0:
        return None
    observed, where = _split_statistic(values[None, :])
    rng = np.random.default_rng(seed)
    # Row by row the draws of rng.permutation(values), made at once.
    shuffled = rng.permuted(np.tile(values, (_PERMUTATIONS, 1)), axis=1)
    null, _ = _split_statistic(shuffled)
    p = float((1 + np.sum(null >= observed[0])) / (1 + _PERMUTATIONS))
    return (int(where[0]), p) if p < alpha else None


def fit_with_step(
    logs: np.ndarray, is_candidate: np.ndarray, after: np.ndarray
) -> Optional[tuple[float, float, float]]:
    """(candidate - baseline, se, df) of log values with a level per arm and a shift after
    the step; None when the step and the arms cannot be told apart (collinear)."""
    design = np.column_stack([np.ones_like(logs), is_candidate, after]).astype(float)
    if np.linalg.matrix_rank(design) < 3 or logs.size < 5:
        return None
    coef, *_ = np.linalg.lstsq(design, logs, rcond=None)
    residual = logs - design @ coef
    df = logs.size - 3
    variance = float(residual @ residual) / df
    cov = variance * np.linalg.inv(design.T @ design)
    return float(coef[1]), math.sqrt(float(cov[1, 1])), float(df)


def corrected_lag1(raw: np.ndarray, parameters: int, n: int) -> np.ndarray:
    """Lag-1 autocorrelation of a fit's residuals, bias-corrected and clipped to [0, 0.95]:
    ``n`` residuals of a fit of ``parameters`` underestimate it by about (1 + 3 rho + p - 1)
    / n."""
    return np.clip((raw + parameters / n) / (1 - 3 / n), 0.0, 0.95)


def ar1_inflation(
    residuals_in_time: Sequence[float], design: np.ndarray, rho_upper_z: float = 0.0
) -> tuple[float, float]:
    """(rho, factor) for the second coefficient (the candidate's) of a least-squares fit
    with ``design`` (rows in time order): the lag-1 autocorrelation of its residuals,
    bias-corrected, and how much the coefficient's true standard error exceeds
    the one computed as for independent values: sqrt(c'Rc / (c'c tr(MR) / (n - p))), R
    the AR(1) correlation, c the coefficient's weights, M the residual maker. Never below
    1: autocorrelation does not shrink an interval here (see :func:`corrected_lag1`).
    With ``rho_upper_z``, rho is taken at that many standard errors above its estimate
    (sqrt((1 - rho^2) / n)): from a few dozen runs the estimate is too uncertain for an
    interval that must cover under real autocorrelation."""
    e = np.asarray(residuals_in_time, float)
    c = np.linalg.pinv(design)[1]
    parameters = design.shape[1]
    n = e.size
    if n < 6 or float(e @ e) == 0:
        return 0.0, 1.0
    rho = float(corrected_lag1(np.array(float(e[:-1] @ e[1:]) / float(e @ e)), parameters, n))
    if rho_upper_z:
        rho = min(0.95, rho + rho_upper_z * math.sqrt(max(1 - rho**2, 0.05) / n))
    if rho == 0:
        return 0.0, 1.0
    index = np.arange(n)
    correlation = rho ** np.abs(index[:, None] - index[None, :])
    # The residuals' own spread shrinks under autocorrelation too (by tr(M R) / (n - p),
    # M the fit's residual maker), which the interval's standard error is scaled by.
    residual_maker = np.eye(n) - design @ np.linalg.pinv(design)
    shrink = float(np.trace(residual_maker @ correlation)) / (n - parameters)
    return rho, max(1.0, math.sqrt(float(c @ correlation @ c) / float(c @ c) / shrink))
