"""A sweep's comparisons measured until decided (specexp.core.sequential): the arms of each
comparison that run on servers of their own take turns launch by launch, in balanced rounds
(ABBA), and every comparison is looked at after each round; an arm launches again only
while a comparison it is in is undecided and within budget. Runs per launch are planned
after the first look from the spreads it measured.

Only the sweep's own process can run this (its jobs stay open between their launches);
with other launchers the sweep measures each job's configured launches whole.

Before the first launch, the sweep says what its budget can find: the smallest difference
the weakest of its comparisons finds with stats.power (sequential, fixed launches, runs on
one server, or nothing across single launches), at spreads measured before or assumed.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Callable, Mapping, Optional, Sequence

import numpy as np
from scipy import optimize
from scipy import stats as scipy_stats

from specexp.analysis.arms import Selector, pair_by_factor
from specexp.analysis.calibration import Calibration
from specexp.core.schemas.multirun import JobOrder
from specexp.core.sequential import (
    Costs,
    SequentialComparison,
    SequentialDesign,
    SequentialRecord,
    Spending,
    StopReason,
    after_round,
    critical_values,
    crossing_probability,
    plan_runs,
)
from specexp.core.stats.distributions import t_isf
from specexp.core.stats.planning import minimum_detectable_effect
from specexp.output.terminal.screen import console
from specexp.run.job_run import OpenJobs
from specexp.run.session import JobSession
from specexp.sweep.plan import ComposeJob, Plan, PlannedJob, Step, compose_jobs


@dataclass
class _Running:
    """A comparison being measured sequentially: its arms and its record so far."""

    baseline: PlannedJob
    candidate: PlannedJob
    record: SequentialRecord

    @property
    def open(self) -> bool:
        return self.record.stop is None

    def outcome(self) -> SequentialComparison:
        return SequentialComparison(
            self.baseline.fingerprint,
            self.candidate.fingerprint,
            self.baseline.label,
            self.candidate.label,
            self.record,
        )


# What a budget finds, said before it is spent ---------------------------------------------


@dataclass(frozen=True)
class Spreads:
    """Coefficients of variation of throughput: of a launch's offset, and of a run inside
    a launch; ``source`` says where they come from."""

    between_cv: float
    within_cv: float
    source: str

    def launch_var(self, runs: int) -> float:
        """Variance of one launch's mean log throughput over ``runs`` measured runs."""
        return self.between_cv**2 + self.within_cv**2 / runs


# The spreads the README's sequential figures are measured at: what a budget is judged by
# until calibration runs measure the server family's own.
ASSUMED = Spreads(0.02, 0.02, "assuming 2% launch-to-launch and 2% run-to-run spread")
# Seconds from a launch to ready, and of one run, that a budget's server-minutes are judged
# at until calibration runs measure the family's own: those docs/statistics.md's budget
# figures are simulated at (with 2 warm-ups the configured 5 runs per launch are then the
# cheapest information at the assumed spreads).
ASSUMED_LAUNCH_S, ASSUMED_RUN_S = 230.0, 10.0


def sequential_power(
    design: SequentialDesign, launch_var: float, effect: float, launches: int
) -> float:
    """Power of a sequence against a relative ``effect`` when one launch's mean varies by
    ``launch_var`` and it can afford ``launches`` per arm (its budget of server time may
    stop it before ``design.max_launches``): its looks after every round, each at the
    boundary its Lan-DeMets spending gives it, the last spending what is left (as the
    sequence does when out of time); the exact crossing probability on the information the
    launches carry, the drift read on Student's t at the last look; 0 when they do not
    reach the first look."""
    if launches < design.min_launches:
        return 0.0
    looks = range(design.min_launches, launches + 1)
    carried = [n / design.max_launches for n in looks]
    spent_on = [*carried[:-1], 1.0]
    criticals = critical_values(spent_on, design.alpha, design.spending)
    last = criticals[-1]
    widen = t_isf(float(scipy_stats.norm.sf(last)), looks[-1] - 1) / last
    drift = math.log1p(effect) / (widen * math.sqrt(2 * launch_var / design.max_launches))
    return crossing_probability(carried, criticals, drift)


# The largest relative effect a budget line looks for (+1000%, an eleven-fold ratio).
LARGEST_DETECTABLE = 10.0


def sequential_detectable(design: SequentialDesign, launch_var: float) -> Optional[float]:
    """Smallest relative effect a sequence of up to ``max_launches`` finds with
    ``design.power`` (:func:`sequential_power`); never below the design effect, since the
    sequence stops once it has the launches that effect needs. None where it does not find
    even :data:`LARGEST_DETECTABLE` (two launches per arm at 99.999%: Student's t on one
    degree of freedom)."""

    def shortfall(effect: float) -> float:
        return sequential_power(design, launch_var, effect, design.max_launches) - design.power

    if shortfall(LARGEST_DETECTABLE) < 0:
        return None
    return max(optimize.brentq(shortfall, 0.0, LARGEST_DETECTABLE), design.design_effect)


class Design(StrEnum):
    """How a sweep's comparisons are measured, which sets what their budget can find."""

    sequential = "measured until decided"
    launches = "fixed launches"
    one_server = "runs on one shared server"
    single_launches = "one launch per arm"


@dataclass(frozen=True)
class Affordable:
    """What a sequence's server time buys at its family's launch and run times, ``measured``
    by calibration runs or assumed (``source`` says which): launches per arm, and the power
    they have at the printed effect and at the threshold (:func:`sequential_power`)."""

    launches: int
    costs: Costs
    source: str
    at_effect: float
    at_threshold: float
    minutes_needed: float  # server-minutes the design's max_launches take, both arms
    measured: bool = True

    def below(self, power: float) -> bool:
        """Whether the power at the printed effect, as printed (2 decimals), misses ``power``."""
        return round(self.at_effect, 2) < power


@dataclass(frozen=True)
class BudgetPower:
    """The smallest difference the weakest of a sweep's comparisons finds with ``power``
    (None: none it can decide across launches), against the threshold."""

    design: Design
    detectable: Optional[float]
    threshold: float
    power: float
    launches: int  # per arm, at most
    runs: int  # per launch, as configured
    spreads: Spreads
    server_minutes: Optional[float] = None  # a sequence's server-time budget
    affordable: Optional[Affordable] = None  # what that budget buys (sequential designs)

    @property
    def short(self) -> bool:
        """The budget cannot find a difference of the threshold's size, or its server time
        does not buy the power it states."""
        return (
            self.detectable is None
            or self.detectable > self.threshold
            or (self.affordable is not None and self.affordable.below(self.power))
        )

    @property
    def statement(self) -> str:
        """One line: what the budget finds, under what spreads, and whether that misses
        the threshold."""
        if self.detectable is None and self.design == Design.sequential:
            line = (
                f"budget: {self.design}, at most {self.launches} launch(es) x {self.runs} runs "
                f"per arm, finds no difference up to {LARGEST_DETECTABLE:.0%} with power "
                f"{self.power:g} ({self.spreads.source}); it cannot find the "
                f"{self.threshold:.1%} threshold"
            )
        elif self.detectable is None:
            line = (
                f"budget: {self.design}, so no comparison is decided across launches unless a "
                "calibration of the server family applies (stats.launches=3 measures it)"
            )
        else:
            allowed = (
                f", if {self.server_minutes:g} server-min allow"
                if self.server_minutes is not None
                else ""
            )
            line = (
                f"budget: finds a {self.detectable:.1%} difference with power {self.power:g} "
                f"({self.design}, at most {self.launches} launch(es) x {self.runs} runs per "
                f"arm{allowed}; {self.spreads.source})"
            )
        if self.detectable is not None and self.detectable > self.threshold:
            line += f"; it cannot find the {self.threshold:.1%} threshold"
        bought = self.affordable
        if bought is not None and self.detectable is not None:
            line += (
                f"; {self.server_minutes:g} server-min allow {bought.launches} launch(es) per "
                f"arm at {bought.costs.launch_s:.0f} s a launch and {bought.costs.run_s:.0f} s "
                f"a run ({bought.source}): power {bought.at_effect:.2f} at "
                f"{self.detectable:.1%}, {bought.at_threshold:.2f} at the "
                f"{self.threshold:.1%} threshold"
            )
            if bought.below(self.power):
                line += (
                    f" - below {self.power:g}: {self.launches} launches per arm take "
                    f"stats.sequential.max_server_minutes={math.ceil(bought.minutes_needed)}"
                )
            if not bought.measured:
                line += (
                    "; the power is unknown until calibration runs (stats.launches=3) measure "
                    "this family's launch and run times"
                )
        return line


def fixed_detectable(
    design: Design, spreads: Spreads, launches: int, runs: int, alpha: float, power: float
) -> Optional[float]:
    """Smallest effect Welch's test finds with ``power`` at a fixed design: launch means
    (several launches), or runs on one server (no launch offset between the arms); None for
    one launch per arm on servers of their own, whose offsets the runs cannot tell from a
    difference."""
    if design == Design.launches:
        return minimum_detectable_effect(
            math.sqrt(spreads.launch_var(runs)), launches, alpha, power
        )
    if design == Design.one_server:
        return minimum_detectable_effect(spreads.within_cv, runs, alpha, power)
    return None


def baseline_jobs(plan: Plan, baseline: Optional[str]) -> list[tuple[PlannedJob, PlannedJob]]:
    """(baseline, candidate) jobs the sweep report will compare: with a FACTOR=VALUE
    baseline, each job paired with the baseline job that shares its other factors, by the
    report's own rule (analysis.arms.pair_by_factor: within a sweep its factors set the
    engine, model, workload and stack); capacity searches left out (their runs are at rates
    of the search's choosing: the estimate is their verdict)."""
    selector = Selector(baseline) if baseline else None
    if selector is None or selector.factor is None:
        return []
    factor = selector.factor

    def factors(job: PlannedJob) -> dict[str, str]:
        return dict(f.split("=", 1) for f in job.factors if "=" in f)

    def others(job: PlannedJob) -> tuple[tuple[str, str], ...]:
        return tuple(sorted((k, v) for k, v in factors(job).items() if k != factor))

    return [
        (base, job)
        for base, job in pair_by_factor(plan.to_run, selector, factors, others)
        if job.job.config.concurrency.search is None
    ]


def sequential_pairs(
    plan: Plan, baseline: Optional[str], order: JobOrder, in_process: bool
) -> list[tuple[PlannedJob, PlannedJob]]:
    """The baseline pairs to measure sequentially: those whose servers differ, or are not
    shared (launch-to-launch variance enters their difference), where sequential
    comparisons are enabled; none unless the sweep interleaves in its own process."""
    if order != JobOrder.interleaved or not in_process:
        return []
    return [
        (base, job)
        for base, job in baseline_jobs(plan, baseline)
        if (job.server != base.server or not job.job.config.multirun.reuse_servers)
        and job.job.config.stats.sequential.enabled
        and base.job.config.stats.sequential.enabled
    ]


def known_spreads(
    job: PlannedJob, known: Mapping[tuple[str, ...], Calibration], hardware: str
) -> Spreads:
    """The spreads of the job's server family on this ``hardware`` where calibration runs
    measured them, else the assumed ones."""
    config = job.job.config
    found = known.get((job.job.engine.name, config.model.name, config.stack.name, hardware))
    if found is None:
        return ASSUMED
    return Spreads(
        math.sqrt(found.between_var),
        math.sqrt(found.within_var),
        f"spreads of calibration runs {', '.join(r[:8] for r in found.runs)}",
    )


def affordable(
    job: PlannedJob,
    design: SequentialDesign,
    spreads: Spreads,
    effect: float,
    known: Mapping[tuple[str, ...], Calibration],
    hardware: str,
) -> Affordable:
    """What the sequence's server-minutes buy at the launch and run times calibration runs
    of the job's family measured, else at the assumed ones (both arms alike; a round is one
    launch of each, stopped before a round would pass the budget, as :func:`run_sequences`
    does)."""
    config = job.job.config
    found = known.get((job.job.engine.name, config.model.name, config.stack.name, hardware))
    measured = found is not None and math.isfinite(found.launch_s) and math.isfinite(found.run_s)
    if found is not None and measured:
        times = (found.launch_s, found.run_s)
        source = f"measured by calibration runs {', '.join(r[:8] for r in found.runs)}"
    else:
        times = (ASSUMED_LAUNCH_S, ASSUMED_RUN_S)
        source = (
            "assumed, as docs/statistics.md's budget figures: not measured for this server "
            "family yet"
        )
    costs = Costs(*times, config.stats.warmup_runs)
    runs = config.stats.measured_runs
    round_s = 2 * costs.launch(runs)
    budget_s = config.stats.sequential.max_server_minutes * 60
    launches = min(design.max_launches, int(budget_s // round_s))
    launch_var = spreads.launch_var(runs)
    return Affordable(
        launches,
        costs,
        source,
        sequential_power(design, launch_var, effect, launches),
        sequential_power(design, launch_var, design.threshold, launches),
        design.max_launches * round_s / 60,
        measured,
    )


def budget_power(
    plan: Plan,
    baseline: Optional[str],
    sequential: Sequence[tuple[PlannedJob, PlannedJob]],
    known: Mapping[tuple[str, ...], Calibration] = MappingProxyType({}),
    hardware: str = "",
) -> Optional[BudgetPower]:
    """What the weakest of the sweep's comparisons can find with its budget, at the
    spreads calibration runs measured for its server family on this ``hardware`` (``known``,
    by family key), else assumed ones: the sequential pairs (as :func:`with_launch_budget`
    returned them) with their sequential budget, the others with their fixed launches and
    runs. None for a sweep without baseline pairs."""
    pairs = baseline_jobs(plan, baseline)
    in_sequence = {(id(b), id(c)) for b, c in sequential}
    found = []
    for base, job in pairs:
        spreads = known_spreads(base, known, hardware)
        stats = job.job.config.stats
        settings = stats.sequential
        if (id(base), id(job)) in in_sequence:
            design = design_for(job, len(sequential))
            effect = sequential_detectable(design, spreads.launch_var(stats.measured_runs))
            found.append(
                BudgetPower(
                    Design.sequential,
                    effect,
                    stats.threshold,
                    stats.power,
                    settings.max_launches,
                    stats.measured_runs,
                    spreads,
                    settings.max_server_minutes,
                    None
                    if effect is None
                    else affordable(base, design, spreads, effect, known, hardware),
                )
            )
            continue
        launches = min(stats.launches, base.job.config.stats.launches)
        if launches > 1:
            kind = Design.launches
        elif job.server == base.server and job.job.config.multirun.reuse_servers:
            kind = Design.one_server
        else:
            kind = Design.single_launches
        # The report compares every pair as one family (Bonferroni).
        alpha = round(1 - stats.confidence, 12) / len(pairs)
        detectable = fixed_detectable(
            kind, spreads, launches, stats.measured_runs, alpha, stats.power
        )
        found.append(
            BudgetPower(
                kind,
                detectable,
                stats.threshold,
                stats.power,
                launches,
                stats.measured_runs,
                spreads,
            )
        )
    return max(
        found,
        key=lambda b: math.inf if b.detectable is None else b.detectable,
        default=None,
    )


def with_launch_budget(
    plan: Plan,
    pairs: list[tuple[PlannedJob, PlannedJob]],
    compose: ComposeJob,
) -> list[tuple[PlannedJob, PlannedJob]]:
    """The paired jobs recomposed with their launch budget as ``stats.launches`` (each
    launch one part the sweep can stop after), in the plan and in the pairs."""
    jobs = _arms(pairs)
    budget = [
        [*j.overrides, f"stats.launches={j.job.config.stats.sequential.max_launches}"] for j in jobs
    ]
    recomposed = compose_jobs(compose, budget)
    if recomposed.errors:
        plan.errors += recomposed.errors
        return []
    new = dict(zip(map(id, jobs), recomposed.jobs, strict=True))
    for old, fresh in zip(jobs, recomposed.jobs, strict=True):
        fresh.factors, fresh.server_launch = old.factors, old.server_launch
    plan.jobs = [new.get(id(j), j) for j in plan.jobs]
    return [(new[id(b)], new[id(c)]) for b, c in pairs]


def sequential_summary(pairs: Sequence[tuple[PlannedJob, PlannedJob]]) -> str:
    settings = pairs[0][0].job.config.stats.sequential
    return (
        f"sequential: {len(pairs)} comparison(s) measured until decided, launch by launch "
        f"(ABBA), {settings.min_launches} to {settings.max_launches} launches per arm, at most "
        f"{settings.max_server_minutes:g} server-minutes each"
    )


def _arms(pairs: Sequence[tuple[PlannedJob, PlannedJob]]) -> list[PlannedJob]:
    """The jobs of the pairs, each once, in order."""
    return list({id(j): j for pair in pairs for j in pair}.values())


def design_for(job: PlannedJob, family: int) -> SequentialDesign:
    stats = job.job.config.stats
    settings = stats.sequential
    return SequentialDesign(
        alpha=round(1 - stats.confidence, 12) / family,
        threshold=stats.threshold,
        design_effect=settings.design_effect or 2 * stats.threshold,
        power=stats.power,
        spending=Spending(settings.spending),
        min_launches=settings.min_launches,
        max_launches=settings.max_launches,
    )


def _launch_values(session: JobSession, through: int) -> tuple[list[float], list[float]]:
    """(mean tok/s of each launch's measured runs, variance of log tok/s inside each launch
    with several runs), of the launches up to ``through`` (a resumed sweep replays its
    rounds on launches taken back, past the round it replays)."""
    by_launch: dict[int, list[float]] = {}
    for run in session.result.runs:
        if not run.warmup and run.ok and run.launch <= through:
            by_launch.setdefault(run.launch, []).append(run.tok_per_s)
    means = [float(np.mean(v)) for _, v in sorted(by_launch.items())]
    within = [float(np.var(np.log(v), ddof=1)) for v in by_launch.values() if len(v) > 1]
    return means, within


def run_sequences(
    pairs: Sequence[tuple[PlannedJob, PlannedJob]],
    launch: Callable[[Step, list[str]], None],
    open_jobs: OpenJobs,
    seed: int,
) -> list[SequentialComparison]:
    """Round after round, each arm of an undecided comparison one launch, in a seeded order
    the next round reverses; a look at every undecided comparison after each round. A job
    whose killed attempt completed launches takes them back when it opens (its first part)
    and measures only the parts it lacks: the rounds and looks are replayed on them as the
    killed sweep made them, then go on. The jobs still open when every comparison has
    stopped are summarised and ended."""
    family = len(pairs)
    sequences = [_Running(b, c, SequentialRecord(design_for(b, family))) for b, c in pairs]
    jobs = _arms(pairs)
    sessions: dict[int, JobSession] = {}
    runs = {id(j): j.job.config.stats.measured_runs for j in jobs}
    rng, forward = random.Random(seed), list(range(len(jobs)))
    for round_index in range(max(j.job.config.stats.launches for j in jobs)):
        active = {id(j) for s in sequences if s.open for j in (s.baseline, s.candidate)}
        if not active:
            break
        if round_index % 2 == 0:
            rng.shuffle(forward)
        turn = forward if round_index % 2 == 0 else list(reversed(forward))
        for job in (jobs[i] for i in turn if id(jobs[i]) in active):
            launch(Step(job, round_index), [f"multirun.part_runs={runs[id(job)]}"])
            found = next(
                (s for s in open_jobs.sessions() if s.job.config_fingerprint() == job.fingerprint),
                None,
            )
            if found is not None:
                sessions[id(job)] = found
        for sequence in (s for s in sequences if s.open):
            _look(sequence, sessions, round_index, runs)
    _fail_halves(sequences, sessions, open_jobs)
    open_jobs.finish_all()
    return [s.outcome() for s in sequences]


def _fail_halves(
    sequences: Sequence[_Running], sessions: dict[int, JobSession], open_jobs: OpenJobs
) -> None:
    """The arm still open of each comparison that stopped for its other arm's failure (a
    full disk, a server that died) ended failed, not finished with the launches it had: a
    resumed sweep would skip it as done and lose the comparison; failed, both arms are
    measured again."""
    for sequence in sequences:
        if sequence.record.stop == StopReason.failed:
            for job in (sequence.baseline, sequence.candidate):
                held = sessions.get(id(job))
                if held is not None:
                    open_jobs.fail(held, "its comparison stopped: the other arm failed")


def _look(
    sequence: _Running,
    sessions: dict[int, JobSession],
    round_index: int,
    runs: dict[int, int],
) -> None:
    """The look after round ``round_index``, on the arms' launches and server time up to it."""
    record = sequence.record
    held = [sessions.get(id(j)) for j in (sequence.baseline, sequence.candidate)]
    if any(s is None or s.result.error for s in held):
        record.stop = StopReason.failed
        return
    arms = [s for s in held if s is not None]
    measured = [_launch_values(s, round_index) for s in arms]
    means = [m for m, _ in measured]
    if len(means[0]) < record.design.min_launches:
        return
    config = sequence.baseline.job.config
    result = after_round(
        record,
        means[0],
        means[1],
        server_s=sum(t for s in arms for i, t in s.launch_s.items() if i <= round_index),
        next_round_s=sum(s.launch_s.get(round_index, 0.0) for s in arms),
        server_budget_s=config.stats.sequential.max_server_minutes * 60,
    )
    console.print(
        f"look {len(record.looks)}: {sequence.candidate.label} vs {sequence.baseline.label}, "
        f"{result.launches_baseline}+{result.launches_candidate} launches: "
        f"x{result.ratio:.3f} [{result.ci_low:.3f}, {result.ci_high:.3f}] ({result.level:.2%}) "
        f"{result.verdict}" + (f"; stops: {record.stop}" if record.stop else "")
    )
    if record.stop is None and record.runs_per_launch is None:
        # A launch's start-up: its server time less its runs'.
        baseline = arms[0]
        walls = [r.wall_s for r in baseline.result.runs if r.launch == round_index]
        plan_runs(
            record,
            means,
            [w for _, within in measured for w in within],
            config.stats.measured_runs,
            Costs(
                max(baseline.launch_s.get(round_index, 0.0) - sum(walls), 0.0),
                float(np.mean(walls)),
                config.stats.warmup_runs,
            ),
        )
        for job in (sequence.baseline, sequence.candidate):
            runs[id(job)] = record.runs_per_launch or runs[id(job)]
