"""A comparison of arms (``specexp compare``, a sweep's report) and a reproduction of
published results."""

from __future__ import annotations

from typing import Any, Optional, Sequence

from rich.markup import escape

from specexp.analysis.arms import Arm
from specexp.analysis.report import Caveat
from specexp.analysis.reproduction import ClaimCheck
from specexp.core.stats.comparison import Comparison
from specexp.output.markdown import caveat_lines, hardware_line, run_warnings
from specexp.output.tables import claim_rows, comparison_rows, point_rows
from specexp.output.terminal.rendering import rich_table
from specexp.output.terminal.screen import console


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
