"""The sweep report as one value, compiled purely from the sweep's job runs: its arms, their
comparisons with the baseline, where speculation stops paying, dynamic speculation checked,
and the caveats - what holds for several comparisons said once, then what is particular to
one. The terminal, the markdown description, the JSON document, the plots and the MLflow
writes all render this value; none of them computes anything of it."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Mapping, Optional, Sequence

from specexp.analysis import acceptance, crossover
from specexp.analysis.acceptance import Efficiency
from specexp.analysis.arms import Arm, SelectionError, Selector, baseline_pairs, make_arms, stack_of
from specexp.analysis.calibration import Calibration
from specexp.analysis.capacity import (
    ArmCapacity,
    CapacityComparison,
    compare_capacity,
    has_capacity,
)
from specexp.analysis.comparisons import compare_arms, judge_sequences
from specexp.analysis.crossover import Crossover, SwitchOffCheck
from specexp.analysis.energy_arms import EnergyReport, energy_report
from specexp.analysis.prompts import JobPrompts, PromptComparison, compare_prompts
from specexp.analysis.results import (
    JobRun,
    Metric,
    RunStatus,
    ServerDeath,
    Tag,
    server_deaths,
    tag_flag,
)
from specexp.analysis.schedule import DraftSchedule, draft_schedule
from specexp.analysis.surface import Surface, surfaces
from specexp.core.notes import Note, NoteKind
from specexp.core.records import History, Record, Version
from specexp.core.schemas.speculative import SpeculativeConfig, SpeculativeMethod
from specexp.core.schemas.stats import StatsConfig
from specexp.core.sequential import SequentialComparison
from specexp.core.stats.comparison import Comparison


@dataclass(frozen=True)
class Caveat:
    """A note on the comparisons: said once for all the ``subjects`` it holds for."""

    kind: NoteKind
    message: str
    subjects: tuple[str, ...]


def _range(values: Sequence[float], fmt: Callable[[float], str]) -> str:
    low, high = min(values), max(values)
    return fmt(low) if fmt(low) == fmt(high) else f"{fmt(low)} to {fmt(high)}"


def caveats(comparisons: Sequence[Comparison]) -> list[Caveat]:
    """The comparisons' notes, each said once: a note several comparisons share is one
    caveat naming them all; the effects they cannot detect, one caveat with the range."""
    said: dict[tuple[NoteKind, str], list[str]] = {}
    undetectable = [c for c in comparisons if any(n.kind == NoteKind.undetectable for n in c.notes)]
    for c in comparisons:
        for note in c.notes:
            if note.kind == NoteKind.undetectable and len(undetectable) > 1:
                continue
            said.setdefault((note.kind, note.message), []).append(c.candidate)
    found = [Caveat(kind, message, tuple(who)) for (kind, message), who in said.items()]
    if len(undetectable) > 1:
        mdes = [c.mde for c in undetectable if c.mde is not None]
        runs = [float(c.runs_needed) for c in undetectable if c.runs_needed]
        threshold = undetectable[0].threshold
        message = f"cannot detect effects below {_range(mdes, '{:.1%}'.format)} with these runs"
        if runs:
            message += f"; {_range(runs, '{:.0f}'.format)} runs per arm would find {threshold:.1%}"
        found.append(
            Caveat(NoteKind.undetectable, message, tuple(c.candidate for c in undetectable))
        )
    # Shared caveats first: they hold for most of what the report shows.
    return sorted(found, key=lambda caveat: -len(caveat.subjects))


@dataclass(frozen=True)
class Sides:
    """A comparison's two arms and the stack each ran on (a sweep's case may set the stack:
    reference_cpu's older-stack stand-ins against its baseline)."""

    baseline: str
    baseline_stack: str
    candidate: str
    candidate_stack: str


def _checks_named(record: dict[str, Any]) -> dict[str, Any]:
    """A format 5 report with its switch-off checks under their field's name."""
    return {("checks" if k == "switch_off_checks" else k): v for k, v in record.items()}


@dataclass
class SweepReport(Record):
    """What a sweep found. ``notes`` are the report's own (a baseline that matched nothing,
    runs left out); the comparisons' notes are in ``caveats``."""

    HISTORY = History(
        "sweep report",
        (
            Version(1, "arms, comparisons, crossovers, switch-off checks, notes, caveats"),
            Version(2, "prompt_comparisons: arms on a prompt set", ("prompt_comparisons",)),
            Version(3, "sequences: comparisons measured until decided", ("sequences",)),
            Version(
                4,
                "capacities and capacity_arms: capacity searches; schedule came later within "
                "format 4",
                ("capacities", "capacity_arms", "schedule"),
            ),
            Version(
                5,
                "goodput_crossovers; efficiencies and energy came later within format 5",
                ("goodput_crossovers", "efficiencies", "energy"),
            ),
            Version(
                6,
                "the switch-off checks under checks, their field's name (switch_off_checks before)",
                upgrade=_checks_named,
            ),
            Version(
                7,
                "surfaces: the crossover as a surface over concurrency and another factor; "
                "deaths (capacity searches' servers that died) came later within format 7",
                ("surfaces", "deaths"),
            ),
        ),
    )
    DERIVED = ("sides",)

    parent_run_id: str
    engine: str
    order: str
    baseline: Optional[str]
    confidence: float
    job_runs: int
    failed: int
    server_launches: int
    arms: list[Arm]
    comparisons: list[Comparison]
    skipped: list[str] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)
    crossover_factor: Optional[str] = None
    crossovers: list[Crossover] = field(default_factory=list)
    # Under an SLO, where speculation stops adding goodput (good tokens per second).
    goodput_crossovers: list[Crossover] = field(default_factory=list)
    checks: list[SwitchOffCheck] = field(default_factory=list)
    caveats: list[Caveat] = field(default_factory=list)
    # Per category and output by output, for arms measured on a prompt set.
    prompt_comparisons: list[PromptComparison] = field(default_factory=list)
    # Comparisons measured until decided: their looks, spending and stops.
    sequences: list[SequentialComparison] = field(default_factory=list)
    # Capacity-search arms: each candidate's capacity under the SLO against its baseline's.
    capacities: list[CapacityComparison] = field(default_factory=list)
    capacity_arms: list[ArmCapacity] = field(default_factory=list)
    # A sweep of draft lengths by level: the length to deploy at each.
    schedule: Optional[DraftSchedule] = None
    # Each speculative arm's speed-up as a share of its bound, and what limits it.
    efficiencies: list[Efficiency] = field(default_factory=list)
    # Energy per output token: the arms, their comparisons, its crossover beside speed's.
    energy: Optional[EnergyReport] = None
    # Speed-up per cell of concurrency x another factor (prompt length), crossover per row.
    surfaces: list[Surface] = field(default_factory=list)
    # Capacity searches' servers that died: (the job's label, the death).
    deaths: list[tuple[str, ServerDeath]] = field(default_factory=list)

    @property
    def sides(self) -> list[Sides]:
        """Each comparison's arms with their stacks, in the comparisons' order."""
        stacks = {a.label: stack_of(a) for a in self.arms}
        return [
            Sides(
                c.baseline, stacks.get(c.baseline, "?"), c.candidate, stacks.get(c.candidate, "?")
            )
            for c in self.comparisons
        ]

    @property
    def verdict_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for c in self.comparisons:
            counts[c.label] = counts.get(c.label, 0) + 1
        return dict(sorted(counts.items()))

    def families(self) -> dict[str, dict[int, Arm]]:
        if not self.crossover_factor:
            return {}
        return crossover.families(self.arms, self.crossover_factor)


@dataclass(frozen=True)
class SweepFacts:
    """What the sweep knows of itself beside its runs."""

    parent_run_id: str
    engine: str
    order: str
    baseline: Optional[str]
    crossover_factor: Optional[str]
    stats: StatsConfig
    # Each job's speculative settings, by its config fingerprint.
    speculative: Mapping[str, SpeculativeConfig]
    # The comparisons the sweep measured until decided.
    sequences: Sequence[SequentialComparison] = ()
    # Each job's model path, by its config fingerprint: an arm that serves a draft model
    # alone gives the draft's cost against the bound (acceptance.Efficiency).
    models: Mapping[str, str] = field(default_factory=dict)
    # Finished runs of the sweep's jobs from before it resumed.
    resumed: Sequence[str] = ()


def _crossovers(
    arms: Sequence[Arm],
    selector: Selector,
    facts: SweepFacts,
    calibration: Mapping[tuple[str, ...], Calibration],
) -> tuple[list[Crossover], list[SwitchOffCheck]]:
    """Where each fixed speculative family stops paying, with a recommended switch-off; and
    each dynamic family checked against the fixed arms it should follow."""
    factor, stats = facts.crossover_factor, facts.stats
    assert factor is not None
    families = crossover.families(arms, factor)

    def speculative(family: str) -> SpeculativeConfig:
        arm = next(iter(families[family].values()))
        return facts.speculative[arm.run.tags[Tag.config_fingerprint]]

    adaptive = [f for f in families if speculative(f).switch_off_at is not None]
    analysed = crossover.analyse(
        arms, selector, factor, stats.confidence, stats.cv_warn, calibration=calibration
    )
    found = [c for c in analysed if c.candidate not in adaptive]
    for result in found:
        result.recommendation = crossover.recommend(result, speculative(result.candidate))
    checks = []
    for name in adaptive:
        spec = speculative(name)
        static = dataclasses.replace(spec, switch_off_at=None)
        for result in found:
            if speculative(result.candidate) != static:
                continue
            checks.append(
                crossover.check_switch_off(
                    (name, families[name]),
                    (result.candidate, families[result.candidate]),
                    (result.baseline, families[result.baseline]),
                    spec.switch_off_at or 0,
                    stats.confidence,
                    stats.threshold,
                    calibration,
                )
            )
    return found, checks


def _efficiencies(
    pairs: Sequence[tuple[Arm, Arm]],
    comparisons: Sequence[Comparison],
    arms: Sequence[Arm],
    facts: SweepFacts,
) -> list[Efficiency]:
    """Each speculative chain arm against its bound: tau its acceptance length; c from an
    arm serving its draft model alone at the baseline's level (n-grams: no draft model,
    c = 0)."""

    def settings(arm: Arm) -> Optional[SpeculativeConfig]:
        return facts.speculative.get(arm.run.tags.get(Tag.config_fingerprint, ""))

    def model(arm: Arm) -> Optional[str]:
        return facts.models.get(arm.run.tags.get(Tag.config_fingerprint, ""))

    found = []
    for (base, arm), comparison in zip(pairs, comparisons, strict=True):
        spec, tau = settings(arm), arm.run.metrics.get(Metric.acceptance_length_mean)
        if spec is None or spec.method == SpeculativeMethod.none or tau is None:
            continue
        if spec.eagle_topk > 1 or not comparison.testable or not math.isfinite(comparison.se):
            continue  # a tree's tau is not the chain's; an untested speed-up has no error
        cost: Optional[tuple[float, float, float]] = None
        if spec.method == SpeculativeMethod.ngram:
            cost, source = (0.0, 0.0, 0.0), "n-gram lookup, no draft model"
        else:
            level = base.run.tags.get("concurrency")
            drafts = [
                a
                for a in arms
                if spec.draft_model
                and model(a) == spec.draft_model
                and (s := settings(a)) is not None
                and s.method == SpeculativeMethod.none
                and a.run.tags.get("concurrency") == level
            ]
            source = "no arm serves the draft model alone at this level"
            if drafts:
                draft = drafts[0]
                cost = (
                    base.summary.mean / draft.summary.mean,
                    acceptance.log_mean_se(base.values),
                    acceptance.log_mean_se(draft.values),
                )
                source = f"{draft.label} served alone"
        found.append(
            acceptance.efficiency(
                baseline=base.label,
                candidate=arm.label,
                candidate_run_id=arm.run_id,
                gamma=spec.num_draft_tokens,
                tau=tau,
                speedup=comparison.ratio,
                speedup_log_se=comparison.se,
                df=comparison.df,
                confidence=facts.stats.confidence,
                cost=cost,
                cost_source=source,
            )
        )
    return found


def _goodput_crossovers(
    runs: Sequence[JobRun], selector: Selector, facts: SweepFacts
) -> list[Crossover]:
    """Where each speculative family stops adding goodput: on the difference of the means,
    since goodput is 0 where nothing meets the SLO. Capacity searches are left out (their
    runs are at rates of the search's choosing)."""
    assert facts.crossover_factor is not None
    arms, _ = make_arms(
        runs, label_tags=[], confidence=facts.stats.confidence, metric=Metric.goodput_tok_per_s
    )
    return crossover.analyse(
        [a for a in arms if not has_capacity(a)],
        selector,
        facts.crossover_factor,
        facts.stats.confidence,
        facts.stats.cv_warn,
        metric=Metric.goodput_tok_per_s,
        scale=crossover.Scale.difference,
    )


def limited_as(overall: Comparison, compared: PromptComparison) -> PromptComparison:
    """The per-category verdicts limited as the arms' overall one is: the same launches and
    the same timeline lie under them."""
    for row in compared.rows:
        for limit in ("confounded", "attributable"):
            setattr(row.comparison, limit, getattr(overall, limit))
        if overall.launches_only:
            row.comparison.hold_for_launches_only()
    return compared


def _compare_with_baseline(
    report: SweepReport,
    pairs: Sequence[tuple[Arm, Arm]],
    facts: SweepFacts,
    calibration: Mapping[tuple[str, ...], Calibration],
    prompts: Mapping[str, JobPrompts],
) -> None:
    """Each arm against its baseline: the comparisons (those measured until decided with
    their looks), the draft schedule, the efficiencies against the bound, and per category
    on a prompt set."""
    stats = facts.stats
    report.comparisons = compare_arms(
        pairs,
        calibration=dict(calibration),
        confidence=stats.confidence,
        threshold=stats.threshold,
        power=stats.power,
        factor=Selector(facts.baseline).factor if facts.baseline else None,
    )
    if facts.crossover_factor:
        report.schedule = draft_schedule(
            pairs,
            report.comparisons,
            facts.speculative,
            {a.run_id: a.run.tags.get(Tag.config_fingerprint, "") for a in report.arms},
            facts.crossover_factor,
        )
    report.efficiencies = _efficiencies(pairs, report.comparisons, report.arms, facts)
    report.sequences = list(facts.sequences)
    judge_sequences(pairs, report.comparisons, {facts.parent_run_id: facts.sequences})
    report.prompt_comparisons = [
        limited_as(
            overall,
            compare_prompts(
                prompts[base.run_id],
                prompts[arm.run_id],
                names=(base.label, arm.label),
                confidence=stats.confidence,
                threshold=stats.threshold,
                power=stats.power,
            ),
        )
        for (base, arm), overall in zip(pairs, report.comparisons, strict=True)
        if base.run_id in prompts and arm.run_id in prompts
    ]


def server_launches(children: Sequence[JobRun]) -> int:
    """The servers a sweep's jobs started: each of a job's launches (a job measured launch by
    launch, or calibrated, starts one per launch) when it did not reuse a server, and one
    more for each server that died under a capacity search (its replacement)."""
    return sum(
        int(r.metrics.get(Metric.launches, 1))
        for r in children
        if tag_flag(r.tags.get(Tag.server_reused)) is False
    ) + sum(len(server_deaths(r.tags)) for r in children)


def compile_sweep_report(
    facts: SweepFacts,
    children: Sequence[JobRun],
    resumed: Sequence[JobRun],
    calibration: Mapping[tuple[str, ...], Calibration],
    prompts: Mapping[str, JobPrompts] = MappingProxyType({}),
    goodput_runs: Sequence[JobRun] = (),
    energy_runs: Sequence[JobRun] = (),
) -> SweepReport:
    """The report on a sweep's job runs (``children``, and the finished runs of jobs it
    resumed), compared with the baseline when one is configured; arms measured on a prompt
    set (``prompts``, by run id) are compared per category and output by output too; the
    same runs read for their goodput (``goodput_runs``, when measured under an SLO) give
    the crossover on goodput; read for their energy per token (``energy_runs``, where
    metered), energy's comparisons and crossover."""
    stats = facts.stats
    # A resumed job's run is this sweep's (its directory's earlier attempt finished it): it
    # pairs with the jobs measured now as if one sweep had measured them all.
    ours = [
        dataclasses.replace(r, tags={**r.tags, Tag.parent: facts.parent_run_id}) for r in resumed
    ]
    runs = [*children, *ours]
    arms, skipped = make_arms(
        runs, label_tags=[], confidence=stats.confidence, metric=Metric.tok_per_s
    )
    report = SweepReport(
        parent_run_id=facts.parent_run_id,
        engine=facts.engine,
        order=facts.order,
        baseline=facts.baseline,
        confidence=stats.confidence,
        job_runs=len(children),
        failed=sum(1 for r in children if r.status != RunStatus.finished),
        server_launches=server_launches(children),
        arms=arms,
        comparisons=[],
        skipped=skipped,
        crossover_factor=facts.crossover_factor,
    )
    selector = Selector(facts.baseline) if facts.baseline else None
    searched = [a for a in arms if has_capacity(a)]
    if searched:
        # Their runs are at rates the search chose: their tok/s is not one quantity to compare.
        report.arms = arms = [a for a in arms if not has_capacity(a)]
    if selector and searched:
        try:
            report.capacities = compare_capacity(
                baseline_pairs(searched, selector), stats.confidence
            )
        except SelectionError as exc:
            report.notes.append(Note(NoteKind.no_baseline, str(exc)))
    report.capacity_arms = [ArmCapacity.of(a) for a in searched]
    # Every job's, finished or not: a job whose servers died may have died of it.
    report.deaths = [
        (r.name, death)
        for r in sorted(runs, key=lambda r: r.name)
        for death in server_deaths(r.tags)
    ]
    if selector and arms:
        try:
            _compare_with_baseline(
                report, baseline_pairs(arms, selector), facts, calibration, prompts
            )
        except SelectionError as exc:
            report.notes.append(Note(NoteKind.no_baseline, str(exc)))
    if skipped:
        report.notes.append(
            Note(NoteKind.left_out, f"{len(skipped)} run(s) left out: {'; '.join(skipped)}")
        )
    if selector and facts.crossover_factor and arms:
        report.crossovers, report.checks = _crossovers(arms, selector, facts, calibration)
        report.goodput_crossovers = _goodput_crossovers(goodput_runs, selector, facts)
        report.surfaces = surfaces(
            arms,
            report.comparisons,
            report.crossovers,
            selector,
            facts.crossover_factor,
            stats.confidence,
        )
    if arms:
        report.energy = energy_report(
            runs, energy_runs, selector, stats, facts.crossover_factor, report.crossovers
        )
    report.caveats = caveats(report.comparisons)
    return report
