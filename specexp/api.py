"""specexp's Python API: what the ``specexp`` command does, as functions that return typed
results. The command line is built on these; a notebook gets the same results without
parsing anything printed.

Run a job (the overrides are those of ``specexp run``)::

    >>> import specexp
    >>> result = specexp.run_job(
    ...     ["model=tiny-pair-small", "workload=short", "workload.max_tokens=32",
    ...      "stats.warmup_runs=0", "stats.measured_runs=2", "tracking=off"],
    ...     quiet=True,
    ... )
    >>> result.status
    <RunStatus.finished: 'FINISHED'>
    >>> result.summary.tok_per_s.n
    2

``quiet=True`` prints nothing: the run's lines still go to its ``specexp.log``. A job's
observers are chosen with ``observers``: its files, its MLflow run and the console by
default; ``observers=["files"]`` keeps the files and tracks nothing; ``observers=[]`` prints,
writes and tracks nothing, and returns the typed result alone::

    >>> result = specexp.run_job(
    ...     ["model=tiny-pair-small", "workload=short", "workload.max_tokens=16",
    ...      "stats.warmup_runs=0", "stats.measured_runs=2"],
    ...     observers=[],
    ... )
    >>> result.summary.tok_per_s.n, result.output_dir, result.run_id
    (2, None, None)
"""

from __future__ import annotations

import contextlib
import json
import signal
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Collection, Iterator, Optional, Sequence

from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.errors import HydraException, OverrideParseException
from omegaconf.errors import OmegaConfBaseException

from specexp import hydra_app
from specexp.analysis.report import SweepReport
from specexp.analysis.results import JobRun, RunKind, RunStatus, Tag
from specexp.compare_command import ComparisonReport, compare_runs
from specexp.host import failure, interrupt
from specexp.hydra_app import Observe
from specexp.options import USAGE_EXIT, NotRun, UsageError, unknown
from specexp.output.terminal.loggers import quiet_libraries
from specexp.output.terminal.screen import console, interrupted, print_stopped
from specexp.run.session import JobResult
from specexp.tracking.observer import RUN_FILE
from specexp.tracking.store import TrackingStore

__all__ = [
    "ComparisonReport",
    "JobResult",
    "LoadedRun",
    "NotRun",
    "Observe",
    "SweepResult",
    "UsageError",
    "check_overrides",
    "compare_runs",
    "load",
    "run_job",
    "run_sweep",
]


@dataclass
class SweepResult:
    """A finished sweep: its exit status, as ``specexp sweep`` exits (0: every job finished
    and compared; 1: some failed, which it said; 2: refused before launching; 74, 75...:
    docs/cli.md's table), each job's result as this process saw it (jobs in
    other processes are read back from the store by :func:`load`), and the sweep's report
    when it was tracked."""

    exit_status: int
    jobs: list[JobResult] = field(default_factory=list)
    parent_run_id: Optional[str] = None
    report: Optional[SweepReport] = None

    @property
    def failed(self) -> list[JobResult]:
        return [job for job in self.jobs if job.status == RunStatus.failed]


@dataclass
class LoadedRun:
    """A finished run read back: a job's run as the store holds it, or a sweep's report."""

    run_id: str
    kind: RunKind
    job: Optional[JobRun] = None
    report: Optional[SweepReport] = None


@dataclass
class _Session:
    """What the jobs Hydra ran in this process gave: each one's result, and why one stopped
    before it ran, if one did."""

    results: list[JobResult] = field(default_factory=list)
    not_run: list[NotRun] = field(default_factory=list)

    def raise_not_run(self) -> None:
        if self.not_run:
            raise self.not_run[-1]


@contextlib.contextmanager
def _hydra_session(
    observers: Optional[Collection[str]], quiet: bool
) -> Iterator[tuple[_Session, frozenset[Observe]]]:
    """Hydra as ``python -m specexp`` runs it, inside this process: each job's result
    collected, its observers those chosen (all by default), Hydra's global state put back
    after (a notebook or test may hold its own), the terminal silent when ``quiet`` or
    without the console observer."""
    held = GlobalHydra.instance().hydra
    GlobalHydra.instance().clear()
    collected = _Session()
    hydra_app.on_result.append(collected.results.append)
    hydra_app.on_not_run.append(collected.not_run.append)
    argv, was_quiet, was_observing = sys.argv, console.quiet, hydra_app.observing
    chosen = frozenset(Observe) if observers is None else frozenset(map(Observe, observers))
    hydra_app.observing = chosen
    console.quiet = quiet or Observe.console not in chosen or was_quiet
    try:
        yield collected, chosen
    finally:
        sys.argv = argv
        console.quiet = was_quiet
        hydra_app.observing = was_observing
        hydra_app.on_result.remove(collected.results.append)
        hydra_app.on_not_run.remove(collected.not_run.append)
        GlobalHydra.instance().hydra = held


def _launch(args: list[str], observers: Collection[Observe], quiet: bool) -> int:
    """``python -m specexp ARGS`` in this process; its exit status. Without the files
    observer, Hydra's own files and the server's log go to a directory removed after."""
    hydra_app.register()
    with contextlib.ExitStack() as stack:
        # Hydra configures logging for its job; quiet, it leaves the process's logging alone.
        extra = (
            ["hydra/job_logging=none", "hydra/hydra_logging=none"]
            if quiet or Observe.console not in observers
            else []
        )
        if Observe.files not in observers:
            scratch = stack.enter_context(tempfile.TemporaryDirectory(prefix="specexp-"))
            extra += [
                f"hydra.run.dir={scratch}",
                f"hydra.sweep.dir={scratch}",
                "hydra.output_subdir=null",
            ]
        return hydra_app.launch([*args, *extra])


def run_command(args: Sequence[str]) -> int:
    """``python -m specexp ARGS`` - and ``specexp run``, ``specexp sweep`` (``-m ARGS``),
    which are the same command - in this process: the overrides checked, the jobs run, what
    stopped one printed; the exit status, one for each outcome (docs/cli.md's table)."""
    interrupt.install()
    quiet_libraries()
    try:
        check_overrides(args)
    except UsageError as exc:
        print_stopped("usage error", str(exc))
        return USAGE_EXIT
    hydra_app.on_not_run.append(_print_not_run)
    try:
        return hydra_app.launch(args)
    except KeyboardInterrupt:
        return interrupted(interrupt.received() or signal.SIGINT)
    finally:
        hydra_app.on_not_run.remove(_print_not_run)


def _print_not_run(stopped: NotRun) -> None:
    print_stopped(stopped.what, stopped.why)


def run_job(
    overrides: Sequence[str] = (),
    *,
    observers: Optional[Collection[str]] = None,
    quiet: bool = False,
) -> JobResult:
    """Run one job, as ``specexp run OVERRIDES`` does, and return its typed result: its
    status, MLflow run id, summary (tok/s with its interval, latencies, notes), every
    measured run and its output directory. ``observers`` chooses who hears the job (see
    :class:`Observe`: its files, its MLflow run, the console; all by default, none with
    ``[]``); ``quiet`` keeps the terminal silent (the console's lines still go to the job's
    ``specexp.log``). A failed job is returned with its error, not
    raised; a usage error raises :class:`UsageError`, a config the job refused
    :class:`NotRun` (with why: nothing is printed of it).

    Example (the small generated model, two short runs; nothing printed)::

        result = specexp.run_job(["model=tiny-pair-small", "workload=short"], quiet=True)
        print(result.summary.tok_per_s.mean, result.summary.tok_per_s.ci_low)
    """
    check_overrides(overrides)
    with _hydra_session(observers, quiet) as (collected, chosen):
        code = _launch(list(overrides), chosen, quiet)
    collected.raise_not_run()
    if collected.results:
        return collected.results[-1]
    raise NotRun(code, "not run", f"exit status {code}; Hydra said why above")


def run_sweep(
    overrides: Sequence[str],
    *,
    observers: Optional[Collection[str]] = None,
    quiet: bool = False,
) -> SweepResult:
    """Run a sweep, as ``specexp sweep OVERRIDES`` does (comma lists and ``+sweep=NAME``
    expand into jobs), and return each job's result, the failed ones and the sweep's report
    (read back from the store when the sweep was tracked: without the MLflow observer it is
    not). ``observers`` and ``quiet`` as for :func:`run_job`; a job stopped before it ran
    (a config it refused) stops the sweep, and raises :class:`NotRun` as there.

    Example::

        swept = specexp.run_sweep(["model=tiny-pair-small", "speculative=none,draft"])
        for job in swept.jobs:
            print(job.run_id, job.summary.tok_per_s.mean if job.summary else job.error)
    """
    check_overrides(overrides)
    with _hydra_session(observers, quiet) as (collected, chosen):
        untracked = [] if Observe.mlflow in chosen else ["tracking.enabled=false"]
        code = _launch(["-m", *overrides, *untracked], chosen, quiet)
    collected.raise_not_run()
    jobs = collected.results
    parent = _parent_of(jobs)
    record = _run_record(jobs[0].output_dir) if jobs else None
    # Only a report the sweep published is read back: one left in a journal (75), or a
    # sweep stopped before its report, has none in the store.
    published = code in (0, failure.RUN_FAILED)
    report = (
        load(
            parent, tracking_uri=record.get("tracking_uri"), experiment=record["experiment"]
        ).report
        if parent and record and published
        else None
    )
    return SweepResult(code, jobs, parent, report)


def _parent_of(results: Sequence[JobResult]) -> Optional[str]:
    """The sweep's parent run, as its tracked jobs wrote it down."""
    for result in results:
        record = _run_record(result.output_dir)
        if record and record.get("parent_run_id"):
            return str(record["parent_run_id"])
    return None


def _run_record(directory: Optional[Path]) -> Optional[dict[str, str]]:
    """What a tracked job's output directory says of its run (RUN_FILE)."""
    path = directory / RUN_FILE if directory else None
    if path is None or not path.is_file():
        return None
    record: dict[str, str] = json.loads(path.read_text())
    return record


def load(run: str, *, tracking_uri: Optional[str] = None, experiment: str = "specexp") -> LoadedRun:
    """A finished job or sweep as typed results: from its MLflow run id, or from its output
    directory (a job's, whose ``config.yaml`` names its store, or a sweep's ``multirun/``
    directory). A sweep's parent run gives its report; a job's run gives its
    :class:`~specexp.analysis.results.JobRun` (values, metrics, tags).

    Example::

        loaded = specexp.load("multirun/2026-12-03/08-00-00")
        print(loaded.report.comparisons[0].verdict)
    """
    path = Path(run)
    if path.is_dir():
        return _load_directory(path, tracking_uri, experiment)
    store = TrackingStore(tracking_uri, experiment, create=False)
    found = store.client.get_run(run)
    kind = RunKind(found.data.tags.get(Tag.kind, RunKind.job))
    if kind == RunKind.sweep:
        return LoadedRun(run, kind, report=store.sweep_report(run))
    (job,) = store.job_runs(run_ids=[run])
    return LoadedRun(run, kind, job=job)


def _load_directory(path: Path, tracking_uri: Optional[str], experiment: str) -> LoadedRun:
    """A job's output directory gives its run; a sweep's (``multirun/DATE/TIME``), its
    parent run, as the jobs wrote them down."""
    records = [r for d in (path, *sorted(path.iterdir())) if (r := _run_record(d))]
    if not records:
        raise UsageError(f"{path} holds no tracked job's {RUN_FILE}")
    sweep = (path / "multirun.yaml").is_file()
    record = records[0]
    run_id = record["parent_run_id"] if sweep and record.get("parent_run_id") else record["run_id"]
    return load(
        run_id,
        tracking_uri=tracking_uri or record.get("tracking_uri"),
        experiment=record.get("experiment", experiment),
    )


def check_overrides(overrides: Sequence[str]) -> None:
    """Raise :class:`UsageError` for an override Hydra would refuse or silently take for
    another: an unknown group, option or key, or an enum value out of its choices, naming
    the nearest valid spelling; the options of a user's own config folders (``--config-dir``,
    ``hydra.searchpath``) are known. What it cannot judge is left to Hydra."""
    hydra_app.register()
    search, rest = hydra_app.config_search(overrides)
    # -m is a sweep's; Hydra's other flags (--cfg job, --info ...) are Hydra's to judge.
    given = [o for o in rest if o not in ("-m", "--multirun")]
    if any(o.startswith("-") for o in given):
        return
    parsed = [o for o in _parse(given) if not o.get_key_element().lstrip("+~").startswith("hydra")]
    # One job's overrides, none added or deleted: if they compose, every group, option, key
    # and value is valid, and one composition (0.2 CPU-seconds at each start) is saved. If not,
    # the checks below find which and name its nearest spelling.
    if all("," not in o and not o.startswith(("+", "~")) for o in given):
        with contextlib.suppress(HydraException, OmegaConfBaseException, ValueError):
            hydra_app.compose_config([o for o in given if not o.startswith("hydra")], search)
            return
    groups = hydra_app.config_groups(search)
    selections = _group_selections(parsed, groups)
    # A sweep's first job - its groups' first options, its keys' single values - composed
    # once: its keys are every option's (none deleted), and its values' types are checked.
    # If it does not compose, the groups alone, then the values, find which and name it.
    leaves = [
        str(o.input_line)
        for o in parsed
        if not o.is_sweep_override() and o.get_key_element().lstrip("+") not in groups
    ]
    first_job = None
    if not any(o.startswith("~") for o in given):
        with contextlib.suppress(HydraException, OmegaConfBaseException, ValueError):
            first_job = hydra_app.compose_config([*selections, *leaves], search)
    try:
        composed = (
            first_job if first_job is not None else hydra_app.compose_config(selections, search)
        )
    except (HydraException, OmegaConfBaseException, ValueError) as exc:
        raise UsageError(str(exc)) from None
    known = hydra_app.config_keys(composed)
    for override in parsed:
        if override.get_key_element().lstrip("+~") not in groups:
            _check_key(override, known, groups)
    if first_job is not None:
        return
    # Last, the values' types (a number that is not one): the overrides of one job composed
    # (a sweep's comma lists and Hydra's own keys left to Hydra).
    single = [o for o in given if "," not in o and not o.lstrip("+~").startswith("hydra")]
    try:
        hydra_app.compose_config(single, search)
    except (HydraException, OmegaConfBaseException) as exc:
        reason = f": {str(exc.__cause__).splitlines()[0]}" if exc.__cause__ else ""
        raise UsageError(f"{str(exc).splitlines()[0]}{reason}") from None


def _parse(overrides: Sequence[str]) -> list[Override]:
    """The overrides parsed, one at a time so that a malformed one is named."""
    parser = OverridesParser.create()
    parsed = []
    for given in overrides:
        try:
            parsed.extend(parser.parse_overrides([given]))
        except OverrideParseException:
            raise UsageError(
                f"not an override: {given!r} (an override is key=value, e.g. speculative=draft;"
                f" the commands compare, history, doctor, models, ui... run as 'specexp {given}')"
                if "=" not in given
                else f"not an override: {given!r} (see Hydra's override grammar)"
            ) from None
    return parsed


def _values(override: Override) -> list[str]:
    """An override's values: each of a sweep's, else its one."""
    if override.is_sweep_override():
        return list(override.sweep_string_iterator())
    return [override.get_value_element_as_str()]


def _group_selections(parsed: Sequence[Override], groups: dict[str, list[str]]) -> list[str]:
    """The config group options chosen (the first of a sweep's), each checked to exist."""
    selections = []
    for override in parsed:
        key = override.get_key_element().lstrip("+~")
        if key not in groups:
            continue
        values = _values(override)
        for value in values:
            if value not in groups[key]:
                raise UsageError(
                    unknown(f"{key} option {value!r}", value, groups[key])
                    + f" (options: {', '.join(sorted(groups[key]))})"
                )
        selections.append(f"{override.get_key_element()}={values[0]}")
    return selections


def _check_key(
    override: Override, known: dict[str, Optional[list[str]]], groups: dict[str, list[str]]
) -> None:
    """An override of a key: the key exists (anything goes below an open mapping, and a
    ``+`` adds one), and an enum's values are among its choices."""
    raw_key = override.get_key_element()
    if raw_key.startswith("+"):
        return
    parts = raw_key.lstrip("~").split(".")
    if any(known.get(".".join(parts[:n]), []) is None for n in range(1, len(parts))):
        return
    key = ".".join(parts)
    if key not in known:
        raise UsageError(unknown(f"key {key!r}", key, [*known, *groups]))
    choices = known[key]
    for value in _values(override):
        if choices and value not in choices:
            raise UsageError(
                unknown(f"{key} value {value!r}", value, choices)
                + f" (choices: {', '.join(choices)})"
            )
