"""What a person sees in the terminal: dry-run commands, progress, the end-of-run summary."""

from __future__ import annotations

import contextlib
import json
import sys
from typing import Any, Callable, Iterator, Optional, Sequence

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from specexp.analysis import Arm, ClaimCheck, ci_label
from specexp.crossover import Crossover, SwitchOffCheck
from specexp.engines.base import LaunchSpec, Resolution
from specexp.job import Job
from specexp.measurements import RunResult
from specexp.redaction import redact_env
from specexp.results import Tag
from specexp.schemas import RunConfig
from specexp.stats import Comparison, Summary

# soft_wrap: long lines (commands, paths) stay whole instead of being wrapped mid-word.
# Logs and pipes get a wide fixed width, so tables stay readable there too.
console = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 200)


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
    else:
        console.print(f"# {engine.name}'s own resolution keeps the command's settings")
    if cfg.engine.url:
        console.print(f"# measures the running server at {cfg.engine.url}: nothing is launched")
        return
    # Plain print: the command must stay one copy-pasteable line, never wrapped by rich.
    print(LaunchSpec(launch.argv, env).shell_line(), flush=True)


@contextlib.contextmanager
def status(message: str) -> Iterator[None]:
    with console.status(message):
        yield


class _RunProgress:
    def __init__(self, progress: Progress, task: Any):
        self.progress, self.task = progress, task

    def advance(self, result: RunResult) -> None:
        kind = "warm-up" if result.warmup else f"run {result.run}"
        note = f"{kind}: {result.tok_per_s:.1f} tok/s" if result.ok else f"{kind}: [red]failed[/]"
        self.progress.update(self.task, advance=1, description=note)
        if not console.is_terminal:  # a log file gets no live bar: one line per run instead
            console.print(note)


@contextlib.contextmanager
def run_progress(total: int) -> Iterator[_RunProgress]:
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    )
    with progress:
        yield _RunProgress(progress, progress.add_task("measuring", total=total))


def _fmt(value: Optional[float], digits: int = 2) -> str:
    return "-" if value is None or value != value else f"{value:.{digits}f}"


def print_summary(
    cfg: RunConfig,
    summary: Optional[Summary],
    metrics: dict[str, float],
    notes: list[str],
    runs: list[RunResult],
) -> None:
    table = Table(
        title=f"{cfg.engine.name} / {cfg.model.name} / speculative={cfg.speculative.method} / "
        f"concurrency={cfg.concurrency.streams}"
    )
    if cfg.stats.launches > 1:
        table.add_column("launch")
    table.add_column("run")
    table.add_column("tok/s", justify="right")
    table.add_column("tokens", justify="right")
    table.add_column("TTFT ms", justify="right")
    table.add_column("accept len", justify="right")
    for result in runs:
        ttft = result.ttft_s_mean * 1000 if result.ttft_s_mean is not None else None
        launch = [str(result.launch)] if cfg.stats.launches > 1 else []
        table.add_row(
            *launch,
            "warm-up" if result.warmup else str(result.run),
            _fmt(result.tok_per_s, 1),
            str(result.output_tokens),
            _fmt(ttft, 1),
            _fmt(result.acceptance_length),
        )
    console.print(table)
    if summary:
        level = int(summary.confidence * 100)
        unit = "launch means" if cfg.stats.launches > 1 else "measured runs"
        console.print(
            f"[bold]tok/s {summary.mean:.2f}[/] ± {summary.std:.2f} (CV {summary.cv:.2%}), "
            f"{level}% CI [{_fmt(summary.ci_low)}, {_fmt(summary.ci_high)}], n={summary.n} {unit}"
        )
        if "tok_per_s_var_between_launch" in metrics:
            console.print(
                f"variance of tok/s: within a launch {metrics['tok_per_s_var_within_launch']:.3g}, "
                f"between launches {metrics['tok_per_s_var_between_launch']:.3g}"
            )
    for note in notes:
        console.print(f"[yellow]warning:[/] {note}")
    accounting = [
        f"{label} {_fmt(metrics[f'server_{name}'] * scale, digits)} (client "
        f"{_fmt(metrics.get(name, float('nan')) * scale, digits)})"
        for label, name, scale, digits in (
            ("tokens", "output_tokens_total", 1, 0),
            ("TTFT ms", "ttft_s_mean", 1000, 1),
            ("TPOT ms", "tpot_s_mean", 1000, 2),
            ("E2E ms", "e2e_s_mean", 1000, 1),
        )
        if f"server_{name}" in metrics
    ]
    if accounting:
        console.print("the server's own accounting: " + ", ".join(accounting))
    if "acceptance_length_mean" in metrics:
        console.print(
            f"acceptance length {metrics['acceptance_length_mean']:.2f}, "
            f"rate {metrics.get('acceptance_rate_mean', float('nan')):.1%}"
        )


# Comparisons and reproduction reports: rows are built once, then drawn for the terminal
# (rich) or written as markdown (MLflow artifact).

_VERDICT_STYLE = {
    "faster": "green",
    "slower": "red",
    "equivalent": "cyan",
    "inconclusive": "yellow",
    "cannot test": "magenta",
    "not attributable": "magenta",
    "confounded by drift": "magenta",
    "reproduced": "green",
    "contradicted": "red",
    "not measured": "dim",
}


def verdict_text(c: Comparison) -> str:
    return c.verdict + (" (these launches)" if c.launches_only else "")


def _pct(value: Optional[float]) -> str:
    return "-" if value is None or value != value else f"{value:+.1%}"


def _p(value: Optional[float]) -> str:
    if value is None or value != value:
        return "-"
    return f"{value:.2g}" if value >= 1e-4 else "<1e-4"


def comparison_rows(
    arms: Sequence[Arm], comparisons: Sequence[Comparison]
) -> tuple[list[str], list[list[str]]]:
    headers = [
        "configuration",
        "n",
        "mean",
        ci_label(arms),
        "CV",
        "vs baseline",
        "ratio CI (simultaneous)",
        "p Welch (Bonferroni)",
        "p Mann-Whitney",
        "verdict",
        "MDE",
        "per arm for threshold",
    ]
    by_label = {c.candidate: c for c in comparisons}
    baselines = {c.baseline for c in comparisons}
    rows = []
    for arm in arms:
        s, c = arm.summary, by_label.get(arm.label)
        row = [
            arm.label + (" (baseline)" if arm.label in baselines else ""),
            f"{s.n} {arm.unit}s",
            _fmt(s.mean),
            f"[{_fmt(s.ci_low)}, {_fmt(s.ci_high)}]",
            f"{s.cv:.1%}",
        ]
        if c:
            row += [
                _pct(c.change)
                + (" (drift out)" if c.drift else "")
                + ("" if len(baselines) == 1 else f" vs {c.baseline}"),
                f"[{_pct(c.ci_low - 1)}, {_pct(c.ci_high - 1)}]",
                f"{_p(c.p_welch)} ({_p(c.p_welch_adjusted)})",
                _p(c.p_mannwhitney),
                verdict_text(c),
                _pct(c.mde).lstrip("+"),
                f"{c.plan.launches} launches x {c.plan.runs}"
                if c.plan
                else str(c.runs_needed or "-"),
            ]
        else:
            row += ["-"] * 7
        rows.append(row)
    return headers, rows


def _markdown_table(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell.replace("|", "/") for cell in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _rich_table(
    title: str, headers: list[str], rows: list[list[str]], verdict_column: Optional[int]
) -> Table:
    table = Table(title=title)
    for header in headers:
        table.add_column(
            header, justify="left" if header in ("configuration", "claim", "point") else "right"
        )
    for row in rows:
        cells = list(row)
        if verdict_column is not None:
            style = _VERDICT_STYLE.get(cells[verdict_column].split(" (")[0])
            if style:
                cells[verdict_column] = f"[{style}]{cells[verdict_column]}[/]"
        table.add_row(*cells)
    return table


def _comparison_notes(comparisons) -> list[str]:
    return [f"{c.candidate}: {note}" for c in comparisons for note in c.notes]


def comparison_markdown(arms: Sequence[Arm], comparisons: Sequence[Comparison], metric: str) -> str:
    headers, rows = comparison_rows(arms, comparisons)
    text = f"# Comparison of {metric}\n\n" + _markdown_table(headers, rows)
    notes = _comparison_notes(comparisons)
    return text + ("\n" + "\n".join(f"- {n}" for n in notes) + "\n" if notes else "")


def print_comparison(
    arms: Sequence[Arm], comparisons: Sequence[Comparison], skipped: list[str], metric: str
) -> None:
    headers, rows = comparison_rows(arms, comparisons)
    console.print(
        _rich_table(
            f"{metric}: ratio of geometric means vs baseline, Welch t on logs (with the time "
            f"drift taken out where arms share a timeline); simultaneous intervals (Bonferroni) over "
            f"{len(comparisons)} comparison(s)",
            headers,
            rows,
            headers.index("verdict"),
        )
    )
    for note in _comparison_notes(comparisons):
        console.print(f"[yellow]note:[/] {note}")
    for arm in arms:
        if arm.run.tags.get(Tag.warnings):
            console.print(f"[yellow]warning:[/] {arm.label}: {arm.run.tags[Tag.warnings]}")
    for line in skipped:
        console.print(f"[dim]skipped: {line}[/]")


def switch_off_rows(check: SwitchOffCheck) -> tuple[list[str], list[list[str]]]:
    headers = [
        "level",
        "faster fixed arm",
        "adaptive vs it",
        "ratio CI (simultaneous)",
        "verdict",
        "outcome",
    ]
    rows = [
        [
            str(level),
            followed,
            _pct(c.change),
            f"[{_pct(c.ci_low - 1)}, {_pct(c.ci_high - 1)}]",
            c.verdict,
            outcome,
        ]
        for level, followed, c, outcome in zip(
            check.levels, check.followed, check.comparisons, check.outcomes, strict=True
        )
    ]
    return headers, rows


def switch_off_markdown(check: SwitchOffCheck) -> str:
    headers, rows = switch_off_rows(check)
    return f"## Switch-off check\n\n{check.statement}\n\n" + _markdown_table(headers, rows)


def print_switch_off(check: SwitchOffCheck) -> None:
    headers, rows = switch_off_rows(check)
    console.print(_rich_table(escape(check.statement), headers, rows, headers.index("verdict")))


def reproduction_rows(
    reference: Any,
    points: dict[str, Optional[Arm]],
    claims: Sequence[ClaimCheck],
    same_hardware: bool,
):
    measured = [arm for arm in points.values() if arm is not None]
    point_headers = ["point", "published tok/s", "measured tok/s", ci_label(measured), "run"]
    point_rows = []
    for point, arm in points.items():
        published = f"{reference.points[point].tok_per_s:.1f}"
        if arm is None:
            point_rows.append([point, published, "not measured", "-", "-"])
        elif same_hardware:
            point_rows.append(
                [
                    point,
                    published,
                    _fmt(arm.summary.mean),
                    f"[{_fmt(arm.summary.ci_low)}, {_fmt(arm.summary.ci_high)}]",
                    arm.run_id[:8],
                ]
            )
        else:
            point_rows.append(
                [
                    point,
                    published,
                    f"({_fmt(arm.summary.mean)}, other hardware)",
                    "-",
                    arm.run_id[:8],
                ]
            )
    claim_headers = [
        "claim",
        "published",
        "measured",
        "ratio CI",
        "verdict",
        "measured / published (CI)",
        "status",
    ]
    claim_rows = []
    for check in claims:
        c = check.comparison
        agreement = (
            f"[{_fmt(check.agreement_low, 3)}, {_fmt(check.agreement_high, 3)}]"
            if check.agreement_low is not None
            else "-"
        )
        claim_rows.append(
            [
                f"{check.id}: {check.text}",
                _pct(check.published_ratio - 1),
                _pct(c.change) if c else "-",
                f"[{_pct(c.ci_low - 1)}, {_pct(c.ci_high - 1)}]" if c else "-",
                verdict_text(c) if c else "-",
                agreement,
                check.status,
            ]
        )
    return (point_headers, point_rows), (claim_headers, claim_rows)


def _hardware_line(reference, same_hardware: bool, measured: str) -> str:
    if same_hardware:
        return f"Hardware matches the reference ({reference.hardware.description}): absolute tok/s are compared."
    return (
        f"Hardware differs: reference {reference.hardware.description}; measured on {measured}. "
        "Absolute tok/s are not compared, so whether the published figures hold on the reference "
        "hardware cannot be judged here; the claims are judged as ratios between configurations, "
        "which other hardware may change too."
    )


def reproduction_markdown(reference, points, claims, same_hardware: bool, measured: str) -> str:
    (ph, pr), (ch, cr) = reproduction_rows(reference, points, claims, same_hardware)
    return (
        f"# Reproduction: {reference.title}\n\n{_hardware_line(reference, same_hardware, measured)}\n\n"
        f"Method of the reference: {reference.method.workload}, {reference.method.warmup_runs} warm-ups, "
        f"{reference.method.measured_runs} measured runs; each published figure is taken to carry run noise "
        f"up to {reference.method.published_cv_max:.0%} CV. The claims are one family: 'contradicted' means the "
        "measured / published interval (simultaneous) excludes 1.\n\n"
        + _markdown_table(ph, pr)
        + "\n"
        + _markdown_table(ch, cr)
    )


def print_reproduction(reference, points, claims, same_hardware: bool, measured: str) -> None:
    (ph, pr), (ch, cr) = reproduction_rows(reference, points, claims, same_hardware)
    console.print(f"[bold]Reproduction: {reference.title}[/]")
    console.print(_hardware_line(reference, same_hardware, measured))
    console.print(_rich_table("published points", ph, pr, None))
    console.print(_rich_table("published claims, as ratios with their CI", ch, cr, len(ch) - 1))


def sweep_description(
    *,
    arms: Sequence[Arm],
    comparisons: Sequence[Comparison],
    crossovers: Sequence[Crossover],
    checks: Sequence[SwitchOffCheck],
    notes: Sequence[str],
    baseline: str,
    engine: str,
    order: str,
    failed: int,
    view_link: str,
    run_link: Callable[[str], str],
    plot_link: Callable[[str], str],
    limit: int,
) -> str:
    """The sweep's report as its parent run's description (markdown, at most ``limit``
    characters): findings first, then the verdicts with links to the job runs, then what
    may make them wrong."""
    lines: list[str] = []
    for found in crossovers:
        setting = found.recommendation.get(engine)
        lines.append(f"**Crossover:** {found.statement}")
        if setting:
            lines.append(
                f"**{engine} setting** (switch off from {found.recommendation['threshold']}): "
                f"`{json.dumps(setting)}`"
            )
        elif found.recommendation.get("note"):
            lines.append(f"**Setting:** {found.recommendation['note']}")
        lines.append("")
    for check in checks:
        lines += [f"**Switch-off check:** {check.statement}", ""]
    by_label = {c.candidate: c for c in comparisons}
    baselines = {c.baseline for c in comparisons}
    counts: dict[str, int] = {}
    for comparison in comparisons:
        counts[comparison.verdict] = counts.get(comparison.verdict, 0) + 1
    if comparisons:
        lines.append(
            f"**Verdicts** against {baseline}: "
            + ", ".join(f"{n} {verdict}" for verdict, n in sorted(counts.items()))
            + (f"; **{failed} job(s) failed**" if failed else "")
        )
    lines += [
        "",
        f"[Open the sweep's jobs in the runs table]({view_link}) (configuration, tok/s with its "
        "interval, verdict, engaged) - select them there to compare.",
        "",
    ]
    lines += [
        f"| job | tok/s | {ci_label(arms)} | vs baseline | simultaneous CI | verdict | engaged |",
        "|---|---|---|---|---|---|---|",
    ]
    for arm in arms:
        s, versus = arm.summary, by_label.get(arm.label)
        verdict = verdict_text(versus) if versus else "baseline" if arm.label in baselines else "-"
        lines.append(
            f"| [{arm.label}]({run_link(arm.run_id)}) | {_fmt(s.mean)} | "
            f"[{_fmt(s.ci_low)}, {_fmt(s.ci_high)}] | "
            + (
                f"{_pct(versus.change)} | [{_pct(versus.ci_low - 1)}, {_pct(versus.ci_high - 1)}]"
                if versus
                else "- | -"
            )
            + f" | {verdict} | {arm.run.tags.get(Tag.engaged, '-')} |"
        )
    if crossovers:
        lines += ["", f"![crossover]({plot_link('crossover/crossover.png')})"]
    # Drift (fitted, taken out, or confounding a verdict) and other notes on comparisons.
    warnings = _comparison_notes(comparisons)
    warnings += [
        f"NOT ENGAGED: {a.label}: {a.run.tags[Tag.not_engaged]}"
        for a in arms
        if a.run.tags.get(Tag.not_engaged)
    ]
    warnings += [
        f"{a.label}: {a.run.tags[Tag.warnings]}" for a in arms if a.run.tags.get(Tag.warnings)
    ]
    warnings += list(notes)
    if warnings:
        lines += ["", "**Warnings**", ""] + [f"- {w}" for w in warnings]
    lines += ["", f"Order: {order}. Full report: artifacts `sweep_report/`, `crossover/`."]
    text = "\n".join(lines) + "\n"
    if len(text) > limit:
        cut = "\n\n(cut here: the full report is the artifact sweep_report/sweep_report.md)\n"
        text = text[: limit - len(cut)].rsplit("\n", 1)[0] + cut
    return text
