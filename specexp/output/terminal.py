"""What a person sees in the terminal: dry-run commands, progress, a job's summary, and the
comparison, reproduction and sweep reports."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import IO, Any, Callable, Iterator, Optional, Sequence

from rich.console import Console, Group
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from specexp.analysis.arms import Arm, ClaimCheck
from specexp.analysis.crossover import SwitchOffCheck
from specexp.analysis.energy_arms import EnergyReport
from specexp.analysis.prompts import JobPrompts, PromptComparison
from specexp.analysis.report import Caveat, SweepReport
from specexp.analysis.results import Metric, server_metric
from specexp.analysis.schedule import NO_SCHEDULE, DraftSchedule
from specexp.analysis.summary import JobSummary
from specexp.analysis.surface import Surface
from specexp.core.measurements import RequestRecord, RunResult
from specexp.core.notes import NoteKind
from specexp.core.redaction import redact_env, redact_text
from specexp.core.schemas import (
    ASSUMED_TOK_PER_S_PER_STREAM,
    RunConfig,
    expected_run_seconds,
    run_requests,
)
from specexp.core.slo import run_goodput
from specexp.core.stats import Comparison
from specexp.engines.records import LaunchSpec, Resolution
from specexp.host.energy import WINDOW_ERROR
from specexp.host.job import Job
from specexp.output.markdown import caveat_lines, hardware_line, run_warnings
from specexp.output.tables import (
    Rows,
    capacity_rows,
    category_rows,
    claim_rows,
    comparison_rows,
    death_summary,
    energy_rows,
    point_rows,
    schedule_rows,
    sequence_rows,
    setting_rows,
    share,
    surface_crossover,
    surface_decided,
    surface_rows,
    switch_off_rows,
)

# Tables are drawn to fit this many columns where the terminal's width is not known (logs,
# pipes), and at most this many in a terminal: wider ones fold their cells, never a figure.
WIDTH = 100


class _Console(Console):
    """The terminal, whose printed lines also go, plain, to the log files open (a job's
    ``specexp.log``); live displays (progress, status) stay on the terminal."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.logs: list[Console] = []

    def print(self, *objects: Any, **kwargs: Any) -> None:
        super().print(*objects, **kwargs)
        for log in self.logs:
            log.print(*objects, **kwargs)

    def log_only(self, text: str) -> None:
        """A line for the log files alone (the terminal shows it live instead)."""
        for log in self.logs:
            log.print(text)


# soft_wrap: long lines (commands, paths) stay whole instead of being wrapped mid-word.
console = _Console(
    highlight=False,
    soft_wrap=True,
    width=min(WIDTH, os.get_terminal_size().columns) if sys.stdout.isatty() else WIDTH,
)


class _LogFile:
    """A log file that stops taking lines at its first write error (a full disk): the job
    goes on, and the terminal has said each line."""

    def __init__(self, path: Path):
        self.file: Optional[IO[str]] = path.open("a", encoding="utf-8")

    def _try(self, call: Callable[[IO[str]], Any]) -> None:
        if self.file is not None:
            try:
                call(self.file)
            except OSError:
                broken, self.file = self.file, None
                with contextlib.suppress(OSError):
                    broken.close()

    def write(self, text: str) -> int:
        self._try(lambda file: file.write(text))
        return len(text)

    def flush(self) -> None:
        self._try(lambda file: file.flush())

    def close(self) -> None:
        self._try(lambda file: file.close())


@contextlib.contextmanager
def logged_to(path: Path) -> Iterator[None]:
    """What the console prints, and tracebacks (:func:`log_traceback`), also appended to
    ``path`` while the context lasts (while its disk takes them)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    file = _LogFile(path)
    log = Console(file=file, width=WIDTH, no_color=True, highlight=False, soft_wrap=True)  # type: ignore[arg-type]
    console.logs.append(log)
    try:
        yield
    finally:
        console.logs.remove(log)
        file.close()


def log_traceback() -> None:
    """The exception being handled, with its traceback, into the log files (the terminal
    gets one line for it where it is handled)."""
    console.log_only(redact_text(traceback.format_exc().rstrip()))


# What a sweep tells its jobs besides their own overrides (their parent run, label, part,
# the store): Hydra's launchers print each job's overrides, these among them.
_INTERNAL_OVERRIDE = re.compile(
    r"\s*\b(?:multirun\.\w+|tracking\.uri)=(?:'(?:[^'\\]|\\.)*'|\[[^\]]*\]|\S+)"
)
HYDRA_LAUNCHER_LOGGERS = (
    "hydra._internal.core_plugins.basic_launcher",
    "hydra_plugins.hydra_submitit_launcher.submitit_launcher",
)


class _HideInternalOverrides(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str) and not record.args:
            record.msg = _INTERNAL_OVERRIDE.sub("", record.msg)
        return True


def hide_internal_overrides() -> None:
    """Hydra's job lines (``#0 : speculative=draft``) show the job's own overrides only."""
    for name in HYDRA_LAUNCHER_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _HideInternalOverrides) for f in logger.filters):
            logger.addFilter(_HideInternalOverrides())


# Libraries whose INFO lines are theirs, not the run's: shown with -v (SPECEXP_VERBOSE=1).
THIRD_PARTY = ("mlflow", "alembic", "huey", "sqlalchemy", "urllib3", "matplotlib", "httpx")
VERBOSE = "SPECEXP_VERBOSE"


def quiet_libraries() -> None:
    """Third-party loggers at WARNING unless $SPECEXP_VERBOSE is set (``specexp -v``), and
    log files that fail silent; jobs in other processes inherit the choice through the
    environment."""
    verbose = bool(os.environ.get(VERBOSE))
    if not verbose:
        os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
        # MLflow's tqdm bar ("Downloading artifacts") as a sweep reads its jobs' prompts back.
        os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    for name in THIRD_PARTY:
        logging.getLogger(name).setLevel(logging.INFO if verbose else logging.WARNING)
    # A store's database error, logged with its traceback as it is raised: specexp says
    # it in one line (the journal takes the run), the traceback goes to the log file.
    logging.getLogger("mlflow.store.db.utils").setLevel(
        logging.INFO if verbose else logging.CRITICAL
    )
    # A log file the disk no longer takes is skipped, not reported with a traceback each line.
    logging.raiseExceptions = False


def print_dry_run(job: Job, launch: LaunchSpec, resolution: Optional[Resolution]) -> None:
    """The job, how the engine will take it (notes, and its own resolution where the stack's
    interpreter can run it here), then the command."""
    cfg, engine = job.config, job.engine
    version, source = engine.version(job.server)
    console.print(
        f"[bold]# engine={engine.name} stack={cfg.stack.name} model={cfg.model.name} "
        f"attention_backend={cfg.attention_backend.name} allreduce_backend={cfg.allreduce_backend.name} "
        f"speculative={cfg.speculative.method} concurrency={cfg.concurrency.streams}[/]"
    )
    console.print(f"# {engine.name} version: {version or 'unknown'} ({source})")
    env = redact_env(launch.env)
    console.print(
        "# environment set by specexp: "
        + (", ".join(f"{k}={v}" for k, v in sorted(env.items())) or "(none)")
    )
    for note in engine.plan_notes(job.server):
        console.print(f"# [yellow]note:[/] {note}")
    if resolution is None:
        pass  # the engine has none, or its stack's interpreter is not on this machine
    elif resolution.error:
        console.print(f"# resolution not run: {escape(resolution.error)}")
    elif resolution.changed:
        console.print(
            f"# [red]{engine.name} would change:[/] {escape('; '.join(resolution.changed))}"
        )
    elif resolution.ran:
        console.print(f"# {engine.name}'s own resolution keeps the command's settings")
    if resolution is not None and resolution.chosen:
        chosen = ", ".join(f"{k}={v}" for k, v in resolution.chosen)
        console.print(
            f"# [bold]{engine.name} will choose:[/] {escape(chosen)} "
            f"({escape(resolution.chosen_for)})"
        )
    if cfg.engine.url:
        console.print(
            f"# measures the running server at {redact_text(cfg.engine.url)}: nothing is launched"
        )
        return
    # Plain print: the command must stay one copy-pasteable line, never wrapped by rich.
    if not console.quiet:
        print(redact_text(LaunchSpec(launch.argv, env).shell_line()), flush=True)


def print_stopped(what: str, why: str) -> None:
    """Why a command stopped before it ran (a usage error, a refused config), one line."""
    console.print(f"[red]{what}:[/] {escape(why)}")


def interrupted(signum: signal.Signals) -> int:
    """Every handler on the way up has cleaned up: one line, and the shell's exit status."""
    console.print(
        f"[yellow]interrupted ({signum.name}):[/] every server specexp "
        "started is stopped and open runs are ended as KILLED; what was measured is kept"
    )
    return 128 + signum


@contextlib.contextmanager
def status(message: str) -> Iterator[None]:
    with console.status(message):
        yield


class _RunProgress:
    """The bar of a job's runs: request by request where a run's requests are counted
    (tok/s of the run so far beside it), run by run otherwise."""

    def __init__(self, progress: Progress, task: Any, requests: Optional[int]):
        self.progress, self.task, self.requests = progress, task, requests
        self._run_started: Optional[float] = None
        self._done = self._tokens = 0

    def request_done(self, record: RequestRecord) -> None:
        """One request ended (a listener of the load client): the bar moves on."""
        if self._run_started is None:
            self._run_started, self._done, self._tokens = record.start_unix, 0, 0
        self._done += 1
        self._tokens += record.output_tokens or 0
        elapsed = max(time.time() - self._run_started, 1e-9)
        kind = "warm-up" if record.warmup else f"run {record.run}"
        self.progress.update(
            self.task,
            advance=1 if self.requests else 0,
            description=f"{kind}: {self._done}/{self.requests or '?'} requests, "
            f"{self._tokens / elapsed:.1f} tok/s",
        )

    def advance(self, result: RunResult) -> None:
        kind = "warm-up" if result.warmup else f"run {result.run}"
        if result.asked_rate is not None:
            kind += f" at {result.asked_rate:.3g} req/s"
        stalled = sum(r.stalled for r in result.records)
        note = (
            f"{kind}: [red]failed[/]"
            if result.faults
            else f"{kind}: {result.tok_per_s:.1f} tok/s"
            + (f", [yellow]{stalled} stalled[/]" if stalled else "")
        )
        # Requests counted in other processes (client workers) are counted here.
        left = (self.requests - self._done) if self.requests else 1
        self.progress.update(self.task, advance=max(left, 0), description=note)
        self._run_started, self._done = None, 0
        if console.is_terminal:  # the bar shows it live; the log gets one line per run
            console.log_only(note)
        else:
            console.print(note)


@contextlib.contextmanager
def run_progress(runs: int, requests: Optional[int] = None) -> Iterator[_RunProgress]:
    """Progress over ``runs`` runs of ``requests`` requests each (None: not known ahead)."""
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("left"),
        TimeRemainingColumn(),
        console=console,
        transient=False,
    )
    with progress:
        task = progress.add_task("measuring", total=runs * (requests or 1))
        yield _RunProgress(progress, task, requests)


def duration(seconds: float) -> str:
    return f"{max(1, round(seconds))} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def print_expected(cfg: RunConfig, earlier_s: Optional[float]) -> None:
    """Before a job starts: how long it should take, as an estimate - from an earlier run of
    the same configuration, else from the config at the model's expected rate (or, where the
    model states none, an assumed one), each basis said."""
    if earlier_s is not None:
        console.print(
            f"expected: about {duration(earlier_s)} (an earlier run of this configuration took "
            "that long)"
        )
        return
    stats, workload, level = cfg.stats, cfg.workload, cfg.concurrency
    stated = cfg.model.expected_tok_per_s
    tok_per_s = stated or ASSUMED_TOK_PER_S_PER_STREAM
    per_launch = stats.warmup_runs + (cfg.multirun.part_runs or stats.measured_runs)
    runs = stats.launches * per_launch
    seconds = runs * expected_run_seconds(workload, level, tok_per_s)
    requests = run_requests(workload, level)
    rate = (
        f" at {tok_per_s:g} tok/s per stream (model.expected_tok_per_s)"
        if stated
        else f" at an assumed {tok_per_s:g} tok/s per stream (model.expected_tok_per_s states none)"
    )
    if requests is None:
        what = f"{level.duration_s:g} s"
    elif not level.open_loop:
        what = f"{requests} request(s) of up to {workload.max_tokens} tokens{rate}"
    elif level.rate is not None:
        what = f"{requests} arrivals at {level.rate:g} req/s"
    elif level.search is not None:
        what = (
            f"{requests} arrivals, each run timed at the capacity search's start rate "
            f"{level.search.start_rate:g} req/s (faster rates make shorter runs; a run the "
            "server cannot keep up with lasts until its backlog drains)"
        )
    else:
        what = f"{requests} arrivals at the times they are given"
    if cfg.multirun.part_runs is not None:
        # A sequential comparison's arm: launch after launch until the comparison is
        # decided, from its least launches to its budget (stats.launches).
        least = min(stats.sequential.min_launches, stats.launches)
        console.print(
            f"expected: about {duration(seconds * least / stats.launches)} to "
            f"{duration(seconds)} of measuring, an estimate - {least} to {stats.launches} "
            f"launches (measured until decided) of {per_launch} runs of {what} - plus each "
            "server's start"
        )
        return
    console.print(
        f"expected: about {duration(seconds)} of measuring, an estimate - {runs} runs of {what}"
        " - plus the server's start"
    )


def _fmt(value: Optional[float], digits: int = 2) -> str:
    return "-" if value is None or value != value else f"{value:.{digits}f}"


def print_summary(cfg: RunConfig, job: JobSummary, runs: list[RunResult]) -> None:
    """The job's runs as a table, then its summary, its notes, and the server's own
    accounting beside the client's figures."""
    console.print(_runs_table(cfg, runs))
    summary, metric = job.tok_per_s, job.metric
    if summary:
        console.print(
            f"[bold]tok/s {summary.mean:.2f}[/] ± {summary.std:.2f} (CV {summary.cv:.2%}), "
            f"{summary.confidence * 100:g}% CI [{_fmt(summary.ci_low)}, {_fmt(summary.ci_high)}], "
            f"n={summary.n} {job.unit}"
        )
        between = metric(Metric.var_between_launch)
        if between is not None:
            console.print(
                f"variance of tok/s: within a launch {metric(Metric.var_within_launch):.3g}, "
                f"between launches {between:.3g}"
            )
    _print_service_levels(cfg, job)
    console.print(energy_line(job, runs))
    for note in job.notes:
        console.print(
            f"[yellow]warning:[/] {note.message}" if note.doubtful else f"note: {note.message}"
        )
    _print_accounting(job)
    if job.prompts:
        console.print(_categories_table(job.prompts))


def _runs_table(cfg: RunConfig, runs: list[RunResult]) -> Table:
    table = Table(
        title=f"{cfg.engine.name} / {cfg.model.name} / speculative={cfg.speculative.method} / "
        f"concurrency={cfg.concurrency.streams}"
    )
    several = cfg.stats.launches > 1
    for header in (["launch"] if several else []) + ["run"]:
        table.add_column(header)
    open_loop, slo = cfg.concurrency.open_loop, cfg.slo if cfg.slo.defined else None
    for header in (
        ("tok/s", "tokens", "TTFT ms", "accept len")
        + (("req/s asked", "req/s sent") if open_loop else ())
        + (("SLO met",) if slo else ())
    ):
        table.add_column(header, justify="right")
    for result in runs:
        ttft = result.ttft_s_mean * 1000 if result.ttft_s_mean is not None else None
        goodput = run_goodput(result, slo) if slo else None
        table.add_row(
            *([str(result.launch)] if several else []),
            "warm-up" if result.warmup else str(result.run),
            _fmt(result.tok_per_s, 1),
            str(result.output_tokens),
            _fmt(ttft, 1),
            _fmt(result.acceptance_length),
            *((_fmt(result.asked_rate, 3), _fmt(result.achieved_rate, 3)) if open_loop else ()),
            *((f"{goodput.good}/{goodput.requests}",) if goodput else ()),
        )
    return table


def _print_accounting(job: JobSummary) -> None:
    """The server's own figures beside the client's, and the acceptance."""
    metric = job.metric
    accounting = [
        f"{label} {_fmt(server * scale, digits)} (client "
        f"{_fmt((metric(name) or float('nan')) * scale, digits)})"
        for label, name, scale, digits in (
            ("tokens", Metric.output_tokens_total, 1, 0),
            ("TTFT ms", Metric.ttft_s_mean, 1000, 1),
            ("TPOT ms", Metric.tpot_s_mean, 1000, 2),
            ("E2E ms", Metric.e2e_s_mean, 1000, 1),
        )
        if (server := metric(server_metric(name))) is not None
    ]
    if accounting:
        console.print("the server's own accounting: " + ", ".join(accounting))
    length = metric(Metric.acceptance_length_mean)
    if length is not None:
        rate = metric(Metric.acceptance_rate_mean)
        console.print(f"acceptance length {length:.2f}, rate {_fmt(rate and rate * 100, 1)}%")


def _categories_table(prompts: JobPrompts) -> Table:
    table = Table(title="per category (the prompt set)")
    for header in ("category", "prompts", "accepted of drafted", "ended at EOS", "same every run"):
        table.add_column(header, justify="left" if header == "category" else "right")
    for c in prompts.categories():
        table.add_row(
            c.category,
            str(c.prompts),
            "-" if c.acceptance is None else f"{c.acceptance:.0%}",
            f"{c.natural_ends}/{c.prompts}",
            f"{c.stable}/{c.prompts}",
        )
    return table


def energy_line(job: JobSummary, runs: Sequence[RunResult]) -> str:
    """Energy per output token with its interval and the meter's shortest window, or that
    it was not measured (no figure)."""
    mean = job.metric(f"{Metric.energy_j_per_token}_mean")
    if mean is None:
        return "energy per output token: not measured"
    low, high = (job.metric(f"{Metric.energy_j_per_token}_ci_{end}") for end in ("low", "high"))
    interval = f"[{low:.3g}, {high:.3g}]" if low is not None and high is not None else "-"
    window = max(r.telemetry.get(Metric.energy_shortest_window_s, 0.0) for r in runs)
    short = job.metric(Metric.energy_unresolved_runs) or 0.0
    return (
        f"energy per output token {mean:.3g} J, CI {interval}; the meter resolves runs of "
        f"{window:.1f} s or more to {WINDOW_ERROR:.0%}"
        + (f" ({short:.0f} measured run(s) shorter)" if short else "")
    )


def _print_service_levels(cfg: RunConfig, job: JobSummary) -> None:
    """Goodput and attainment with their intervals, or a capacity search's capacity."""
    slo = cfg.slo
    levels = ", ".join(
        f"{label} <= {value * 1000:g} ms"
        for label, value in (
            ("TTFT", slo.ttft_s),
            ("ITL" if slo.itl_percentile is None else f"ITL p{slo.itl_percentile:g}", slo.itl_s),
            ("E2E", slo.e2e_s),
        )
        if value is not None
    )
    for label, summary, scale, unit in (
        ("SLO attainment", job.attainment, 100, "%"),
        ("goodput", job.goodput_rps, 1, " req/s"),
    ):
        if summary:
            console.print(
                f"[bold]{label} {summary.mean * scale:.3g}{unit}[/] "
                f"{summary.confidence * 100:g}% CI [{_fmt(summary.ci_low * scale, 3)}, "
                f"{_fmt(summary.ci_high * scale, 3)}] ({levels})"
            )
    capacity = job.capacity
    if capacity:
        console.print(
            f"[bold]capacity at {capacity.target:.0%} attainment ({levels}): "
            f"{capacity.describe()}[/] ({capacity.confidence * 100:g}% CI; "
            f"{len(capacity.points)} rates measured)"
        )
        if capacity.reason:
            console.print(f"[yellow]capacity:[/] {capacity.reason}")


# The report tables (specexp.output.tables), drawn with their marks coloured.

_STYLE = {
    "faster": "green",
    "slower": "red",
    "equivalent": "cyan",
    "inconclusive": "yellow",
    "cannot test": "magenta",
    "caveat": "magenta",  # confounded by drift, or not attributable
    "reproduced": "green",
    "contradicted": "red",
    "not measured": "dim",
}


def rich_table(title: str, rows: Rows) -> Group:
    """The rows as tables that fit the console's width without cutting a figure: cells wrap
    at spaces only, and columns that do not fit beside the first go on to a table of their
    own, with the first column repeated."""
    cells = [[rows.headers[c], *(r[c] for r in rows.rows)] for c in range(len(rows.headers))]
    least = [max(len(w) for cell in column for w in [*cell.split(), ""]) for column in cells]
    natural = [max(len(cell) for cell in column) for column in cells]
    groups: list[list[int]] = [[]]
    for column in range(1, len(rows.headers)):
        if groups[-1] and _drawn(least, [0, *groups[-1], column]) > console.width:
            groups.append([])
        groups[-1].append(column)
    tables = []
    for i, group in enumerate(groups):
        columns = [0, *group]
        widths = {c: natural[c] for c in columns}
        # Narrow the widest column that can be narrowed, one character at a time.
        while _drawn(list(widths.values()), range(len(widths))) > console.width:
            narrowable = [c for c in columns if widths[c] > least[c]]
            if not narrowable:  # words wider than the console: it overflows, nothing is cut
                break
            widths[max(narrowable, key=widths.__getitem__)] -= 1
        tables.append(_table(title if i == 0 else "", rows, widths))
    return Group(*tables)


def _drawn(widths: Sequence[int], columns: Sequence[int]) -> int:
    """A table's drawn width: its columns' widths, a space either side, and the rules."""
    return sum(widths[c] + 3 for c in columns) + 1


def _table(title: str, rows: Rows, widths: dict[int, int]) -> Table:
    table = Table(title=title or None, title_justify="left")
    for column, width in widths.items():
        header = rows.headers[column]
        left = header in ("configuration", "claim", "point")
        table.add_column(header, justify="left" if left else "right", width=width)
    marked = rows.headers.index(rows.marked) if rows.marked else None
    for row, mark in zip(rows.rows, rows.marks, strict=True):
        table.add_row(*(_styled(row[c], mark) if c == marked else row[c] for c in widths))
    return table


def _styled(cell: str, mark: Optional[str]) -> str:
    style = _STYLE.get(mark or "")
    return f"[{style}]{escape(cell)}[/]" if style else cell


def print_comparison(
    arms: Sequence[Arm],
    comparisons: Sequence[Comparison],
    caveats: Sequence[Caveat],
    skipped: Sequence[str],
    metric: str,
) -> None:
    console.print(
        rich_table(
            f"{metric}: ratio of geometric means vs baseline, Welch t on logs (with the time "
            f"drift taken out where arms share a timeline); simultaneous intervals (Bonferroni) "
            f"over {len(comparisons)} comparison(s)",
            comparison_rows(arms, comparisons),
        )
    )
    for line in caveat_lines(caveats, len(comparisons)):
        console.print(f"[yellow]note:[/] {escape(line)}")
    for line in run_warnings(arms):
        console.print(f"[yellow]warning:[/] {escape(line)}")
    for line in skipped:
        console.print(f"[dim]skipped: {escape(line)}[/]")


def print_switch_off(check: SwitchOffCheck) -> None:
    console.print(rich_table(escape(check.statement), switch_off_rows(check)))


def print_reproduction(
    reference: Any,
    points: dict[str, Optional[Arm]],
    claims: Sequence[ClaimCheck],
    same_hardware: bool,
    measured: str,
) -> None:
    console.print(f"[bold]Reproduction: {reference.title}[/]")
    console.print(hardware_line(reference, same_hardware, measured))
    console.print(rich_table("published points", point_rows(reference, points, same_hardware)))
    console.print(rich_table("published claims, as ratios with their CI", claim_rows(claims)))


def _print_deaths(report: SweepReport) -> None:
    """The capacity searches' server deaths: the summary line, then one line each."""
    if report.deaths:
        console.print(f"[yellow]{escape(death_summary(report))}[/]")
        for label, death in report.deaths:
            console.print(f"  {escape(label)}: {escape(death.describe())}")


def print_sweep_report(report: SweepReport, ui_line: str) -> None:
    """The sweep report in the terminal: what ran, the comparison, the findings."""
    console.print(
        f"[bold]sweep report[/] (parent run {report.parent_run_id}): {report.job_runs} job runs, "
        f"{report.failed} failed, {report.server_launches} server launch(es)\n"
        f"order: {report.order}"
    )
    if report.arms:
        print_comparison(
            report.arms, report.comparisons, report.caveats, report.skipped, Metric.tok_per_s
        )
    if report.sequences:
        console.print(
            rich_table("measured until decided (sequential)", sequence_rows(report.sequences))
        )
    if report.capacity_arms:
        console.print(
            rich_table(
                "capacity under the SLO: the highest arrival rate meeting the target attainment "
                "(capacity search), candidates' ratio to the baseline with simultaneous intervals",
                capacity_rows(report.capacity_arms, report.capacities),
            )
        )
    _print_deaths(report)
    for note in report.notes:
        if note.kind != NoteKind.left_out:  # the skipped runs are listed above
            console.print(f"[yellow]note:[/] {escape(note.message)}")
    _print_findings(report)
    if report.energy:
        print_energy(report.energy)
    if report.schedule:
        _print_schedule(report.schedule)
    for compared in report.prompt_comparisons:
        print_prompt_comparison(compared)
    for check in report.checks:
        print_switch_off(check)
    console.print(ui_line)


def _print_findings(report: SweepReport) -> None:
    """Crossovers (by load, under the SLO, as a surface) and the efficiency against the
    bound."""
    for found in report.crossovers:
        console.print(f"[bold]crossover:[/] {escape(found.statement)}")
        advice = found.recommendation
        if advice.settings:
            console.print(
                rich_table(
                    escape(f"recommended switch-off from {advice.threshold}: {advice.basis}"),
                    setting_rows(advice.settings),
                )
            )
        else:
            console.print(f"recommended switch-off: {escape(advice.note)}")
    for found in report.goodput_crossovers:
        console.print(f"[bold]crossover under the SLO:[/] {escape(found.statement)}")
    for surface in report.surfaces:
        print_surface(surface)
    for bound in report.efficiencies:
        console.print(f"[bold]against the bound:[/] {escape(bound.sentence())}")


def print_surface(surface: Surface) -> None:
    """A surface's cells, which are decided, and each row's crossover."""
    console.print(
        rich_table(
            f"[bold]surface:[/] {escape(surface.candidate)} vs {escape(surface.baseline)}, "
            f"{surface.factor} x {surface.levels_factor}",
            surface_rows(surface),
        )
    )
    console.print(escape(surface_decided(surface)))
    for row in surface.rows:
        console.print(f"crossover {escape(surface_crossover(surface, row))}")


def _print_schedule(schedule: DraftSchedule) -> None:
    """The draft length to deploy by level, as each engine takes it."""
    console.print(
        rich_table(
            "draft length to deploy by level: on only where shown faster than none",
            schedule_rows(schedule),
        )
    )
    if schedule.settings:
        console.print(
            rich_table(
                escape(f"to deploy: {schedule.batch_schedule().describe()}"),
                setting_rows(schedule.settings),
            )
        )
    else:
        console.print(f"[yellow]{escape(NO_SCHEDULE)}[/]")


def print_energy(energy: EnergyReport) -> None:
    """Energy per output token: its source and resolution (or that it was not measured),
    the arms compared on joules per token, its crossover and whether speed's agrees."""
    console.print(f"[bold]energy:[/] {escape(energy.statement)}")
    if energy.comparisons:
        console.print(
            rich_table(
                f"{Metric.energy_j_per_token} (lower is better): ratio of geometric means vs "
                "baseline, Welch t on logs; simultaneous intervals (Bonferroni) over "
                f"{len(energy.comparisons)} comparison(s)",
                energy_rows(energy),
            )
        )
    for note in energy.notes:
        console.print(f"[yellow]note:[/] {escape(note)}")
    for found in energy.crossovers:
        console.print(f"[bold]crossover on energy:[/] {escape(found.statement)}")
    for said in energy.agreements:
        style = "bold red" if said.disagree else "bold"
        console.print(f"[{style}]speed and energy:[/] {escape(said.statement)}")


def print_prompt_comparison(compared: PromptComparison) -> None:
    """Per category, what the candidate accepted and bought; whether its outputs match."""
    console.print(
        rich_table(
            f"{compared.candidate} against {compared.baseline}, per category",
            category_rows(compared),
        )
    )
    console.print(
        f"outputs identical to the baseline's: {share(compared.identical, compared.compared)}"
    )
    for d in compared.divergences:
        console.print(
            f"  {escape(d.prompt_id)}: first differs at character {d.at}: "
            f"{escape(repr(d.baseline))} vs {escape(repr(d.candidate))}"
        )
    for note in compared.notes:
        console.print(f"[yellow]note:[/] {escape(note.message)}")


def print_budget(statement: str, short: bool) -> None:
    """Before the first launch: what the sweep's budget can find; in yellow when it falls
    ``short`` of the threshold."""
    console.print(f"[yellow]{escape(statement)}[/]" if short else escape(statement))
