"""Summaries of repeated measurements: mean, standard deviation, CV and a t interval."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Optional, Sequence

import numpy as np
from scipy import stats as scipy_stats


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


def summarize(values: Sequence[float], confidence: float = 0.95) -> Optional[Summary]:
    """Student-t interval of the mean; None without data. One value gives a zero-width CI
    only in the sense of 'unknown': its bounds are NaN."""
    data = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    if data.size == 0:
        return None
    mean = float(data.mean())
    std = float(data.std(ddof=1)) if data.size > 1 else 0.0
    if data.size > 1:
        half = float(scipy_stats.t.ppf(0.5 + confidence / 2, data.size - 1) * std / math.sqrt(data.size))
        low, high = mean - half, mean + half
    else:
        low = high = float("nan")
    return Summary(
        n=int(data.size), mean=mean, std=std, cv=std / mean if mean else float("nan"),
        ci_low=low, ci_high=high, median=float(np.median(data)),
        minimum=float(data.min()), maximum=float(data.max()), confidence=confidence,
    )


def percentiles(values: Sequence[float], qs: Sequence[int] = (50, 90, 99)) -> dict[str, float]:
    data = np.asarray(values, dtype=float)
    if data.size == 0:
        return {}
    return {f"p{q}": float(np.percentile(data, q)) for q in qs}
