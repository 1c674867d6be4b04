"""Capacity under service levels: the highest arrival rate at which SLO attainment stays at
or above a target, found by a search that spends few runs, with an interval.

The search (:func:`next_rate`) brackets the capacity by doubling or halving the rate from
its start, then bisects the bracket in log rate; once the bracket is narrow, runs go to the
fitted capacity, where they say most about it. The estimate (:func:`estimate`) fits every
run's attainment to a logistic curve in log rate (a binomial GLM, quasi-binomial: requests
of one run share its load, so their outcomes are not independent, and the run-to-run excess
is estimated from the fit's Pearson residuals) and reads the rate at which the curve meets
the target. Its interval inverts the test of "the curve meets the target here" (Fieller's
interval, as for a dose-response curve's ED50), so it is asymmetric where the data are, and
unbounded - said so, not clipped - when the runs do not pin the slope down.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import numpy as np
from scipy import stats as scipy_stats

from specexp.core.load_curve import curve_point
from specexp.core.measurements import RunResult
from specexp.core.schemas import CapacitySearchConfig, SloConfig
from specexp.core.slo import run_goodput


@dataclass(frozen=True)
class RatePoint:
    """One measured run of the search: its asked rate, its requests, those that met the SLO."""

    rate: float
    requests: int
    good: int

    @property
    def attainment(self) -> float:
        return self.good / self.requests if self.requests else 0.0


@dataclass(frozen=True)
class Bracket:
    """The highest rate that met the target below the lowest that did not (None: not found)."""

    passing: Optional[float]
    failing: Optional[float]


def bracket(points: Sequence[RatePoint], target: float) -> Bracket:
    failing = [p.rate for p in points if p.attainment < target]
    lowest_fail = min(failing) if failing else None
    below = [
        p.rate
        for p in points
        if p.attainment >= target and (lowest_fail is None or p.rate < lowest_fail)
    ]
    return Bracket(max(below) if below else None, lowest_fail)


@dataclass(frozen=True)
class Capacity:
    """The capacity estimate: the rate (requests/s) where the fitted attainment meets
    ``target``, its interval at ``confidence`` (None where unbounded), the standard error of
    its log (for comparing arms), the search's bracket, and why there is no estimate."""

    target: float
    confidence: float
    points: tuple[RatePoint, ...]
    bracket: Bracket
    rate: Optional[float] = None
    ci_low: Optional[float] = None
    ci_high: Optional[float] = None
    log_se: Optional[float] = None
    # The runs' dispersion beyond binomial (1: none found).
    dispersion: float = 1.0
    reason: Optional[str] = None

    def describe(self) -> str:
        if self.rate is None:
            return self.reason or "no estimate"
        return f"{self.rate:.3g} req/s {interval_text(self.ci_low, self.ci_high)}"


def _three_digits(value: float) -> str:
    return f"{value:.3g}"


def interval_text(
    low: Optional[float], high: Optional[float], fmt: Callable[[float], str] = _three_digits
) -> str:
    """An interval as every report prints it, an end it lacks (None) as "unbounded"."""
    return (
        f"[{'unbounded' if low is None else fmt(low)}, "
        f"{'unbounded' if high is None else fmt(high)}]"
    )


def _logit(p: float) -> float:
    return math.log(p / (1 - p))


# How far beyond the measured rates (in log rate: a factor e^6, about 400) a fitted capacity
# or an interval's end is still read off the curve; beyond, a curve this flat says nothing
# of where it meets the target (and exp would overflow for flat enough ones).
_LOG_REACH = 6.0


def _within_reach(x: float, rates: Sequence[float]) -> Optional[float]:
    """exp(x) when the log rate ``x`` lies within reach of the measured rates, else None."""
    logs = np.log(rates)
    if not logs.min() - _LOG_REACH <= x <= logs.max() + _LOG_REACH:
        return None
    return math.exp(x)


def _fit(points: Sequence[RatePoint]) -> Optional[tuple[np.ndarray, np.ndarray, float, int]]:
    """(coefficients, covariance, dispersion, residual df) of the logistic fit, or None."""
    import statsmodels.api as sm  # noqa: PLC0415 (half a second at every CLI start; see DEFERRED)

    x = np.log([p.rate for p in points])
    successes = np.array([p.good for p in points], dtype=float)
    failures = np.array([p.requests - p.good for p in points], dtype=float)
    design = sm.add_constant(x, has_constant="add")
    model = sm.GLM(np.column_stack([successes, failures]), design, family=sm.families.Binomial())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            fitted = model.fit()
        except (ValueError, np.linalg.LinAlgError):
            return None
    df = len(points) - 2
    dispersion = max(1.0, float(fitted.pearson_chi2) / df) if df > 0 else 1.0
    params = np.asarray(fitted.params, dtype=float)
    covariance = np.asarray(fitted.cov_params(), dtype=float) * dispersion
    if not (np.all(np.isfinite(params)) and np.all(np.isfinite(covariance))):
        return None
    return params, covariance, dispersion, df


def estimate(points: Sequence[RatePoint], target: float, confidence: float = 0.95) -> Capacity:
    """The capacity at ``target`` attainment from the search's runs."""
    points = tuple(points)
    found = bracket(points, target)

    def without(reason: str) -> Capacity:
        return Capacity(target, confidence, points, found, reason=reason)

    if found.failing is None:
        top = max((p.rate for p in points), default=0.0)
        return without(f"every rate met the target, up to {top:.3g} req/s: capacity is higher")
    if found.passing is None:
        return without(
            f"no rate met the target, down to {found.failing:.3g} req/s: capacity is lower"
        )
    if len({p.rate for p in points}) < 3:
        return without("fewer than three rates measured: no curve to read the capacity from")
    fit = _fit(points)
    if fit is None:
        return without("the logistic fit did not converge")
    (a, b), cov, dispersion, df = fit
    if b >= 0:
        return without("attainment does not fall with the rate in these runs")
    level = _logit(target)
    x_hat = (level - a) / b
    rates = [p.rate for p in points]
    rate = _within_reach(x_hat, rates)
    if rate is None:
        return without(
            "attainment is too flat near the target to place the capacity: the fitted curve "
            "meets it far beyond the measured rates"
        )
    # Critical value: t on the residual df when the dispersion is estimated above binomial.
    crit = float(
        scipy_stats.t.ppf(0.5 + confidence / 2, df)
        if dispersion > 1.0 and df > 0
        else scipy_stats.norm.ppf(0.5 + confidence / 2)
    )
    v_aa, v_ab, v_bb = cov[0, 0], cov[0, 1], cov[1, 1]
    log_se = math.sqrt(max(0.0, float(v_aa + 2 * x_hat * v_ab + x_hat**2 * v_bb))) / abs(float(b))
    # Fieller: the x at which (a + b x - level)^2 <= crit^2 Var(a + b x).
    quad = b**2 - crit**2 * v_bb
    lin = 2 * ((a - level) * b - crit**2 * v_ab)
    const = (a - level) ** 2 - crit**2 * v_aa
    low = high = None
    discriminant = lin**2 - 4 * quad * const
    if quad > 0 and discriminant >= 0:
        root = math.sqrt(discriminant)
        low = _within_reach((-lin - root) / (2 * quad), rates)
        high = _within_reach((-lin + root) / (2 * quad), rates)
    return Capacity(
        target,
        confidence,
        points,
        found,
        rate=rate,
        ci_low=low,
        ci_high=high,
        log_se=log_se,
        dispersion=dispersion,
        reason=None
        if low is not None and high is not None
        else "the runs do not bound the slope: interval unbounded",
    )


def within_completed(capacity: Capacity, completed_rps: Optional[float]) -> Capacity:
    """The capacity no higher than the highest rate at which any run completed requests
    (``completed_rps``): the fit reads it between the last rate that met the target and the
    first that did not, and may place it above every rate the server was seen to complete -
    a rate nothing measured shows it can sustain. Capped there, and said why."""
    if capacity.rate is None or completed_rps is None or capacity.rate <= completed_rps:
        return capacity
    said = (
        f"the fit placed the capacity at {capacity.rate:.3g} req/s, above the highest rate any "
        f"run completed ({completed_rps:.3g} req/s): capped there"
    )
    return dataclasses.replace(
        capacity,
        rate=completed_rps,
        ci_low=None if capacity.ci_low is None else min(capacity.ci_low, completed_rps),
        ci_high=None if capacity.ci_high is None else min(capacity.ci_high, completed_rps),
        reason=f"{capacity.reason}; {said}" if capacity.reason else said,
    )


@dataclass(frozen=True)
class CapacityRatio:
    """One arm's capacity over another's, with its interval (None: unbounded that way)."""

    ratio: float
    ci_low: Optional[float]
    ci_high: Optional[float]


# Log capacity ratios scanned for the interval: e^+-6 is beyond any search's range.
_LOG_RATIOS = np.linspace(-6.0, 6.0, 4801)
_ROWS_AT_ONCE = 64


def capacity_ratio(
    baseline: Sequence[RatePoint],
    candidate: Sequence[RatePoint],
    target: float,
    confidence: float,
) -> Optional[CapacityRatio]:
    """The candidate's capacity over the baseline's, from both searches' runs (independent
    servers), with the interval that inverts the test of "the log capacities differ by d":
    d is kept where some log rate x makes x the baseline's capacity and x + d the
    candidate's, each by its own Fieller statistic, their sum within the critical value.
    Wald's interval on the log ratio (each capacity's delta-method standard error) is not
    used: where a search pins its slope loosely its Fieller interval is far from symmetric,
    and in seeded searches Wald called an A/A pair different in 6-8% of them at 95%.
    None when either arm has no fitted capacity (or one too flat to place it)."""
    fits = []
    for points in (baseline, candidate):
        fit = _fit(points)
        if fit is None or fit[0][1] >= 0:
            return None
        fits.append(fit)
    level = _logit(target)
    stats = [(float(a), float(b), cov[0, 0], cov[0, 1], cov[1, 1]) for (a, b), cov, _, _ in fits]

    def fieller(x: np.ndarray, arm: tuple[float, float, float, float, float]) -> np.ndarray:
        a, b, v_aa, v_ab, v_bb = arm
        return (a + b * x - level) ** 2 / (v_aa + 2 * x * v_ab + x**2 * v_bb)

    centres = [(level - a) / b for a, b, *_ in stats]
    for centre, arm in zip(centres, (baseline, candidate), strict=True):
        if _within_reach(centre, [p.rate for p in arm]) is None:
            return None
    estimate_d = centres[1] - centres[0]
    dispersed = [df for _, _, dispersion, df in fits if dispersion > 1.0 and df > 0]
    crit = float(
        scipy_stats.t.ppf(0.5 + confidence / 2, min(dispersed))
        if dispersed
        else scipy_stats.norm.ppf(0.5 + confidence / 2)
    )
    # For each d (a row), the smallest sum over x: x between the baseline's centre and the
    # candidate's shifted back by d, where each statistic is 0, sampled finely (the columns).
    # A block of rows at a time, small enough to stay in the CPU's cache: 5 times faster
    # than a row at a time, 3 times than all rows at once.
    share = np.linspace(-0.5, 1.5, 401)
    edge = estimate_d + _LOG_RATIOS
    smallest = np.empty_like(edge)
    for start in range(0, len(edge), _ROWS_AT_ONCE):
        d = edge[start : start + _ROWS_AT_ONCE, np.newaxis]
        x = centres[0] + share * (centres[1] - d - centres[0])
        total = fieller(x, stats[0]) + fieller(x + d, stats[1])
        smallest[start : start + _ROWS_AT_ONCE] = total.min(axis=1)
    accepted = edge[smallest <= crit**2]
    low, high = float(accepted.min()), float(accepted.max())
    return CapacityRatio(
        math.exp(estimate_d),
        None if low <= edge[0] else math.exp(low),
        None if high >= edge[-1] else math.exp(high),
    )


def next_rate(points: Sequence[RatePoint], search: CapacitySearchConfig, target: float) -> float:
    """The rate the search measures next, from the runs so far."""
    if not points:
        return search.start_rate
    found = bracket(points, target)
    if found.failing is None:
        return min(search.max_rate, 2 * max(p.rate for p in points))
    if found.passing is None:
        return max(search.min_rate, found.failing / 2)
    low, high = found.passing, found.failing
    if high / low - 1 > search.precision:
        return math.sqrt(low * high)
    fit = estimate(points, target)
    fitted = fit.rate
    if fitted is None or not low / 2 <= fitted <= 2 * high:
        return math.sqrt(low * high)
    if fit.ci_low is None or fit.ci_high is None:
        # The slope is not pinned down (attainment flips about the target near it): a rate
        # well above, where attainment must fall, measures it.
        return min(search.max_rate, 2 * fitted)
    # Either side of the fitted capacity in turn: the slope, which the interval needs, is
    # measured only by rates apart.
    narrow = sum(1 for p in points if low / 2 <= p.rate <= 2 * high)
    step = (1 + 2 * search.precision) ** (1 if narrow % 2 else -1)
    return min(search.max_rate, max(search.min_rate, fitted * step))


def rate_points(runs: Sequence[RunResult], slo: SloConfig) -> list[RatePoint]:
    """The search's points: each measured open-loop run's offered rate (what the client
    sent at, not what was asked) and SLO outcome. A run whose server did not keep up
    (:attr:`CurvePoint.oversaturated`) counts none of its requests as good: the latencies it
    saw were a backlog's first minutes, which grow without end at that rate, so a capacity
    read from them would be one the server cannot sustain."""
    points = []
    for run in runs:
        goodput = run_goodput(run, slo)
        offered = run.offered_rate
        if not run.warmup and offered is not None and goodput and goodput.requests:
            curve = curve_point(run)
            kept_up = curve is None or not curve.oversaturated
            points.append(RatePoint(offered, goodput.requests, goodput.good if kept_up else 0))
    return points
