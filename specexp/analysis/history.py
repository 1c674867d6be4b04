"""A configuration's history: its runs on one hardware class in time order, the changes in
its throughput, each with its size and interval, and what differs between the runs before
and after it - clean splits first, effective settings first among them.

A machine wanders: its runs' means are autocorrelated (a warm or busy spell spans several
runs) and now and then far off. Change points tested as if the runs were independent
(Otava's E-Divisive with its t test) called a flat history changed in 27-48% of AR(1)
histories at rho 0.6. Here each split's t of log throughput is deflated by the
autocorrelation of its residuals (effective sample size, n(1 - rho)/(1 + rho)); the largest
split's statistic is tested against its null distribution simulated for AR(1) noise at each
of :data:`WANDER_RHOS` and must beat the least favourable of them (its p-value is the
largest); found, the segments either side are searched the same way (binary segmentation).
The interval of a change widens by the residuals' autocorrelation as well.

Pure: it takes :class:`~specexp.analysis.results.JobRun` records; no MLflow. A history's
key is the run's configuration without its stack (an upgrade is what a history is for) and
without how it was tracked, on one hardware class.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from enum import StrEnum
from functools import lru_cache
from typing import Mapping, Optional, Sequence

import numpy as np
from scipy import stats as scipy_stats

from specexp.analysis.results import EFFECTIVE, STACK, JobRun, Metric, RunStatus, Tag
from specexp.core.stats.drift import ar1_inflation, corrected_lag1

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
    # The setting changed once, within LOCATION_SLACK runs of the change (a clean split), or
    # elsewhere, or several times: the sides differ in mix only.
    clean: bool


# Runs a change point's location may be off by (a 3-sigma step puts it one run off about one
# time in eight): a setting that changed this close to it changed with it.
LOCATION_SLACK = 2
# A change's interval widens for autocorrelation at the one-sided 95% upper bound of the
# residuals' rho: at its estimate, a -3% change's interval covered 80% at AR(1) rho 0.6 over
# 30 runs (tests/statistics/test_history.py).
RHO_UPPER_Z = 1.645


@dataclass
class Change:
    """A change point: the first run after it, the sides' means, the relative change with
    its interval (t on the log means of the runs since the change before and until the
    change after, widened by their autocorrelation), the p-value of the split (against the
    least favourable wandering), and the differences, likeliest cause first."""

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


def _interval(before: np.ndarray, after: np.ndarray, confidence: float) -> tuple[float, float]:
    """Relative change after / before - 1 and its interval on log means: pooled t, its
    standard error widened by the lag-1 autocorrelation of the residuals, taken at its
    one-sided 95% upper bound (the sides' pooled spread when one side has a single run)."""
    lb, la = np.log(before), np.log(after)
    diff = float(la.mean() - lb.mean())
    df = lb.size + la.size - 2
    pooled = (
        (lb.var(ddof=1) * (lb.size - 1) if lb.size > 1 else 0.0)
        + (la.var(ddof=1) * (la.size - 1) if la.size > 1 else 0.0)
    ) / max(df, 1)
    step = np.r_[np.zeros(lb.size), np.ones(la.size)]
    residuals = np.r_[lb - lb.mean(), la - la.mean()]
    _, widen = ar1_inflation(
        residuals, np.column_stack([np.ones_like(step), step]), rho_upper_z=RHO_UPPER_Z
    )
    se = widen * math.sqrt(pooled * (1 / lb.size + 1 / la.size))
    half = float(scipy_stats.t.ppf(0.5 + confidence / 2, max(df, 1))) * se
    return math.expm1(diff - half), math.expm1(diff + half)


def differences(before: Sequence[HistoryPoint], after: Sequence[HistoryPoint]) -> list[Difference]:
    """What the runs after a change ran with that the runs before did not, ranked: clean
    splits first (a setting that changed once, with the change), then by kind - effective
    settings, stack, configuration, hardware, telemetry."""
    found = []
    runs = [*before, *after]
    keys = sorted({k for p in runs for k in p.settings})
    for key in keys:
        ours = {p.settings.get(key, "-") for p in before}
        theirs = {p.settings.get(key, "-") for p in after}
        if ours == theirs:
            continue
        values = [p.settings.get(key, "-") for p in runs]
        switches = [i for i in range(1, len(values)) if values[i] != values[i - 1]]
        clean = len(switches) == 1 and abs(switches[0] - len(before)) <= LOCATION_SLACK
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
                clean,
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
    return sorted(found, key=lambda d: (not d.clean, RANK.index(d.kind), d.key))


# The run-to-run autocorrelations (AR(1)) a split's statistic is judged against: a change is
# called only where it beats the least favourable of them.
WANDER_RHOS = (0.0, 0.2, 0.4, 0.6, 0.7)
_NULL_SIMULATIONS = 2000
# Runs each side of a split, at least.
_MIN_SIDE = 2
# A segment shorter than this is not searched for a change.
MIN_RUNS = 6


def split_statistics(logs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each row of time-ordered log values: the split with the largest two-sample t
    (pooled) - the first value after it - and that t deflated by the lag-1 autocorrelation
    of the split's residuals, sqrt((1 - rho) / (1 + rho))."""
    rows, n = logs.shape
    largest, statistic = np.zeros(rows), np.zeros(rows)
    where = np.zeros(rows, dtype=int)
    for k in range(_MIN_SIDE, n - _MIN_SIDE + 1):
        before, after = logs[:, :k], logs[:, k:]
        residuals = np.concatenate(
            [
                before - before.mean(axis=1, keepdims=True),
                after - after.mean(axis=1, keepdims=True),
            ],
            axis=1,
        )
        squares = np.maximum((residuals * residuals).sum(axis=1), 1e-300)
        t = np.abs(after.mean(axis=1) - before.mean(axis=1)) / np.sqrt(
            squares / (n - 2) * (1 / k + 1 / (n - k))
        )
        rho = corrected_lag1((residuals[:, :-1] * residuals[:, 1:]).sum(axis=1) / squares, 2, n)
        better = t > largest
        largest = np.where(better, t, largest)
        statistic = np.where(better, t * np.sqrt((1 - rho) / (1 + rho)), statistic)
        where = np.where(better, k, where)
    return statistic, where


@lru_cache(maxsize=128)
def _null_statistics(n: int) -> np.ndarray:
    """The statistic of flat histories of ``n`` runs, for each of WANDER_RHOS (rows), from
    stationary AR(1) noise (seeded: a history's p-value is the same each time)."""
    rng = np.random.default_rng(n)
    rows = []
    for rho in WANDER_RHOS:
        shocks = rng.normal(size=(_NULL_SIMULATIONS, n))
        noise = np.empty_like(shocks)
        noise[:, 0] = shocks[:, 0]
        for i in range(1, n):
            noise[:, i] = rho * noise[:, i - 1] + math.sqrt(1 - rho**2) * shocks[:, i]
        rows.append(split_statistics(noise)[0])
    return np.array(rows)


def step_test(logs: np.ndarray) -> tuple[int, float]:
    """(the first run after the likeliest split, its p-value: the largest over WANDER_RHOS
    of the share of flat histories whose statistic reaches it)."""
    statistic, where = split_statistics(logs[None, :])
    null = _null_statistics(logs.size)
    p = (1 + (null >= statistic[0]).sum(axis=1)) / (1 + null.shape[1])
    return int(where[0]), float(p.max())


def _change_points(logs: np.ndarray, start: int, max_pvalue: float) -> list[tuple[int, float]]:
    """(index, p-value) of each change in ``logs`` (offset by ``start``), by binary
    segmentation: the likeliest split if significant, then the segments either side."""
    if logs.size < MIN_RUNS or np.ptp(logs) == 0:
        return []
    k, p = step_test(logs)
    if p >= max_pvalue:
        return []
    return [
        *_change_points(logs[:k], start, max_pvalue),
        (start + k, p),
        *_change_points(logs[k:], start + k, max_pvalue),
    ]


def find_changes(
    points: Sequence[HistoryPoint],
    *,
    max_pvalue: float = 0.05,
    confidence: float = 0.95,
) -> list[Change]:
    """The change points of a history's mean throughput (significant at ``max_pvalue``
    whatever the wandering up to AR(1) 0.7), each with its interval and differences."""
    series = np.log([p.tok_per_s for p in points])
    found = _change_points(series, 0, max_pvalue)
    edges = [0, *(index for index, _ in found), len(series)]
    changes = []
    for number, (index, p_value) in enumerate(found, start=1):
        before = points[edges[number - 1] : edges[number]]
        after = points[edges[number] : edges[number + 1]]
        values_before = np.array([p.tok_per_s for p in before])
        values_after = np.array([p.tok_per_s for p in after])
        low, high = _interval(values_before, values_after, confidence)
        changes.append(
            Change(
                index=index,
                at_unix=points[index].started_unix,
                run_id=points[index].run_id,
                before_mean=float(values_before.mean()),
                after_mean=float(values_after.mean()),
                change=float(values_after.mean() / values_before.mean() - 1),
                ci_low=low,
                ci_high=high,
                p_value=p_value,
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

    DERIVED = ("too_little_data",)

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
