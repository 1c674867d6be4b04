"""A sweep's report: what ran, the comparison, measured-until-decided and capacity tables,
the findings (crossovers, surfaces, the bound, energy, the draft schedule, prompts, the
switch-off checks); and before its first launch, what its budget can find."""

from __future__ import annotations

from rich.markup import escape

from specexp.analysis.crossover import SwitchOffCheck
from specexp.analysis.energy_arms import EnergyReport
from specexp.analysis.prompts import PromptComparison
from specexp.analysis.report import SweepReport
from specexp.analysis.results import Metric
from specexp.analysis.schedule import NO_SCHEDULE, DraftSchedule
from specexp.analysis.surface import Surface
from specexp.core.notes import NoteKind
from specexp.output.tables import (
    capacity_rows,
    category_rows,
    death_summary,
    energy_rows,
    schedule_rows,
    sequence_rows,
    setting_rows,
    share,
    surface_crossover,
    surface_decided,
    surface_rows,
    switch_off_rows,
)
from specexp.output.terminal.comparison import print_comparison
from specexp.output.terminal.rendering import rich_table
from specexp.output.terminal.screen import console


def print_switch_off(check: SwitchOffCheck) -> None:
    console.print(rich_table(escape(check.statement), switch_off_rows(check)))


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
