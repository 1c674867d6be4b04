"""Multirun orchestration: plan the jobs, share servers, resume, and report on the sweep.

Hydra's basic sweeper expands the overrides; specexp's sweeper (hydra_plugins/) then hands
the job list to :func:`plan`, which composes every job first - so a bad composition fails
before any server starts - and orders jobs so that jobs with an identical server
configuration run back to back and share one launch. One parent MLflow run holds the
sweep; each job is its child. Rerunning an interrupted sweep skips jobs whose
configuration already has a finished run in the experiment.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from omegaconf import DictConfig, OmegaConf, open_dict

from specexp.config import ConfigError

def _digest(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:16]


def config_fingerprint(cfg: DictConfig) -> str:
    """Identity of what a job measures: everything but tracking and dry-run settings."""
    data = OmegaConf.to_container(cfg, resolve=True)
    for key in ("tracking", "dry_run", "multirun", "hydra"):
        data.pop(key, None)
    return _digest(data)


def server_fingerprint(cfg: DictConfig) -> str:
    """Identity of the server a job needs: its command (port aside) and environment."""
    from specexp.engines import get_engine

    launch = get_engine(cfg.engine.name).launch_spec(cfg, 0)
    return _digest({"argv": launch.argv, "env": launch.env, "launches": cfg.stats.launches})


@dataclass
class PlannedJob:
    overrides: list[str]
    cfg: DictConfig
    fingerprint: str
    server: str
    server_launch: int = 0
    finished_run_id: Optional[str] = None  # set when a finished run already exists (resume)
    label: str = ""  # the overrides that set this job apart from the others


@dataclass
class Plan:
    jobs: list[PlannedJob]
    errors: list[str] = field(default_factory=list)

    @property
    def to_run(self) -> list[PlannedJob]:
        return [j for j in self.jobs if j.finished_run_id is None]

    @property
    def server_launches(self) -> int:
        return len({j.server_launch for j in self.to_run})


def compose_jobs(config_loader: Any, sweep_config: DictConfig, job_overrides: Sequence[Sequence[str]]) -> Plan:
    """Compose and validate every job; collect errors instead of stopping at the first."""
    from specexp.runner import prepare

    jobs, errors = [], []
    for overrides in job_overrides:
        cfg = config_loader.load_sweep_config(sweep_config, list(overrides))
        with open_dict(cfg):
            del cfg["hydra"]
        try:
            prepare(cfg)
        except ConfigError as exc:
            errors.append(f"{' '.join(overrides)}: {exc}")
            continue
        jobs.append(PlannedJob(list(overrides), cfg, config_fingerprint(cfg), server_fingerprint(cfg)))
    shared = set.intersection(*(set(j.overrides) for j in jobs)) if len(jobs) > 1 else set()
    for job in jobs:
        job.label = " ".join(o for o in job.overrides if o not in shared) or " ".join(job.overrides) or "defaults"
    return Plan(jobs, errors)


def order_jobs(plan: Plan, randomize: bool, seed: int) -> None:
    """Group jobs by server (first appearance order) inside each replicate block; optionally
    shuffle the order of server configurations within each block, for bias control."""
    blocks: dict[int, list[PlannedJob]] = {}
    for job in plan.jobs:
        blocks.setdefault(int(job.cfg.replicate), []).append(job)
    ordered, launch = [], 0
    rng = random.Random(seed)
    for replicate in sorted(blocks):
        groups: dict[str, list[PlannedJob]] = {}
        for job in blocks[replicate]:
            groups.setdefault(job.server, []).append(job)
        keys = list(groups)
        if randomize:
            rng.shuffle(keys)
        for key in keys:
            for job in groups[key]:
                job.server_launch = launch
            launch += 1
            ordered += groups[key]
    plan.jobs = ordered


def mark_finished(plan: Plan, tracker: Any) -> None:
    """Resume: attach the newest finished run of each job's configuration, if there is one."""
    for job in plan.jobs:
        runs = tracker.client.search_runs(
            [tracker.experiment_id],
            f"tags.config_fingerprint = '{job.fingerprint}' and attributes.status = 'FINISHED'",
            max_results=1, order_by=["attributes.start_time DESC"])
        if runs:
            job.finished_run_id = runs[0].info.run_id


def describe(plan: Plan) -> list[str]:
    lines = [f"sweep: {len(plan.jobs)} jobs, {len(plan.to_run)} to run, "
             f"{plan.server_launches} server launch(es) needed"]
    for job in plan.jobs:
        state = f"done in run {job.finished_run_id[:8]}, skipped" if job.finished_run_id else f"server {job.server_launch}"
        lines.append(f"  {job.label}: {state}")
    return lines


def overrides_for(job: PlannedJob, parent_run_id: Optional[str]) -> list[str]:
    """The job's overrides plus what the sweep tells it: its label, parent run and server launch."""
    label = job.label.replace("'", "")
    extra = [f"multirun.server_launch={job.server_launch}", f"multirun.job_label='{label}'"]
    if parent_run_id:
        extra.append(f"multirun.parent_run_id={parent_run_id}")
    return job.overrides + extra


def dry_run_elsewhere(plan: Plan, launcher: Any) -> None:
    """Dry run of a sweep for a launcher that runs jobs elsewhere: every job's server command,
    composed here, and for Slurm the sbatch script that would be submitted. Nothing is submitted."""
    from specexp import launchers, report
    from specexp.engines import get_engine
    from specexp.runner import planned_launch

    for job in plan.to_run:
        engine = get_engine(job.cfg.engine.name)
        report.print_dry_run(job.cfg, planned_launch(job.cfg, engine), engine)
    report.console.print(f"# {type(launcher).__name__}: {len(plan.to_run)} job(s); time limit "
                         f"{launcher.params.get('timeout_min')} min each")
    if launchers.is_slurm(launcher):
        print(launchers.sbatch_preview(launcher, len(plan.to_run)), flush=True)


def run_sweep(config_loader: Any, sweep_config: DictConfig, job_overrides: list[list[str]], launcher: Any,
              max_batch_size: Optional[int] = None) -> Any:
    """Plan, check the launcher, launch the jobs (all at once, or ``max_batch_size`` at a
    time; launchers may run a batch in parallel), report."""
    import sys

    from specexp import launchers, report
    from specexp.server import POOL
    from specexp.tracking import Tracker, uri_in_force

    plan = compose_jobs(config_loader, sweep_config, job_overrides)
    first = plan.jobs[0].cfg if plan.jobs else None
    uri = uri_in_force(first.tracking.uri)[0] if first else ""
    errors = plan.errors + launchers.check(launcher, [job.cfg for job in plan.jobs], uri, max_batch_size)
    if errors:
        for error in errors:
            report.console.print(f"[red]config error:[/] {error}")
        what = (f"{len(plan.errors)} of {len(job_overrides)} jobs cannot run" if plan.errors
                else "hydra/launcher cannot run this sweep as configured")
        report.console.print(f"[red]{what}; nothing was launched[/]")
        sys.exit(2)
    settings = first.multirun
    order_jobs(plan, settings.order == "randomized", settings.seed)
    if first.dry_run and not launchers.runs_in_process(launcher):
        dry_run_elsewhere(plan, launcher)
        return []
    tracked = first.tracking.enabled and not first.dry_run
    tracker = Tracker(first.tracking.uri, first.tracking.experiment) if tracked else None
    if tracker and settings.resume:
        mark_finished(plan, tracker)
    for line in describe(plan):
        report.console.print(line)
    parent = None
    if tracker:
        parent = tracker.start(f"sweep ({len(plan.jobs)} jobs)", {
            "specexp.kind": "sweep", "jobs": str(len(plan.jobs)), "jobs_to_run": str(len(plan.to_run)),
            "planned_server_launches": str(plan.server_launches)})
        tracker.log_params({"overrides": " ".join(sys.argv[1:])})
    status, returns = "FAILED", []
    try:
        extra = launchers.job_overrides(launcher, tracker.uri if tracker else uri)
        batch = max_batch_size or len(plan.to_run) or 1
        for start in range(0, len(plan.to_run), batch):
            jobs = plan.to_run[start:start + batch]
            returns += launcher.launch([overrides_for(job, parent) + extra for job in jobs], initial_job_idx=start)
        status = "FINISHED"
    except KeyboardInterrupt:
        status = "KILLED"
        if not launchers.runs_in_process(launcher) and not launchers.is_slurm(launcher):
            launchers.stop_local_jobs()
        raise
    finally:
        POOL.close()
        if tracker:
            from specexp.compare import sweep_report

            if not launchers.is_slurm(launcher):  # Slurm jobs outlive the sweep's process
                # A job process that was killed could not end its run; its server is gone with it.
                tracker.end_children(parent, "FAILED" if status == "FINISHED" else status)
            sweep_report(tracker, parent, plan, returns, settings.baseline)
            tracker.end(status)
    return [returns]
