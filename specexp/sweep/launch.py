"""Running a sweep: plan it (specexp.sweep.plan), check that the launcher can run it, start
its parent run, launch the jobs - whole, or part by part taking turns - and report.

specexp's sweeper (hydra_plugins/) expands the overrides and hands the job list to
:func:`run_sweep`. One parent MLflow run holds the sweep; each job is its child, and the
sweep report (verdicts against the baseline, the crossover) is logged on the parent.
Rerunning an interrupted sweep skips jobs whose configuration already has a finished run in
the experiment.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Optional, Sequence

from hydra.core.config_loader import ConfigLoader
from hydra.core.utils import JobReturn, JobStatus
from omegaconf import DictConfig
from rich.markup import escape

from specexp.analysis.arms import calibrations
from specexp.analysis.report import SweepFacts
from specexp.analysis.results import Artifact, RunKind, RunStatus, Tag
from specexp.core.redaction import redact_text
from specexp.core.schemas import RunConfig
from specexp.core.sequential import SequentialComparison
from specexp.host import capture, failure, interrupt, owner
from specexp.output import terminal
from specexp.run import launchers
from specexp.run.job_run import OpenJobs
from specexp.run.launchers import LauncherKind, launcher_kind
from specexp.serving.server import POOL
from specexp.sweep.plan import (
    Plan,
    Step,
    compose_jobs,
    default_baseline,
    describe,
    mark_finished,
    order_jobs,
    order_summary,
    overrides_for,
    plan_steps,
)
from specexp.sweep.report import (
    end_sweep,
    journal_sweep_end,
    replay_sweep_end,
    sweep_facts,
    sweep_view,
)
from specexp.sweep.sequential import (
    budget_power,
    run_sequences,
    sequential_pairs,
    sequential_summary,
    with_launch_budget,
)
from specexp.tracking.store import RunLog, TrackingStore, now_ms, uri_in_force, uri_problem


def dry_run_elsewhere(plan: Plan, launcher: Any) -> None:
    """Dry run of a sweep for a launcher that runs jobs elsewhere: every job's server command,
    composed here, and for Slurm the sbatch script that would be submitted. Nothing is submitted."""
    for planned in plan.to_run:
        launch = planned.job.planned_launch()
        terminal.print_dry_run(planned.job, launch, planned.job.predicted_resolution(launch))
    terminal.console.print(
        f"# {type(launcher).__name__}: {len(plan.to_run)} job(s); time limit "
        f"{launcher.params.get('timeout_min')} min each"
    )
    if launcher_kind(launcher) == LauncherKind.slurm:
        print(launchers.sbatch_preview(launcher, len(plan.to_run)), flush=True)


def _refuse(plan: Plan, errors: list[str], jobs: int) -> None:
    for error in errors:
        terminal.console.print(f"[red]config error:[/] {escape(error)}")
    what = (
        f"{len(plan.errors)} of {jobs} jobs cannot run"
        if plan.errors
        else "hydra/launcher cannot run this sweep as configured"
    )
    terminal.console.print(f"[red]{what}; nothing was launched[/]")
    sys.exit(2)


def _open_store(first: RunConfig) -> TrackingStore:
    """The sweep's store; one that cannot be reached is refused before anything launches (a
    sweep's report is read back from its store)."""
    try:
        return TrackingStore(first.tracking.uri, first.tracking.experiment)
    except Exception as exc:
        failure.log_traceback(exc)
        terminal.console.print(
            f"[red]MLflow store unreachable[/] ({escape(redact_text(uri_in_force(first.tracking.uri)[0]))}: "
            f"{escape(failure.one_line(exc))}); nothing was launched. Start it, or sweep "
            "untracked with tracking.enabled=false"
        )
        sys.exit(failure.STORE_DOWN)


def _start_parent(store: TrackingStore, plan: Plan, first: RunConfig) -> RunLog:
    parent = store.start_run(
        f"sweep ({len(plan.jobs)} jobs)",
        {
            Tag.kind: RunKind.sweep,
            Tag.process: owner.this_process(),
            Tag.jobs: str(len(plan.jobs)),
            Tag.jobs_to_run: str(len(plan.to_run)),
            Tag.planned_server_launches: str(plan.server_launches),
            Tag.order: str(first.multirun.order),
        },
    )
    parent.log_params({"overrides": redact_text(" ".join(sys.argv[1:]))})
    sweep_view(store, parent.run_id, plan)
    return parent


def _launch(
    launcher: Any,
    plan: Plan,
    steps: list[Step],
    overrides: list[str],
    parent: Optional[RunLog],
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
                overrides_for(s.planned, parent.run_id if parent else None, s.part) + overrides
                for s in steps[start:stop]
            ],
            initial_job_idx=first,
        )
        interrupt.stop_if_received()  # Hydra keeps a job's error as its return value
        start = stop
    return returns


def run_sweep(
    config_loader: ConfigLoader,
    sweep_config: DictConfig,
    job_overrides: list[list[str]],
    launcher: Any,
    max_batch_size: Optional[int] = None,
) -> Any:
    """Plan, check the launcher, launch the jobs (all at once, or ``max_batch_size`` at a
    time; launchers may run a batch in parallel), report."""
    terminal.hide_internal_overrides()
    plan = compose_jobs(config_loader, sweep_config, job_overrides)
    sweep_dir = Path(sweep_config.hydra.sweep.dir)
    first = plan.jobs[0].job.config if plan.jobs else None
    uri = uri_in_force(first.tracking.uri)[0] if first else ""
    configs = [j.job.config for j in plan.jobs]
    errors = plan.errors + launchers.check(launcher, configs, uri, max_batch_size)
    uri_error = uri_problem(uri) if first and first.tracking.enabled else None
    if uri_error:
        errors.append(uri_error)
    if errors:
        _refuse(plan, errors, len(job_overrides))
    if first is None:
        terminal.console.print("[yellow]the sweep has no jobs; nothing was launched[/]")
        return []
    settings = first.multirun
    baseline = default_baseline(plan, settings.baseline, settings.crossover_factor)
    order_jobs(plan, settings.order)
    kind = launcher_kind(launcher)
    if first.dry_run and kind != LauncherKind.in_process:
        dry_run_elsewhere(plan, launcher)
        return []
    tracked = first.tracking.enabled and not first.dry_run
    store = _open_store(first) if tracked else None
    in_process = kind == LauncherKind.in_process
    pairs = sequential_pairs(plan, baseline, settings.order, in_process)
    if pairs:
        pairs = with_launch_budget(plan, pairs, config_loader, sweep_config)
        if plan.errors:
            _refuse(plan, plan.errors, len(job_overrides))
    if store:
        store.end_abandoned()  # an earlier sweep's runs, left RUNNING by a kill
        _publish_left_report(store, sweep_dir)
    if store and settings.resume:
        mark_finished(plan, store)
        pairs = [
            (b, c) for b, c in pairs if b.finished_run_id is None and c.finished_run_id is None
        ]
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
    chosen = (
        [f"baseline: {baseline} (the swept factor's first value; multirun.baseline sets another)"]
        if baseline and not settings.baseline
        else []
    )
    for line in [*describe(plan, [j for pair in pairs for j in pair]), *chosen, f"order: {order}"]:
        terminal.console.print(line)
    budget = budget_power(
        plan,
        baseline,
        pairs,
        calibrations(store.calibration_runs()) if store else {},
        capture.hardware()[Tag.hardware],
    )
    if budget is not None:
        terminal.print_budget(budget.statement, budget.short)
    if first.dry_run:  # nothing is measured: each job's command once
        steps, pairs = [Step(planned) for planned in plan.to_run], []
    parent = _start_parent(store, plan, first) if store else None
    status, returns = RunStatus.failed, []
    failed_with = 0
    batch = 1 if in_process else max_batch_size or len(steps) or 1
    overrides = launchers.job_overrides(launcher, store.uri if store else uri)
    sequences: list[SequentialComparison] = []
    with OpenJobs() as open_jobs:
        try:
            returns = _launch(launcher, plan, steps, overrides, parent, batch)
            if pairs:
                sequences = run_sequences(
                    pairs,
                    lambda step, extra: returns.extend(
                        _launch(launcher, plan, [step], overrides + extra, parent, 1)
                    ),
                    open_jobs,
                    settings.seed,
                )
            status = RunStatus.finished
        except BaseException as stopped:
            # A signal can land inside code that turns it into an error of its own (Hydra
            # composing the next job): the signal received, not the exception, says killed.
            if not isinstance(stopped, KeyboardInterrupt) and interrupt.received() is None:
                if not isinstance(stopped, Exception):
                    raise
                failure.log_traceback(stopped)
                terminal.console.print(
                    f"[red]sweep failed:[/] {escape(failure.one_line(stopped))} "
                    "(traceback: specexp.log); its runs are ended FAILED"
                )
                failed_with = failure.exit_status(stopped)
            else:
                status = RunStatus.killed
                if kind == LauncherKind.local:
                    launchers.stop_local_jobs()
                interrupt.stop_if_received()
                raise
        finally:
            ended = RunStatus.failed if status == RunStatus.finished else status
            open_jobs.end_all(ended)
            POOL.close()
            if store and parent:
                facts = sweep_facts(plan, parent.run_id, baseline, order, sequences)
                _end_sweep(store, parent, facts, status, kind != LauncherKind.slurm, sweep_dir)
    if failed_with:
        sys.exit(failed_with)
    failed = failed_jobs(returns)
    if failed:
        terminal.console.print(
            f"[red]{len(failed)} of {len(plan.to_run)} job(s) failed:[/] "
            + escape(", ".join(failed))
        )
        sys.exit(1)
    return [returns]


def failed_jobs(returns: Sequence[JobReturn]) -> list[str]:
    """The labels of the jobs that failed, each once (a job's parts return one each)."""
    failed = [
        r.cfg.multirun.job_label if r.cfg is not None else " ".join(r.overrides or ())
        for r in returns
        if r.status == JobStatus.FAILED or r.return_value == RunStatus.failed
    ]
    return list(dict.fromkeys(failed))


def _end_sweep(
    store: TrackingStore,
    parent: RunLog,
    facts: SweepFacts,
    status: str,
    end_children: bool,
    sweep_dir: Path,
) -> None:
    """The report and the parent's end in the store, journaled beside the jobs' directories
    first: kept there when the store fails now or the sweep is killed while publishing, for
    `python -m specexp.upload` (or the sweep resumed here) to publish later."""
    at_ms = now_ms()
    try:
        journal = journal_sweep_end(sweep_dir, store, facts, status, end_children, at_ms)
    except OSError as exc:  # a full disk: the store may still take the report
        failure.log_traceback(exc)
        journal = None
    try:
        end_sweep(store, parent, facts, status, end_children, at_ms)
    except Exception as exc:  # whatever the store's failure, the sweep's results are kept
        if journal is None:
            raise
        failure.log_traceback(exc)
        terminal.console.print(
            f"[bold yellow]MLflow store failed at the sweep's end[/] ({redact_text(store.uri)}: "
            f"{escape(failure.one_line(exc))}): the report is kept in {journal}; publish it "
            f"under the same parent run with: python -m specexp.upload {sweep_dir} "
            "[--tracking-uri URI]"
        )
    else:
        if journal is not None:
            journal.unlink()


def _publish_left_report(store: TrackingStore, sweep_dir: Path) -> None:
    """A report an earlier run of this sweep journaled and did not publish (its store down,
    or the sweep killed while publishing), published before this run journals its own."""
    journal = sweep_dir / Artifact.report_journal
    if not journal.exists():
        return
    try:
        parent = replay_sweep_end(journal, store.uri)
    except Exception as exc:  # kept for `specexp.upload`; this sweep goes on
        failure.log_traceback(exc)
        # Out of the way of this run's journal, where the upload still finds it.
        aside = sweep_dir / f"unpublished-{now_ms()}"
        aside.mkdir()
        kept = journal.rename(aside / journal.name)
        terminal.console.print(
            f"[yellow]the report an earlier run of this sweep left could not be published "
            f"({escape(failure.one_line(exc))}); kept as {kept}: publish it with "
            f"python -m specexp.upload {sweep_dir}[/]"
        )
        return
    terminal.console.print(
        f"published the report an earlier run of this sweep left unpublished, on run {parent}"
    )
