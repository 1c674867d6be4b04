"""A sweep's plan: every job expanded from the overrides, composed and checked before any
server starts, ordered so that jobs with an identical server configuration run back to back
and share one launch, their runs placed in time (interleaved in balanced rounds, or
blocked), and the jobs this sweep directory already finished found (resume)."""

from __future__ import annotations

import itertools
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Collection, Mapping, Optional, Sequence

from hydra.core.config_loader import ConfigLoader
from hydra.core.default_element import ConfigDefault, GroupDefault
from hydra.core.override_parser.overrides_parser import OverridesParser

from specexp.analysis.results import Tag
from specexp.core.schemas.checks import ConfigError
from specexp.core.schemas.multirun import JobOrder
from specexp.host.job import Job
from specexp.output.files import RUN_FILE
from specexp.tracking.store import TrackingStore

# One job's overrides composed and typed into a checked job (the sweeper composes them with
# Hydra and types them at specexp.hydra_app.prepare); raises ConfigError.
ComposeJob = Callable[[Sequence[str]], Job]


def expand_overrides(
    overrides: Sequence[str],
    config_loader: Optional[ConfigLoader] = None,
    params: Sequence[str] = (),
) -> list[list[str]]:
    """Every job of a sweep: the cartesian product of the sweep overrides' values. A key given
    twice keeps its first place and its last value. A sweep's own ``params`` come after the
    configs the command line adds (``+sweep=X``, which declares them) and before its other
    keys, and a key the command line gives too keeps the command line's value: Hydra lets the
    config added last win a group both choose in their defaults lists, so a case the sweep
    sweeps (``+cpu_case=cuda-graphs-off``: ``override /stack``) is added after the sweep's
    file and its choice beats the sweep's own; the jobs' labels read params first."""
    parser = OverridesParser.create(config_loader=config_loader)

    def by_key(given: Sequence[str]) -> dict[str, list[str]]:
        keyed: dict[str, list[str]] = {}
        for override in parser.parse_overrides(list(given)):
            key = override.get_key_element()
            if override.is_sweep_override():
                keyed[key] = [f"{key}={value}" for value in override.sweep_string_iterator()]
            else:
                keyed[key] = [f"{key}={override.get_value_element_as_str()}"]
        return keyed

    command_line = by_key(overrides)
    added = {k: v for k, v in command_line.items() if k.startswith("+") and len(v) == 1}
    merged = {
        **added,
        **{k: v for k, v in by_key(params).items() if k not in command_line},
        **command_line,
    }
    return [list(job) for job in itertools.product(*merged.values())]


def case_mismatches(
    repository: Any,
    factors: Mapping[str, str],
    choices: Mapping[str, str],
    chosen: Collection[str],
) -> list[str]:
    """Where a job did not get what its cases say. A swept option of a config group (the
    factor ``cpu_case=cuda-graphs-off``) names group choices in its defaults list (``override
    /stack: llamacpp-cuda-nographs``, also through the configs it includes); ``choices`` are
    the ones the job was composed with (Hydra's runtime choices). A group in ``chosen`` was
    set by the command line, which wins by design."""
    problems = []
    for group, option in factors.items():
        if group not in choices:  # a value (concurrency.streams), not a config group
            continue
        for named_group, named in _named_choices(repository, f"{group}/{option}").items():
            got = choices.get(named_group)
            if named_group not in chosen and got != named:
                problems.append(
                    f"{group}={option} names {named_group}={named}, but its job was composed "
                    f"with {named_group}={got} (another config's defaults list chose it)"
                )
    return problems


def _named_choices(repository: Any, path: str) -> dict[str, str]:
    """The group choices a config's defaults list overrides, its own before those of the
    configs it includes (Hydra lets the including config's override win)."""
    loaded = repository.load_config(path)
    named: dict[str, str] = {}
    included = []
    here = path.rsplit("/", 1)[0] if "/" in path else ""
    for default in (loaded.defaults_list or []) if loaded else []:
        if isinstance(default, GroupDefault) and default.group and default.get_name():
            group, option = _absolute(default.group, here), str(default.get_name())
            if default.override:
                named.setdefault(group, option)
            else:
                included.append(f"{group}/{option}")
        elif isinstance(default, ConfigDefault) and not default.is_self() and default.path:
            included.append(_absolute(default.path, here))
    for config in included:
        for group, option in _named_choices(repository, config).items():
            named.setdefault(group, option)
    return named


def _absolute(name: str, here: str) -> str:
    """A defaults-list entry's group or path from the config's own folder, or the root."""
    return name[1:] if name.startswith("/") else f"{here}/{name}" if here else name


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


def compose_jobs(compose: ComposeJob, job_overrides: Sequence[Sequence[str]]) -> Plan:
    """Compose and check every job; collect errors instead of stopping at the first."""
    shared = set.intersection(*(set(o) for o in job_overrides)) if len(job_overrides) > 1 else set()
    jobs, errors = [], []
    for overrides in job_overrides:
        factors = [_factor(o) for o in overrides if o not in shared]
        try:
            job = compose([*overrides, factor_overrides(factors)])
        except ConfigError as exc:
            errors.append(f"{' '.join(overrides)}: {exc}")
            continue
        jobs.append(
            PlannedJob(
                list(overrides), job, job.config_fingerprint(), job.server_fingerprint(), factors
            )
        )
    return Plan(jobs, errors + same_configurations(jobs))


def same_configurations(jobs: Sequence[PlannedJob]) -> list[str]:
    """Jobs that the sweep sets apart but that compose to the same measurement: a case that
    did not change what it names (its choice lost to another config's), which would be
    measured, and compared, as if it had."""
    first: dict[str, PlannedJob] = {}
    errors = []
    for planned in jobs:
        earlier = first.setdefault(planned.job.measurement_fingerprint(), planned)
        if earlier is not planned:
            errors.append(
                f"cases {earlier.label} and {planned.label} are the same configuration (the same "
                "server command and measurement): what sets them apart did not reach the job"
            )
    return errors


def default_baseline(
    plan: Plan, configured: Optional[str], crossover_factor: Optional[str]
) -> Optional[str]:
    """The sweep's baseline: ``multirun.baseline`` as configured, else, where the sweep varies
    one factor only, that factor's first value (as given), so that a comparison such as
    ``speculative=none,draft`` is compared, and measured until decided, without being told.
    A sweep of the crossover factor alone (concurrency levels) is a curve, not a comparison."""
    if configured or len(plan.jobs) < 2 or not all(j.factors for j in plan.jobs):
        return configured
    factors = {f.split("=", 1)[0] for j in plan.jobs for f in j.factors}
    if len(factors) != 1 or factors == {crossover_factor}:
        return None
    return plan.jobs[0].factors[0]


def order_jobs(plan: Plan, order: JobOrder) -> None:
    """Put jobs with the same server next to each other and number their server launches:
    interleaved, one group per server configuration (replicates included); blocked, one
    group per server configuration inside each replicate block. A job told not to reuse
    servers (``multirun.reuse_servers=false``) is a group of its own: it starts its own."""
    blocks: dict[int, list[PlannedJob]] = {}
    for planned in plan.jobs:
        block = planned.job.config.replicate if order == JobOrder.blocked else 0
        blocks.setdefault(block, []).append(planned)
    ordered, launch = [], 0
    for block in sorted(blocks):
        groups: dict[tuple[str, int], list[PlannedJob]] = {}
        for index, planned in enumerate(blocks[block]):
            alone = 0 if planned.job.config.multirun.reuse_servers else index + 1
            groups.setdefault((planned.server, alone), []).append(planned)
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
    if not turns:
        return (
            "interleaved, but no job shares a server or has several launches, so none takes "
            "turns: each job runs whole on a server of its own"
        )
    return (
        f"interleaved: {len(turns)} job(s) take turns in balanced rounds (ABBA), run by run on "
        "a shared server or launch by launch; the others have a server of their own"
    )


def tracked_runs(sweep_dir: Path) -> list[str]:
    """The runs the jobs of a sweep directory were tracked as: each job directory's
    ``run.json`` (a killed attempt's, set aside in ``attempt-N/``, ended unfinished)."""
    found = []
    for path in sorted(sweep_dir.glob(f"*/{RUN_FILE}")):
        try:
            found.append(str(json.loads(path.read_text())["run_id"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue  # a file cut short by a kill: its job is measured again
    return found


def mark_finished(plan: Plan, store: TrackingStore, sweep_dirs: Sequence[Path]) -> None:
    """Resume: attach to each job the finished run of its configuration that a job of
    ``sweep_dirs`` was tracked as (the sweep's own directory first, then those it was told
    to resume from). A finished run another sweep directory measured is not this sweep's:
    the job is measured again (issue 61: a new sweep directory's job was skipped as done)."""
    ids = list(dict.fromkeys(i for d in sweep_dirs for i in tracked_runs(d)))
    quoted = ", ".join(f"'{i}'" for i in ids if i.isalnum())
    runs = (
        store.job_runs(
            filter_string=f"attributes.run_id IN ({quoted}) and attributes.status = 'FINISHED'"
        )
        if quoted
        else []
    )
    by_fingerprint: dict[str, str] = {}
    for run in sorted(runs, key=lambda r: ids.index(r.run_id)):
        by_fingerprint.setdefault(run.tags.get(Tag.config_fingerprint, ""), run.run_id)
    for planned in plan.jobs:
        planned.finished_run_id = by_fingerprint.get(planned.fingerprint)


def describe(plan: Plan, until_decided: Sequence[PlannedJob] = ()) -> list[str]:
    """The plan in lines: its size, the server launches it takes, each job. The jobs
    measured ``until_decided`` (a sequential comparison) take between their least and most
    launches, not their budget."""
    sequential = {id(j) for j in until_decided}
    fixed = Plan([j for j in plan.to_run if id(j) not in sequential]).server_launches
    budgets = [j.job.config.stats.sequential for j in plan.to_run if id(j) in sequential]
    launches = (
        f"{fixed + sum(b.min_launches for b in budgets)} to "
        f"{fixed + sum(b.max_launches for b in budgets)} server launches (measured until decided)"
        if budgets
        else f"{fixed} server launch(es)"
    )
    lines = [f"sweep: {len(plan.jobs)} jobs, {len(plan.to_run)} to run, {launches}"]
    for planned in plan.jobs:
        state = (
            f"done in run {planned.finished_run_id[:8]}, skipped"
            if planned.finished_run_id
            else f"server {planned.server_launch}"
        )
        lines.append(f"  {planned.label}: {state}")
    return lines


# The keys the sweep sets in a job's config beside the job's own overrides (overrides_for, and
# sequential's launch budget and runs per part): leaves of the schema, which a job composed
# once takes on a copy for each launch (hydra_app.ComposedOnce).
SET_BY_THE_SWEEP = (
    "multirun.server_launch",
    "multirun.job_label",
    "multirun.factors",
    "multirun.parent_run_id",
    "multirun.part",
    "multirun.part_runs",
    "stats.launches",
)


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
