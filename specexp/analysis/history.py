"""A configuration's history: its runs on one hardware class in time order, the changes in
its throughput found with Apache Otava's change-point detection (E-Divisive means, each
candidate tested with a t test; Hunter, Fleming et al. 2023), each with its size and
interval, and what differs between the runs before and after it - effective settings first.

Pure: it takes :class:`~specexp.analysis.results.JobRun` records; no MLflow. A history's
key is the run's configuration without its stack (an upgrade is what a history is for) and
without how it was tracked, on one hardware class.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum
from typing import Any, Mapping, Optional, Sequence

import numpy as np
from otava.analysis import compute_change_points
from scipy import stats as scipy_stats

from specexp.analysis.results import EFFECTIVE, STACK, JobRun, Metric, RunStatus, Tag

# Params that say how a run was tracked or planned, or which stack it ran on: not part of
# what a history follows.
_NOT_FOLLOWED = ("tracking.", "multirun.", "dry_run", "stack.", "stats.sequential.")
# Telemetry means per run whose change between the sides is worth naming.
_TELEMETRY = ("cpu_other_cores", "busy_machine_runs", "busy_start_runs")


class DifferenceKind(StrEnum):
    """What differs between the runs before a change and after it, likeliest cause first."""

    effective = "effective setting"
    stack = "stack"
    config = "configuration"
    hardware = "hardware"
    telemetry = "telemetry"


RANK = list(DifferenceKind)


@dataclass(frozen=True)
class HistoryPoint:
    """One run of the configuration: when, its mean throughput, and what it ran with."""

    run_id: str
    name: str
    started_unix: float
    tok_per_s: float
    settings: Mapping[str, str]  # effective.* and stack.* tags, config params, hardware
    telemetry: Mapping[str, float]

    @classmethod
    def of(cls, run: JobRun) -> HistoryPoint:
        settings = {k: v for k, v in run.captured().items()}
        settings.update(
            {f"config.{k}": v for k, v in run.params.items() if not k.startswith(_NOT_FOLLOWED)}
        )
        for tag in (Tag.hardware, Tag.gpu_name, Tag.gpu_count):
            if tag in run.tags:
                settings[f"hardware.{tag}"] = run.tags[tag]
        started = min(run.times) if run.times else run.metrics.get(Metric.midpoint_unix, math.nan)
        return cls(
            run.run_id,
            run.name,
            float(started),
            float(np.mean(run.values)),
            settings,
            {k: float(run.metrics[k]) for k in _TELEMETRY if k in run.metrics},
        )


def history_key(run: JobRun, across: Sequence[str] = ()) -> tuple[tuple[str, str], ...]:
    """What a history follows: the configuration without its stack and tracking (and the
    settings ``across``, whose changes are then events inside one history), and the
    hardware class."""
    skipped = (*_NOT_FOLLOWED, *across)
    followed = sorted((k, v) for k, v in run.params.items() if not k.startswith(skipped))
    return (*followed, ("hardware", run.tags.get(Tag.hardware, "unknown")))


def histories(runs: Sequence[JobRun], across: Sequence[str] = ()) -> list[list[HistoryPoint]]:
    """The finished runs with values, by history, each in time order."""
    grouped: dict[tuple, list[HistoryPoint]] = {}
    for run in runs:
        if run.status == RunStatus.finished and run.values:
            grouped.setdefault(history_key(run, across), []).append(HistoryPoint.of(run))
    return [sorted(points, key=lambda p: p.started_unix) for points in grouped.values()]


@dataclass(frozen=True)
class Difference:
    kind: DifferenceKind
    key: str
    before: str
    after: str
    # Each side has one value throughout (a clean split), or the sides only differ in mix.
    clean: bool


@dataclass
class Change:
    """A change point: the first run after it, the sides' means, the relative change with
    its interval (Welch's t on the log means of the runs since the change before and until
    the change after), Otava's p-value, and the differences, likeliest cause first."""

    index: int
    at_unix: float
    run_id: str
    before_mean: float
    after_mean: float
    change: float
    ci_low: float
    ci_high: float
    p_value: float
    differences: list[Difference] = field(default_factory=list)

    @property
    def regression(self) -> bool:
        return self.ci_high < 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _interval(before: np.ndarray, after: np.ndarray, confidence: float) -> tuple[float, float]:
    """Relative change after / before - 1 and its interval on log means; the sides' pooled
    spread when one side has a single run."""
    lb, la = np.log(before), np.log(after)
    diff = float(la.mean() - lb.mean())
    df = lb.size + la.size - 2
    pooled = (
        (lb.var(ddof=1) * (lb.size - 1) if lb.size > 1 else 0.0)
        + (la.var(ddof=1) * (la.size - 1) if la.size > 1 else 0.0)
    ) / max(df, 1)
    se = math.sqrt(pooled * (1 / lb.size + 1 / la.size))
    half = float(scipy_stats.t.ppf(0.5 + confidence / 2, max(df, 1))) * se
    return math.expm1(diff - half), math.expm1(diff + half)


def differences(before: Sequence[HistoryPoint], after: Sequence[HistoryPoint]) -> list[Difference]:
    """What the runs after a change ran with that the runs before did not, ranked: effective
    settings, stack, configuration, hardware, telemetry; clean splits first in each."""
    found = []
    keys = sorted({k for p in [*before, *after] for k in p.settings})
    for key in keys:
        ours = {p.settings.get(key, "-") for p in before}
        theirs = {p.settings.get(key, "-") for p in after}
        if ours == theirs:
            continue
        kind = (
            DifferenceKind.effective
            if key.startswith(EFFECTIVE)
            else DifferenceKind.stack
            if key.startswith(STACK)
            else DifferenceKind.hardware
            if key.startswith("hardware.")
            else DifferenceKind.config
        )
        found.append(
            Difference(
                kind,
                key,
                ", ".join(sorted(ours)),
                ", ".join(sorted(theirs)),
                len(ours) == len(theirs) == 1,
            )
        )
    for key in _TELEMETRY:
        ours_t = [p.telemetry[key] for p in before if key in p.telemetry]
        theirs_t = [p.telemetry[key] for p in after if key in p.telemetry]
        if ours_t and theirs_t and abs(np.mean(theirs_t) - np.mean(ours_t)) >= 0.5:
            found.append(
                Difference(
                    DifferenceKind.telemetry,
                    key,
                    f"{np.mean(ours_t):.1f}",
                    f"{np.mean(theirs_t):.1f}",
                    False,
                )
            )
    return sorted(found, key=lambda d: (RANK.index(d.kind), not d.clean, d.key))


def find_changes(
    points: Sequence[HistoryPoint],
    *,
    max_pvalue: float = 0.0005,
    confidence: float = 0.95,
    window: int = 50,
) -> list[Change]:
    """The change points of a history's mean throughput (Otava, at ``max_pvalue``), each
    with its interval and differences."""
    series = [p.tok_per_s for p in points]
    if len(series) < 4:
        return []
    found, _ = compute_change_points(series, window_len=window, max_pvalue=max_pvalue)
    edges = [0, *(c.index for c in found), len(series)]
    changes = []
    for number, point in enumerate(found, start=1):
        before = points[edges[number - 1] : edges[number]]
        after = points[edges[number] : edges[number + 1]]
        values_before = np.array([p.tok_per_s for p in before])
        values_after = np.array([p.tok_per_s for p in after])
        low, high = _interval(values_before, values_after, confidence)
        changes.append(
            Change(
                index=int(point.index),
                at_unix=points[point.index].started_unix,
                run_id=points[point.index].run_id,
                before_mean=float(values_before.mean()),
                after_mean=float(values_after.mean()),
                change=float(values_after.mean() / values_before.mean() - 1),
                ci_low=low,
                ci_high=high,
                p_value=float(point.stats.pvalue),
                differences=differences(before, after),
            )
        )
    return changes


def newest_regression(changes: Sequence[Change], threshold: float) -> Optional[Change]:
    """The last change, if it is a regression beyond ``threshold`` (its whole interval below
    -threshold): what a CI guard fails on."""
    if not changes:
        return None
    last = changes[-1]
    return last if last.ci_high < -threshold else None


def published_changes(
    points: Sequence[HistoryPoint], *, cv_max: float, runs: int, confidence: float = 0.95
) -> list[Change]:
    """Changes between consecutive published points, each a mean of ``runs`` runs whose CV
    is at most ``cv_max`` (no per-run values were published, so no change-point search):
    a change where the interval of the log ratio excludes no change."""
    se, df = cv_max * math.sqrt(2 / runs), 2.0 * (runs - 1)
    half = float(scipy_stats.t.ppf(0.5 + confidence / 2, df)) * se
    changes = []
    for index in range(1, len(points)):
        before, after = points[index - 1], points[index]
        log_ratio = math.log(after.tok_per_s / before.tok_per_s)
        if abs(log_ratio) <= half:
            continue
        changes.append(
            Change(
                index=index,
                at_unix=after.started_unix,
                run_id=after.run_id,
                before_mean=before.tok_per_s,
                after_mean=after.tok_per_s,
                change=math.expm1(log_ratio),
                ci_low=math.expm1(log_ratio - half),
                ci_high=math.expm1(log_ratio + half),
                p_value=float(2 * scipy_stats.t.sf(abs(log_ratio) / se, df)),
                differences=differences([before], [after]),
            )
        )
    return changes


# Speculation's own metrics followed beside throughput, each a job's summary value: its mean
# acceptance length, and its goodput (requests/s meeting the SLO) where it had an SLO.
FOLLOWED_METRICS = (Metric.acceptance_length_mean, f"{Metric.goodput_rps}_mean")
# Runs a history needs for a change-point search (find_changes searches none below it).
MIN_POINTS = 4


@dataclass(frozen=True)
class MetricChanges:
    """The change points of one more metric of a history, over the runs that carry it."""

    metric: str
    points: int
    changes: list[Change]

    @property
    def too_little_data(self) -> bool:
        return self.points < MIN_POINTS

    def describe(self, max_pvalue: float) -> str:
        if self.too_little_data:
            return (
                f"{self.metric}: too little data ({self.points} run(s) carry it; a change-point "
                f"search needs {MIN_POINTS})"
            )
        if not self.changes:
            return f"{self.metric}: no change at p < {max_pvalue:g} over {self.points} runs"
        return f"{self.metric}: {len(self.changes)} change(s) over {self.points} runs"

    def to_json(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "points": self.points,
            "too_little_data": self.too_little_data,
            "changes": [c.to_json() for c in self.changes],
        }


def metric_changes(
    points: Sequence[HistoryPoint],
    runs: Mapping[str, JobRun],
    metric: str,
    *,
    max_pvalue: float = 0.0005,
    confidence: float = 0.95,
) -> MetricChanges:
    """The change points of ``metric`` along a throughput history (``runs``: its runs by
    id): the points whose run has a positive value of it (a change's interval is on log
    values), searched as find_changes searches throughput."""
    # find_changes reads each point's tok_per_s: there it holds the metric's value.
    carried = [
        replace(point, tok_per_s=float(value))
        for point in points
        if (value := runs[point.run_id].metrics.get(metric)) is not None and value > 0
    ]
    found = (
        find_changes(carried, max_pvalue=max_pvalue, confidence=confidence)
        if len(carried) >= MIN_POINTS
        else []
    )
    return MetricChanges(metric, len(carried), found)
