"""Multirun orchestration: plan the jobs, share servers, resume, and report on the sweep.

specexp's sweeper (hydra_plugins/) expands the overrides (:func:`expand_overrides`) and
hands the job list to :func:`run_sweep`, which composes every job first - so a bad
composition fails before any server starts - and orders jobs so that jobs with an identical
server configuration run back to back and share one launch. One parent MLflow run holds the
sweep; each job is its child, and the sweep report (verdicts against the baseline, the
crossover) is logged on the parent. Rerunning an interrupted sweep skips jobs whose
configuration already has a finished run in the experiment.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import random
import sys
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from hydra.core.config_loader import ConfigLoader
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, open_dict
from rich.markup import escape

from specexp import crossover, launchers, publish, report, runner
from specexp.analysis import (
    SelectionError,
    Selector,
    baseline_pairs,
    calibrations,
    compare_arms,
    make_arms,
)
from specexp.job import Job, prepare
from specexp.launchers import LauncherKind, launcher_kind
from specexp.redaction import redact_text
from specexp.results import FACTOR, Metric, RunKind, RunStatus, Tag
from specexp.schemas import ConfigError, JobOrder, SpeculativeConfig
from specexp.server import POOL
from specexp.tracking import (
    MAX_TAG,
    NOTE,
    RESULT_COLUMNS,
    RunLog,
    TrackingStore,
    uri_in_force,
)


def expand_overrides(
    overrides: Sequence[str], config_loader: Optional[ConfigLoader] = None
) -> list[list[str]]:
    """Every job of a sweep: the cartesian product of the sweep overrides' values. A key given
    twice keeps its first place and its last value (a sweep's params, then the command line)."""
    by_key: dict[str, list[str]] = {}
    for override in OverridesParser.create(config_loader=config_loader).parse_overrides(
        list(overrides)
    ):
        key = override.get_key_element()
        if override.is_sweep_override():
            by_key[key] = [f"{key}={value}" for value in override.sweep_string_iterator()]
        else:
            by_key[key] = [f"{key}={override.get_value_element_as_str()}"]
    return [list(job) for job in itertools.product(*by_key.values())]


def with_levels(overrides: Sequence[str], levels: Sequence[int]) -> list[str]:
    """A concurrency option's levels (``concurrency=ramp``) as a sweep of
    ``concurrency.streams``, unless the overrides set the streams themselves."""
    keys = {_factor(o).split("=", 1)[0] for o in overrides}
    if not levels or "concurrency.streams" in keys:
        return list(overrides)
    return [*overrides, "concurrency.streams=" + ",".join(str(level) for level in levels)]


def _factor(override: str) -> str:
    """An override as FACTOR=VALUE: the key without Hydra's add/delete prefixes."""
    return override.lstrip("+~")


@dataclass
class PlannedJob:
    overrides: list[str]
    job: Job
    fingerprint: str
    server: str
    factors: list[str]  # the overrides that set this job apart from the others, as FACTOR=VALUE
    server_launch: int = 0
    finished_run_id: Optional[str] = None  # set when a finished run already exists (resume)

    @property
    def label(self) -> str:
        return " ".join(self.factors) or " ".join(self.overrides) or "defaults"


@dataclass
class Plan:
    jobs: list[PlannedJob]
    errors: list[str] = field(default_factory=list)

    @property
    def to_run(self) -> list[PlannedJob]:
        return [j for j in self.jobs if j.finished_run_id is None]

    @property
    def server_launches(self) -> int:
        """Servers the jobs to run start: one per shared configuration, one per launch of
        jobs with several."""
        launches = [j.job.config.stats.launches for j in self.to_run]
        single = {j.server_launch for j, n in zip(self.to_run, launches, strict=True) if n == 1}
        return len(single) + sum(n for n in launches if n > 1)


def _quoted(value: str) -> str:
    """A string as a quoted Hydra override value."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def factor_overrides(factors: Sequence[str]) -> str:
    return "multirun.factors=[" + ",".join(_quoted(f) for f in factors) + "]"


def compose_jobs(
    config_loader: ConfigLoader, sweep_config: DictConfig, job_overrides: Sequence[Sequence[str]]
) -> Plan:
    """Compose and check every job; collect errors instead of stopping at the first."""
    shared = set.intersection(*(set(o) for o in job_overrides)) if len(job_overrides) > 1 else set()
    jobs, errors = [], []
    for overrides in job_overrides:
        factors = [_factor(o) for o in overrides if o not in shared]
        cfg = config_loader.load_sweep_config(sweep_config, [*overrides, factor_overrides(factors)])
        with open_dict(cfg):
            del cfg["hydra"]
        try:
            job = prepare(cfg)
        except ConfigError as exc:
            errors.append(f"{' '.join(overrides)}: {exc}")
            continue
        jobs.append(
            PlannedJob(
                list(overrides), job, job.config_fingerprint(), job.server_fingerprint(), factors
            )
        )
    return Plan(jobs, errors)


def order_jobs(plan: Plan, order: JobOrder) -> None:
    """Put jobs with the same server next to each other and number their server launches:
    interleaved, one group per server configuration (replicates included); blocked, one
    group per server configuration inside each replicate block."""
    blocks: dict[int, list[PlannedJob]] = {}
    for planned in plan.jobs:
        block = planned.job.config.replicate if order == JobOrder.blocked else 0
        blocks.setdefault(block, []).append(planned)
    ordered, launch = [], 0
    for block in sorted(blocks):
        groups: dict[str, list[PlannedJob]] = {}
        for planned in blocks[block]:
            groups.setdefault(planned.server, []).append(planned)
        for group in groups.values():
            for planned in group:
                planned.server_launch = launch
            launch += 1
            ordered += group
    plan.jobs = ordered


@dataclass(frozen=True)
class Step:
    """One launch of a job by the sweep: the whole job, or one of its parts (interleaved)."""

    planned: PlannedJob
    part: Optional[int] = None


def balanced_rounds(parts: Sequence[int], rng: random.Random) -> list[int]:
    """Arms taking turns: round after round, every arm with parts left takes one, in a
    seeded order that the next round reverses (ABBA for two arms). Over each pair of rounds
    every arm sits at the same mean position, so a linear drift adds the same to each."""
    left, forward = list(parts), list(range(len(parts)))
    sequence: list[int] = []
    for round_index in itertools.count():
        if not any(left):
            return sequence
        if round_index % 2 == 0:
            rng.shuffle(forward)
        for arm in forward if round_index % 2 == 0 else reversed(forward):
            if left[arm]:
                sequence.append(arm)
                left[arm] -= 1
    raise AssertionError("unreachable")


def plan_steps(
    jobs: Sequence[PlannedJob], order: JobOrder, seed: int, in_process: bool
) -> list[Step]:
    """The sweep's launches in order. Interleaved (jobs in this process only: parts of a job
    wait in it for their turn): jobs sharing a server take turns run by run; jobs with
    several launches take turns launch by launch, where the first of them was; the rest run
    whole. Blocked, or with jobs in other processes: every job whole, in plan order."""
    if order == JobOrder.blocked or not in_process:
        return [Step(planned) for planned in jobs]
    rng = random.Random(seed)
    steps: list[Step] = []
    groups: dict[str, list[PlannedJob]] = {}
    for planned in jobs:
        groups.setdefault(planned.server, []).append(planned)
    by_launch = [j for j in jobs if j.job.config.stats.launches > 1]
    for group in groups.values():
        config = group[0].job.config
        if config.stats.launches > 1:
            if group[0] is by_launch[0]:
                steps += _take_turns(by_launch, rng)
        elif len(group) > 1 and config.multirun.reuse_servers:
            steps += _take_turns(group, rng)
        else:
            steps += [Step(planned) for planned in group]
    return steps


def _take_turns(jobs: Sequence[PlannedJob], rng: random.Random) -> list[Step]:
    if len(jobs) == 1:
        return [Step(jobs[0])]
    parts = [j.job.config.stats.parts for j in jobs]
    taken = [0] * len(jobs)
    steps = []
    for arm in balanced_rounds(parts, rng):
        steps.append(Step(jobs[arm], taken[arm]))
        taken[arm] += 1
    return steps


def order_summary(steps: Sequence[Step], order: JobOrder, in_process: bool) -> str:
    """How the sweep places its jobs' runs in time, for the plan and every report."""
    turns = {id(s.planned) for s in steps if s.part is not None}
    if order == JobOrder.blocked:
        return (
            "blocked: each job's runs back to back, so drift over time is part of the "
            "differences between jobs (multirun.order=blocked)"
        )
    if not in_process:
        return (
            "whole jobs: this launcher runs jobs in their own processes, where parts of "
            "different jobs cannot take turns on one server"
        )
    return (
        f"interleaved: {len(turns)} job(s) take turns in balanced rounds (ABBA), run by run on "
        "a shared server or launch by launch; the others have a server of their own"
    )


def mark_finished(plan: Plan, store: TrackingStore) -> None:
    """Resume: attach the newest finished run of each job's configuration, if there is one."""
    for planned in plan.jobs:
        planned.finished_run_id = store.finished_run(planned.fingerprint)


def describe(plan: Plan) -> list[str]:
    lines = [
        f"sweep: {len(plan.jobs)} jobs, {len(plan.to_run)} to run, "
        f"{plan.server_launches} server launch(es) needed"
    ]
    for planned in plan.jobs:
        state = (
            f"done in run {planned.finished_run_id[:8]}, skipped"
            if planned.finished_run_id
            else f"server {planned.server_launch}"
        )
        lines.append(f"  {planned.label}: {state}")
    return lines


def overrides_for(
    planned: PlannedJob, parent_run_id: Optional[str], part: Optional[int] = None
) -> list[str]:
    """The job's overrides plus what the sweep tells it: its factors, label, parent run,
    server launch and, interleaved, the part to measure."""
    extra = [
        f"multirun.server_launch={planned.server_launch}",
        f"multirun.job_label={_quoted(planned.label)}",
        factor_overrides(planned.factors),
    ]
    if parent_run_id:
        extra.append(f"multirun.parent_run_id={parent_run_id}")
    if part is not None:
        extra.append(f"multirun.part={part}")
    return planned.overrides + extra


def dry_run_elsewhere(plan: Plan, launcher: Any) -> None:
    """Dry run of a sweep for a launcher that runs jobs elsewhere: every job's server command,
    composed here, and for Slurm the sbatch script that would be submitted. Nothing is submitted."""
    for planned in plan.to_run:
        launch = planned.job.planned_launch()
        report.print_dry_run(planned.job, launch, planned.job.predicted_resolution(launch))
    report.console.print(
        f"# {type(launcher).__name__}: {len(plan.to_run)} job(s); time limit "
        f"{launcher.params.get('timeout_min')} min each"
    )
    if launcher_kind(launcher) == LauncherKind.slurm:
        print(launchers.sbatch_preview(launcher, len(plan.to_run)), flush=True)


def run_sweep(
    config_loader: ConfigLoader,
    sweep_config: DictConfig,
    job_overrides: list[list[str]],
    launcher: Any,
    max_batch_size: Optional[int] = None,
) -> Any:
    """Plan, check the launcher, launch the jobs (all at once, or ``max_batch_size`` at a
    time; launchers may run a batch in parallel), report."""
    plan = compose_jobs(config_loader, sweep_config, job_overrides)
    first = plan.jobs[0].job.config if plan.jobs else None
    uri = uri_in_force(first.tracking.uri)[0] if first else ""
    errors = plan.errors + launchers.check(
        launcher, [j.job.config for j in plan.jobs], uri, max_batch_size
    )
    if errors:
        for error in errors:
            report.console.print(f"[red]config error:[/] {escape(error)}")
        what = (
            f"{len(plan.errors)} of {len(job_overrides)} jobs cannot run"
            if plan.errors
            else "hydra/launcher cannot run this sweep as configured"
        )
        report.console.print(f"[red]{what}; nothing was launched[/]")
        sys.exit(2)
    if first is None:
        report.console.print("[yellow]the sweep has no jobs; nothing was launched[/]")
        return []
    settings = first.multirun
    order_jobs(plan, settings.order)
    kind = launcher_kind(launcher)
    if first.dry_run and kind != LauncherKind.in_process:
        dry_run_elsewhere(plan, launcher)
        return []
    tracked = first.tracking.enabled and not first.dry_run
    store = TrackingStore(first.tracking.uri, first.tracking.experiment) if tracked else None
    if store and settings.resume:
        mark_finished(plan, store)
    in_process = kind == LauncherKind.in_process
    steps = plan_steps(plan.to_run, settings.order, settings.seed, in_process)
    order = order_summary(steps, settings.order, in_process)
    for line in [*describe(plan), f"order: {order}"]:
        report.console.print(line)
    if first.dry_run:  # nothing is measured: each job's command once
        steps = [Step(planned) for planned in plan.to_run]
    parent = None
    if store:
        parent = store.start_run(
            f"sweep ({len(plan.jobs)} jobs)",
            {
                Tag.kind: RunKind.sweep,
                Tag.jobs: str(len(plan.jobs)),
                Tag.jobs_to_run: str(len(plan.to_run)),
                Tag.planned_server_launches: str(plan.server_launches),
                Tag.order: str(settings.order),
            },
        )
        parent.log_params({"overrides": redact_text(" ".join(sys.argv[1:]))})
        sweep_view(store, parent.run_id, plan)
    status, returns = RunStatus.failed, []
    try:
        extra = launchers.job_overrides(launcher, store.uri if store else uri)
        numbers = {id(j): i for i, j in enumerate(plan.to_run)}
        batch = 1 if in_process else max_batch_size or len(steps) or 1
        for start in range(0, len(steps), batch):
            returns += launcher.launch(
                [
                    overrides_for(s.planned, parent.run_id if parent else None, s.part) + extra
                    for s in steps[start : start + batch]
                ],
                # Hydra numbers the job's directory; every part of a job goes to the same one.
                initial_job_idx=numbers[id(steps[start].planned)],
            )
        status = RunStatus.finished
    except KeyboardInterrupt:
        status = RunStatus.killed
        if kind == LauncherKind.local:
            launchers.stop_local_jobs()
        raise
    finally:
        runner.end_open_jobs(RunStatus.failed if status == RunStatus.finished else status)
        POOL.close()
        if store and parent:
            if kind != LauncherKind.slurm:  # Slurm jobs outlive the sweep's process
                # A job process that was killed could not end its run; its server is gone with it.
                store.end_children(
                    parent.run_id, RunStatus.failed if status == RunStatus.finished else status
                )
            sweep_report(store, parent, plan, settings.baseline, order)
            parent.end(status)
    return [returns]


def ui_address(uri: str) -> str:
    """Where the UI of the store at ``uri`` is: the tracking server's address, or that of
    ``mlflow ui`` started on the store with its defaults."""
    if uri.startswith(("http://", "https://")):
        return redact_text(uri).rstrip("/") + "/"
    return f"(mlflow ui --backend-store-uri {redact_text(uri)}) http://127.0.0.1:5000/"


def _view_id(parent_run_id: str) -> str:
    return f"sweep-{parent_run_id}"


def sweep_view(store: TrackingStore, parent_run_id: str, plan: Plan) -> str:
    """A saved view of the runs table with the sweep's jobs, fastest first, and the columns to
    read them by: each swept setting, then the results. Returns its link."""
    factors = dict.fromkeys(f.split("=", 1)[0] for j in plan.jobs for f in j.factors)
    return store.save_view(
        _view_id(parent_run_id),
        f"sweep {parent_run_id[:8]}: {' x '.join(factors) or 'one configuration'}",
        [f"tags.`{FACTOR}{factor}`" for factor in factors] + RESULT_COLUMNS,
        f"tags.`mlflow.parentRunId` = '{parent_run_id}'",
        order_by=f"metrics.`{Metric.tok_per_s_mean}`",
    )


def sweep_report(
    store: TrackingStore, parent: RunLog, plan: Plan, baseline: Optional[str], order: str
) -> None:
    """The sweep's report on its parent run: every job's run (resumed ones too), compared
    with the baseline when one is configured, and how their runs were ordered in time.
    Written also when jobs failed."""
    settings = plan.jobs[0].job.config
    stats = settings.stats
    children = store.job_runs(parent=parent.run_id)
    resumed = [j.finished_run_id for j in plan.jobs if j.finished_run_id]
    runs = children + (store.job_runs(run_ids=resumed) if resumed else [])
    failed = [r for r in children if r.status != RunStatus.finished]
    launched = sum(1 for r in children if r.tags.get(Tag.server_reused) == "false")
    parent.set_tags({Tag.failed_jobs: str(len(failed)), Tag.server_launches: str(launched)})
    arms, skipped = make_arms(
        runs, label_tags=[], confidence=stats.confidence, metric=Metric.tok_per_s
    )
    comparisons, notes = [], []
    selector = Selector(baseline) if baseline else None
    if selector and arms:
        try:
            comparisons = compare_arms(
                baseline_pairs(arms, selector),
                calibration=calibrations(store.calibration_runs()),
                confidence=stats.confidence,
                threshold=stats.threshold,
                power=stats.power,
                factor=selector.factor,
            )
        except SelectionError as exc:
            notes.append(str(exc))
    report.console.print(
        f"[bold]sweep report[/] (parent run {parent.run_id}): {len(children)} job runs, "
        f"{len(failed)} failed, {launched} server launch(es)\norder: {order}"
    )
    if arms:
        report.print_comparison(arms, comparisons, skipped, Metric.tok_per_s)
    for note in notes:
        report.console.print(f"[yellow]note:[/] {note}")
    crossovers, checks = [], []
    factor = settings.multirun.crossover_factor
    if selector and factor and arms:
        jobs = {j.fingerprint: j.job for j in plan.jobs}
        families = crossover.families(arms, factor)

        def speculative(family: str) -> SpeculativeConfig:
            arm = next(iter(families[family].values()))
            return jobs[arm.run.tags[Tag.config_fingerprint]].config.speculative

        # Arms with dynamic speculation are not asked where they stop paying: they are
        # checked against the fixed arms they should follow.
        adaptive = [f for f in families if speculative(f).switch_off_at is not None]
        analysed = crossover.analyse(arms, selector, factor, stats.confidence, stats.cv_warn)
        crossovers = [c for c in analysed if c.candidate not in adaptive]
        for result in crossovers:
            result.recommendation = crossover.recommend(result, speculative(result.candidate))
            report.console.print(f"[bold]crossover:[/] {escape(result.statement)}")
            report.console.print(
                f"recommended switch-off: {escape(json.dumps(result.recommendation))}"
            )
        for name in adaptive:
            spec = speculative(name)
            static = dataclasses.replace(spec, switch_off_at=None)
            for result in crossovers:
                if speculative(result.candidate) == static:
                    values = {
                        family: {level: arm.values for level, arm in families[family].items()}
                        for family in (name, result.candidate, result.baseline)
                    }
                    check = crossover.check_switch_off(
                        (name, values[name]),
                        (result.candidate, values[result.candidate]),
                        (result.baseline, values[result.baseline]),
                        spec.switch_off_at or 0,
                        stats.confidence,
                        stats.threshold,
                    )
                    checks.append(check)
                    report.print_switch_off(check)
        if crossovers:
            publish.log_crossover(parent, families, crossovers, factor, checks)
    report.console.print(
        f"MLflow UI: the sweep's report is its parent run's description; its jobs, with the "
        f"columns to read them by: {ui_address(store.uri)}{store.view_link(_view_id(parent.run_id))}"
    )
    publish.log_verdicts(store, arms, comparisons)
    publish.log_levels(parent, arms, comparisons, factor)
    parent.set_tags(
        {
            NOTE: report.sweep_description(
                arms=arms,
                comparisons=comparisons,
                crossovers=crossovers,
                checks=checks,
                notes=notes + [f"{len(skipped)} run(s) left out: {'; '.join(skipped)}"]
                if skipped
                else notes,
                baseline=baseline or "-",
                engine=plan.jobs[0].job.engine.name,
                order=order,
                failed=len(failed),
                view_link=store.view_link(_view_id(parent.run_id)),
                run_link=store.run_link,
                plot_link=lambda path: f"get-artifact?path={path}&run_uuid={parent.run_id}",
                limit=MAX_TAG,
            )
        }
    )
    document = {
        "parent_run_id": parent.run_id,
        "failed_jobs": len(failed),
        "server_launches": launched,
        "crossovers": [c.to_json() for c in crossovers],
        "switch_off_checks": [c.to_json() for c in checks],
        "baseline": baseline,
        "order": order,
        "arms": [a.to_json() for a in arms],
        "comparisons": [c.to_json() for c in comparisons],
        "skipped": skipped,
        "notes": notes,
    }
    markdown = (
        f"Order: {order}.\n\n"
        + (
            report.comparison_markdown(arms, comparisons, Metric.tok_per_s)
            if arms
            else "No finished runs.\n"
        )
        + "".join("\n" + report.switch_off_markdown(c) for c in checks)
    )
    publish.log_report(
        parent, document, markdown, arms, comparisons, Metric.tok_per_s, folder="sweep_report"
    )
