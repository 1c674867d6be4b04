"""Timelines: when both arms were measured on one timeline (one shared server, or launches
alternating in time), a common linear trend in time fitted with them (ANCOVA on logs), a
single step on the timeline found by permutation and fitted as a level before and after,
and the widening of a standard error for residuals autocorrelated in time (AR(1)).

Look here for the figures behind "time drift", "a step in" and "autocorrelated" notes;
:mod:`specexp.core.stats.comparison` judges a comparison with them, and
:mod:`specexp.analysis.timeline` fits them to two runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np


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
