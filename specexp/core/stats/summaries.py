"""One configuration's values: the summary (mean, std, CV and a Student-t interval, the
median and range, a few percentiles), the launch and run variance of a two-level design
(one-way random-effects ANOVA), and the warnings that its values cannot be trusted (high
CV, a trend left in the measured runs, an outlier, too few values).

Values passed in must be independent: per launch when a configuration had several server
launches, per measured run otherwise (requests inside one run are not independent).
Look here for what a job reports of its own values; comparisons of two are in
:mod:`specexp.core.stats.comparison`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Optional, Sequence

import numpy as np
from scipy import stats as scipy_stats

from specexp.core.notes import Note, NoteKind
from specexp.core.stats.distributions import t_ppf


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
