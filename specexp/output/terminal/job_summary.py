"""A job's summary: its runs as a table, tok/s with its interval, service levels, energy,
notes, the server's own accounting and the prompt set's categories."""

from __future__ import annotations

from typing import Optional, Sequence

from rich.table import Table

from specexp.analysis.prompts import JobPrompts
from specexp.analysis.results import Metric, server_metric
from specexp.analysis.summary import JobSummary
from specexp.core.measurements import RunResult
from specexp.core.schemas.run import RunConfig
from specexp.core.slo import run_goodput
from specexp.host.energy import WINDOW_ERROR
from specexp.output.terminal.screen import console


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
