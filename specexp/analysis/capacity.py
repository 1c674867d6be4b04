"""Capacity under the SLO compared between arms: each arm's capacity (a capacity search's
job) with its interval, and each candidate's capacity over its baseline's with the interval
of that ratio - "speculation raises capacity from X to Y requests/s". Pure: read from the
arms' job runs, which carry what the search estimated (``Metric.capacity_*``)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any, Mapping, Optional, Sequence

from scipy import stats as scipy_stats

from specexp.analysis.arms import Arm
from specexp.analysis.results import Metric, capacity_points
from specexp.core.records import check_format

CAPACITY_FORMAT = 1


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

    @classmethod
    def of(cls, arm: Arm) -> ArmCapacity:
        metrics = arm.run.metrics
        return cls(
            arm.label,
            arm.run_id,
            metrics.get(Metric.capacity_rps),
            metrics.get(Metric.capacity_ci_low_rps),
            metrics.get(Metric.capacity_ci_high_rps),
            metrics.get(Metric.capacity_log_se),
            tuple((p.rate, p.requests, p.good) for p in capacity_points(arm.run.tags)),
            metrics.get(Metric.capacity_target),
        )

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ArmCapacity:
        return cls(**{**data, "points": tuple(tuple(p) for p in data.get("points", ()))})

    def describe(self) -> str:
        if self.rate is None:
            return "not estimated"
        low = "-" if self.ci_low is None else f"{self.ci_low:.3g}"
        high = "unbounded" if self.ci_high is None else f"{self.ci_high:.3g}"
        return f"{self.rate:.3g} [{low}, {high}]"


@dataclass(frozen=True)
class CapacityComparison:
    """A candidate's capacity against its baseline's: the ratio and its interval (on the log
    scale, from each search's standard error; independent servers, so the variances add)."""

    baseline: ArmCapacity
    candidate: ArmCapacity
    confidence: float
    ratio: Optional[float]
    ci_low: Optional[float]
    ci_high: Optional[float]
    verdict: CapacityVerdict

    def to_json(self) -> dict[str, Any]:
        return {"format_version": CAPACITY_FORMAT, **asdict(self)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CapacityComparison:
        check_format("capacity comparison", data, CAPACITY_FORMAT)
        return cls(
            ArmCapacity.from_json(data["baseline"]),
            ArmCapacity.from_json(data["candidate"]),
            data["confidence"],
            data["ratio"],
            data["ci_low"],
            data["ci_high"],
            CapacityVerdict(data["verdict"]),
        )


def has_capacity(arm: Arm) -> bool:
    """A capacity search's arm (estimated or not: its runs are the search's)."""
    return bool(capacity_points(arm.run.tags))


def compare_capacity(
    pairs: Sequence[tuple[Arm, Arm]], confidence: float
) -> list[CapacityComparison]:
    """Each (baseline, candidate) pair of capacity-search arms compared; the pairs share one
    simultaneous level (Bonferroni), as the sweep's other comparisons do."""
    level = 1 - (1 - confidence) / max(1, len(pairs))
    z = float(scipy_stats.norm.ppf(0.5 + level / 2))
    compared = []
    for base_arm, arm in pairs:
        base, candidate = ArmCapacity.of(base_arm), ArmCapacity.of(arm)
        if None in (base.rate, candidate.rate, base.log_se, candidate.log_se):
            compared.append(
                CapacityComparison(
                    base, candidate, confidence, None, None, None, CapacityVerdict.not_estimated
                )
            )
            continue
        assert base.rate and candidate.rate and base.log_se is not None
        assert candidate.log_se is not None
        difference = math.log(candidate.rate / base.rate)
        half = z * math.hypot(base.log_se, candidate.log_se)
        low, high = math.exp(difference - half), math.exp(difference + half)
        verdict = (
            CapacityVerdict.raises
            if low > 1
            else CapacityVerdict.lowers
            if high < 1
            else CapacityVerdict.inconclusive
        )
        compared.append(
            CapacityComparison(
                base, candidate, confidence, math.exp(difference), low, high, verdict
            )
        )
    return compared
