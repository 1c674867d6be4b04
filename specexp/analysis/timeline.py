"""Two runs on one timeline (one shared server, or launches alternating in time): before a
family is decided, the drift they share is fitted, their standard error widened for runs
autocorrelated in time, and a step found in what the machine did or in the values - so that
a verdict confounded with the timeline is not given.

Look here for where the "time drift", "a step in", "autocorrelated" and "measured in blocks"
notes of a comparison come from; the statistics are in :mod:`specexp.core.stats.drift`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional, Sequence

import numpy as np

from specexp.analysis.results import JobRun, Tag, Unit
from specexp.core.notes import NoteKind
from specexp.core.schemas.multirun import JobOrder
from specexp.core.stats.comparison import Comparison
from specexp.core.stats.drift import (
    MACHINE_SERIES,
    MACHINE_STEP_MIN,
    TimeDrift,
    TimeStep,
    ar1_inflation,
    find_step,
    fit_time_drift,
    fit_with_step,
)


def shared_timeline(base: JobRun, arm: JobRun) -> bool:
    """Whether two runs' values lie on one timeline that a common drift could run through:
    runs on one server instance, or launches alternating in time."""
    if not (base.times and arm.times) or base.unit != arm.unit:
        return False
    return base.unit == Unit.launch or same_server(base, arm)


def same_server(base: JobRun, arm: JobRun) -> bool:
    """Whether two single-launch runs were measured on one server instance (a sweep's
    shared server)."""
    server = (Tag.server_url, Tag.server_started_at)
    return all(base.tags.get(t) and base.tags.get(t) == arm.tags.get(t) for t in server)


def time_drift(pairs: Sequence[tuple[JobRun, JobRun]], comparisons: Sequence[Comparison]) -> None:
    """Before :func:`decide`: fit the drift of each pair on one timeline, so that a verdict
    confounded with it is not given; say when such a pair was measured in blocks."""
    for (base, arm), c in zip(pairs, comparisons, strict=True):
        if not c.testable or not shared_timeline(base, arm):
            continue
        c.drift = fit_time_drift(base.values, base.times, arm.values, arm.times)
        _autocorrelation(base, arm, c)
        c.step = _step(base, arm, _alpha_of(c), c.drift)
        blocked = [r.name for r in (base, arm) if r.tags.get(Tag.order) == JobOrder.blocked]
        if blocked:
            c.note(
                NoteKind.blocked_order,
                f"measured in blocks ({', '.join(blocked)}: multirun.order=blocked): drift is told "
                "from the effect only as far as the trend inside each arm shows it",
            )


def _timeline(base: JobRun, arm: JobRun) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Both arms' values on their shared timeline, in time order: (log values, is-candidate,
    times, the order that sorts them)."""
    logs = np.log(np.asarray([*base.values, *arm.values], float))
    is_candidate = np.asarray([0.0] * len(base.values) + [1.0] * len(arm.values))
    times = np.asarray([*base.times, *arm.times], float)
    order = np.argsort(times, kind="stable")
    return logs[order], is_candidate[order], times[order], order


def _autocorrelation(base: JobRun, arm: JobRun, c: Comparison) -> None:
    """Widen the comparison's standard error for runs that are autocorrelated in time
    (AR(1) on the residuals of the arms' levels, and of the drift where it is fitted), by
    as much as it widens this arrangement's contrast; noted when it does."""
    logs, is_candidate, times, _ = _timeline(base, arm)
    columns = [np.ones_like(logs), is_candidate]
    if c.drift is not None:
        columns.append((times - times.mean()) / 60)
    design = np.column_stack(columns)
    residuals = logs - design @ np.linalg.lstsq(design, logs, rcond=None)[0]
    rho, factor = ar1_inflation(residuals, design)
    if factor <= 1.0:
        return
    # Fewer effective values, too: the t quantile takes the AR(1) effective count's df.
    fewer = (1 - rho) / (1 + rho)
    if c.drift is not None:
        c.drift = dataclasses.replace(
            c.drift, se=c.drift.se * factor, df=max(1.0, c.drift.df * fewer)
        )
    else:
        c.se, c.df = c.se * factor, max(1.0, c.df * fewer)
    c.note(
        NoteKind.autocorrelated,
        f"runs are autocorrelated in time (lag-1 rho about {rho:.2f}): the interval is widened "
        f"x{factor:.2f} (as much as this order of the arms' runs needs) and its degrees of "
        f"freedom cut to the effective number of runs",
    )


def _step(
    base: JobRun, arm: JobRun, alpha: float, trend: Optional[TimeDrift]
) -> Optional[TimeStep]:
    """The first step found on the shared timeline: in what the machine did (telemetry
    series both arms logged), else in the values beside the arms' levels (and the drift's
    trend, where it is fitted: a slope is no step); fitted where it can be told from the
    arms."""
    logs, is_candidate, times, order = _timeline(base, arm)
    series = [
        (name, np.asarray([*base.machine[name], *arm.machine[name]])[order])
        for name in MACHINE_SERIES
        if name in base.machine and name in arm.machine
    ]
    series.append(("tok/s", logs - _levels(logs, is_candidate, times, trend)))
    for name, values in series:
        found = find_step(values.tolist(), alpha)
        if found is None:
            continue
        at, p = found
        size = _step_size(name, values[:at].mean(), values[at:].mean())
        if name in MACHINE_STEP_MIN and abs(size) < MACHINE_STEP_MIN[name]:
            continue
        fit = fit_with_step(logs, is_candidate, (np.arange(logs.size) >= at).astype(float))
        step = TimeStep(float((times[at - 1] + times[at]) / 2), name, size, p)
        if fit is not None:
            step = dataclasses.replace(step, log_diff=fit[0], se=fit[1], df=fit[2])
        return step
    return None


def _levels(
    logs: np.ndarray, is_candidate: np.ndarray, times: np.ndarray, trend: Optional[TimeDrift]
) -> np.ndarray:
    """Each arm's level on the timeline, with the drift's trend where it is fitted."""
    fitted = np.zeros_like(logs)
    for arm_flag in (0.0, 1.0):
        mine = is_candidate == arm_flag
        fitted[mine] = logs[mine].mean()
        if trend is not None:
            fitted[mine] += trend.slope_per_min * (times[mine] - times[mine].mean()) / 60
    return fitted


def _step_size(name: str, before: float, after: float) -> float:
    """How large a step in series ``name`` is: in busy cores, a share of throughput (its
    logs), or a share of the level before."""
    if name == "cpu_other_cores":
        return float(after - before)
    if name == "tok/s":
        return math.expm1(after - before)
    return float(after / before - 1) if before else math.inf


def _alpha_of(c: Comparison) -> float:
    return round(1 - c.confidence, 12)
