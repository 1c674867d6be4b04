"""Launch-to-launch variance: a server family's (engine, model, stack, hardware) calibration
from runs with several launches, the checks that it applies to a single-launch arm (age,
stack, run-to-run spread, the F test against the configuration's own earlier launches), and
the comparisons of single-launch arms tested against it - or held for their launches only.

Look here for the "calibration ... not used", "tested against the launch-to-launch
variance" and "one launch per arm" notes of a comparison, and for the margins that gate a
calibration (docs/statistics.md, item 4).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Mapping, Optional, Sequence

import numpy as np
from scipy import stats as scipy_stats

from specexp.analysis.results import STACK, JobRun, Metric, RunStatus, Tag, Unit
from specexp.analysis.timeline import same_server
from specexp.core.notes import NoteKind
from specexp.core.stats.comparison import Comparison, use_launch_level_error

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
