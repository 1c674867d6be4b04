"""Arms, pairing, drift and reproduction: the analysis behind compare and the sweep report.

Pure: it takes :class:`~specexp.analysis.results.JobRun` records and gives comparisons; no MLflow.
An arm is one configuration's independent values (per launch with several server launches,
else per measured run). Arms carry their factors as a mapping; pairing, crossover families
and baselines are found through it, never by parsing labels.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Callable, Hashable, Iterable, Mapping, Optional, Sequence, TypeVar

import numpy as np
from scipy import stats as scipy_stats

from specexp.analysis.results import EFFECTIVE, STACK, JobRun, Metric, RunStatus, Tag, Unit
from specexp.core.records import History, Record, Version
from specexp.core.schemas.multirun import JobOrder
from specexp.core.sequential import (
    SequentialComparison,
    SequentialRecord,
    StopReason,
    reversed_record,
)
from specexp.core.stats import (
    MACHINE_SERIES,
    MACHINE_STEP_MIN,
    Comparison,
    Confounder,
    NoteKind,
    RepetitionPlan,
    Summary,
    TimeDrift,
    TimeStep,
    Verdict,
    ar1_inflation,
    compare,
    decide,
    find_step,
    fit_time_drift,
    fit_with_step,
    plan_repetitions,
    summarize,
    use_launch_level_error,
)
from specexp.engines.records import Engagement

# Launches a run needs to calibrate its server family's launch-to-launch variance.
CALIBRATION_MIN_LAUNCHES = 3
# The run-to-run spread check of a calibration against each arm: strict, since refusing a
# calibration that applies costs the comparison its verdict.
CALIBRATION_CHECK_ALPHA = 0.01
# A calibration measured further than this from the arms (before or after) is not used: a
# machine's launch spread moves with its drivers, firmware and neighbours.
CALIBRATION_MAX_AGE_H = 7 * 24.0
# A calibration is used only where its launch means spread more than its runs explain: the
# F test of its launch variance against its run-to-run variance over the runs per launch
# (its own degrees of freedom), one-sided at this level. Single-launch arms carry no
# evidence of their own launch spread, so the margin against a spread grown since the
# calibration is the calibration's uncertainty: one that cannot tell its launch variance
# from none bounds no launch offset, and one that can is used as measured, its degrees of
# freedom in the interval's t. At 19% it keeps false verdicts within 5% + 2 SE where the
# calibration measured a quarter of the truth, or none of it, at 0.8 or more of the power of
# the calibration used wherever it measured a launch variance above 0 - both at their edge
# (20% gives 6.0% false at none of it, 18% 0.79 of the power: docs/statistics.md,
# benchmarks/calibration_margin.py); a fixed multiple of it cannot do both.
LAUNCH_VARIANCE_SHOWN_ALPHA = 0.19
# The test of a calibration's launch variance against the spread of an arm's configuration's
# own launches (its earlier single-launch runs in the store): one-sided at this level, since
# a refusal costs the comparison its verdict, never a false one.
LAUNCH_TEST_ALPHA = 0.05


class ClaimStatus(StrEnum):
    """What the measurements say of a published claim."""

    reproduced = "reproduced"
    contradicted = "contradicted"
    inconclusive = "inconclusive"
    not_measured = "not measured"


class SelectionError(ValueError):
    pass


@dataclass(frozen=True)
class Selector:
    """FACTOR=VALUE (e.g. speculative=none), or a run id (prefix) or label."""

    text: str

    @property
    def factor(self) -> Optional[str]:
        return self.text.split("=", 1)[0] if "=" in self.text else None

    @property
    def value(self) -> Optional[str]:
        return self.text.split("=", 1)[1] if "=" in self.text else None


@dataclass(frozen=True)
class Arm(Record):
    """One configuration's independent values, from one job run."""

    HISTORY = History("arm", (Version(1, "the arm: its run, label, factors and summary"),))
    DERIVED = ("run_id", "values", "unit")

    run: JobRun
    label: str
    factors: Mapping[str, str]
    summary: Summary

    @property
    def run_id(self) -> str:
        return self.run.run_id

    @property
    def values(self) -> tuple[float, ...]:
        return self.run.values

    @property
    def unit(self) -> Unit:
        return self.run.unit

    def others(self, factor: str) -> tuple[tuple[str, str], ...]:
        """The arm's factors without ``factor``: what a partner arm must share."""
        return tuple(sorted((k, v) for k, v in self.factors.items() if k != factor))


def stack_of(arm: Arm) -> str:
    """The stack the arm's run was measured on (its ``stack`` tag), "?" where unrecorded."""
    return arm.run.tags.get(Tag.stack, "?")


def ci_label(arms: Sequence[Arm]) -> str:
    """The interval's header at the confidence the arms were summarised with
    (stats.confidence), e.g. "95% CI"."""
    return f"{arms[0].summary.confidence * 100:g}% CI" if arms else "CI"


def make_arms(
    runs: Sequence[JobRun], *, label_tags: Sequence[str], confidence: float, metric: str
) -> tuple[list[Arm], list[str]]:
    """Finished runs as arms, plus a note for each run that was left out and why. Factors are
    the sweep's (recorded with each run) or, with ``label_tags``, those tags' values."""
    arms, skipped = [], []
    for run in runs:
        if run.status != RunStatus.finished:
            skipped.append(f"{run.name} ({run.run_id[:8]}): {run.status}, not compared")
            continue
        summary = summarize(run.values, confidence)
        if summary is None:
            skipped.append(f"{run.name} ({run.run_id[:8]}): no {metric} values")
            continue
        factors = {t: run.tags.get(t, "?") for t in label_tags} if label_tags else dict(run.factors)
        label = " ".join(f"{k}={v}" for k, v in factors.items()) if label_tags else run.name
        arms.append(Arm(run, label, factors, summary))
    seen: dict[str, int] = {}
    for arm in arms:
        seen[arm.label] = seen.get(arm.label, 0) + 1
    return [
        Arm(a.run, f"{a.label} [{a.run_id[:8]}]", a.factors, a.summary) if seen[a.label] > 1 else a
        for a in arms
    ], skipped


def pick_baseline(arms: Sequence[Arm], selector: Selector) -> Arm:
    """A run id (or its prefix), a label, or FACTOR=VALUE (a factor or tag) matching exactly one arm."""
    if selector.factor:
        matches = [
            a
            for a in arms
            if a.factors.get(selector.factor, a.run.tags.get(selector.factor)) == selector.value
        ]
    else:
        matches = [
            a for a in arms if a.run_id.startswith(selector.text) or a.label == selector.text
        ]
    if len(matches) != 1:
        found = ", ".join(f"{a.label} ({a.run_id[:8]})" for a in matches) or "none"
        raise SelectionError(
            f"--baseline {selector.text!r} must match exactly one finished run; matched: {found}. "
            "Use a run id to choose."
        )
    return matches[0]


# What a run was measured on beside its sweep's factors: a baseline is paired only with
# runs that share all of it, and the sweep they ran in (tags of each job run).
SETTINGS = (Tag.engine, Tag.model, Tag.workload, Tag.stack, Tag.hardware, Tag.parent)
# Of those, what a sweep's jobs are configured with: between runs of one sweep they differ
# only as its factors do (reference_cpu's cpu_case sets the stack), so there the factors
# pair them and the sweep decided those comparisons. Hardware is where a job ran, not its
# configuration.
CONFIGURED = (Tag.engine, Tag.model, Tag.workload, Tag.stack)


def _swept(arm: Arm) -> bool:
    """Whether the arm is a run of a sweep, labelled by that sweep's factors."""
    return bool(arm.run.tags.get(Tag.parent)) and dict(arm.factors) == dict(arm.run.factors)


def _settings(arm: Arm, factor: str) -> tuple[tuple[str, str], ...]:
    """The arm's factors without ``factor``, with what it was measured on and the sweep it
    ran in (none of it ``factor`` itself; in a sweep, not what its factors configure): what
    a partner arm must share."""
    root = factor.split(".", 1)[0]
    shared = [t for t in SETTINGS if t.value != root and not (_swept(arm) and t in CONFIGURED)]
    measured_on = tuple((t.value, arm.run.tags.get(t, "")) for t in shared)
    return (*arm.others(factor), *measured_on)


def _groups(arms: Sequence[Arm], factor: str) -> list[tuple[list[Arm], list[Arm]]]:
    """(baselines, arms) of each group of arms that share their settings (:func:`_settings`),
    baselines the arms whose ``factor`` is the selector's value, latest first."""
    grouped: dict[tuple, list[Arm]] = {}
    for arm in arms:
        grouped.setdefault(_settings(arm, factor), []).append(arm)
    return [(sorted(group, key=_latest, reverse=True), group) for group in grouped.values()]


def _latest(arm: Arm) -> float:
    return max(arm.run.times, default=-math.inf)


Paired = TypeVar("Paired")


def pair_by_factor(
    items: Sequence[Paired],
    selector: Selector,
    factors: Callable[[Paired], Mapping[str, str]],
    shared: Callable[[Paired], Hashable],
    prefer: Callable[[Paired], float] = lambda _: 0.0,
) -> list[tuple[Paired, Paired]]:
    """(baseline, candidate): each item whose ``selector.factor`` is not its value, with the
    baseline of its group - the items with the same ``shared`` - whose factor is (of
    several, the first ``prefer`` ranks highest). The one pairing rule of a sweep's plan
    (the comparisons it measures until decided, sweep.sequential) and of its report
    (:func:`baseline_pairs`), so that the report holds every comparison the sweep decided."""
    factor, value = selector.factor, selector.value
    assert factor is not None
    grouped: dict[Hashable, list[Paired]] = {}
    for item in items:
        grouped.setdefault(shared(item), []).append(item)
    pairs = []
    for group in grouped.values():
        bases = [i for i in group if factors(i).get(factor) == value]
        if bases:
            base = max(bases, key=prefer)
            pairs += [(base, i) for i in group if factors(i).get(factor) != value]
    return pairs


def baseline_pairs(arms: Sequence[Arm], selector: Selector) -> list[tuple[Arm, Arm]]:
    """(baseline, candidate) pairs. When the selector is FACTOR=VALUE and the arms vary that
    factor, each arm is compared with the baseline that shares all its other factors, what
    it was measured on (engine, model, workload, stack, hardware) and its sweep - e.g.
    speculative=draft at concurrency 8 against speculative=none at concurrency 8 of the same
    sweep; within a sweep, what its factors configure differs with them (a case on an older
    stack is compared with the sweep's baseline, as the sweep measured it); where several
    such baselines were measured, the latest (:func:`pairing_said` says so). Otherwise one
    baseline run is compared with every other arm."""
    factor = selector.factor
    if factor is None or not any(factor in a.factors for a in arms):
        baseline = pick_baseline(arms, selector)
        return [(baseline, a) for a in arms if a is not baseline]
    pairs = pair_by_factor(
        arms, selector, lambda a: a.factors, lambda a: _settings(a, factor), _latest
    )
    if not pairs:
        raise SelectionError(f"baseline {selector.text!r} matched no run")
    return pairs


def pairing_said(arms: Sequence[Arm], selector: Selector) -> list[str]:
    """What :func:`baseline_pairs` decided beyond the named factor, one line each: the
    groups it compared within when the runs differ in more than their factors, and the
    baseline it took where several matched."""
    factor = selector.factor
    if factor is None or not any(factor in a.factors for a in arms):
        return []
    said = []
    groups = [(o, g) for o, g in _groups(arms, factor) if len(g) > 1]
    if len(groups) > 1:
        said.append(
            f"compared within {len(groups)} groups of runs that share their other factors, "
            "engine, model, workload, stack (unless their sweep's factors set them), hardware "
            f"and sweep: runs that differ in more than {factor} are not set against one baseline"
        )
    for ordered, _ in groups:
        bases = [a for a in ordered if a.factors.get(factor) == selector.value]
        if len(bases) > 1:
            said.append(
                f"baseline {selector.text!r} matches several runs with the same settings "
                f"({', '.join(a.run_id[:8] for a in bases)}): the latest measured, "
                f"{bases[0].run_id[:8]}, is the baseline"
            )
    return said


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


def drift(base: Arm, arm: Arm, factor: Optional[str]) -> list[str]:
    """Differences in captured stack and effective configuration other than the declared
    factor: the effective settings first (what the servers actually ran), the attention
    backend first of all - two stacks whose servers chose different backends differ in
    that before anything else."""
    skip = {f"effective.{factor}", f"stack.{factor}"} if factor else set()
    ours, theirs = base.run.captured(), arm.run.captured()
    keys = sorted(
        (k for k in set(ours) | set(theirs) if k not in skip),
        key=lambda k: (k != f"{EFFECTIVE}attention_backend", not k.startswith(EFFECTIVE), k),
    )
    return [
        f"{k}: {ours.get(k, '-')} vs {theirs.get(k, '-')}"
        for k in keys
        if ours.get(k) != theirs.get(k)
    ]


@dataclass(frozen=True)
class Calibration:
    """How much one server family's (engine, model, stack, hardware) single-launch means
    vary from launch to launch, on log values, from runs with several launches; comparisons
    of single-launch arms of that family are tested against it."""

    launch_var: float  # variance of one launch's mean log throughput
    within_var: float  # run-to-run variance of log throughput inside a launch
    runs_per_launch: float
    df: float  # launches - 1, summed over the calibration runs
    runs: tuple[str, ...]
    within_df: float = 0.0  # measured runs - launches, summed
    measured_unix: float = math.nan  # when its newest value was measured
    stack: Mapping[str, str] = field(default_factory=dict)  # the captured stack of its runs
    # The family's single-launch runs in the store, by config fingerprint: the launches a
    # configuration has had, which its launch variance is tested against (:func:`launch_test`).
    launches: Mapping[str, tuple[JobRun, ...]] = field(default_factory=dict)
    # Mean seconds from a launch to ready, and of one measured run, over its runs (NaN where
    # they did not record them): what a budget's launches cost on this family.
    launch_s: float = math.nan
    run_s: float = math.nan

    @property
    def between_var(self) -> float:
        """Variance of one launch's offset, as calibrated: what plans and budgets assume,
        and what single launches are tested with."""
        return max(self.launch_var - self.within_var / self.runs_per_launch, 0.0)

    @property
    def launch_variance_p(self) -> float:
        """One-sided p-value of the F test that its launches vary beyond their runs: the
        launch means' variance against the run-to-run variance over the runs per launch,
        on df and within_df degrees of freedom (the run noise known where within_df is 0)."""
        noise = self.within_var / self.runs_per_launch
        if noise <= 0 or self.df <= 0:
            return 0.0 if self.launch_var > 0 and self.df > 0 else 1.0
        ratio = self.launch_var / noise
        if self.within_df <= 0:
            return float(scipy_stats.chi2.sf(self.df * ratio, self.df))
        return float(scipy_stats.f.sf(ratio, self.df, self.within_df))

    def mean_var(self, runs: int) -> float:
        """Variance of the mean of one launch with ``runs`` measured runs."""
        return self.between_var + self.within_var / runs


def family_key(run: JobRun) -> tuple[str, ...]:
    return tuple(run.tags.get(t, "") for t in ("engine", "model", "stack", Tag.hardware))


def calibrations(runs: Sequence[JobRun]) -> dict[tuple[str, ...], Calibration]:
    """Each server family's launch-to-launch variance, pooled over its finished runs with 3
    or more launches (weighted by their degrees of freedom) measured within
    CALIBRATION_MAX_AGE_H of its newest: an old calibration does not ride on a new one."""
    usable: dict[tuple[str, ...], list[JobRun]] = {}
    for run in runs:
        if _calibrates(run):
            usable.setdefault(family_key(run), []).append(run)
    known = {}
    for key, family in usable.items():
        newest = max(_last_measured(run) for run in family)
        # Not "<=": runs without times (-inf) are all as new as each other.
        recent = [
            run for run in family if not newest - _last_measured(run) > CALIBRATION_MAX_AGE_H * 3600
        ]
        known[key] = _pooled(recent, newest)
    return known


def with_launches(
    known: Mapping[tuple[str, ...], Calibration], runs: Sequence[JobRun]
) -> dict[tuple[str, ...], Calibration]:
    """``known`` with each family's finished single-launch ``runs`` attached, by config
    fingerprint: the launches each configuration has had (store.configuration_runs)."""
    found: dict[tuple[str, ...], dict[str, list[JobRun]]] = {}
    for run in runs:
        fingerprint = run.tags.get(Tag.config_fingerprint)
        if fingerprint and run.status == RunStatus.finished and run.unit == Unit.run:
            found.setdefault(family_key(run), {}).setdefault(fingerprint, []).append(run)
    return {
        key: dataclasses.replace(
            cal, launches={f: tuple(rs) for f, rs in found.get(key, {}).items()}
        )
        for key, cal in known.items()
    }


@dataclass(frozen=True)
class LaunchTest:
    """A calibration's launch variance against the spread of the means of one
    configuration's launches (the arm's run and its earlier runs): one-sided F test of their
    variance against the calibration's launch variance plus run noise over their runs
    (degrees of freedom launches - 1 against the calibration's)."""

    launches: int
    spread_cv: float  # standard deviation of the launch means' logs
    expected_cv: float  # what the calibration predicts for it
    p_value: float
    power: float  # to see a launch variance (between launches) twice the calibration's

    @property
    def consistent(self) -> bool:
        return self.p_value >= LAUNCH_TEST_ALPHA

    def describe(self) -> str:
        finding = "consistent" if self.consistent else "larger than calibrated"
        return (
            f"{finding} (launch means spread {self.spread_cv:.2%} against "
            f"{self.expected_cv:.2%} calibrated; F test p={self.p_value:.2g}; power "
            f"{self.power:.2f} to see a doubled launch variance with {self.launches} launches)"
        )


def _stack(run: JobRun) -> dict[str, str]:
    return {k: v for k, v in run.captured().items() if k.startswith(STACK)}


def _earlier_launches(calibration: Calibration, run: JobRun) -> list[JobRun]:
    """The launches of ``run``'s configuration in the store before it, on its captured stack,
    within CALIBRATION_MAX_AGE_H: launches further apart drift apart, which inflates their
    spread (a refusal, the safe side), and a launch spread older than that is not today's."""
    fingerprint = run.tags.get(Tag.config_fingerprint, "")
    start = min(run.times, default=math.nan)
    return [
        other
        for other in calibration.launches.get(fingerprint, ())
        if other.run_id != run.run_id
        and other.times
        and 0 < start - min(other.times) <= CALIBRATION_MAX_AGE_H * 3600
        and _stack(other) == _stack(run)
    ]


def launch_test(calibration: Calibration, run: JobRun) -> Optional[LaunchTest]:
    """The F test of ``calibration``'s launch variance against ``run``'s launch and the earlier
    launches of its configuration; None without an earlier launch."""
    launches = [run, *_earlier_launches(calibration, run)]
    if len(launches) < 2 or calibration.df <= 0:
        return None
    means = [float(np.mean(np.log(r.values))) for r in launches]
    noise = calibration.within_var * float(np.mean([1 / len(r.values) for r in launches]))
    expected = calibration.between_var + noise
    if expected <= 0:
        return None
    dfn, dfd = len(launches) - 1, calibration.df
    spread = float(np.var(means, ddof=1))
    critical = scipy_stats.f.isf(LAUNCH_TEST_ALPHA, dfn, dfd)
    doubled = (2 * calibration.between_var + noise) / expected
    return LaunchTest(
        len(launches),
        math.sqrt(spread),
        math.sqrt(expected),
        float(scipy_stats.f.sf(spread / expected, dfn, dfd)),
        float(scipy_stats.f.sf(critical / doubled, dfn, dfd)),
    )


def _calibrates(run: JobRun) -> bool:
    """A finished run of 3 or more launches with the figures a calibration pools."""
    return (
        run.status == RunStatus.finished
        and run.unit == Unit.launch
        and len(run.values) >= CALIBRATION_MIN_LAUNCHES
        and {Metric.var_within_launch, Metric.tok_per_s_mean, Metric.measured_runs}
        <= set(run.metrics)
    )


def _last_measured(run: JobRun) -> float:
    return max(run.times, default=-math.inf)


def _pooled(runs: Sequence[JobRun], newest: float) -> Calibration:
    """One family's runs pooled, weighted by their degrees of freedom; the stack they share
    (a stack key they disagree on says so)."""
    entries = []
    stack: dict[str, str] = {}
    for run in runs:
        metrics = run.metrics
        launch_var = float(np.var(np.log(run.values), ddof=1))
        within = metrics[Metric.var_within_launch] / metrics[Metric.tok_per_s_mean] ** 2
        per_launch = metrics[Metric.measured_runs] / len(run.values)
        entries.append((launch_var, within, per_launch, len(run.values) - 1.0))
        for name, value in run.captured().items():
            if name.startswith(STACK) and stack.setdefault(name, value) != value:
                stack[name] = "(differs between calibration runs)"
    df = sum(e[3] for e in entries)

    def weighted(i: int) -> float:
        return sum(e[i] * e[3] for e in entries) / df

    return Calibration(
        weighted(0),
        weighted(1),
        weighted(2),
        df,
        tuple(run.run_id for run in runs),
        within_df=sum(e[3] + 1 for e in entries) * (weighted(2) - 1),
        measured_unix=newest if math.isfinite(newest) else math.nan,
        stack=stack,
        launch_s=float(np.mean([run.metrics.get(Metric.server_ready_s, math.nan) for run in runs])),
        run_s=float(np.mean([run.metrics.get(Metric.wall_s, math.nan) for run in runs])),
    )


def why_not_applicable(calibration: Calibration, run: JobRun, alpha: float) -> Optional[str]:
    """Why a calibration's launch variance does not apply to a single-launch arm: measured
    beyond CALIBRATION_MAX_AGE_H from the arm (or at an unknown time), a stack captured
    otherwise than the calibration's, a run-to-run spread that is not the calibration's
    (two-sided F test on log values at ``alpha``), or launches of the arm's configuration
    that spread more than it predicts (:func:`launch_test`); None when it applies."""
    if calibration.launch_variance_p >= LAUNCH_VARIANCE_SHOWN_ALPHA:
        return (
            "its launch means do not spread more than their runs explain (launch-to-launch "
            f"CV {math.sqrt(calibration.between_var):.2%}; F test p={calibration.launch_variance_p:.2g}"
            f" on {calibration.df:g} degrees of freedom, at {LAUNCH_VARIANCE_SHOWN_ALPHA:g}), so "
            "it bounds no launch offset: calibrate with more launches"
        )
    hours = _age_h(calibration, run)
    if hours is None:
        return f"its age against {run.name} is unknown (no measurement times)"
    if abs(hours) > CALIBRATION_MAX_AGE_H:
        return (
            f"it was {_age(calibration, run)} ({run.name}), beyond the "
            f"{CALIBRATION_MAX_AGE_H / 24:.0f}-day limit: calibrate again (stats.launches=3 or more)"
        )
    ours = _stack(run)
    differs = [
        f"{k} {calibration.stack[k]} vs {v}"
        for k, v in sorted(ours.items())
        if k in calibration.stack and calibration.stack[k] != v
    ]
    if differs:
        return f"its stack differs from {run.name}'s ({'; '.join(differs)})"
    logs = np.log(np.asarray(run.values, float))
    if logs.size >= 2 and calibration.within_var > 0 and calibration.within_df > 0:
        ratio = float(logs.var(ddof=1)) / calibration.within_var
        tail = scipy_stats.f.cdf(ratio, logs.size - 1, calibration.within_df)
        p = 2 * min(tail, 1 - tail)
        if p < alpha:
            return (
                f"{run.name}'s run-to-run spread (CV {math.sqrt(logs.var(ddof=1)):.1%}) is not "
                f"the calibration's ({math.sqrt(calibration.within_var):.1%}; F test p={p:.3g}): "
                "the server was not in the state it was calibrated in"
            )
    test = launch_test(calibration, run)
    if test is not None and not test.consistent:
        return (
            f"the launches of {run.name}'s configuration vary more than it predicts: "
            f"{test.describe()}"
        )
    return None


def _age_h(calibration: Calibration, run: JobRun) -> Optional[float]:
    """Hours from the calibration's newest value to the arm's first; None when unknown."""
    if not run.times or math.isnan(calibration.measured_unix):
        return None
    return (min(run.times) - calibration.measured_unix) / 3600


def _age(calibration: Calibration, run: JobRun) -> str:
    hours = _age_h(calibration, run)
    if hours is None:
        return "age unknown"
    if hours < 0:
        return (
            "measured after these arms"
            if -hours < 48
            else f"measured {-hours / 24:.0f} days after these arms"
        )
    return (
        f"measured {hours:.1f} h before" if hours < 48 else f"measured {hours / 24:.0f} days before"
    )


def _alpha_of(c: Comparison) -> float:
    return round(1 - c.confidence, 12)


def account_for_launches(
    pairs: Sequence[tuple[JobRun, JobRun]],
    comparisons: Sequence[Comparison],
    known: dict[tuple[str, ...], Calibration],
) -> None:
    """Before :func:`decide`: a comparison of single-launch arms on different servers is tested against the
    launch-to-launch variance of both arms' families when calibration runs measured it
    (Satterthwaite's degrees of freedom), else its verdict is marked as holding for these
    launches only."""
    for (base, arm), c in zip(pairs, comparisons, strict=True):
        if not c.testable or base.unit != Unit.run or arm.unit != Unit.run:
            continue
        if same_server(base, arm):
            c.note(
                NoteKind.one_server,
                "both arms ran on one server launch: its offset is common to both, so "
                "launch-to-launch variance does not enter their difference",
            )
            continue
        first, second = known.get(family_key(base)), known.get(family_key(arm))
        refused = [
            f"calibration {', '.join(r[:8] for r in cal.runs)} not used: {reason}"
            for cal, run in ((first, base), (second, arm))
            if cal is not None and (reason := why_not_applicable(cal, run, CALIBRATION_CHECK_ALPHA))
        ]
        for reason in refused:
            c.note(NoteKind.calibration_refused, reason)
        if first is None or second is None or refused:
            c.launches_only = True
            c.note(
                NoteKind.launches_only,
                "one launch per arm and no launch variance known for this server family: the runs "
                "say something of these launches only (shown apart), not of the configurations; "
                "measure launch by launch (a sweep's sequential comparison) or calibrate with "
                "stats.launches=3 or more",
            )
            continue
        tests = [launch_test(cal, run) for cal, run in ((first, base), (second, arm))]
        var_base, var_arm = (
            cal.mean_var(len(run.values)) for cal, run in ((first, base), (second, arm))
        )
        if first is second:  # one estimate for both arms: its own degrees of freedom
            df = first.df
        else:
            df = (var_base + var_arm) ** 2 / (var_base**2 / first.df + var_arm**2 / second.df)
        use_launch_level_error(c, var_base + var_arm, df)
        sources = sorted({r[:8] for f in (first, second) for r in f.runs})
        c.note(
            NoteKind.launch_variance,
            f"tested against the launch-to-launch variance of calibration runs {', '.join(sources)} "
            f"({_age(first, base)}, within {CALIBRATION_MAX_AGE_H / 24:.0f} days; its stack and "
            "run-to-run spread checked against the arms'; its launch variance, told from its run "
            f"noise at p={max(first.launch_variance_p, second.launch_variance_p):.2g}, used as "
            f"measured with its {df:.0f} degrees of freedom); against each arm's launches: "
            + "; ".join(
                _launch_finding(run, test) for run, test in zip((base, arm), tests, strict=True)
            ),
        )


def _launch_finding(run: JobRun, test: Optional[LaunchTest]) -> str:
    """What the launches of ``run``'s configuration say of the calibration's launch variance
    (``test``; None without an earlier launch)."""
    if test is None:
        return f"{run.name} not tested: no earlier launch of this configuration"
    return f"{run.name} {test.describe()}"


def compare_arms(
    pairs: Sequence[tuple[Arm, Arm]],
    *,
    confidence: float,
    threshold: float,
    power: float,
    factor: Optional[str] = None,
    calibration: Optional[dict[tuple[str, ...], Calibration]] = None,
) -> list[Comparison]:
    """Compare each pair as one family (simultaneous intervals); list drift, account for
    launch-to-launch variance (:func:`account_for_launches`), refuse to compare arms whose
    values are of different units, and refuse to attribute a difference to the declared
    factor when it did not engage in one of the arms."""
    comparisons = []
    for base, arm in pairs:
        comparison = compare(
            base.values,
            arm.values,
            confidence=confidence,
            threshold=threshold,
            power=power,
            baseline_name=base.label,
            candidate_name=arm.label,
        )
        if base.unit != arm.unit and comparison.testable:
            comparison.verdict = Verdict.cannot_test
            comparison.ci_low = comparison.ci_high = math.nan
            comparison.note(
                NoteKind.cannot_test,
                f"cannot test: {base.label} has one value per {base.unit}, {arm.label} one per "
                f"{arm.unit}; their spreads differ in kind. Measure both with the same stats.launches",
            )
        comparisons.append(comparison)
    runs = [(b.run, a.run) for b, a in pairs]
    account_for_launches(runs, comparisons, calibration or {})
    time_drift(runs, comparisons)
    decide(comparisons)
    for (base, arm), comparison in zip(pairs, comparisons, strict=True):
        if comparison.testable:
            comparison.plan = repetition_plan(base.run, arm.run, comparison, calibration or {})
        for difference in drift(base, arm, factor):
            comparison.note(NoteKind.stack_drift, f"drift: {difference}")
        missed = [
            a.label
            for a in (base, arm)
            if factor and a.run.engagement(factor) == Engagement.not_engaged
        ]
        if missed:
            comparison.attributable = False
            comparison.note(
                NoteKind.not_engaged,
                f"{factor} did not engage in {', '.join(missed)}: the difference is not "
                f"attributed to {factor}",
            )
    return comparisons


def launch_spread(
    base: JobRun, arm: JobRun, known: dict[tuple[str, ...], Calibration]
) -> Optional[tuple[float, float]]:
    """(within, between) launch CV of a pair: measured by the arms themselves when they had
    several launches, else by their families' calibration runs; None when unknown."""
    runs = (base, arm)
    if all(r.unit == Unit.launch for r in runs):
        names = (Metric.var_within_launch, Metric.var_between_launch, Metric.tok_per_s_mean)
        if not all(name in r.metrics for r in runs for name in names):
            return None

        def pooled_cv(variance: str) -> float:
            return math.sqrt(
                sum(r.metrics[variance] / r.metrics[Metric.tok_per_s_mean] ** 2 for r in runs) / 2
            )

        return pooled_cv(Metric.var_within_launch), pooled_cv(Metric.var_between_launch)
    families = [known.get(family_key(r)) for r in runs]
    if any(f is None for f in families):
        return None
    cals = [f for f in families if f is not None]
    within = sum(c.within_var for c in cals) / 2
    between = sum(c.between_var for c in cals) / 2
    return math.sqrt(within), math.sqrt(between)


def repetition_plan(
    base: JobRun, arm: JobRun, comparison: Comparison, known: dict[tuple[str, ...], Calibration]
) -> Optional[RepetitionPlan]:
    """The cheapest launches x runs per arm that find the threshold effect, from the pair's
    variance within and between launches and the arms' launch and run times."""
    runs = (base, arm)
    spread = launch_spread(base, arm, known)
    costs = (Metric.server_ready_s, Metric.wall_s)
    if spread is None or not all(name in r.metrics for r in runs for name in costs):
        return None
    plan = plan_repetitions(
        within_cv=spread[0],
        between_cv=spread[1],
        effect=comparison.threshold,
        launch_s=sum(r.metrics[Metric.server_ready_s] for r in runs) / 2,
        run_s=sum(r.metrics[Metric.wall_s] for r in runs) / 2,
        warmup_runs=int(float(base.params.get("stats.warmup_runs", 0))),
        alpha=round(1 - comparison.confidence, 12),
        family=comparison.family,
        power=comparison.power,
    )
    if plan is not None:
        comparison.note(
            NoteKind.repetitions,
            f"to find {comparison.threshold:.1%}: {plan.launches} launches x {plan.runs} runs per arm, "
            f"about {plan.cost_s / 60:.0f} min per arm (power {plan.power:.2f}, family of "
            f"{comparison.family})",
        )
    return plan


def use_sequence(c: Comparison, record: SequentialRecord) -> None:
    """The comparison's interval and verdict from its sequence's last look: the repeated
    interval, which holds over all the looks the sequence made."""
    if not record.looks:
        return
    last = record.looks[-1]
    c.ratio, c.ci_low, c.ci_high, c.ci_level = last.ratio, last.ci_low, last.ci_high, last.level
    c.verdict, c.launches_only, c.within_launch = last.verdict, False, None
    # The arms took turns ABBA, which balances a linear drift; fitting one to a few
    # launches would only spend their degrees of freedom. A step they straddle unevenly
    # still confounds them.
    c.drift = None
    c.confounded = bool(
        c.step and not c.step.separable and c.verdict in (Verdict.faster, Verdict.slower)
    )
    c.confounded_by = Confounder.step
    # What a fixed design would need no longer applies: the sequence planned its own.
    c.mde = c.runs_needed = c.plan = None
    replaced = {
        NoteKind.undetectable,
        NoteKind.launches_only,
        NoteKind.repetitions,
        NoteKind.drift_fitted,
        *([] if c.confounded else [NoteKind.confounded]),
    }
    c.notes = [n for n in c.notes if n.kind not in replaced]
    design = record.design
    c.note(
        NoteKind.sequential,
        f"measured until decided: {len(record.looks)} look(s) at {last.launches_baseline}+"
        f"{last.launches_candidate} launches in ABBA order, {last.server_s / 60:.1f} server-min"
        + (
            f" ({record.runs_per_launch} runs per launch after the first look)"
            if record.runs_per_launch
            else ""
        )
        + f"; stopped: {record.stop}"
        + (
            f" (to find {design.design_effect:.1%} with power {design.power:g} it would take "
            f"{record.planned_launches} launches per arm)"
            if record.planned_launches and record.stop != StopReason.decided
            else ""
        )
        + ". The interval is repeated over the looks "
        f"({design.spending} spending of {design.alpha:.3g}), so it holds whichever look stopped",
    )


def judge_sequences(
    pairs: Sequence[tuple[Arm, Arm]],
    comparisons: Sequence[Comparison],
    sequences: Mapping[str, Sequence[SequentialComparison]],
) -> None:
    """Each comparison whose two runs a sweep measured until decided judged as that sweep
    judged them (:func:`use_sequence`): launches gathered until an interval decided, then
    tested as if their number had been fixed, would claim what the sequence did not.
    ``sequences``: by sweep (parent run id), the comparisons it measured sequentially,
    matched by the two runs' config fingerprints within that sweep."""
    for (base, arm), comparison in zip(pairs, comparisons, strict=True):
        sweep = base.run.tags.get(Tag.parent)
        if sweep is None or arm.run.tags.get(Tag.parent) != sweep:
            continue
        key = tuple(a.run.tags.get(Tag.config_fingerprint) for a in (base, arm))
        for sequence in sequences.get(sweep, ()):
            if (sequence.baseline, sequence.candidate) == key:
                use_sequence(comparison, sequence.record)
            elif (sequence.candidate, sequence.baseline) == key:  # compared the other way
                use_sequence(comparison, reversed_record(sequence.record))


# Reproduction of published results ---------------------------------------------------------


def hardware_matches(reference: Any, arms: Sequence[Arm]) -> tuple[bool, str]:
    wanted = reference.hardware
    measured = sorted({a.run.tags.get(Tag.hardware, "unknown") for a in arms})
    same = bool(arms) and all(
        wanted.gpu in a.run.tags.get(Tag.gpu_name, "")
        and a.run.tags.get(Tag.gpu_count) == str(wanted.gpu_count)
        for a in arms
    )
    return same, ", ".join(measured)


@dataclass
class ClaimCheck:
    id: str
    text: str
    published_ratio: float
    comparison: Optional[Comparison]
    status: ClaimStatus
    # Interval of measured / published ratio, with the published figures' own noise and
    # simultaneous over the claims measured: "contradicted" exactly when it excludes 1.
    agreement_low: Optional[float] = None
    agreement_high: Optional[float] = None
    # With one launch per arm and no launch variance known: what the runs say of these
    # launches, kept apart; the status is then inconclusive.
    within_launch: Optional[ClaimStatus] = None


# What a published point is made of: a claim between points that differ in one of these
# alone is about that change.
_POINT_SETTINGS = ("stack", "attention_backend", "allreduce_backend", "speculative")


def _stack_of(arm: Arm) -> str:
    """The stack an arm's runs were served by, with the engine's release where it was read
    (its version up to what it adds in parentheses)."""
    tags = arm.run.tags
    version = tags.get(Tag.engine_version)
    release = f" ({version.split(' (')[0]})" if version else ""
    return f"{tags.get(Tag.stack, 'unknown')}{release}"


_ONE_STACK = (
    "not judged: both sides ran {stack}, and the claim is about a change of stack (the "
    "older stack's stand-in did not reach its runs)"
)


def _one_stack_for_two(reference: Any, claim: Any, base: Arm, cand: Arm) -> bool:
    """The claim's points differ in stack, and its two stand-ins ran the same one."""
    points = reference.points[claim.baseline], reference.points[claim.candidate]
    stack = base.run.tags.get(Tag.stack)
    return (
        points[0].get("stack") != points[1].get("stack")
        and stack is not None
        and stack == cand.run.tags.get(Tag.stack)
    )


def _stand_in_scope(reference: Any, claim: Any, by_point: Mapping[str, Optional[Arm]]) -> str:
    """What a claim's runs on other hardware than the reference's can say of it."""
    base, cand = by_point.get(claim.baseline), by_point.get(claim.candidate)
    if base is None or cand is None:
        missing = [p for p in (claim.baseline, claim.candidate) if by_point.get(p) is None]
        return f"not measured: no run stands in for {' or '.join(missing)}"
    if base is cand:
        return "not measured: one run stands for both points (nothing here differs as they do)"
    points = reference.points[claim.baseline], reference.points[claim.candidate]
    changed = [s for s in _POINT_SETTINGS if points[0].get(s) != points[1].get(s)]
    if _one_stack_for_two(reference, claim, base, cand):
        return _ONE_STACK.format(stack=_stack_of(base))
    direction = "judged by direction only"
    if changed == ["stack"]:
        return (
            f"a stand-in, {direction}: the same engine and model on a stand-in for the older "
            f"stack and one for the newer here ({_stack_of(base)} against {_stack_of(cand)}); "
            "it tells whether what differs between these changes the baseline's speed here, "
            f"nothing about the published stacks themselves ({points[0].stack} against "
            f"{points[1].stack}) or how large the change is on the reference hardware"
        )
    both = f" of a claim that changes {', '.join(changed)} at once" if len(changed) > 1 else ""
    return (
        f"a stand-in{both}, {direction} (is the same kind of change faster or "
        "slower here); how large it is on the reference hardware cannot be told here"
    )


def _judge(
    check: ClaimCheck,
    c: Comparison,
    published: tuple[float, float],
    family: int,
    confidence: float,
    same_hardware: bool,
) -> None:
    """A measured claim's agreement with the published ratio (both noises, Bonferroni over
    the ``family``) and its status; one launch per arm holds the status for those launches."""
    se_published, df_published = published
    se = math.sqrt(c.se**2 + se_published**2)
    df = se**4 / (c.se**4 / c.df + se_published**4 / df_published)
    half = float(scipy_stats.t.ppf(1 - round(1 - confidence, 12) / (2 * family), df)) * se
    gap = c.log_diff - math.log(check.published_ratio)
    agreement = math.exp(gap - half), math.exp(gap + half)
    check.agreement_low, check.agreement_high = agreement
    finding = c.within_launch if c.launches_only else c.finding
    status = _claim_status(check.published_ratio, agreement, finding, same_hardware)
    if c.launches_only:
        check.within_launch, check.status = status, ClaimStatus.inconclusive
    else:
        check.status = status


def _claim_status(
    published_ratio: float,
    agreement: tuple[float, float],
    finding: Optional[Verdict],
    same_hardware: bool,
) -> ClaimStatus:
    """On the reference's hardware, contradicted by a ratio that disagrees beyond the noise
    (``agreement``: measured / published); on other hardware, by a verdict the other way;
    reproduced by one the published way."""
    published_way = Verdict.faster if published_ratio > 1 else Verdict.slower
    other_way = Verdict.slower if published_ratio > 1 else Verdict.faster
    if same_hardware and (agreement[0] > 1 or agreement[1] < 1):
        return ClaimStatus.contradicted
    if not same_hardware and finding == other_way:
        return ClaimStatus.contradicted
    if finding == published_way:
        return ClaimStatus.reproduced
    return ClaimStatus.inconclusive


def published_noise(reference: Any) -> tuple[float, float]:
    """(standard error, degrees of freedom) of a published log ratio: each published figure
    is a mean of ``method.measured_runs`` runs whose CV is unknown but at most
    ``method.published_cv_max``."""
    runs = int(reference.method.measured_runs)
    cv = float(reference.method.published_cv_max)
    return cv * math.sqrt(2 / runs), 2.0 * (runs - 1)


# A run, an arm or a config that stands in for published points.
StandIn = TypeVar("StandIn")


def stand_ins(
    points: Iterable[str], stand_for: Sequence[tuple[StandIn, Optional[str]]]
) -> dict[str, Optional[StandIn]]:
    """Each published point's stand-in, of (stand-in, its reference_point tag: points
    comma-separated): one that stands for the point alone (an older stack's baseline) before
    one that stands for it among others (one baseline for both stacks); else the last."""
    tagged = [(stand_in, (tag or "").split(",")) for stand_in, tag in stand_for]
    found: dict[str, Optional[StandIn]] = {}
    for point in points:
        matching = [(stand_in, its) for stand_in, its in tagged if point in its]
        found[point] = (
            min(reversed(matching), key=lambda match: len(match[1]))[0] if matching else None
        )
    return found


def reproduce(
    reference: Any,
    arms: Sequence[Arm],
    *,
    confidence: float,
    threshold: float,
    power: float,
    calibration: Optional[dict[tuple[str, ...], Calibration]] = None,
    same_hardware: bool,
) -> tuple[dict[str, Optional[Arm]], list[ClaimCheck]]:
    """Map runs to published points (by their reference_point tag) and judge the claims as
    one family. On the reference's hardware: contradicted when measured and published ratios
    differ beyond both their noises (the published figures' own included; Bonferroni over
    the claims measured); else reproduced when the measured interval excludes 1 on the
    published side (the verdict says faster or slower, as the claim does); else inconclusive;
    or not measured. On other hardware the runs are stand-ins, and only a claim's direction
    is judged: reproduced when the verdict goes the published way, contradicted when it goes
    the other, else inconclusive - the published size is not compared (each claim's text
    says so, and what its stand-ins can tell: for a claim between stacks alone, whether the
    newer stack changes the speed here, nothing of the published stacks themselves)."""
    by_point = stand_ins(
        reference.points, [(a, a.run.tags.get(Tag.reference_point, "")) for a in arms]
    )
    checks, comparisons = [], []
    for claim in reference.claims:
        ratio = (
            reference.points[claim.candidate].tok_per_s / reference.points[claim.baseline].tok_per_s
        )
        base, cand = by_point.get(claim.baseline), by_point.get(claim.candidate)
        comparison = None
        one_stack = (
            base is not None
            and cand is not None
            and _one_stack_for_two(reference, claim, base, cand)
        )
        if not same_hardware:
            text = f"{claim.text}; on this hardware: " + _stand_in_scope(reference, claim, by_point)
        elif one_stack and base is not None:
            text = f"{claim.text}; " + _ONE_STACK.format(stack=_stack_of(base))
        else:
            text = claim.text
        if base and cand and base is not cand and not one_stack:
            comparison = compare(
                base.values,
                cand.values,
                confidence=confidence,
                threshold=threshold,
                power=power,
                baseline_name=claim.baseline,
                candidate_name=claim.candidate,
            )
            comparisons.append(comparison)
        checks.append(ClaimCheck(claim.id, text, ratio, comparison, ClaimStatus.not_measured))
    measured = [(by_point[c.baseline], by_point[c.candidate]) for c in comparisons]
    runs = [(b.run, a.run) for b, a in measured if a and b]
    account_for_launches(runs, comparisons, calibration or {})
    time_drift(runs, comparisons)
    decide(comparisons)
    se_published, df_published = published_noise(reference)
    family = sum(c.testable for c in comparisons)
    for check in checks:
        if check.comparison is not None and check.comparison.testable:
            published = (se_published, df_published)
            _judge(check, check.comparison, published, family, confidence, same_hardware)
    return by_point, checks
