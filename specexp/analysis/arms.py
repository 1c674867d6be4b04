"""Arms and their pairing: an arm is one configuration's independent values (per launch
with several server launches, else per measured run), from one job run. Arms carry their
factors as a mapping; baselines are picked, and arms grouped and paired with them, through
it, never by parsing labels.

Look here for which runs ``specexp compare`` and a sweep's report set against which
baseline (:func:`baseline_pairs`, :func:`pair_by_factor`) and why (:func:`pairing_said`).
The comparisons themselves are in :mod:`specexp.analysis.comparisons`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Hashable, Mapping, Optional, Sequence, TypeVar

from specexp.analysis.results import JobRun, RunStatus, Tag, Unit
from specexp.core.records import History, Record, Version
from specexp.core.stats.summaries import Summary, summarize


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
