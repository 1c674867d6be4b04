"""Capacity under service levels: the highest arrival rate at which SLO attainment stays at
or above a target, found by a search that spends few runs, with an interval.

The search (:func:`next_rate`) brackets the capacity by doubling or halving the rate from
its start, then bisects the bracket in log rate; once the bracket is narrow, runs go to the
fitted capacity inside it. It never leaves the bracket once it has one: a rate at or above
the lowest that failed, or at or below the highest that met the target beneath it, says
nothing the runs have not said.

The estimate (:func:`estimate`) fits the runs' attainment to a logistic curve in log rate
(a binomial GLM, quasi-binomial: requests of one run share its load, so their outcomes are
not independent, and the run-to-run excess is estimated from the fit's Pearson residuals)
and reads the rate at which the curve meets the target, kept inside the bracket. Where
attainment is not monotone in the rate (it rises again above a rate that failed: a latency
on the SLO's limit, met more often by the batches of a busier server) the curve is fitted
to the runs up to the rise only, and the estimate says so. The interval inverts the test of
"the curve meets the target here" (Fieller's interval, as for a dose-response curve's
ED50), so it is asymmetric where the runs are; an end the runs' slope does not bound is the
bracket's own end, the nearest run whose attainment is beyond the target by more than its
noise (:func:`decided_bracket`). Unbounded only where no run decides that side.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import numpy as np
from scipy import optimize
from scipy import stats as scipy_stats

from specexp.core.load_curve import curve_point
from specexp.core.measurements import RequestRecord, RunResult
from specexp.core.schemas.concurrency import CapacitySearchConfig
from specexp.core.schemas.slo import SloConfig
from specexp.core.slo import meets, run_goodput


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
    # The variance of the runs' logits beyond binomial (Williams': 0, none found).
    excess: float = 0.0
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


# The least excess assumed (a logit sd of 0.3): with a steep curve two or three runs land
# between 0 and 1, too few to estimate it, and runs of one server do differ (their load,
# the machine); assumed 0 there, 95% intervals from 320 arrivals a run covered 91%.
_EXCESS_FLOOR = 0.09


def _fit(points: Sequence[RatePoint]) -> Optional[tuple[np.ndarray, np.ndarray, float, int]]:
    """(coefficients, covariance, excess variance, residual df) of the logistic fit, or None.

    The runs' excess beyond binomial is Williams' (1982): each run's logit shifted by its
    own load, of variance ``excess``, so a run of n requests at attainment p varies by
    n p (1 - p) (1 + (n - 1) p (1 - p) excess) - most where p is near one half, not at all
    where it is 0 or 1. A single quasi-binomial factor spreads it over every run: with many
    requests and a steep curve, runs at 0 or 1 dilute it, and intervals from 320 arrivals a
    run covered 78%. ``excess`` makes the weighted Pearson statistic equal its df."""
    import statsmodels.api as sm  # noqa: PLC0415 (half a second at every CLI start; see DEFERRED)

    x = np.log([p.rate for p in points])
    successes = np.array([p.good for p in points], dtype=float)
    requests = np.array([p.requests for p in points], dtype=float)
    design = sm.add_constant(x, has_constant="add")
    response = np.column_stack([successes, requests - successes])

    def fitted_with(excess: float, share: np.ndarray) -> Any:
        weights = 1 / (1 + (requests - 1) * share * (1 - share) * excess)
        model = sm.GLM(response, design, family=sm.families.Binomial(), var_weights=weights)
        return model.fit()

    def pearson(excess: float, share: np.ndarray) -> float:
        spread = np.clip(share * (1 - share), 1e-12, None)
        weights = 1 / (1 + (requests - 1) * spread * excess)
        residuals = weights * (successes - requests * share) ** 2 / (requests * spread)
        return float(residuals[informative].sum())

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            first = fitted_with(_EXCESS_FLOOR, np.clip(successes / requests, 0.0, 1.0))
            share = np.asarray(first.fittedvalues, dtype=float)
            # Runs whose fitted attainment leaves less than one request expected either way
            # (n p (1 - p) < 1) say nothing of the excess: their Pearson residual is 0 but for
            # a rare outlier, and counted in the df they would hide it.
            informative = requests * share * (1 - share) >= 1
            df = int(informative.sum()) - 2
            excess = _EXCESS_FLOOR
            # Williams' moment equation, on the first fit's attainment: the weighted Pearson
            # statistic falls as the excess grows, to its df.
            if df > 0 and pearson(excess, share) > df:
                high = 1.0
                while pearson(high, share) > df and high < 1e4:
                    high *= 4
                if pearson(high, share) <= df:
                    excess = float(
                        optimize.brentq(lambda e: pearson(e, share) - df, excess, high, xtol=1e-5)
                    )
            fitted = fitted_with(excess, share)
        except (ValueError, np.linalg.LinAlgError, RuntimeError):
            return None
    params = np.asarray(fitted.params, dtype=float)
    covariance = np.asarray(fitted.cov_params(), dtype=float)
    if not (np.all(np.isfinite(params)) and np.all(np.isfinite(covariance))):
        return None
    return params, covariance, excess, df


@dataclass(frozen=True)
class Rise:
    """Where attainment rose with the rate: a run above the lowest failing rate whose
    attainment exceeds a lower rate's by more than both runs' noise."""

    below: RatePoint
    above: RatePoint

    def describe(self) -> str:
        return (
            f"attainment is not monotone in the rate: it rose from {self.below.attainment:.0%} "
            f"at {self.below.rate:.3g} req/s to {self.above.attainment:.0%} at "
            f"{self.above.rate:.3g} req/s; the capacity is the first crossing, read from the "
            f"runs below {self.above.rate:.3g} req/s"
        )


# A rise in attainment is claimed past this many standard errors of the difference, and this
# much attainment.
_RISE_Z = 3.0
_RISE_MARGIN = 0.1


def attainment_rise(
    points: Sequence[RatePoint], target: float, excess: float = _EXCESS_FLOOR
) -> Optional[Rise]:
    """The first rise of attainment with the rate at or above the lowest failing rate (None:
    monotone as far as the runs tell), beyond both runs' noise - binomial and the runs'
    ``excess`` (see :func:`_fit`). Below that rate every run met the target: how far above
    it they were does not move the capacity."""
    failing = bracket(points, target).failing
    if failing is None:
        return None
    above = sorted((p for p in points if p.rate >= failing and p.requests), key=lambda p: p.rate)

    def variance(point: RatePoint, share: float) -> float:
        spread = max(share * (1 - share), 1e-12)
        return spread / point.requests * (1 + (point.requests - 1) * spread * excess)

    for j, high in enumerate(above):
        for low in above[:j]:
            if low.rate == high.rate:
                continue
            pooled = (low.good + high.good) / (low.requests + high.requests)
            se = math.sqrt(variance(low, pooled) + variance(high, pooled))
            rise = high.attainment - low.attainment
            if rise > _RISE_MARGIN and rise > _RISE_Z * se:
                return Rise(low, high)
    return None


def _wilson(point: RatePoint, z: float, target: float, excess: float, upper: bool) -> float:
    """The Wilson score bound on a run's attainment, its requests discounted by the runs'
    ``excess`` beyond binomial as it is at the target (see :func:`_fit`)."""
    n = point.requests / (1 + (point.requests - 1) * target * (1 - target) * excess)
    p = point.attainment
    centre = (p + z**2 / (2 * n)) / (1 + z**2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z**2 / (4 * n**2)) / (1 + z**2 / n)
    return centre + half if upper else centre - half


def decided_bracket(
    points: Sequence[RatePoint], target: float, confidence: float, excess: float = 0.0
) -> Bracket:
    """The bracket of runs decided beyond their noise: the lowest rate whose attainment is
    below the target by more than its interval (one-sided, at ``confidence``), and the
    highest rate beneath it whose attainment is above it so. Where the runs' slope does not
    bound the capacity's interval, its ends are these."""
    z = float(scipy_stats.norm.ppf(0.5 + confidence / 2))
    decided = [p for p in points if p.requests]
    failed = [p.rate for p in decided if _wilson(p, z, target, excess, upper=True) < target]
    lowest_fail = min(failed) if failed else None
    met = [
        p.rate
        for p in decided
        if _wilson(p, z, target, excess, upper=False) >= target
        and (lowest_fail is None or p.rate < lowest_fail)
    ]
    return Bracket(max(met) if met else None, lowest_fail)


def estimate(points: Sequence[RatePoint], target: float, confidence: float = 0.95) -> Capacity:
    """The capacity at ``target`` attainment from the search's runs: the fitted curve's
    crossing, kept inside the bracket (never below a rate that met the target beneath the
    lowest that failed, never above that one); read off the bracket (its log midpoint)
    where no curve can be fitted."""
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
    said = []
    rise = attainment_rise(points, target)
    if rise is not None:
        said.append(rise.describe())
    curve = [p for p in points if rise is None or p.rate < rise.above.rate]
    fitted = _crossing(curve, target, confidence)
    excess = fitted.excess if fitted else 0.0
    edges = decided_bracket(curve, target, confidence, excess)
    if fitted is None:
        said.append("no curve fitted to these runs: the capacity is the bracket's log midpoint")
        rate = math.sqrt(found.passing * found.failing)
        low, high, log_se = None, None, None
    else:
        rate, low, high, log_se = fitted.rate, fitted.low, fitted.high, fitted.log_se
    rate = min(max(rate, found.passing), found.failing)
    if low is None or high is None:
        # An end Fieller leaves open: the nearest run decided beyond its noise, else the
        # fit's Wald end on the log rate (bounded, symmetric where Fieller is not).
        wald = (
            (
                fitted.rate * math.exp(-fitted.crit * fitted.log_se),
                fitted.rate * math.exp(fitted.crit * fitted.log_se),
            )
            if fitted is not None
            else (None, None)
        )
        low = low if low is not None else edges.passing or wald[0]
        high = high if high is not None else edges.failing or wald[1]
        said.append(
            "the runs do not bound the slope: the interval's open end is the nearest run "
            "decided beyond its noise, or the fit's Wald end"
            if low is not None and high is not None
            else "the runs do not bound the slope: interval unbounded"
        )
    ci_low = None if low is None else min(low, rate)
    ci_high = None if high is None else max(high, rate)
    if log_se is None and ci_low is not None and ci_high is not None:
        log_se = math.log(ci_high / ci_low) / (
            2 * float(scipy_stats.norm.ppf(0.5 + confidence / 2))
        )
    return Capacity(
        target,
        confidence,
        points,
        found,
        rate=rate,
        ci_low=ci_low,
        ci_high=ci_high,
        log_se=log_se,
        excess=excess,
        reason="; ".join(said) or None,
    )


@dataclass(frozen=True)
class _Crossing:
    """Where the fitted curve meets the target, Fieller's interval (None: unbounded that
    way), the standard error of its log and the runs' excess beyond binomial."""

    rate: float
    low: Optional[float]
    high: Optional[float]
    log_se: float
    excess: float
    # The critical value its interval was read at.
    crit: float


def _crossing(points: Sequence[RatePoint], target: float, confidence: float) -> Optional[_Crossing]:
    """The logistic curve's crossing of ``target``; None with fewer than three rates, a fit
    that failed, attainment that does not fall with the rate, or a crossing beyond reach."""
    if len({p.rate for p in points}) < 3:
        return None
    fit = _fit(points)
    if fit is None:
        return None
    (a, b), cov, excess, df = fit
    if b >= 0:
        return None
    level = _logit(target)
    x_hat = (level - a) / b
    rates = [p.rate for p in points]
    rate = _within_reach(x_hat, rates)
    if rate is None:
        return None
    # Critical value: t on the informative runs' df where the excess was estimated.
    crit = float(
        scipy_stats.t.ppf(0.5 + confidence / 2, df)
        if excess > _EXCESS_FLOOR and df > 0
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
    return _Crossing(rate, low, high, log_se, excess, crit)


def within_completed(capacity: Capacity, completed_rps: Optional[float]) -> Capacity:
    """The capacity no higher than the highest rate at which any run completed requests
    (``completed_rps``): the fit reads it between the last rate that met the target and the
    first that did not, and may place it above every rate the server was seen to complete -
    a rate nothing measured shows it can sustain. Capped there, and said why."""
    if completed_rps is not None and capacity.bracket.passing is not None:
        # A rate that met the target was completed, whatever its runs' span said.
        completed_rps = max(completed_rps, capacity.bracket.passing)
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


def capacity_ratio(
    baseline: Capacity, candidate: Capacity, confidence: float
) -> Optional[CapacityRatio]:
    """The candidate's capacity over the baseline's, from the two capacities as reported
    (capped, kept in their brackets) and their intervals, so that the ratio printed is the
    ratio of the capacities printed: the interval of the log ratio is MOVER's (Zou & Donner
    2008: each end from the two intervals' ends, asymmetric as they are), each interval's
    half-widths scaled from its own level to ``confidence`` (a sweep's simultaneous level).
    None when either arm has no capacity; unbounded where an arm's interval is."""
    if baseline.rate is None or candidate.rate is None:
        return None

    def scaled(rate: float, capacity: Capacity) -> tuple[float, Optional[float], Optional[float]]:
        scale = float(
            scipy_stats.norm.ppf(0.5 + confidence / 2)
            / scipy_stats.norm.ppf(0.5 + capacity.confidence / 2)
        )
        centre = math.log(rate)
        low, high = capacity.ci_low, capacity.ci_high
        return (
            centre,
            None if low is None else centre - math.log(rate / low) * scale,
            None if high is None else centre + math.log(high / rate) * scale,
        )

    base, base_low, base_high = scaled(baseline.rate, baseline)
    cand, cand_low, cand_high = scaled(candidate.rate, candidate)
    d = cand - base
    low = (
        None
        if cand_low is None or base_high is None
        else d - math.hypot(cand - cand_low, base_high - base)
    )
    high = (
        None
        if cand_high is None or base_low is None
        else d + math.hypot(cand_high - cand, base - base_low)
    )
    return CapacityRatio(
        math.exp(d),
        None if low is None else math.exp(low),
        None if high is None else math.exp(high),
    )


def next_rate(points: Sequence[RatePoint], search: CapacitySearchConfig, target: float) -> float:
    """The rate the search measures next, from the runs so far: doubling from the highest
    rate until one fails, halving from the lowest failing one until one meets the target
    beneath it; then its log midpoint while it is wider than ``search.precision``; then
    either side of the fitted capacity in turn, where the slope the interval needs is
    measured: a step below it, and above it halfway to the lowest failing rate - never at or
    above that rate, which would repeat what it said."""
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
    fitted = min(max(estimate(points, target).rate or low, low), high)
    narrow = sum(1 for p in points if low / 2 <= p.rate <= 2 * high)
    if narrow % 2:
        return math.sqrt(fitted * high)
    return max(search.min_rate, fitted / (1 + 2 * search.precision))


@dataclass(frozen=True)
class RateDecision:
    """Whether one run's attainment is decided against the target, so that its client can
    stop sending arrivals (the run's cap is ``concurrency.arrivals``): Wald's sequential
    probability ratio test of the share met, missing at half the allowed share (met) against
    twice it (failed), each error at most ``error``. Read on the run's first arrivals whose
    outcomes are all known, in the order they arrived - the first to finish are the fast
    ones, and would say "met" too soon. "Met" is not decided before ``least_met`` arrivals:
    an overloaded server serves its first requests from empty slots, and only a queue shows
    what the rate does (a run shorter than that measured a transient's capacity)."""

    target: float
    least_met: int
    error: float = 0.05

    def verdict(self, outcomes: Sequence[bool]) -> Optional[bool]:
        """True (met), False (failed) or None (not yet) after ``outcomes`` in order."""
        allowed = 1 - self.target
        met, failed = 1 - allowed / 2, 1 - min(1.0, 2 * allowed)
        if failed <= 0:
            failed = 1e-9
        bound = math.log((1 - self.error) / self.error)
        good = sum(outcomes)
        ratio = good * math.log(met / failed) + (len(outcomes) - good) * math.log(
            (1 - met) / (1 - failed)
        )
        if ratio <= -bound:
            return False
        if ratio >= bound and len(outcomes) >= self.least_met:
            return True
        return None

    def decided(self, records: Sequence[RequestRecord], slo: SloConfig) -> bool:
        """Whether the run whose arrivals so far are ``records`` (in the order sent) is decided."""
        known = []
        for record in records:
            if record.e2e_s is None:  # still running: the prefix of known outcomes ends here
                break
            known.append(meets(record, slo))
        return self.verdict(known) is not None


def rate_points(runs: Sequence[RunResult], slo: SloConfig) -> list[RatePoint]:
    """The search's points: each measured open-loop run's offered rate (what the client
    sent at, not what was asked) and SLO outcome. A run whose server did not keep up
    (:attr:`CurvePoint.oversaturated`) counts none of its requests as good: the latencies it
    saw were a backlog's first minutes, which grow without end at that rate, so a capacity
    read from them would be one the server cannot sustain. A run whose server died (failed
    requests: in a search nothing else ends a run) counts, as a failed rate, only once a
    second run at its rate died too: the first death is measured again on a new server."""
    died = [r.asked_rate for r in runs if r.faults and not r.warmup]
    points = []
    for run in runs:
        if run.faults and died.count(run.asked_rate) < 2:
            continue
        goodput = run_goodput(run, slo)
        offered = run.offered_rate
        if not run.warmup and offered is not None and goodput and goodput.requests:
            curve = curve_point(run)
            kept_up = curve is None or not curve.oversaturated
            points.append(RatePoint(offered, goodput.requests, goodput.good if kept_up else 0))
    return points
