"""A sweep's comparisons measured until decided (specexp.core.sequential): the arms of each
comparison that run on servers of their own take turns launch by launch, in balanced rounds
(ABBA), and every comparison is looked at after each round; an arm launches again only
while a comparison it is in is undecided and within budget. Runs per launch are planned
after the first look from the spreads it measured.

Only the sweep's own process can run this (its jobs stay open between their launches);
with other launchers the sweep measures each job's configured launches whole.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import numpy as np
from hydra.core.config_loader import ConfigLoader
from omegaconf import DictConfig

from specexp.analysis.arms import Selector
from specexp.core.schemas import JobOrder
from specexp.core.sequential import (
    Costs,
    SequentialComparison,
    SequentialDesign,
    SequentialRecord,
    Spending,
    StopReason,
    after_round,
    plan_runs,
)
from specexp.output import terminal
from specexp.run.job_run import OpenJobs
from specexp.run.session import JobSession
from specexp.sweep.plan import Plan, PlannedJob, Step, compose_jobs


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


def sequential_pairs(
    plan: Plan, baseline: Optional[str], order: JobOrder, in_process: bool
) -> list[tuple[PlannedJob, PlannedJob]]:
    """(baseline, candidate) jobs to measure sequentially: with a FACTOR=VALUE baseline, each
    job paired with the baseline job that shares its other factors, where their servers
    differ, or are not shared (launch-to-launch variance enters their difference), and
    sequential comparisons are enabled; none unless the sweep interleaves in its own process."""
    selector = Selector(baseline) if baseline else None
    if selector is None or selector.factor is None or order != JobOrder.interleaved:
        return []
    if not in_process:
        return []
    wanted = f"{selector.factor}={selector.value}"

    def others(job: PlannedJob) -> tuple[str, ...]:
        return tuple(sorted(f for f in job.factors if not f.startswith(f"{selector.factor}=")))

    bases = {others(j): j for j in plan.to_run if wanted in j.factors}
    return [
        (bases[others(job)], job)
        for job in plan.to_run
        if wanted not in job.factors
        and others(job) in bases
        and (job.server != bases[others(job)].server or not job.job.config.multirun.reuse_servers)
        and job.job.config.stats.sequential.enabled
        and bases[others(job)].job.config.stats.sequential.enabled
        # A capacity search's runs are at rates of its choosing: its estimate is its verdict.
        and job.job.config.concurrency.search is None
    ]


def with_launch_budget(
    plan: Plan,
    pairs: list[tuple[PlannedJob, PlannedJob]],
    config_loader: ConfigLoader,
    sweep_config: DictConfig,
) -> list[tuple[PlannedJob, PlannedJob]]:
    """The paired jobs recomposed with their launch budget as ``stats.launches`` (each
    launch one part the sweep can stop after), in the plan and in the pairs."""
    jobs = _arms(pairs)
    budget = [
        [*j.overrides, f"stats.launches={j.job.config.stats.sequential.max_launches}"] for j in jobs
    ]
    recomposed = compose_jobs(config_loader, sweep_config, budget)
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


def _launch_values(session: Optional[JobSession]) -> tuple[list[float], list[float]]:
    """(mean tok/s of each launch's measured runs, variance of log tok/s inside each launch
    with several runs)."""
    if session is None:
        return [], []
    by_launch: dict[int, list[float]] = {}
    for run in session.result.runs:
        if not run.warmup and run.ok:
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
    the next round reverses; a look at every undecided comparison after each round. The
    jobs still open when every comparison has stopped are summarised and ended."""
    family = len(pairs)
    sequences = [_Running(b, c, SequentialRecord(design_for(b, family))) for b, c in pairs]
    jobs = _arms(pairs)
    sessions: dict[int, JobSession] = {}
    spent_s = {id(j): 0.0 for j in jobs}
    last_s = {id(j): 0.0 for j in jobs}
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
            started = time.monotonic()
            launch(Step(job, round_index), [f"multirun.part_runs={runs[id(job)]}"])
            last_s[id(job)] = time.monotonic() - started
            spent_s[id(job)] += last_s[id(job)]
            found = next(
                (s for s in open_jobs.sessions() if s.job.config_fingerprint() == job.fingerprint),
                None,
            )
            if found is not None:
                sessions[id(job)] = found
        for sequence in (s for s in sequences if s.open):
            _look(sequence, sessions, spent_s, last_s, runs)
    open_jobs.finish_all()
    return [s.outcome() for s in sequences]


def _look(
    sequence: _Running,
    sessions: dict[int, JobSession],
    spent_s: dict[int, float],
    last_s: dict[int, float],
    runs: dict[int, int],
) -> None:
    arms = (sequence.baseline, sequence.candidate)
    record = sequence.record
    measured = [_launch_values(sessions.get(id(j))) for j in arms]
    means = [m for m, _ in measured]
    if any(sessions.get(id(j)) is None or sessions[id(j)].result.error for j in arms):
        record.stop = StopReason.failed
        return
    if len(means[0]) < record.design.min_launches:
        return
    config = sequence.baseline.job.config
    result = after_round(
        record,
        means[0],
        means[1],
        server_s=sum(spent_s[id(j)] for j in arms),
        next_round_s=sum(last_s[id(j)] for j in arms),
        server_budget_s=config.stats.sequential.max_server_minutes * 60,
    )
    terminal.console.print(
        f"look {len(record.looks)}: {sequence.candidate.label} vs {sequence.baseline.label}, "
        f"{result.launches_baseline}+{result.launches_candidate} launches: "
        f"x{result.ratio:.3f} [{result.ci_low:.3f}, {result.ci_high:.3f}] ({result.level:.2%}) "
        f"{result.verdict}" + (f"; stops: {record.stop}" if record.stop else "")
    )
    if record.stop is None and record.runs_per_launch is None:
        # A launch's start-up: its step's time less its runs'.
        session = sessions[id(sequence.baseline)]
        latest = max(r.launch for r in session.result.runs)
        walls = [r.wall_s for r in session.result.runs if r.launch == latest]
        plan_runs(
            record,
            means,
            [w for _, within in measured for w in within],
            config.stats.measured_runs,
            Costs(
                max(last_s[id(sequence.baseline)] - sum(walls), 0.0),
                float(np.mean(walls)),
                config.stats.warmup_runs,
            ),
        )
        for job in arms:
            runs[id(job)] = record.runs_per_launch or runs[id(job)]
