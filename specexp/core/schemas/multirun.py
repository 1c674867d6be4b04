"""The multirun settings: how a sweep (`python -m specexp -m ...`) runs its jobs and
reports on them, and what the sweeper sets for each job."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Optional


class JobOrder(StrEnum):
    # Arms sharing a server take turns run by run, arms with several launches launch by
    # launch, in seeded balanced rounds (ABBA): drift over time adds the same to every arm.
    interleaved = "interleaved"
    # Each job's runs back to back, jobs sharing a server next to each other: drift between
    # the arms is part of their difference (reports say so).
    blocked = "blocked"


@dataclass
class MultirunConfig:
    """How `python -m specexp -m ...` runs its jobs and reports on them."""

    # Selector of the sweep report's baseline: FACTOR=VALUE (e.g. speculative=none); null: the
    # swept factor's first value when the sweep varies one factor, else no verdicts.
    baseline: Optional[str] = None
    order: JobOrder = JobOrder.interleaved
    # Seeds the order of each round of interleaved parts.
    seed: int = 0
    reuse_servers: bool = True
    # Skip jobs that a sweep into this hydra.sweep.dir already finished (each job
    # directory's run.json names its run); a new directory measures every job.
    resume: bool = True
    # Another sweep directory whose finished jobs count as done here too (a sweep measured
    # elsewhere, or parts copied back from a lost machine into a new directory).
    resume_from: Optional[str] = None
    # With a baseline: the swept setting along which to find where the candidate stops paying.
    crossover_factor: Optional[str] = "concurrency.streams"
    # The threshold the *_switch_off speculative options draft below (a crossover's
    # recommended switch-off), so that they can be swept beside the arms they are checked on.
    switch_off_at: Optional[int] = None
    # Set by the sweeper for each job.
    parent_run_id: Optional[str] = None
    server_launch: Optional[int] = None
    job_label: Optional[str] = None
    # Interleaved: the one part of the job (see StatsConfig.parts) this invocation measures.
    part: Optional[int] = None
    # Measured runs of this part's launch, when a sequential comparison plans them.
    part_runs: Optional[int] = None
    # The job's swept settings as FACTOR=VALUE overrides (what sets it apart in the sweep).
    factors: list[str] = field(default_factory=list)
