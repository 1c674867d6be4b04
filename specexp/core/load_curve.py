"""Why the rate curve bends: its knee, where it over-saturates, and a model of latency under
load, from open-loop runs at several rates (a capacity search's, or a rate sweep's).

Each run is one :class:`CurvePoint`: the rate it offered, its requests' mean latency (from
their due times), the rate it completed them at, and whether it was over-saturated.

- The **knee** is the hinge of a two-segment line fitted to latency against rate (the hinge
  chosen by least squares over a fine grid between the rates measured); its interval is the
  bootstrap's (runs resampled, the hinge refitted; percentile interval). No knee is claimed
  when latency does not bend upwards there.
- A run is **over-saturated** when the server did not keep up with what it was offered: it
  completed requests at under ``OVERSATURATED_SHARE`` of the offered rate (the backlog
  drained after the last arrival), or its steady window failed Little's law with a backlog
  (specexp.core.steady). Over-saturation starts at the lowest such rate above which every
  run is over-saturated.
- The **latency model** L = C1 / (1 - lambda C2) (with B = lambda L by Little's law; Kong et
  al., arXiv 2605.15051): C1 the latency of a request alone, 1 / C2 the rate at which latency
  diverges. It is an M/M/1 queue's mean sojourn with C1 = C2 = the mean service time. Fitted
  by nonlinear least squares (scipy's curve_fit) to the runs that were not over-saturated,
  with t intervals from the fit's covariance; its lack of fit is tested against the nested
  model L = C1 / (1 - lambda C2)^p (extra sum of squares F test of p = 1) and reported.
  Weighted by the model's latency squared, refitted (see :func:`fit_latency_model`).
  Speculation lowers C1 and raises C2; the model predicts that capacity near saturation
  scales by C2 without over C2 with it.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np
from scipy import optimize
from scipy import stats as scipy_stats

from specexp.core.measurements import RunResult
from specexp.core.steady import SteadyVerdict, steady_state

# A run that completed requests at under this share of the rate it offered did not keep up.
OVERSATURATED_SHARE = 0.8
KNEE_GRID = 60
BOOTSTRAP = 400


@dataclass(frozen=True)
class CurvePoint:
    """One open-loop run: the rate it offered (requests/s), its requests' mean latency (s),
    the rate it completed them at (requests/s over its wall time), and whether its steady
    window showed a growing backlog."""

    rate: float
    latency_s: float
    completed_rps: float
    backlog: bool = False
    # Energy per output token over the run (J; None: not metered).
    energy_j_per_token: Optional[float] = None

    @property
    def oversaturated(self) -> bool:
        return self.backlog or self.completed_rps < OVERSATURATED_SHARE * self.rate


def curve_point(run: RunResult) -> Optional[CurvePoint]:
    """An open-loop run as a point of its rate curve (None: closed loop, fewer than two
    requests, or a run whose server died: its rate is measured again, and its latency and
    energy are a dying server's): its offered rate; its requests' mean latency from their due times (a failed
    one's until the run's end); the rate they finished at, between the first to finish and
    the last (a server that kept up finishes them as fast as they came); and whether its
    steady window showed a backlog."""
    timed = [(r.due_s, r) for r in run.records if r.due_s is not None]
    offered = run.offered_rate
    if offered is None or len(timed) < 2 or run.faults:
        return None
    latency = np.array(
        [r.e2e_s if r.ok and r.e2e_s is not None else run.wall_s - t for t, r in timed]
    )
    done = np.sort(np.array([t for t, _ in timed]) + latency)
    span = float(done[-1] - done[0])
    steady = steady_state(run)
    energy = run.telemetry.get("energy_j_per_token")  # host.energy's: Metric.energy_j_per_token
    return CurvePoint(
        offered,
        float(latency.mean()),
        (len(done) - 1) / span if span > 0 else offered,
        steady is not None and steady.verdict == SteadyVerdict.server_queueing,
        None if energy is None else float(energy),
    )


@dataclass(frozen=True)
class Knee:
    """The knee of latency against rate with its bootstrap interval (None: no knee in these
    runs, and why), the slopes either side (s per request/s), and the lowest rate from which
    every run was over-saturated (None: none was)."""

    rate: Optional[float]
    ci_low: Optional[float]
    ci_high: Optional[float]
    slope_below: Optional[float]
    slope_above: Optional[float]
    oversaturated_from: Optional[float]
    confidence: float
    reason: Optional[str] = None

    def describe(self) -> str:
        knee = (
            self.reason
            if self.rate is None
            else f"knee {self.rate:.3g} req/s [{self.ci_low:.3g}, {self.ci_high:.3g}]"
        )
        over = (
            f"over-saturated from {self.oversaturated_from:.3g} req/s"
            if self.oversaturated_from is not None
            else "not over-saturated at the rates measured"
        )
        return f"{knee}; {over}"


def oversaturated_from(points: Sequence[CurvePoint]) -> Optional[float]:
    """The lowest rate from which every run (at it and above) was over-saturated."""
    found = None
    for point in sorted(points, key=lambda p: p.rate, reverse=True):
        if not point.oversaturated:
            break
        found = point.rate
    return found


def _hinge_fits(
    rates: np.ndarray, latency: np.ndarray, weights: np.ndarray, hinges: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Weighted least squares of latency on [1, rate, max(0, rate - hinge)] for every set of
    weights (rows) and hinge: (sums of squares, coefficients), shaped (weights, hinges[, 3])."""
    design = np.stack(
        [
            np.ones((len(hinges), len(rates))),
            np.broadcast_to(rates, (len(hinges), len(rates))),
            np.maximum(0.0, rates[None, :] - hinges[:, None]),
        ],
        axis=-1,
    )  # (hinges, runs, 3)
    gram = np.einsum("wn,hni,hnj->whij", weights, design, design)
    moment = np.einsum("wn,hni,n->whi", weights, design, latency)
    gram += 1e-12 * np.eye(3)
    coefficients = np.linalg.solve(gram, moment[..., None])[..., 0]
    fitted = np.einsum("hni,whi->whn", design, coefficients)
    residuals = (latency[None, None, :] - fitted) ** 2
    return np.einsum("wn,whn->wh", weights, residuals), coefficients


def knee(
    points: Sequence[CurvePoint],
    confidence: float = 0.95,
    resamples: int = BOOTSTRAP,
    seed: int = 0,
) -> Knee:
    """The knee of the runs' latency against their offered rate, with its interval."""
    over = oversaturated_from(points)
    rates = np.array([p.rate for p in points], dtype=float)
    latency = np.array([p.latency_s for p in points], dtype=float)

    def without(reason: str) -> Knee:
        return Knee(None, None, None, None, None, over, confidence, reason)

    if len(np.unique(rates)) < 4:
        return without("fewer than four rates: no knee to fit")
    inner = np.sort(np.unique(rates))
    # Hinges strictly inside the rates, so that each segment has two rates at least.
    hinges = np.linspace(inner[1], inner[-2], KNEE_GRID)
    sse, coefficients = _hinge_fits(rates, latency, np.ones((1, len(rates))), hinges)
    best = int(np.argmin(sse[0]))
    _, below, bend = coefficients[0, best]
    if bend <= 0:
        return without("latency does not bend upwards at the rates measured: no knee")
    rng = np.random.default_rng(seed)
    counts = rng.multinomial(len(rates), np.full(len(rates), 1 / len(rates)), size=resamples)
    boot_sse, _ = _hinge_fits(rates, latency, counts.astype(float), hinges)
    boot = hinges[np.argmin(boot_sse, axis=1)]
    tail = (1 - confidence) / 2
    return Knee(
        float(hinges[best]),
        float(np.quantile(boot, tail)),
        float(np.quantile(boot, 1 - tail)),
        float(below),
        float(below + bend),
        over,
        confidence,
    )


@dataclass(frozen=True)
class LatencyModel:
    """L = C1 / (1 - lambda C2) fitted to one arm's runs: C1 (s) and C2 (s per request) with
    their intervals and standard errors, the runs fitted, the residual standard error over
    the mean latency, and the lack-of-fit test's p value (None: too few runs to test)."""

    c1: float
    c2: float
    c1_ci: tuple[float, float]
    c2_ci: tuple[float, float]
    c1_se: float
    c2_se: float
    runs: int
    relative_rmse: float
    lack_of_fit_p: Optional[float]
    confidence: float

    @property
    def saturation_rate(self) -> float:
        """1 / C2: the rate at which the model's latency diverges."""
        return 1 / self.c2

    def latency(self, rate: np.ndarray) -> np.ndarray:
        return self.c1 / (1 - rate * self.c2)

    def capacity_at(self, latency_s: float) -> Optional[float]:
        """The rate at which the model's mean latency reaches ``latency_s``."""
        return (1 - self.c1 / latency_s) / self.c2 if latency_s > self.c1 else None

    def describe(self) -> str:
        fit = (
            "lack of fit not tested (too few runs)"
            if self.lack_of_fit_p is None
            else f"lack of fit p={self.lack_of_fit_p:.2g}"
        )
        return (
            f"C1 {self.c1:.3g} s [{self.c1_ci[0]:.3g}, {self.c1_ci[1]:.3g}], "
            f"C2 {self.c2:.3g} s [{self.c2_ci[0]:.3g}, {self.c2_ci[1]:.3g}] (saturates at "
            f"{self.saturation_rate:.3g} req/s); residuals {self.relative_rmse:.1%} of the "
            f"mean over {self.runs} runs; {fit}"
        )


def no_latency_model(points: Sequence[CurvePoint]) -> str:
    """Why :func:`fit_latency_model` fitted no model to ``points``, said where C1 and C2
    would be."""
    kept = {p.rate for p in points if not p.oversaturated}
    if len(kept) < 3:
        return (
            f"not fitted: {len(kept)} rate(s) the server kept up with, of {len(points)}; "
            "the model needs three"
        )
    return "not fitted: the least-squares fit did not converge"


def _model(rate: np.ndarray, c1: float, c2: float) -> np.ndarray:
    return c1 / (1 - rate * c2)


def _extended(rate: np.ndarray, c1: float, c2: float, power: float) -> np.ndarray:
    return c1 / (1 - rate * c2) ** power


def fit_latency_model(
    points: Sequence[CurvePoint], confidence: float = 0.95, reweightings: int = 3
) -> Optional[LatencyModel]:
    """The model fitted to the runs that were not over-saturated; None with fewer than three
    rates among them or when the fit fails. Weighted: a run's mean latency varies as the
    square of the latency (a queue's waits spread and linger as it fills: the variance of
    a run's mean goes as 1 / (1 - rho)^4, its mean as 1 / (1 - rho)), so each run's weight
    is refitted from the model's latency at its rate; unweighted, the interval on C2
    covered 74% in M/M/1 runs, reweighted 95% (tests/statistics/test_load_curve.py)."""
    kept = [p for p in points if not p.oversaturated]
    rates = np.array([p.rate for p in kept], dtype=float)
    latency = np.array([p.latency_s for p in kept], dtype=float)
    if len(np.unique(rates)) < 3:
        return None
    # Start: the lowest rate's latency for C1, a divergence just past the highest rate.
    params = np.array([float(latency[np.argmin(rates)]), 0.5 / float(rates.max())])
    bounds = ([0.0, 0.0], [np.inf, 1 / float(rates.max())])
    sigma = np.ones_like(latency)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            for _ in range(reweightings + 1):
                params, covariance = optimize.curve_fit(
                    _model, rates, latency, p0=params, sigma=sigma, bounds=bounds, maxfev=20000
                )
                sigma = _model(rates, *params) ** 2
        except (RuntimeError, ValueError):
            return None
    if not np.all(np.isfinite(covariance)):
        return None
    c1, c2 = (float(v) for v in params)
    se = np.sqrt(np.diag(covariance))
    df = len(rates) - 2
    crit = float(scipy_stats.t.ppf(0.5 + confidence / 2, df)) if df > 0 else math.inf
    residual = latency - _model(rates, c1, c2)
    weighted = float(((residual / sigma) ** 2).sum())
    return LatencyModel(
        c1,
        c2,
        (c1 - crit * se[0], c1 + crit * se[0]),
        (c2 - crit * se[1], c2 + crit * se[1]),
        float(se[0]),
        float(se[1]),
        len(rates),
        math.sqrt(float(residual @ residual) / max(df, 1)) / float(latency.mean()),
        _lack_of_fit(rates, latency, (c1, c2), sigma, weighted),
        confidence,
    )


def _lack_of_fit(
    rates: np.ndarray,
    latency: np.ndarray,
    fitted: tuple[float, float],
    sigma: np.ndarray,
    sse: float,
) -> Optional[float]:
    """The F test of the model within L = C1 / (1 - lambda C2)^p (p = 1), on the fit's
    weights: small p values say latency bends otherwise than the model says."""
    df = len(rates) - 3
    if df < 1:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            params, _ = optimize.curve_fit(
                _extended,
                rates,
                latency,
                p0=(*fitted, 1.0),
                sigma=sigma,
                bounds=([0.0, 0.0, 0.0], [np.inf, 1 / float(rates.max()), 20.0]),
                maxfev=20000,
            )
        except (RuntimeError, ValueError):
            return None
    full = float((((latency - _extended(rates, *params)) / sigma) ** 2).sum())
    if full <= 0:
        return 0.0 if sse > 0 else 1.0
    statistic = max(0.0, (sse - full) / (full / df))
    return float(scipy_stats.f.sf(statistic, 1, df))


@dataclass(frozen=True)
class ModelRatio:
    """The capacity ratio the two arms' models predict (C2 of the baseline over the
    candidate's, with its interval from both fits' standard errors), beside the one the
    capacity searches measured, and the test of their agreement (z on the log ratios)."""

    predicted: float
    ci_low: float
    ci_high: float
    measured: Optional[float]
    z: Optional[float]
    p_value: Optional[float]


def model_ratio(
    baseline: LatencyModel,
    candidate: LatencyModel,
    measured: Optional[float] = None,
    measured_log_se: Optional[float] = None,
    confidence: float = 0.95,
) -> ModelRatio:
    """Predicted capacity ratio C2_base / C2_cand (delta method on its log), and its
    agreement with the ``measured`` ratio (its log's standard error ``measured_log_se``)."""
    log_ratio = math.log(baseline.c2 / candidate.c2)
    log_se = math.hypot(baseline.c2_se / baseline.c2, candidate.c2_se / candidate.c2)
    crit = float(scipy_stats.norm.ppf(0.5 + confidence / 2))
    z = p_value = None
    if measured is not None and measured_log_se is not None:
        z = (log_ratio - math.log(measured)) / math.hypot(log_se, measured_log_se)
        p_value = float(2 * scipy_stats.norm.sf(abs(z)))
    return ModelRatio(
        math.exp(log_ratio),
        math.exp(log_ratio - crit * log_se),
        math.exp(log_ratio + crit * log_se),
        measured,
        z,
        p_value,
    )
