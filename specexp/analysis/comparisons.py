"""Pairs of arms compared as one family: what ``specexp compare`` and a sweep's report show.
:func:`compare_arms` compares each pair, accounts for launch-to-launch variance and the
shared timeline, decides the family, plans the launches x runs that would find the
threshold, lists the stack's differences beside the declared factor and refuses to
attribute a difference to a factor that did not engage. The comparisons whose runs a sweep
measured until decided take the sweep's sequential verdict (:func:`judge_sequences`).

Look here for how a row of a comparison table came to say what it says.
"""

from __future__ import annotations

import math
from typing import Mapping, Optional, Sequence

from specexp.analysis.arms import Arm
from specexp.analysis.calibration import Calibration, account_for_launches, family_key
from specexp.analysis.results import EFFECTIVE, JobRun, Metric, Tag, Unit
from specexp.analysis.timeline import time_drift
from specexp.core.notes import NoteKind
from specexp.core.sequential import (
    SequentialComparison,
    SequentialRecord,
    StopReason,
    reversed_record,
)
from specexp.core.stats.comparison import Comparison, compare, decide
from specexp.core.stats.planning import RepetitionPlan, plan_repetitions
from specexp.core.stats.verdicts import Confounder, Verdict
from specexp.engines.records import Engagement


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
