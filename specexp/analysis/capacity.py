"""Capacity under the SLO compared between arms: each arm's capacity (a capacity search's
job) with its interval, and each candidate's capacity over its baseline's with the interval
of that ratio - "speculation raises capacity from X to Y requests/s". Pure: read from the
arms' job runs, which carry what the search estimated (``Metric.capacity_*``)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from typing import Optional, Sequence

from specexp.analysis.arms import Arm
from specexp.analysis.results import Metric, capacity_points, rate_curve
from specexp.core.capacity import (
    Capacity,
    RatePoint,
    bracket,
    capacity_ratio,
    estimate,
    interval_text,
    within_completed,
)
from specexp.core.load_curve import (
    CurvePoint,
    Knee,
    LatencyModel,
    ModelRatio,
    fit_latency_model,
    knee,
    model_ratio,
    no_latency_model,
)
from specexp.core.records import History, Record, Version


class CapacityVerdict(StrEnum):
    raises = "raises capacity"
    lowers = "lowers capacity"
    inconclusive = "inconclusive"
    not_estimated = "not estimated"


@dataclass(frozen=True)
class ArmCapacity:
    label: str
    run_id: str
    rate: Optional[float]
    ci_low: Optional[float]
    ci_high: Optional[float]
    log_se: Optional[float]
    # The search's runs: (rate, requests, requests meeting the SLO).
    points: tuple[tuple[float, int, int], ...] = ()
    target: Optional[float] = None
    # The search's runs as points of the rate curve (specexp.core.load_curve), its knee and
    # its latency model (None: no curve, or none fitted).
    curve: tuple[CurvePoint, ...] = ()
    knee: Optional[Knee] = None
    latency_model: Optional[LatencyModel] = None
    # Why there is no latency model (None: there is one).
    no_model: Optional[str] = None
    # What the capacity's estimate says of itself (not monotone, capped, an open end).
    caveat: Optional[str] = None

    @classmethod
    def of(cls, arm: Arm) -> ArmCapacity:
        metrics = arm.run.metrics
        curve = rate_curve(arm.run.tags)
        model = fit_latency_model(curve)
        points = capacity_points(arm.run.tags)
        target = metrics.get(Metric.capacity_target)
        # The job's estimate again, for what it said of itself (its figures are the metrics).
        said = (
            within_completed(
                estimate(points, target), max((p.completed_rps for p in curve), default=None)
            ).reason
            if points and target is not None
            else None
        )
        return cls(
            arm.label,
            arm.run_id,
            metrics.get(Metric.capacity_rps),
            metrics.get(Metric.capacity_ci_low_rps),
            metrics.get(Metric.capacity_ci_high_rps),
            metrics.get(Metric.capacity_log_se),
            tuple((p.rate, p.requests, p.good) for p in points),
            target,
            curve,
            knee(curve) if curve else None,
            model,
            None if model else no_latency_model(curve),
            said,
        )

    def rate_points(self) -> list[RatePoint]:
        return [RatePoint(rate, requests, good) for rate, requests, good in self.points]

    def capacity(self, confidence: float) -> Capacity:
        """The capacity as its job reported it (its interval at ``confidence``)."""
        points = self.rate_points()
        return Capacity(
            self.target or 0.0,
            confidence,
            tuple(points),
            bracket(points, self.target or 0.0),
            self.rate,
            self.ci_low,
            self.ci_high,
            self.log_se,
        )

    def describe(self) -> str:
        if self.rate is None:
            return f"not estimated: {self.caveat}" if self.caveat else "not estimated"
        said = f" ({self.caveat})" if self.caveat else ""
        return f"{self.rate:.3g} {interval_text(self.ci_low, self.ci_high)}{said}"


@dataclass(frozen=True)
class CapacityComparison(Record):
    """A candidate's capacity against its baseline's: the ratio and its interval (None where
    unbounded), from both searches' runs on independent servers."""

    HISTORY = History(
        "capacity comparison",
        (
            Version(
                1,
                "the capacity ratio and its interval; the latency models' ratio (model) and "
                "each arm's curve, knee, latency_model, no_model and caveat came later within "
                "format 1",
                ("model",),
            ),
        ),
    )

    baseline: ArmCapacity
    candidate: ArmCapacity
    confidence: float
    ratio: Optional[float]
    ci_low: Optional[float]
    ci_high: Optional[float]
    verdict: CapacityVerdict
    # The capacity ratio both arms' latency models predict, checked against this one.
    model: Optional[ModelRatio] = None


def has_capacity(arm: Arm) -> bool:
    """A capacity search's arm (estimated or not: its runs are the search's)."""
    return bool(capacity_points(arm.run.tags))


def compare_capacity(
    pairs: Sequence[tuple[Arm, Arm]], confidence: float
) -> list[CapacityComparison]:
    """Each (baseline, candidate) pair of capacity-search arms compared from the capacities
    their jobs reported (:func:`specexp.core.capacity.capacity_ratio`: the ratio printed is
    the ratio of the capacities printed); the pairs share one simultaneous level
    (Bonferroni), as the sweep's other comparisons do."""
    level = 1 - (1 - confidence) / max(1, len(pairs))
    compared = []
    for base_arm, arm in pairs:
        base, candidate = ArmCapacity.of(base_arm), ArmCapacity.of(arm)
        found = (
            capacity_ratio(base.capacity(confidence), candidate.capacity(confidence), level)
            if base.target is not None and base.target == candidate.target
            else None
        )
        if found is None:
            compared.append(
                CapacityComparison(
                    base, candidate, confidence, None, None, None, CapacityVerdict.not_estimated
                )
            )
            continue
        verdict = (
            CapacityVerdict.raises
            if found.ci_low is not None and found.ci_low > 1
            else CapacityVerdict.lowers
            if found.ci_high is not None and found.ci_high < 1
            else CapacityVerdict.inconclusive
        )
        compared.append(
            CapacityComparison(
                base,
                candidate,
                confidence,
                found.ratio,
                found.ci_low,
                found.ci_high,
                verdict,
                predicted_ratio(base, candidate, found.ratio, level),
            )
        )
    return compared


def predicted_ratio(
    base: ArmCapacity, candidate: ArmCapacity, measured: float, confidence: float
) -> Optional[ModelRatio]:
    """What the arms' latency models predict of the capacity ratio (C2 over C2), checked
    against the ``measured`` one; None where either model could not be fitted."""
    if base.latency_model is None or candidate.latency_model is None:
        return None
    log_se = (
        math.hypot(base.log_se, candidate.log_se)
        if base.log_se is not None and candidate.log_se is not None
        else None
    )
    return model_ratio(base.latency_model, candidate.latency_model, measured, log_se, confidence)
