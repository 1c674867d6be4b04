"""Two configurations: the speedup as a ratio of geometric means with a confidence interval
from Welch's t on log values (Kalibera & Jones report the ratio with a CI; logs make it
symmetric), a Mann-Whitney U p-value as a second opinion, and a verdict read off the
interval with a practical threshold. The comparisons of a sweep are one family: their
intervals are simultaneous (Bonferroni, :func:`decide`). With the arms' time drift or a
step fitted (:mod:`specexp.core.stats.drift`), the comparison is made with it taken out;
where the values as measured would have said something else, the verdict is "confounded".

Look here for :class:`Comparison` (the record every report shows), :func:`compare` and
:func:`decide`, and the notes a decision writes.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

import numpy as np
from scipy import stats as scipy_stats

from specexp.core.notes import Note, NoteKind
from specexp.core.records import History, Record, Version
from specexp.core.stats.distributions import t_cdf, t_ppf, t_sf
from specexp.core.stats.drift import TimeDrift, TimeStep
from specexp.core.stats.planning import RepetitionPlan, minimum_detectable_effect, runs_needed
from specexp.core.stats.summaries import _clean
from specexp.core.stats.verdicts import (
    ROBUST_TRIM,
    Confounder,
    RobustEstimate,
    Standing,
    Verdict,
    interval,
    read_verdict,
    welch_log,
)

_CONFOUNDED = {
    Confounder.drift: Standing.confounded_by_drift,
    Confounder.step: Standing.confounded_by_step,
}


# Notes a comparison's decision writes; deciding again replaces them.
DECISION_NOTES = frozenset(
    {
        NoteKind.below_threshold,
        NoteKind.rank_disagrees,
        NoteKind.undetectable,
        NoteKind.drift_fitted,
        NoteKind.confounded,
        NoteKind.robust,
        NoteKind.step,
    }
)


def _single_launch_verdict_apart(record: dict[str, Any]) -> dict[str, Any]:
    """A comparison from before ``within_launch``, whose verdict held for one launch per arm
    only, read as :meth:`Comparison.hold_for_launches_only` has it since."""
    held = record.get("launches_only") and record["verdict"] != Verdict.cannot_test
    if "within_launch" in record or not held:
        return record
    return {**record, "within_launch": record["verdict"], "verdict": Verdict.inconclusive.value}


@dataclass
class Comparison(Record):
    """Candidate against baseline: the ratio of geometric means (candidate / baseline), its
    interval, tests and verdict - one model for all of them: Welch's t on log values, or
    with the arms' time drift fitted, the drift-adjusted difference (ANCOVA)."""

    HISTORY = History(
        "comparison",
        (
            Version(
                1,
                "the comparison, its interval, tests and verdict; robust, step, "
                "confounded_by and within_launch came later within format 1",
                ("robust", "step", "confounded_by"),
            ),
            Version(
                2,
                "within_launch: a format 1 verdict on one launch per arm from before it is read "
                "as held for those launches (in within_launch; the verdict inconclusive)",
                ("within_launch",),
                upgrade=_single_launch_verdict_apart,
            ),
        ),
    )
    DERIVED = ("change", "finding", "label")

    baseline: str
    candidate: str
    n_baseline: int
    n_candidate: int
    mean_baseline: float
    mean_candidate: float
    ratio: float
    # Interval of the ratio at ``ci_level``: simultaneous over the ``family`` of comparisons
    # decided together (Bonferroni), so the verdict can be read off it.
    ci_low: float
    ci_high: float
    p_welch: float
    p_mannwhitney: float
    p_equivalence: float
    confidence: float
    threshold: float
    log_diff: float = math.nan
    se: float = math.nan
    df: float = math.nan
    family: int = 1
    ci_level: float = math.nan
    p_welch_adjusted: Optional[float] = None
    p_equivalence_adjusted: Optional[float] = None
    verdict: Verdict = Verdict.inconclusive
    mde: Optional[float] = None
    runs_needed: Optional[int] = None
    power: float = 0.8
    # With both arms' launch and run variance known: the cheapest launches x runs per arm.
    plan: Optional[RepetitionPlan] = None
    # One launch per arm, and no launch-to-launch variance known to widen the interval
    # with: what the runs say holds for the launches measured only. It is kept here, never
    # as the verdict, which is then inconclusive.
    launches_only: bool = False
    within_launch: Optional[Verdict] = None
    # The arms' common trend in time, when they were measured on one timeline.
    drift: Optional[TimeDrift] = None
    # A step on the shared timeline (the machine changed state, or the values did).
    step: Optional[TimeStep] = None
    # With the drift (or a step) left in, the interval would say something else, or the step
    # falls where the arms change: the difference cannot be told from the timeline's,
    # whatever ``verdict`` says. ``confounded_by`` names which.
    confounded: bool = False
    confounded_by: Confounder = Confounder.drift
    # The arms differ in more than the factor compared (it did not engage in one of them):
    # the difference is not the factor's.
    attributable: bool = True
    # Beside the verdict: a test that a few slow runs do not sway (values as measured, no
    # drift or launch variance model), with at least 5 values per arm.
    robust: Optional[RobustEstimate] = None
    notes: list[Note] = field(default_factory=list)

    @property
    def change(self) -> float:
        return self.ratio - 1.0

    @property
    def testable(self) -> bool:
        return self.verdict != Verdict.cannot_test

    @property
    def finding(self) -> Verdict:
        """The verdict a reader may act on: inconclusive where drift confounds it or the
        difference is not the factor's."""
        if self.verdict.decided and (self.confounded or not self.attributable):
            return Verdict.inconclusive
        return self.verdict

    @property
    def label(self) -> Verdict | Standing:
        """The verdict, or what keeps it from being the factor's (the verdict tag)."""
        if not self.attributable:
            return Standing.not_attributable
        if self.confounded:
            return _CONFOUNDED[self.confounded_by]
        return self.verdict

    def note(self, kind: NoteKind, message: str) -> None:
        self.notes.append(Note(kind, message))

    def hold_for_launches_only(self) -> None:
        """What the interval says moves to ``within_launch``; the verdict is inconclusive."""
        self.launches_only = True
        if self.verdict != Verdict.cannot_test:
            self.within_launch, self.verdict = self.verdict, Verdict.inconclusive
        self.robust = None  # of these launches' runs too


def _alpha(confidence: float) -> float:
    """1 - confidence without the float residue (0.05, not 0.050000000000000044)."""
    return round(1 - confidence, 12)


def _why_untestable(a: np.ndarray, b: np.ndarray, names: tuple[str, str]) -> Optional[str]:
    for values, name in zip((a, b), names, strict=True):
        if values.size < 2:
            return f"{name} has {values.size} value(s): its noise cannot be estimated"
        if np.ptp(np.log(values)) == 0:
            return f"{name} has {values.size} identical values: no spread to test against"
    return None


def compare(
    baseline: Sequence[float],
    candidate: Sequence[float],
    *,
    confidence: float = 0.95,
    threshold: float = 0.01,
    power: float = 0.8,
    baseline_name: str = "baseline",
    candidate_name: str = "candidate",
) -> Comparison:
    """Compare two independent samples of a higher-is-better metric (e.g. tok/s). An arm with
    fewer than two values or none of their spread gives the verdict "cannot test"."""
    a, b = _clean(baseline), _clean(candidate)
    if (a <= 0).any() or (b <= 0).any():
        raise ValueError("values must be positive (ratios are taken on logs)")
    nan = math.nan
    result = Comparison(
        baseline=baseline_name,
        candidate=candidate_name,
        n_baseline=int(a.size),
        n_candidate=int(b.size),
        mean_baseline=float(a.mean()) if a.size else nan,
        mean_candidate=float(b.mean()) if b.size else nan,
        ratio=nan,
        ci_low=nan,
        ci_high=nan,
        p_welch=nan,
        p_mannwhitney=nan,
        p_equivalence=nan,
        confidence=confidence,
        threshold=threshold,
        power=power,
    )
    reason = _why_untestable(a, b, (baseline_name, candidate_name))
    if a.size and b.size:
        result.ratio = math.exp(float(np.log(b).mean() - np.log(a).mean()))
    if reason:
        result.verdict = Verdict.cannot_test
        result.note(NoteKind.cannot_test, f"cannot test: {reason}")
        return result
    result.log_diff, result.se, result.df = welch_log(a, b)
    if min(a.size, b.size) >= 5:
        yuen = scipy_stats.ttest_ind(np.log(b), np.log(a), equal_var=False, trim=ROBUST_TRIM)
        low, high = yuen.confidence_interval(0.5)  # its centre and spread, from scipy
        centre, half = (low + high) / 2, (high - low) / 2
        se = half / t_ppf(0.75, float(yuen.df))
        if se > 0:
            result.robust = RobustEstimate(float(centre), float(se), float(yuen.df))
    _test(result)
    result.p_mannwhitney = float(scipy_stats.mannwhitneyu(b, a, alternative="two-sided").pvalue)
    decide([result])
    return result


def _test(c: Comparison) -> None:
    """The difference's p-value and the equivalence (TOST) p-value from its estimate (see
    :func:`_estimate`)."""
    log_diff, se, df = _estimate(c)
    c.p_welch = 2 * t_sf(abs(log_diff) / se, df)
    bound = math.log1p(c.threshold)
    c.p_equivalence = float(
        max(
            t_sf((log_diff + bound) / se, df),
            t_cdf((log_diff - bound) / se, df),
        )
    )


def use_launch_level_error(c: Comparison, variance: float, df: float) -> None:
    """Test a comparison of single-launch arms against the variance of the difference of
    their means as launches vary (``variance`` on logs, estimated with ``df`` degrees of
    freedom by calibration runs), not against the run-to-run spread inside the two launches,
    which leaves the launches' own offsets out. Call :func:`decide` afterwards."""
    if not c.testable or variance <= 0:
        return
    c.se, c.df = math.sqrt(variance), df
    c.robust = None  # the run-level test leaves the launches out
    _test(c)


def decide(comparisons: Sequence[Comparison]) -> None:
    """Interval, adjusted p-values and verdict of each comparison, as one family of ``m``
    testable comparisons: each interval is at level 1 - alpha/m (Bonferroni), so the
    intervals hold together with probability >= 1 - alpha, and the verdict is read off the
    interval - faster (above 1), slower (below 1), equivalent (inside the threshold either
    way, which takes precedence), else inconclusive. A p-value below alpha after adjustment
    and an interval that excludes 1 are the same statement. With the arms' time drift
    fitted, all of them come from the drift-adjusted estimate (see :func:`_judge_drift`)."""
    testable = [c for c in comparisons if c.testable]
    family = len(testable)
    for c in testable:
        alpha = _alpha(c.confidence)
        log_diff, se, df = _estimate(c)
        _test(c)
        c.ratio = math.exp(log_diff)
        c.family, c.ci_level = family, 1 - alpha / family
        c.ci_low, c.ci_high = interval(log_diff, se, df, alpha / family)
        c.p_welch_adjusted = min(1.0, family * c.p_welch)
        c.p_equivalence_adjusted = min(1.0, 2 * family * c.p_equivalence)
        # Effects the family's test finds with the asked power, at the spread measured.
        cv = float(se / math.sqrt(1 / c.n_baseline + 1 / c.n_candidate))
        n = min(c.n_baseline, c.n_candidate)
        c.mde = minimum_detectable_effect(cv, n, alpha / family, c.power)
        c.runs_needed = runs_needed(cv, c.threshold, alpha / family, c.power)
        c.notes = [n for n in c.notes if n.kind not in DECISION_NOTES]
        c.verdict = read_verdict(c.ci_low, c.ci_high, c.threshold)
        c.confounded = False
        if c.verdict in (Verdict.faster, Verdict.slower):
            if abs(c.change) < c.threshold:
                c.note(
                    NoteKind.below_threshold,
                    f"difference below the practical threshold ({c.threshold:.1%})",
                )
            if c.p_mannwhitney >= alpha and c.drift is None:  # ranks of drifting values mislead
                c.note(
                    NoteKind.rank_disagrees,
                    f"rank test disagrees (Mann-Whitney p={c.p_mannwhitney:.3f}; with few runs it "
                    f"cannot reach {alpha:g})",
                )
        elif c.verdict == Verdict.inconclusive and c.mde is not None and c.mde > c.threshold:
            c.note(
                NoteKind.undetectable,
                f"cannot detect effects below {c.mde:.1%} with these runs; "
                f"{c.runs_needed or 'many'} runs per arm would find {c.threshold:.1%}",
            )
        if c.drift is not None and not (c.step and c.step.separable):
            _judge_drift(c, c.drift, alpha / family)
            c.robust = None  # the values as measured carry the drift
        if c.step is not None:
            _judge_step(c, c.step, alpha / family)
            c.robust = None
        if c.robust is not None:
            c.robust = _judge_robust(c, c.robust, alpha / family)
        if c.launches_only:
            c.hold_for_launches_only()


def _judge_robust(c: Comparison, robust: RobustEstimate, alpha: float) -> RobustEstimate:
    """The robust test at the family's level; a note where it says something the verdict
    does not (slow runs hiding a difference, or making one)."""
    low, high = interval(robust.log_diff, robust.se, robust.df, alpha)
    judged = dataclasses.replace(
        robust,
        ratio=math.exp(robust.log_diff),
        ci_low=low,
        ci_high=high,
        p_value=2 * t_sf(abs(robust.log_diff) / robust.se, robust.df),
        verdict=read_verdict(low, high, c.threshold),
    )
    if judged.verdict != c.verdict and (judged.verdict.decided or c.verdict.decided):
        c.note(
            NoteKind.robust,
            f"robust test (Yuen, {robust.trim:.0%} trimmed means) says {judged.verdict}: "
            f"{judged.ratio:.4f} [{low:.4f}, {high:.4f}]; a few runs far from the others "
            "sway one of the two (see the outlier notes of the arms)",
        )
    return judged


def _judge_step(c: Comparison, step: TimeStep, alpha: float) -> None:
    """A step the arms straddle unevenly: fitted where it can be told from the arms (the
    verdict then comes from the fit, and is confounded if the values as measured say
    otherwise), else the comparison is confounded by it whatever it says."""
    what = (
        f"a step in {step.source} ({step.size:+.1%}"
        if step.source != "cpu_other_cores"
        else f"a step in other work on the machine ({step.size:+.1f} cores"
    ) + f", permutation p={step.p_value:.3f}) at {_clock(step.at_unix)}"
    if not step.separable:
        c.note(
            NoteKind.step,
            f"{what} falls where the arms change (blocked order): it cannot be told from the "
            "difference between them",
        )
        if c.verdict in (Verdict.faster, Verdict.slower):
            c.confounded, c.confounded_by = True, Confounder.step
            c.note(
                NoteKind.confounded,
                f"confounded: {c.verdict} across {what}; interleave the arms "
                "(multirun.order=interleaved) or measure again on a steady machine",
            )
        return
    low, high = interval(c.log_diff, c.se, c.df, alpha)
    unadjusted = read_verdict(low, high, c.threshold)
    c.note(
        NoteKind.step,
        f"{what}, fitted as a level before and after it: {math.exp(c.log_diff):.4f} "
        f"[{low:.4f}, {high:.4f}] ({unadjusted}) without it",
    )
    if unadjusted.decided and unadjusted != c.verdict:
        c.confounded, c.confounded_by = True, Confounder.step
        c.note(NoteKind.confounded, f"confounded: {unadjusted} only across {what}")


def _clock(unix: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(unix))


def _estimate(c: Comparison) -> tuple[float, float, float]:
    """(log ratio, standard error, degrees of freedom) that the interval, p-values and
    verdict rest on: with a step fitted, the step-adjusted ones; with the arms' time drift
    fitted, the drift-adjusted ones."""
    if c.step is not None and c.step.separable:
        assert c.step.log_diff is not None and c.step.se is not None and c.step.df is not None
        return c.step.log_diff, c.step.se, c.step.df
    if c.drift is not None:
        return c.drift.log_diff, c.drift.se, c.drift.df
    return c.log_diff, c.se, c.df


def _judge_drift(c: Comparison, drift: TimeDrift, alpha: float) -> None:
    """The verdict comes from the drift-adjusted interval; if the interval without the
    adjustment claims something else, the difference between the arms cannot be told from
    the server's drift: "confounded by drift", with the figures."""
    low, high = interval(c.log_diff, c.se, c.df, alpha)
    unadjusted = read_verdict(low, high, c.threshold)
    c.note(
        NoteKind.drift_fitted,
        f"time drift {math.expm1(drift.slope_per_min):+.2%}/min (se {drift.slope_se:.2%}), taken "
        f"out of the ratio; the arms' mean times are {drift.shift_s:+.0f} s apart, which moved "
        f"it by {math.expm1(drift.bias):+.2%}: {math.exp(c.log_diff):.4f} [{low:.4f}, {high:.4f}] "
        f"({unadjusted}) before",
    )
    if unadjusted.decided and unadjusted != c.verdict:
        c.note(
            NoteKind.confounded,
            f"confounded: {unadjusted} only with the drift left in, so the difference cannot be "
            "told from the server's drift over time (interleave the arms: multirun.order=interleaved)",
        )
        c.confounded = True
