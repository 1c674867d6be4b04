"""The crossover as a surface: speculation's speed-up over its baseline at every cell of a
sweep over concurrency and one other factor (prompt length first), with each row's
crossover.

Nothing is estimated anew: a cell is the sweep's comparison of that cell's arms (its ratio,
its simultaneous interval and its verdict, launch-to-launch variance carried as the
comparison carries it - the arms' launches, a calibration, or one server for both - or the
cell holds for these launches only), and a row's crossover is the sweep's crossover of that
row's curve (:mod:`specexp.analysis.crossover`), found by the same family key.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Optional, Sequence

from specexp.analysis import crossover
from specexp.analysis.arms import Arm, Selector
from specexp.analysis.crossover import Crossover
from specexp.analysis.results import Unit
from specexp.analysis.timeline import same_server
from specexp.core.records import History, Record, Version
from specexp.core.stats.comparison import Comparison
from specexp.core.stats.verdicts import Verdict

# The factor a surface's rows take first when several vary beside concurrency.
PROMPT_LENGTH = "workload.prompt_tokens"


class LaunchVariance(StrEnum):
    """How a cell's interval carries launch-to-launch variance."""

    launches = "launches"  # each value a launch's mean
    calibration = "calibration"  # single launches, the server family's calibrated variance
    one_server = "one server"  # both arms on one server launch: its offset cancels
    left_out = "left out"  # single launches, none known: the cell holds for these launches


@dataclass
class Cell:
    """The candidate against the baseline at one concurrency level of a row: the ratio of
    their geometric means with its simultaneous interval (None: it cannot be tested), the
    verdict a reader may act on, and what one launch each says where that is all there is."""

    level: int
    candidate: str
    baseline: str
    ratio: float
    ci_low: Optional[float]
    ci_high: Optional[float]
    ci_level: float
    verdict: Verdict
    launch_variance: LaunchVariance
    within_launch: Optional[Verdict] = None

    @property
    def decided(self) -> bool:
        return self.verdict.decided


@dataclass
class SurfaceRow:
    """One value of the row factor: its cells by level, and its crossover (None where the
    sweep found none for this row: fewer than two levels measured)."""

    value: str
    cells: list[Cell]
    crossover: Optional[Crossover] = None


@dataclass
class Surface(Record):
    """A candidate's speed-up over the baseline on ``factor`` x ``levels_factor``; ``rows``
    in the row factor's order (numeric where its values are numbers), cells by level."""

    HISTORY = History(
        "surface",
        (Version(1, "cells (ratio, interval, verdict) per factor value and level, crossovers"),),
    )
    DERIVED = ("decided",)

    candidate: str
    baseline: str
    factor: str
    levels_factor: str
    levels: list[int]
    rows: list[SurfaceRow]
    confidence: float

    @property
    def cells(self) -> list[tuple[str, Cell]]:
        return [(row.value, cell) for row in self.rows for cell in row.cells]

    @property
    def decided(self) -> list[tuple[str, int]]:
        """The (factor value, level) of each cell whose verdict stands."""
        return [(value, cell.level) for value, cell in self.cells if cell.decided]


def _launch_variance(base: Arm, arm: Arm, comparison: Comparison) -> LaunchVariance:
    """What the comparison's interval carries of launch-to-launch variance, as
    :func:`specexp.analysis.calibration.account_for_launches` decided it."""
    if comparison.launches_only:
        return LaunchVariance.left_out
    if base.unit == arm.unit == Unit.launch:
        return LaunchVariance.launches
    if same_server(base.run, arm.run):
        return LaunchVariance.one_server
    return LaunchVariance.calibration


def _ordered(values: set[str]) -> list[str]:
    """Numbers by value (128 before 2048), else as text."""
    try:
        return sorted(values, key=float)
    except ValueError:
        return sorted(values)


def row_factor(arms: Sequence[Arm], levels_factor: str, baseline_factor: str) -> Optional[str]:
    """The factor a surface's rows run over: one that varies beside ``levels_factor`` and
    the baseline's factor, prompt length when it does, else the first by name."""
    named = {k for a in arms for k in a.factors} - {levels_factor, baseline_factor}
    varying = sorted(k for k in named if len({a.factors.get(k) for a in arms}) > 1)
    if not varying:
        return None
    return PROMPT_LENGTH if PROMPT_LENGTH in varying else varying[0]


def surfaces(
    arms: Sequence[Arm],
    comparisons: Sequence[Comparison],
    crossovers: Sequence[Crossover],
    baseline: Selector,
    levels_factor: str,
    confidence: float,
) -> list[Surface]:
    """A surface for each candidate (the compared arms that share every factor but the row
    factor and ``levels_factor``) where the sweep varied ``levels_factor`` and another
    factor beside the baseline's: its cells the comparisons of the candidate's arms, its
    rows' crossovers those found for each row's curve. None where it varied no other."""
    by_label = {a.label: a for a in arms}
    compared = [
        (by_label[c.baseline], by_label[c.candidate], c)
        for c in comparisons
        if levels_factor in by_label[c.candidate].factors
    ]
    factor = row_factor([a for _, a, _ in compared], levels_factor, baseline.factor or "")
    if factor is None:
        return []
    by_curve = {(c.candidate, c.baseline): c for c in crossovers}
    grouped: dict[tuple[tuple[str, str], ...], list[tuple[Arm, Arm, Comparison]]] = {}
    for base, arm, c in compared:
        key = tuple((k, v) for k, v in arm.others(levels_factor) if k != factor)
        grouped.setdefault(key, []).append((base, arm, c))
    found = []
    for key, members in grouped.items():
        values = _ordered({arm.factors.get(factor, "") for _, arm, _ in members})
        rows = []
        for value in values:
            in_row = sorted(
                (m for m in members if m[1].factors.get(factor, "") == value),
                key=lambda m: crossover.level(m[1], levels_factor),
            )
            cells = [
                Cell(
                    level=crossover.level(arm, levels_factor),
                    candidate=arm.label,
                    baseline=base.label,
                    ratio=c.ratio,
                    ci_low=c.ci_low if c.testable else None,
                    ci_high=c.ci_high if c.testable else None,
                    ci_level=c.ci_level,
                    verdict=c.finding,
                    launch_variance=_launch_variance(base, arm, c),
                    within_launch=c.within_launch,
                )
                for base, arm, c in in_row
            ]
            base, arm, _ = in_row[0]
            curve = (crossover.family(arm, levels_factor), crossover.family(base, levels_factor))
            rows.append(SurfaceRow(value, cells, by_curve.get(curve)))
        found.append(
            Surface(
                candidate=" ".join(f"{k}={v}" for k, v in key) or "all",
                baseline=baseline.text,
                factor=factor,
                levels_factor=levels_factor,
                levels=sorted({cell.level for row in rows for cell in row.cells}),
                rows=rows,
                confidence=confidence,
            )
        )
    return found
