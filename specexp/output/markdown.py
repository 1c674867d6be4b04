"""Reports as markdown: a comparison, a switch-off check, a reproduction, and the sweep's
report as its parent run's description and artifact. Findings come first, then the
verdicts, then the caveats, each said once."""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

from specexp.analysis.arms import Arm, ci_label, stack_of
from specexp.analysis.crossover import SwitchOffCheck
from specexp.analysis.prompts import PromptComparison
from specexp.analysis.report import Caveat, SweepReport
from specexp.analysis.reproduction import ClaimCheck
from specexp.analysis.results import Metric, Tag
from specexp.analysis.schedule import NO_SCHEDULE
from specexp.analysis.surface import Surface
from specexp.core.stats.comparison import Comparison
from specexp.output.tables import (
    Rows,
    arm_interval,
    capacity_rows,
    category_rows,
    claim_rows,
    comparison_rows,
    death_summary,
    energy_rows,
    fmt,
    interval,
    pct,
    point_rows,
    schedule_rows,
    sequence_rows,
    setting_rows,
    several_stacks,
    share,
    surface_crossover,
    surface_decided,
    surface_rows,
    switch_off_rows,
    within_launch,
)


def table(rows: Rows) -> str:
    lines = ["| " + " | ".join(rows.headers) + " |", "|" + "---|" * len(rows.headers)]
    lines += ["| " + " | ".join(cell.replace("|", "/") for cell in row) + " |" for row in rows.rows]
    return "\n".join(lines) + "\n"


def caveat_lines(caveats: Sequence[Caveat], compared: int) -> list[str]:
    """Each caveat once, with whom it holds for ("all N comparisons" when it is everyone)."""
    lines = []
    for caveat in caveats:
        who = (
            f"all {compared} comparisons"
            if compared > 1 and len(caveat.subjects) == compared
            else ", ".join(caveat.subjects)
        )
        lines.append(f"{who}: {caveat.message}")
    return lines


def run_warnings(arms: Sequence[Arm]) -> list[str]:
    """What the job runs themselves warned of: settings that did not engage, noisy runs."""
    lines = [
        f"NOT ENGAGED: {a.label}: {a.run.tags[Tag.not_engaged]}"
        for a in arms
        if a.run.tags.get(Tag.not_engaged)
    ]
    return lines + [
        f"{a.label}: {a.run.tags[Tag.warnings]}" for a in arms if a.run.tags.get(Tag.warnings)
    ]


def comparison_markdown(
    arms: Sequence[Arm],
    comparisons: Sequence[Comparison],
    caveats: Sequence[Caveat],
    metric: str,
) -> str:
    text = f"# Comparison of {metric}\n\n" + table(comparison_rows(arms, comparisons))
    notes = caveat_lines(caveats, len(comparisons))
    return text + ("\n" + "\n".join(f"- {n}" for n in notes) + "\n" if notes else "")


def prompt_comparison_markdown(compared: PromptComparison) -> str:
    """Per category, and output by output: what speculation bought on the prompt set."""
    lines = [
        f"## {compared.candidate} against {compared.baseline}, per category",
        "",
        table(category_rows(compared)).rstrip("\n"),
        "",
        f"Outputs identical to the baseline's: {share(compared.identical, compared.compared)}"
        + (f" ({compared.identical_share:.0%})" if compared.identical_share is not None else "")
        + ".",
    ]
    lines += [
        f"- {d.prompt_id}: first differs at character {d.at}: baseline `{d.baseline!r}`, "
        f"{compared.candidate} `{d.candidate!r}`"
        for d in compared.divergences
    ]
    lines += [f"- {n.message}" for n in compared.notes]
    return "\n".join(lines) + "\n"


def switch_off_markdown(check: SwitchOffCheck) -> str:
    return f"## Switch-off check\n\n{check.statement}\n\n" + table(switch_off_rows(check))


def hardware_line(reference: Any, same_hardware: bool, measured: str) -> str:
    if same_hardware:
        return (
            f"Hardware matches the reference ({reference.hardware.description}): absolute tok/s "
            "are compared."
        )
    return (
        f"Hardware differs: reference {reference.hardware.description}; measured on {measured}. "
        "Absolute tok/s are not compared, so whether the published figures hold on the reference "
        "hardware cannot be judged here; the claims are judged as ratios between configurations, "
        "which other hardware may change too."
    )


def reproduction_markdown(
    reference: Any,
    points: dict[str, Optional[Arm]],
    claims: Sequence[ClaimCheck],
    same_hardware: bool,
    measured: str,
) -> str:
    method = reference.method
    return (
        f"# Reproduction: {reference.title}\n\n{hardware_line(reference, same_hardware, measured)}"
        f"\n\nMethod of the reference: {method.workload}, {method.warmup_runs} warm-ups, "
        f"{method.measured_runs} measured runs; each published figure is taken to carry run "
        f"noise up to {method.published_cv_max:.0%} CV. The claims are one family: "
        "'contradicted' means the measured / published interval (simultaneous) excludes 1.\n\n"
        + table(point_rows(reference, points, same_hardware))
        + "\n"
        + table(claim_rows(claims))
    )


def surface_markdown(surface: Surface) -> str:
    """A surface's cells as a table, which of them are decided, and each row's crossover."""
    return (
        f"{surface.candidate} against {surface.baseline}\nover {surface.factor} x "
        f"{surface.levels_factor} (heat map: `sweep_report/surface.png`); intervals\n"
        "simultaneous over the sweep's comparisons, as the job rows'.\n\n"
        + table(surface_rows(surface))
        + f"\n{surface_decided(surface)}.\n\n"
        + "".join(f"- {surface_crossover(surface, row)}\n" for row in surface.rows)
    )


def _findings(report: SweepReport) -> list[str]:
    """The crossovers with the setting they recommend, and the switch-off checks."""
    lines: list[str] = []
    for found in report.crossovers:
        advice = found.recommendation
        lines.append(f"**Crossover:** {found.statement}")
        if advice.settings:
            lines += [
                f"**Switch off from {advice.threshold}** ({advice.basis}), in each engine's "
                "own terms:",
                "",
                table(setting_rows(advice.settings)).rstrip("\n"),
            ]
        elif advice.note:
            lines.append(f"**Setting:** {advice.note}")
        lines.append("")
    for found in report.goodput_crossovers:
        lines += [f"**Crossover under the SLO:** {found.statement}", ""]
    for found in report.energy.crossovers if report.energy else ():
        lines += [f"**Crossover on energy:** {found.statement}", ""]
    for said in report.energy.agreements if report.energy else ():
        lines += [f"**Speed and energy:** {said.statement}", ""]
    for check in report.checks:
        lines += [f"**Switch-off check:** {check.statement}", ""]
    return lines


def _job_table(report: SweepReport, run_link: Callable[[str], str]) -> list[str]:
    if not report.arms:  # a sweep of capacity searches only: no tok/s table, not an empty one
        return []
    by_label = {c.candidate: c for c in report.comparisons}
    baselines = {c.baseline for c in report.comparisons}
    stacks = several_stacks(report.arms)
    lines = [
        f"| job | {'stack | ' if stacks else ''}tok/s | {ci_label(report.arms)} | vs baseline | "
        "simultaneous CI | verdict | one launch each says | engaged |",
        "|---|---|---|---|---|---|---|---|" + ("---|" if stacks else ""),
    ]
    for arm in report.arms:
        versus = by_label.get(arm.label)
        verdict = versus.label if versus else "baseline" if arm.label in baselines else "-"
        change = f"{pct(versus.change)} | {interval(versus)}" if versus else "- | -"
        apart = within_launch(versus) if versus else "-"
        stack = f"{stack_of(arm)} | " if stacks else ""
        lines.append(
            f"| [{arm.label}]({run_link(arm.run_id)}) | {stack}{fmt(arm.summary.mean)} | "
            f"{arm_interval(arm)} | {change} | {verdict} | {apart} | "
            f"{arm.run.tags.get(Tag.engaged, '-')} |"
        )
    return lines


def _surface_lines(surfaces: Sequence[Surface], plot_link: Callable[[str], str]) -> list[str]:
    lines = []
    for surface in surfaces:
        lines += ["", "**Surface:** " + surface_markdown(surface).rstrip("\n")]
    if surfaces:
        lines += ["", f"![surface]({plot_link('sweep_report/surface.png')})"]
    return lines


def _measured_sections(report: SweepReport, plot_link: Callable[[str], str]) -> list[str]:
    """What the report holds beside the verdicts: sequences, capacities, the draft schedule
    and the efficiencies against the bound, each where the sweep measured it."""
    lines: list[str] = []
    if report.sequences:
        lines += [
            "",
            "**Measured until decided** (sequential):",
            "",
            table(sequence_rows(report.sequences)).rstrip("\n"),
        ]
    if report.capacity_arms:
        lines += [
            "",
            "**Capacity under the SLO** (capacity search):",
            "",
            table(capacity_rows(report.capacity_arms, report.capacities)).rstrip("\n"),
            "",
            f"![attainment against load]({plot_link('goodput/attainment.png')})",
        ]
    if report.deaths:
        lines += ["", f"**{death_summary(report)}**", ""]
        lines += [f"- {label}: {death.describe()}" for label, death in report.deaths]
    if report.schedule:
        lines += [
            "",
            "**Draft length to deploy** by level (on only where shown faster than none):",
            "",
            table(schedule_rows(report.schedule)).rstrip("\n"),
            "",
            f"To deploy ({report.schedule.batch_schedule().describe()}), in each engine's "
            "own terms:\n\n" + table(setting_rows(report.schedule.settings)).rstrip("\n")
            if report.schedule.settings
            else NO_SCHEDULE,
        ]
    if report.energy:
        lines += ["", f"**Energy:** {report.energy.statement}"]
        if report.energy.comparisons:
            lines += [
                "",
                f"{Metric.energy_j_per_token} (lower is better) against the baseline:",
                "",
                table(energy_rows(report.energy)).rstrip("\n"),
            ]
        if report.energy.notes:
            lines += ["", *(f"- {note}" for note in report.energy.notes)]
        if report.energy.crossovers:
            lines += ["", f"![energy against speed]({plot_link('energy/crossover.png')})"]
    lines += _surface_lines(report.surfaces, plot_link)
    if report.efficiencies:
        lines += ["", "**Against the bound** tau / (gamma c + 1):", ""]
        lines += [f"- {bound.sentence()}" for bound in report.efficiencies]
    return lines


def sweep_description(
    report: SweepReport,
    *,
    view_link: str,
    run_link: Callable[[str], str],
    plot_link: Callable[[str], str],
    limit: int,
) -> str:
    """The sweep's report as its parent run's description (markdown, at most ``limit``
    characters): findings first, then the verdicts with links to the job runs, then what
    may make them wrong, each caveat once."""
    lines = _findings(report)
    if report.comparisons:
        counts = ", ".join(f"{n} {label}" for label, n in report.verdict_counts.items())
        failed = f"; **{report.failed} job(s) failed**" if report.failed else ""
        lines.append(f"**Verdicts** against {report.baseline}: {counts}{failed}")
    lines += [
        "",
        f"[Open the sweep's jobs in the runs table]({view_link}) (configuration, tok/s with its "
        "interval, verdict, engaged) - select them there to compare.",
        "",
        *_job_table(report, run_link),
    ]
    lines += _measured_sections(report, plot_link)
    for compared in report.prompt_comparisons:
        lines += ["", prompt_comparison_markdown(compared).rstrip("\n")]
    if report.prompt_comparisons:
        lines += ["", f"![acceptance]({plot_link('prompts/acceptance.png')})"]
    if report.crossovers:
        lines += ["", f"![crossover]({plot_link('crossover/crossover.png')})"]
    if report.goodput_crossovers:
        lines += ["", f"![crossover on goodput]({plot_link('goodput/crossover.png')})"]
    warnings = (
        caveat_lines(report.caveats, len(report.comparisons))
        + run_warnings(report.arms)
        + [n.message for n in report.notes]
    )
    if warnings:
        lines += ["", "**Caveats**", ""] + [f"- {w}" for w in warnings]
    lines += ["", f"Order: {report.order}. Full report: artifacts `sweep_report/`, `crossover/`."]
    text = "\n".join(lines) + "\n"
    if len(text) > limit:
        cut = "\n\n(cut here: the full report is the artifact sweep_report/sweep_report.md)\n"
        text = text[: limit - len(cut)].rsplit("\n", 1)[0] + cut
    return text


def sweep_markdown(report: SweepReport, metric: str) -> str:
    """The sweep report artifact: the order, the comparison table with its caveats, the
    switch-off checks."""
    body = (
        comparison_markdown(report.arms, report.comparisons, report.caveats, metric)
        if report.arms
        else ""
        if report.capacity_arms
        else "No finished runs.\n"
    )
    checks = "".join("\n" + switch_off_markdown(c) for c in report.checks)
    categories = "".join("\n" + prompt_comparison_markdown(p) for p in report.prompt_comparisons)
    capacity = (
        "\n**Capacity under the SLO**\n\n"
        + table(capacity_rows(report.capacity_arms, report.capacities))
        if report.capacity_arms
        else ""
    )
    surfaces = "".join("\n## Surface\n\n" + surface_markdown(s) for s in report.surfaces)
    deaths = (
        f"\n**{death_summary(report)}**\n\n"
        + "".join(f"- {label}: {death.describe()}\n" for label, death in report.deaths)
        if report.deaths
        else ""
    )
    return f"Order: {report.order}.\n\n" + body + surfaces + capacity + deaths + categories + checks
