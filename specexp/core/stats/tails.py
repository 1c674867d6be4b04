"""Percentiles of a latency series (TTFT, ITL, chunk gaps: p50, p90, p95, p99) with
distribution-free intervals from order statistics, on the effective number of values: a
request's values move together and values in one run are autocorrelated, so neither counts
as independent.

Look here for why a tail percentile is reported without an interval, or how many values it
needs for one.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np
from scipy import stats as scipy_stats

from specexp.core.stats.distributions import normal_ppf, t_isf

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
