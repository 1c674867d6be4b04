"""What a comparison of two configurations says, and the arithmetic it is read off: the
verdicts (faster / slower / equivalent / inconclusive / cannot test) and what stands in
their place (confounded, not attributable, the baseline), Welch's t on log values, the
two-sided interval of a log ratio and the verdict read off it with a practical threshold,
and the robust (Yuen) estimate's record.

Look here for the vocabulary a comparison is reported in; the comparison itself is in
:mod:`specexp.core.stats.comparison`.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from specexp.core.stats.distributions import t_ppf


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
