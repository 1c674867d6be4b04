"""Running a sweep: plan it (specexp.sweep.plan), check that the launcher can run it,
launch the jobs - whole, or part by part taking turns - and report. What it says and
writes (the plan's lines, the parent run, the report) is its observers'
(specexp.sweep.observer: the console and the tracker).

specexp's sweeper (hydra_plugins/) expands the overrides and hands the job list to
:func:`run_sweep`. One parent MLflow run holds the sweep; each job is its child, and the
sweep report (verdicts against the baseline, the crossover) is logged on the parent.
Rerunning an interrupted sweep into the same hydra.sweep.dir skips the jobs it finished there
(multirun.resume_from=DIR: those another sweep directory finished too).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from hydra.core.utils import JobReturn, JobStatus
from rich.markup import escape

from specexp.analysis.calibration import calibrations
from specexp.analysis.results import Artifact, RunStatus, Tag
from specexp.core.redaction import redact_text
from specexp.core.schemas.run import RunConfig
from specexp.core.sequential import SequentialComparison, StopReason
from specexp.host import capture, failure, interrupt
from specexp.output.terminal.dry_run import print_dry_run
from specexp.output.terminal.loggers import hide_internal_overrides
from specexp.output.terminal.screen import console
from specexp.run import launchers
from specexp.run.events import Emitter
from specexp.run.job_run import OpenJobs
from specexp.run.launchers import LauncherKind, launcher_kind
from specexp.serving.server import POOL
from specexp.sweep.observer import (
    SweepConsole,
    SweepEnded,
    SweepEvent,
    SweepPlanned,
    SweepTracker,
    publish_left_report,
    say_left_to_upload,
    say_refused,
)
from specexp.sweep.plan import (
    ComposeJob,
    Plan,
    PlannedJob,
    Step,
    compose_jobs,
    default_baseline,
    mark_finished,
    order_jobs,
    order_summary,
    overrides_for,
    plan_steps,
    tracked_runs,
)
from specexp.sweep.sequential import (
    budget_power,
    run_sequences,
    sequential_pairs,
    sequential_summary,
    with_launch_budget,
)
from specexp.tracking.address import uri_in_force, uri_problem
from specexp.tracking.journal import journals_under
from specexp.tracking.store import TrackingStore


def dry_run_elsewhere(plan: Plan, launcher: Any) -> None:
    """Dry run of a sweep for a launcher that runs jobs elsewhere: every job's server command,
    composed here, and for Slurm the sbatch script that would be submitted. Nothing is submitted."""
    for planned in plan.to_run:
        launch = planned.job.planned_launch()
        print_dry_run(planned.job, launch, planned.job.predicted_resolution(launch))
    console.print(
        f"# {type(launcher).__name__}: {len(plan.to_run)} job(s); time limit "
        f"{launcher.params.get('timeout_min')} min each"
    )
    if launcher_kind(launcher) == LauncherKind.slurm:
        print(launchers.sbatch_preview(launcher, len(plan.to_run)), flush=True)


def _refuse(plan: Plan, errors: list[str], jobs: int) -> None:
    say_refused(plan, errors, jobs)
    sys.exit(2)


def _open_store(first: RunConfig) -> TrackingStore:
    """The sweep's store; one that cannot be reached is refused before anything launches (a
    sweep's report is read back from its store)."""
    try:
        return TrackingStore(first.tracking.uri, first.tracking.experiment)
    except Exception as exc:
        failure.log_traceback(exc)
        console.print(
            f"[red]MLflow store unreachable[/] ({escape(redact_text(uri_in_force(first.tracking.uri)[0]))}: "
            f"{escape(failure.one_line(exc))}); nothing was launched. Start it, or sweep "
            "untracked with tracking.enabled=false"
        )
        sys.exit(failure.STORE_DOWN)


def _launch(
    launcher: Any,
    plan: Plan,
    steps: list[Step],
    overrides: list[str],
    parent_run_id: Optional[str],
    batch: int,
) -> list[Any]:
    """Every step through the launcher, ``batch`` at a time. Hydra numbers a job's directory
    from the batch's first: a job's number is its place in the whole plan, finished jobs
    included, so a resumed sweep never writes into a finished job's directory (a batch ends
    where the numbers skip one); every part of a job goes to the same one."""
    numbers = {id(j): i for i, j in enumerate(plan.jobs)}
    returns: list[Any] = []
    start = 0
    while start < len(steps):
        first = numbers[id(steps[start].planned)]
        stop = start + 1
        while (
            stop < min(start + batch, len(steps))
            and numbers[id(steps[stop].planned)] == first + stop - start
        ):
            stop += 1
        returns += launcher.launch(
            [
                overrides_for(s.planned, parent_run_id, s.part) + overrides
                for s in steps[start:stop]
            ],
            initial_job_idx=first,
        )
        interrupt.stop_if_received()  # Hydra keeps a job's error as its return value
        start = stop
    return returns


@dataclass
class _Schedule:
    """What the sweep launches: its steps (whole jobs, or parts taking turns), and the
    pairs measured until decided, launch by launch."""

    steps: list[Step]
    pairs: list[tuple[PlannedJob, PlannedJob]]


def run_sweep(
    compose: ComposeJob,
    sweep_dir: Path,
    job_overrides: list[list[str]],
    launcher: Any,
    max_batch_size: Optional[int] = None,
) -> Any:
    """Plan (each job's overrides typed by ``compose``), check the launcher, launch the jobs
    (all at once, or ``max_batch_size`` at a time; launchers may run a batch in parallel),
    report (beside the jobs, in ``sweep_dir``)."""
    hide_internal_overrides()
    plan = compose_jobs(compose, job_overrides)
    first = _checked(plan, launcher, max_batch_size, len(job_overrides))
    if first is None:
        return []
    baseline = default_baseline(plan, first.multirun.baseline, first.multirun.crossover_factor)
    order_jobs(plan, first.multirun.order)
    if first.dry_run and launcher_kind(launcher) != LauncherKind.in_process:
        dry_run_elsewhere(plan, launcher)
        return []
    store = _open_store(first) if first.tracking.enabled and not first.dry_run else None
    tracker = SweepTracker(store, sweep_dir, first.multirun.order, console.print)
    emit: Emitter[SweepEvent] = Emitter([SweepConsole(), tracker])
    schedule = _schedule(plan, first, baseline, launcher, tracker, emit, compose)
    returns, stopped_with = _launch_all(launcher, plan, schedule, tracker, emit, max_batch_size)
    left = journals_under([sweep_dir])
    journals = (
        [*store.not_uploaded(left[Artifact.offline_journal]), *left[Artifact.report_journal]]
        if store
        else []
    )
    if journals:
        say_left_to_upload(sweep_dir, journals)
    # A failure first (the console said which: a comparison stopped, a job's own status, a
    # failed job), then what is left to upload.
    status = (
        stopped_with or jobs_status(returns) or (failure.RUN_FAILED if failed_jobs(returns) else 0)
    )
    if status or journals:
        sys.exit(status or failure.NOT_IN_STORE)
    return [returns]


def _checked(
    plan: Plan, launcher: Any, max_batch_size: Optional[int], jobs: int
) -> Optional[RunConfig]:
    """The sweep's first job's config, once the plan, the launcher and the store are
    checked (a sweep refused exits 2); None for a sweep without jobs."""
    first = plan.jobs[0].job.config if plan.jobs else None
    uri = uri_in_force(first.tracking.uri)[0] if first else ""
    configs = [j.job.config for j in plan.jobs]
    errors = plan.errors + launchers.check(launcher, configs, uri, max_batch_size)
    uri_error = uri_problem(uri) if first and first.tracking.enabled else None
    if uri_error:
        errors.append(uri_error)
    if errors:
        _refuse(plan, errors, jobs)
    if first is None:
        console.print("[yellow]the sweep has no jobs; nothing was launched[/]")
    return first


def _schedule(
    plan: Plan,
    first: RunConfig,
    baseline: Optional[str],
    launcher: Any,
    tracker: SweepTracker,
    emit: Emitter[SweepEvent],
    compose: ComposeJob,
) -> _Schedule:
    """The steps and sequential pairs, less the jobs a resumed sweep finished; the plan
    said (and the parent run started) by the observers."""
    settings, store = first.multirun, tracker.store
    in_process = launcher_kind(launcher) == LauncherKind.in_process
    pairs = sequential_pairs(plan, baseline, settings.order, in_process)
    if pairs:
        pairs = with_launch_budget(plan, pairs, compose)
        if plan.errors:
            _refuse(plan, plan.errors, len(plan.jobs))
    if store:
        store.end_abandoned()  # an earlier sweep's runs, left RUNNING by a kill
        publish_left_report(store, tracker.sweep_dir, tracker.say)
        if settings.resume:
            earlier = [Path(settings.resume_from)] if settings.resume_from else []
            if earlier and not tracked_runs(earlier[0]):
                _refuse(
                    plan,
                    [
                        f"multirun.resume_from={settings.resume_from}: no tracked job there "
                        "(a sweep directory's job directories hold run.json)"
                    ],
                    len(plan.jobs),
                )
            mark_finished(plan, store, [tracker.sweep_dir, *earlier])
            pairs = unfinished_pairs(pairs)
    sequential = {id(j) for pair in pairs for j in pair}
    steps = plan_steps(
        [j for j in plan.to_run if id(j) not in sequential],
        settings.order,
        settings.seed,
        in_process,
    )
    order = order_summary(steps, settings.order, in_process) if steps or not pairs else ""
    if pairs:
        order = "; ".join(part for part in (order, sequential_summary(pairs)) if part)
    budget = budget_power(
        plan,
        baseline,
        pairs,
        calibrations(store.calibration_runs()) if store else {},
        capture.hardware()[Tag.hardware],
    )
    until_decided = tuple(j for pair in pairs for j in pair)
    chosen = baseline is not None and not settings.baseline
    emit(SweepPlanned(plan, until_decided, baseline, chosen, order, budget))
    if first.dry_run:  # nothing is measured: each job's command once
        return _Schedule([Step(planned) for planned in plan.to_run], [])
    return _Schedule(steps, pairs)


def unfinished_pairs(
    pairs: list[tuple[PlannedJob, PlannedJob]],
) -> list[tuple[PlannedJob, PlannedJob]]:
    """The comparisons a resumed sweep still measures until decided: each whose arms are not
    both finished, measured again whole (issue 60: one arm finished with the launches it had
    when the other failed was skipped, and the other measured alone - no comparison)."""
    left = [(b, c) for b, c in pairs if b.finished_run_id is None or c.finished_run_id is None]
    for baseline, candidate in left:
        baseline.finished_run_id = candidate.finished_run_id = None
    return left


def _launch_all(
    launcher: Any,
    plan: Plan,
    schedule: _Schedule,
    tracker: SweepTracker,
    emit: Emitter[SweepEvent],
    max_batch_size: Optional[int],
) -> tuple[list[Any], int]:
    """Every step, then the sequential comparisons round by round; the sweep's end said
    whatever stopped it (a kill is raised on). The jobs' returns, and the exit status of
    the failure that stopped it (0: none did)."""
    kind = launcher_kind(launcher)
    batch = 1 if kind == LauncherKind.in_process else max_batch_size or len(schedule.steps) or 1
    store = tracker.store
    uri = store.uri if store else uri_in_force(plan.jobs[0].job.config.tracking.uri)[0]
    overrides = launchers.job_overrides(launcher, uri)
    parent = tracker.parent_run_id
    status, returns, error, failed_with = RunStatus.failed, [], None, 0
    sequences: list[SequentialComparison] = []
    with OpenJobs() as open_jobs:
        try:
            returns = _launch(launcher, plan, schedule.steps, overrides, parent, batch)
            if schedule.pairs:
                sequences = run_sequences(
                    schedule.pairs,
                    lambda step, extra: returns.extend(
                        _launch(launcher, plan, [step], overrides + extra, parent, 1)
                    ),
                    open_jobs,
                    plan.jobs[0].job.config.multirun.seed,
                )
            status = RunStatus.finished
            if any(s.record.stop == StopReason.failed for s in sequences):
                # A comparison left without its verdict: the sweep is not done (it said which).
                failed_with = failure.RUN_FAILED
        except BaseException as stopped:
            # A signal can land inside code that turns it into an error of its own (Hydra
            # composing the next job): the signal received, not the exception, says killed.
            if isinstance(stopped, KeyboardInterrupt) or interrupt.received() is not None:
                status = RunStatus.killed
                if kind == LauncherKind.local:
                    launchers.stop_local_jobs()
                interrupt.stop_if_received()
                raise
            if not isinstance(stopped, Exception):
                raise
            failure.log_traceback(stopped)
            error, failed_with = failure.one_line(stopped), failure.exit_status(stopped)
        finally:
            open_jobs.end_all(RunStatus.failed if status == RunStatus.finished else status)
            POOL.close()
            emit(
                SweepEnded(
                    status,
                    tuple(sequences),
                    kind != LauncherKind.slurm,
                    error,
                    tuple(failed_jobs(returns)),
                    len(plan.to_run),
                )
            )
    return returns, failed_with


def jobs_status(returns: Sequence[JobReturn]) -> int:
    """The exit status of a job that failed with one of its own (a full disk's 74, as a
    single run exits it); 0 when none did."""
    own = [
        r._return_value.exit_status  # a failed job's error (its return_value raises it)
        for r in returns
        if r.status == JobStatus.FAILED and isinstance(r._return_value, failure.JobFailed)
    ]
    return own[0] if own else 0


def failed_jobs(returns: Sequence[JobReturn]) -> list[str]:
    """The labels of the jobs that failed, each once (a job's parts return one each)."""
    failed = [
        r.cfg.multirun.job_label if r.cfg is not None else " ".join(r.overrides or ())
        for r in returns
        if r.status == JobStatus.FAILED or r.return_value == RunStatus.failed
    ]
    return list(dict.fromkeys(failed))
