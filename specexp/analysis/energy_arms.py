"""Energy per output token between arms, as tok/s is compared: each arm's joules per token
with its interval (over runs, or launch means with several launches), each candidate
against its baseline by the same statistics (:func:`~specexp.analysis.comparisons.compare_arms`:
Welch on logs, simultaneous intervals, drift, launches accounted for), and where speculation
stops saving energy - its own crossover, set beside the speed crossover.

Lower is better for energy, so a comparison's verdict is read in energy's words ("faster"
there is more joules per token, :data:`ENERGY_WORDS`), and the crossover is found on its
reciprocal, tokens per joule, where higher is better as for tok/s. Launch-to-launch variance
of energy is not calibrated: single launches on servers of their own say something of those
launches only. Speed and energy disagree when their crossovers' intervals do not overlap
(conservative: the two are read from the same runs).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Mapping, Optional, Sequence

from specexp.analysis import crossover
from specexp.analysis.arms import Arm, SelectionError, Selector, baseline_pairs, make_arms
from specexp.analysis.capacity import has_capacity
from specexp.analysis.comparisons import compare_arms
from specexp.analysis.crossover import Crossover
from specexp.analysis.results import JobRun, Metric, Tag
from specexp.core.records import History, Record, Version
from specexp.core.schemas.stats import StatsConfig
from specexp.core.stats.comparison import Comparison
from specexp.core.stats.summaries import summarize
from specexp.core.stats.verdicts import Verdict
from specexp.host.energy import WINDOW_ERROR, EnergySource

# What the energy crossover is found on (higher is better, as tok/s).
TOKENS_PER_JOULE = "tokens per joule"
# A comparison's verdict on joules per token, in energy's words.
ENERGY_WORDS: Mapping[str, str] = {
    Verdict.faster: "more energy per token",
    Verdict.slower: "less energy per token",
}


def in_energy_words(text: str) -> str:
    """A verdict (or "one launch each says" cell) on joules per token, in energy's words."""
    for verdict, words in ENERGY_WORDS.items():
        text = text.replace(str(verdict), words)
    return text


@dataclass
class CrossoverAgreement:
    """Where speculation stops paying in speed and in energy, set side by side: they
    disagree when their intervals do not overlap; None when either has no interval."""

    candidate: str
    baseline: str
    disagree: Optional[bool]
    statement: str


@dataclass
class EnergyReport(Record):
    """What a sweep's runs say of energy per output token."""

    HISTORY = History(
        "energy report", (Version(1, "energy per token: arms, comparisons, crossovers"),)
    )

    # Per job run (its name): where its energy came from, or "not measured".
    sources: dict[str, str]
    arms: list[Arm] = field(default_factory=list)
    comparisons: list[Comparison] = field(default_factory=list)
    crossovers: list[Crossover] = field(default_factory=list)
    agreements: list[CrossoverAgreement] = field(default_factory=list)
    # The shortest run the meter resolves, and the runs shorter than it.
    resolution: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def measured(self) -> bool:
        return bool(self.arms)

    @property
    def statement(self) -> str:
        """Energy's headline: not measured (and why), or its source and resolution."""
        if not self.measured:
            return (
                "not measured: no NVML energy counter or GPU power "
                "reading for the server, no readable RAPL counter on this machine - no "
                "energy figures, no energy comparison"
            )
        sources = sorted(set(self.sources.values()) - {EnergySource.none})
        return f"per output token, from the {' and the '.join(sources)}; {self.resolution}"


def resolution(runs: Sequence[JobRun]) -> str:
    """The shortest run the meter resolves to WINDOW_ERROR (the longest of the jobs': each
    end is interpolated across one reading, or one step of the counter where it moves more
    slowly), and how many measured runs were shorter."""
    windows = [
        r.metrics[Metric.energy_shortest_window_s]
        for r in runs
        if Metric.energy_shortest_window_s in r.metrics
    ]
    if not windows:
        return "the meter's resolution was not recorded"
    text = (
        f"the meter resolves a run's energy to {WINDOW_ERROR:.0%} from {max(windows):.1f} s "
        "(each end of a run is interpolated across one reading, or one step of the counter "
        "where it moves more slowly)"
    )
    short = {r.name: r.metrics.get(Metric.energy_unresolved_runs, 0.0) for r in runs}
    short = {name: n for name, n in short.items() if n}
    if short:
        measured = sum(r.metrics.get(Metric.measured_runs, 0.0) for r in runs)
        text += (
            f"; {sum(short.values()):.0f} of {measured:.0f} measured runs were shorter (in "
            f"{', '.join(sorted(short))}): their energy may be off by more than "
            f"{WINDOW_ERROR:.0%} - longer runs (more requests) resolve it"
        )
    return text


def per_joule(arm: Arm) -> Arm:
    """The arm's values as tokens per joule: higher is better, as for tok/s."""
    run = dataclasses.replace(arm.run, values=tuple(1.0 / v for v in arm.values))
    summary = summarize(run.values, arm.summary.confidence)
    assert summary is not None  # the arm had values
    return Arm(run, arm.label, arm.factors, summary)


def _where(c: Crossover, confidence: float) -> str:
    """Where one crossover lies, with its interval, in a few words."""
    if c.estimate is None:
        place = f"pays at every level measured (to {c.levels[-1]})"
    elif c.estimate == c.levels[0] and c.effect[0] <= c.scale.no_effect:
        place = f"does not pay at {c.levels[0]}, the lowest level"
    else:
        place = f"stops paying at {c.estimate:.1f}"
    if c.ci_low is None:
        return f"{place} (no interval)"
    low = f"beyond {c.levels[-1]}" if math.isinf(c.ci_low) else f"{c.ci_low:.1f}"
    high = f"{c.ci_high:.1f}" if c.ci_high is not None else f"beyond {c.levels[-1]}"
    span = f"{low}..{high}" if low != high else low
    return f"{place} ({confidence * 100:g}% CI {span})"


def _span(c: Crossover) -> Optional[tuple[float, float]]:
    """The crossover's interval, beyond the highest level as infinity; None without one."""
    if c.ci_low is None:
        return None
    return c.ci_low, c.ci_high if c.ci_high is not None else math.inf


def agreement(speed: Crossover, energy: Crossover, confidence: float) -> CrossoverAgreement:
    """Speed's crossover (tok/s) against energy's (tokens per joule) for one pair of
    families: they disagree when their intervals do not overlap."""
    pair = f"{speed.candidate} against {speed.baseline}"
    sides = (
        f"on tok/s it {_where(speed, confidence)}; on {TOKENS_PER_JOULE} it "
        f"{_where(energy, confidence)}"
    )
    speed_span, energy_span = _span(speed), _span(energy)
    qualifier = ""
    if speed.launches_only or energy.launches_only:
        qualifier = " (as these launches measured them: one launch per arm and level)"
    elif not (speed.reliable and energy.reliable):
        qualifier = " (on levels flagged unreliable: see the crossovers)"
    if speed_span is None or energy_span is None:
        which = " and ".join(
            name for name, span in (("speed", speed_span), ("energy", energy_span)) if span is None
        )
        return CrossoverAgreement(
            speed.candidate,
            speed.baseline,
            None,
            f"whether speed and energy agree for {pair} cannot be said: {which} has no "
            f"interval; {sides}",
        )
    (speed_low, speed_high), (energy_low, energy_high) = speed_span, energy_span
    disagree = speed_high < energy_low or energy_high < speed_low
    if not disagree:
        return CrossoverAgreement(
            speed.candidate,
            speed.baseline,
            False,
            f"speed and energy agree within their intervals for {pair}{qualifier}: {sides}",
        )
    later = "speed" if speed_low > energy_high else "energy"
    between = (
        "faster there but draws more energy per token"
        if later == "speed"
        else "slower there but draws less energy per token"
    )
    return CrossoverAgreement(
        speed.candidate,
        speed.baseline,
        True,
        f"SPEED AND ENERGY DISAGREE for {pair}{qualifier}: {sides} - between the two, "
        f"{speed.candidate} is {between}",
    )


def energy_report(
    runs: Sequence[JobRun],
    energy_runs: Sequence[JobRun],
    selector: Optional[Selector],
    stats: StatsConfig,
    factor: Optional[str],
    speed_crossovers: Sequence[Crossover],
) -> EnergyReport:
    """Energy per token of a sweep's job runs (``runs``, read for tok/s; ``energy_runs``, the
    same read for joules per token): the arms, each candidate against its baseline, and with
    a crossover ``factor`` each speed crossover's energy counterpart and whether they agree.
    Capacity searches are left out (their runs are at rates of the search's choosing)."""
    report = EnergyReport(
        sources={r.name: r.tags.get(Tag.energy_source, EnergySource.none) for r in runs}
    )
    arms, _ = make_arms(
        energy_runs, label_tags=[], confidence=stats.confidence, metric=Metric.energy_j_per_token
    )
    report.arms = arms = [a for a in arms if not has_capacity(a)]
    if not arms:
        return report
    report.resolution = resolution([a.run for a in arms])
    unmetered = sorted(
        name for name, source in report.sources.items() if source == EnergySource.none
    )
    if unmetered:
        report.notes.append(f"energy not measured for {', '.join(unmetered)}")
    if selector is None:
        return report
    try:
        report.comparisons = compare_arms(
            baseline_pairs(arms, selector),
            confidence=stats.confidence,
            threshold=stats.threshold,
            power=stats.power,
            factor=selector.factor,
        )
        for c in report.comparisons:
            c.plan = None  # planned on tok/s's launch and run variance, not energy's
    except SelectionError as exc:
        report.notes.append(f"energy not compared: {exc}")
    if factor and speed_crossovers:
        found = crossover.analyse(
            [per_joule(a) for a in arms],
            selector,
            factor,
            stats.confidence,
            stats.cv_warn,
            metric=TOKENS_PER_JOULE,
        )
        by_pair = {(c.candidate, c.baseline): c for c in found}
        for speed in speed_crossovers:
            energy = by_pair.get((speed.candidate, speed.baseline))
            if energy is not None:
                report.crossovers.append(energy)
                report.agreements.append(agreement(speed, energy, stats.confidence))
    return report
