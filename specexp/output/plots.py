"""Plots a person would rather look at than read, written as PNG for MLflow."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Mapping, Optional, Sequence

import numpy as np

# Figures made directly, not through pyplot: no global backend or figure state, no display.
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.colors import CenteredNorm
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from matplotlib.ticker import FuncFormatter

from specexp.analysis import crossover
from specexp.analysis.arms import Arm, ci_label
from specexp.analysis.capacity import ArmCapacity
from specexp.analysis.crossover import Crossover
from specexp.analysis.energy_arms import EnergyReport
from specexp.analysis.prompts import PromptComparison
from specexp.analysis.results import Metric
from specexp.analysis.surface import LaunchVariance, Surface
from specexp.core.stats.comparison import Comparison
from specexp.core.stats.verdicts import Verdict


def comparison_plot(
    arms: Sequence[Arm], comparisons: Sequence[Comparison], metric: str, path: Path
) -> Path:
    """Left: each configuration's mean with its CI. Right: each speedup with its CI."""
    fig = Figure(figsize=(12, max(3, 0.6 * len(arms) + 1.5)))
    left, right = fig.subplots(1, 2)
    labels = [a.label for a in arms]
    means = [a.summary.mean for a in arms]
    errors = [
        [a.summary.mean - a.summary.ci_low if a.summary.n > 1 else 0 for a in arms],
        [a.summary.ci_high - a.summary.mean if a.summary.n > 1 else 0 for a in arms],
    ]
    left.errorbar(means, range(len(arms)), xerr=errors, fmt="o", capsize=4)
    left.set_yticks(range(len(arms)), labels)
    left.set_xlabel(f"{metric} (mean, {ci_label(arms)})")
    left.grid(axis="x", alpha=0.3)
    if comparisons:
        threshold = comparisons[0].threshold
        right.axvspan(
            -threshold * 100,
            threshold * 100,
            color="grey",
            alpha=0.15,
            label=f"±{threshold:.0%} threshold",
        )
        right.axvline(0, color="black", linewidth=0.8)
        colors = {
            Verdict.faster: "tab:green",
            Verdict.slower: "tab:red",
            Verdict.equivalent: "tab:blue",
            Verdict.inconclusive: "tab:orange",
        }
        for y, c in enumerate(comparisons):
            if not c.testable:  # no interval to draw; the label says why
                continue
            right.errorbar(
                [c.change * 100],
                [y],
                xerr=[[(c.ratio - c.ci_low) * 100], [(c.ci_high - c.ratio) * 100]],
                fmt="o",
                capsize=4,
                # Confounded or not attributable: the interval is not the factor's.
                color=colors[c.finding] if c.finding == c.verdict else "tab:purple",
            )
        right.set_yticks(
            range(len(comparisons)), [f"{c.candidate}\n{c.label}" for c in comparisons]
        )
        level = comparisons[0].ci_level
        right.set_xlabel(
            _wrapped(
                f"change vs {comparisons[0].baseline} (%), {level:.1%} intervals, "
                f"simultaneous over {comparisons[0].family}",
                70,
            )
        )
        right.legend(loc="best", fontsize="small")
        right.grid(axis="x", alpha=0.3)
    else:
        right.set_axis_off()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def crossover_plot(
    families: dict[str, dict[int, Arm]], crossovers: Sequence[Crossover], factor: str, path: Path
) -> Path:
    # 900 pixels wide: whole in the sweep's description, beside the UI's side panels.
    crossover_figure(families, crossovers, factor).savefig(path, dpi=100)
    return path


def crossover_figure(
    families: dict[str, dict[int, Arm]], crossovers: Sequence[Crossover], factor: str
) -> Figure:
    """Throughput against concurrency for each arm (mean and CI), crossovers marked; the
    findings, whole, as its title."""
    title = _wrapped("; ".join(c.statement for c in crossovers) or "no crossover analysed", 100)
    fig = Figure(figsize=(9, 5.5 + 0.2 * title.count("\n")))
    ax = fig.subplots()
    for name, levels in families.items():
        xs = sorted(levels)
        means = [levels[x].summary.mean for x in xs]
        low = [
            levels[x].summary.mean - levels[x].summary.ci_low if levels[x].summary.n > 1 else 0
            for x in xs
        ]
        high = [
            levels[x].summary.ci_high - levels[x].summary.mean if levels[x].summary.n > 1 else 0
            for x in xs
        ]
        ax.errorbar(xs, means, yerr=[low, high], marker="o", capsize=4, label=name or "(all)")
    arms = [arm for levels in families.values() for arm in levels.values()]
    _finish_crossover_axes(
        ax, crossovers, factor, f"aggregate output tok/s (mean, {ci_label(arms)})", title
    )
    fig.tight_layout()
    return fig


def _finish_crossover_axes(
    ax: Axes, crossovers: Sequence[Crossover], factor: str, ylabel: str, title: str
) -> None:
    """The crossovers marked on a log2 axis of ``factor``, labels, title, legend, grid."""
    _mark_crossovers(ax, crossovers)
    ax.set_xscale("log", base=2)
    ax.set_xlabel(factor)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize="small")
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)


def _mark_crossovers(ax: Axes, crossovers: Sequence[Crossover]) -> None:
    """Each crossover's estimate as a dashed line, its interval shaded."""
    for c in crossovers:
        if c.estimate is None:
            continue
        ax.axvline(c.estimate, color="black", linestyle="--", linewidth=1)
        if c.ci_low is not None and c.ci_high is not None:
            ax.axvspan(c.ci_low, c.ci_high, color="grey", alpha=0.15)
        ax.annotate(
            f"crossover {c.estimate:.1f}",
            (c.estimate, ax.get_ylim()[1]),
            rotation=90,
            va="top",
            ha="right",
            fontsize="small",
        )


def goodput_crossover_plot(crossovers: Sequence[Crossover], factor: str, path: Path) -> Path:
    goodput_crossover_figure(crossovers, factor).savefig(path, dpi=100)
    return path


def goodput_crossover_figure(crossovers: Sequence[Crossover], factor: str) -> Figure:
    """Goodput speculation adds (candidate minus baseline, good tok/s) at each level, a line
    per speculative family; above zero it pays under the SLO. Crossovers marked."""
    title = _wrapped("; ".join(c.statement for c in crossovers), 100)
    fig = Figure(figsize=(9, 5.5 + 0.2 * title.count("\n")))
    ax = fig.subplots()
    for c in crossovers:
        ax.plot(c.levels, c.effect, marker="o", label=f"{c.candidate} - {c.baseline}")
    ax.axhline(0, color="black", linewidth=0.8)
    _finish_crossover_axes(
        ax,
        crossovers,
        factor,
        "goodput gained under the SLO (good tok/s, difference of means)",
        title,
    )
    fig.tight_layout()
    return fig


def energy_crossover_plot(
    energy: EnergyReport, speed: Sequence[Crossover], factor: str, path: Path
) -> Path:
    energy_crossover_figure(energy, speed, factor).savefig(path, dpi=100)
    return path


def energy_crossover_figure(
    energy: EnergyReport, speed: Sequence[Crossover], factor: str
) -> Figure:
    """Joules per output token against ``factor`` for each family (mean and CI), with
    energy's crossovers (on tokens per joule) and speed's beside them, each with its
    interval; whether they agree, whole, as its title."""
    title = _wrapped("; ".join(a.statement for a in energy.agreements), 100)
    fig = Figure(figsize=(9, 5.5 + 0.2 * title.count("\n")))
    ax = fig.subplots()
    for name, levels in crossover.families(energy.arms, factor).items():
        xs = sorted(levels)
        summaries = [levels[x].summary for x in xs]
        ax.errorbar(
            xs,
            [s.mean for s in summaries],
            yerr=[
                [s.mean - s.ci_low if s.n > 1 else 0 for s in summaries],
                [s.ci_high - s.mean if s.n > 1 else 0 for s in summaries],
            ],
            marker="o",
            capsize=4,
            label=name or "(all)",
        )
    for found, color, style, what in (
        (energy.crossovers, "tab:green", "--", "energy"),
        (speed, "black", ":", "speed"),
    ):
        for c in found:
            if c.estimate is None:
                continue
            ax.axvline(c.estimate, color=color, linestyle=style, linewidth=1.2)
            if c.ci_low is not None and c.ci_high is not None:
                ax.axvspan(c.ci_low, c.ci_high, color=color, alpha=0.1)
            ax.annotate(
                f"{what} crossover {c.estimate:.1f}",
                (c.estimate, 1),
                xycoords=("data", "axes fraction"),
                rotation=90,
                va="top",
                ha="right",
                fontsize="small",
                color=color,
            )
    ax.set_xscale("log", base=2)
    ax.set_xlabel(factor)
    ax.set_ylabel(f"joules per output token (mean, {ci_label(energy.arms)}); lower is better")
    ax.set_title(title, fontsize="small")
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def acceptance_plot(compared: Sequence[PromptComparison], path: Path) -> Path:
    """Left: each candidate's per-request acceptance (accepted of drafted), as a histogram.
    Right: its speedup per category with the simultaneous interval."""
    fig = Figure(figsize=(9, 4.5))
    left, right = fig.subplots(1, 2)
    for c in compared:
        if c.acceptances:
            left.hist(c.acceptances, bins=20, range=(0, 1), alpha=0.5, label=c.candidate)
    left.set_xlabel("accepted of drafted tokens, per request")
    left.set_ylabel("requests")
    left.legend(fontsize="small")
    rows = [(f"{c.candidate}: {r.category}", r.comparison) for c in compared for r in c.rows]
    for y, (_, comparison) in enumerate(rows):
        change = (comparison.ratio - 1) * 100
        if comparison.testable:
            low, high = (comparison.ci_low - 1) * 100, (comparison.ci_high - 1) * 100
            right.errorbar(change, y, xerr=[[change - low], [high - change]], fmt="o", capsize=3)
        else:
            right.plot(change, y, "x")
    right.set_yticks(range(len(rows)), [name for name, _ in rows], fontsize="small")
    right.axvline(0, color="black", linewidth=1)
    confidence = compared[0].confidence if compared else 0.95
    right.set_xlabel(f"speedup over baseline, % ({confidence:.0%} simultaneous CI)")
    for ax in (left, right):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return path


def _wrapped(text: str, width: int) -> str:
    """Text in lines of at most ``width`` characters: a title is read whole, never cut."""
    return "\n".join(textwrap.wrap(text, width, break_on_hyphens=False))


def attainment_plot(arms: Sequence[ArmCapacity], path: Path) -> Path:
    """SLO attainment against the arrival rate, each capacity search's runs per arm, with the
    target and each arm's capacity interval."""
    fig = Figure(figsize=(8, 4.5))
    ax = fig.subplots()
    for k, arm in enumerate(arms):
        color = f"C{k}"
        points = sorted(arm.points)
        ax.plot(
            [rate for rate, _, _ in points],
            [good / requests for _, requests, good in points],
            "o",
            color=color,
            label=f"{arm.label}: {arm.describe()} req/s",
        )
        if arm.rate is not None:
            ax.axvline(arm.rate, color=color, linewidth=0.8)
            if arm.ci_low is not None and arm.ci_high is not None:
                ax.axvspan(arm.ci_low, arm.ci_high, color=color, alpha=0.12)
    target = next((a.target for a in arms if a.target is not None), None)
    if target is not None:
        ax.axhline(
            target, color="black", linestyle="--", linewidth=0.8, label=f"target {target:.0%}"
        )
    ax.set_xscale("log")
    ax.set_xlabel("arrival rate (requests/s, Poisson)")
    ax.set_ylabel("requests meeting the SLO")
    ax.set_ylim(-0.03, 1.03)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower left")
    ax.set_title("SLO attainment against load (capacity: where the fit meets the target)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def latency_curve_plot(arms: Sequence[ArmCapacity], path: Path) -> Path:
    """Mean latency against the offered rate, each capacity search's runs per arm (hollow:
    over-saturated), with each arm's fitted L = C1 / (1 - rate C2), its knee and interval,
    and where over-saturation starts."""
    fig = Figure(figsize=(8, 4.5))
    ax = fig.subplots()
    for k, arm in enumerate(arms):
        color, points = f"C{k}", sorted(arm.curve, key=lambda p: p.rate)
        if not points:
            continue
        for over in (False, True):
            shown = [p for p in points if p.oversaturated == over]
            ax.plot(
                [p.rate for p in shown],
                [p.latency_s for p in shown],
                "o",
                color=color,
                markerfacecolor="none" if over else color,
                label=None if over or not shown else arm.label,
            )
        model, found = arm.latency_model, arm.knee
        if model is not None:
            rates = np.linspace(0, 0.98 * model.saturation_rate, 200)
            ax.plot(
                rates, model.latency(rates), "-", color=color, linewidth=0.8, label=model.describe()
            )
        if found is None:
            continue
        if found.rate is not None and found.ci_low is not None and found.ci_high is not None:
            ax.axvline(found.rate, color=color, linestyle=":", linewidth=1)
            ax.axvspan(found.ci_low, found.ci_high, color=color, alpha=0.1)
        if found.oversaturated_from is not None:
            ax.axvline(found.oversaturated_from, color=color, linestyle="--", linewidth=1)
        ax.plot([], [], " ", label=f"{arm.label}: {found.describe()}")
    top = max((p.latency_s for a in arms for p in a.curve), default=1.0)
    ax.set_ylim(0, 1.1 * top)
    ax.set_xlabel("offered rate (requests/s)")
    ax.set_ylabel("mean latency from due time (s)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6, loc="upper left")
    ax.set_title("latency under load: knee (dotted, band: its interval), over-saturation (dashed)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def pareto_plot(families: Mapping[str, Mapping[int, Arm]], factor: str, path: Path) -> Path:
    """Throughput per server against tok/s per user, a line per arm across the levels of
    ``factor`` (the Pareto view: up and to the right is better; each point is a level)."""
    fig = Figure(figsize=(8, 5))
    ax = fig.subplots()
    for k, (family, levels) in enumerate(families.items()):
        points = [
            (level, arm.run.metrics[Metric.request_tok_per_s_mean], arm.summary.mean)
            for level, arm in sorted(levels.items())
            if Metric.request_tok_per_s_mean in arm.run.metrics
        ]
        if not points:
            continue
        ax.plot(
            [x for _, x, _ in points], [y for _, _, y in points], "o-", color=f"C{k}", label=family
        )
        for level, x, y in points:
            ax.annotate(str(level), (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
    ax.set_xlabel("tok/s per user (mean over requests)")
    ax.set_ylabel("tok/s per server (aggregate)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(f"throughput against per-user speed, points labelled by {factor}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def surface_plot(surfaces: Sequence[Surface], path: Path) -> Path:
    surface_figure(surfaces).savefig(path, dpi=100)
    return path


def _position(levels: Sequence[int], concurrency: float) -> float:
    """Where ``concurrency`` lies on a heat map's columns (one per level, evenly spaced):
    linear in log2 between the levels either side, as the crossover is interpolated."""
    x = np.log2(levels)
    return float(np.interp(np.log2(concurrency), x, np.arange(len(levels))))


def surface_figure(surfaces: Sequence[Surface]) -> Figure:
    """Each surface a heat map of the speed-up, factor value by concurrency level: coloured
    on a diverging scale centred on x1.0 (blue faster, red slower), each cell with its ratio,
    simultaneous interval and verdict; undecided cells hatched, untestable ones grey; each
    row's crossover a diamond with its interval (hollow where it holds for these launches
    only or its levels were noisy; an arrow where it lies beyond the highest level)."""
    widest = max(len(s.levels) for s in surfaces)
    heights = [len(s.rows) + 1.5 for s in surfaces]
    fig = Figure(figsize=(3 + 1.8 * widest, 1 + sum(heights)))
    axes = fig.subplots(len(surfaces), 1, squeeze=False, height_ratios=heights)[:, 0]
    for ax, surface in zip(axes, surfaces, strict=True):
        _surface_axes(fig, ax, surface)
    fig.tight_layout()
    return fig


def _mark_row_crossover(
    ax: Axes, levels: Sequence[int], y: int, found: Optional[Crossover]
) -> None:
    """A row's crossover on its heat map row: the estimate a diamond, its interval a bar;
    where it pays at every level, an arrow past the highest."""
    if found is None:
        return
    edge = len(levels) - 0.5
    claim = found.reliable and not found.launches_only
    if found.estimate is None:
        ax.annotate("", (edge, y), (edge - 0.35, y), arrowprops={"arrowstyle": "->", "lw": 1.5})
        return
    x, below = _position(levels, found.estimate), y - 0.38
    error = None
    if found.ci_low is not None:
        high = edge if found.ci_high is None else _position(levels, found.ci_high)
        error = [[x - _position(levels, found.ci_low)], [high - x]]
        if found.ci_high is None:
            ax.annotate("", (edge, below), (high - 0.2, below), arrowprops={"arrowstyle": "->"})
    ax.errorbar(
        [x],
        [below],
        xerr=error,
        fmt="D",
        capsize=3,
        color="black",
        markerfacecolor="black" if claim else "white",
        zorder=3,
    )


def _surface_axes(fig: Figure, ax: Axes, surface: Surface) -> None:
    levels = surface.levels
    gain = np.full((len(surface.rows), len(levels)), np.nan)
    for y, row in enumerate(surface.rows):
        for cell in row.cells:
            if cell.ci_low is not None:
                gain[y, levels.index(cell.level)] = np.log(cell.ratio)
    spread = float(np.nanmax(np.abs(gain))) if np.isfinite(gain).any() else 0.0
    image = ax.imshow(
        np.ma.masked_invalid(gain),
        cmap=colormaps["RdBu"].with_extremes(bad="lightgrey"),
        norm=CenteredNorm(0.0, max(spread, 0.01)),
        aspect="auto",
        origin="lower",
    )
    for y, row in enumerate(surface.rows):
        for cell in row.cells:
            x = levels.index(cell.level)
            if not cell.decided:
                ax.add_patch(
                    Rectangle(
                        (x - 0.5, y - 0.5), 1, 1, fill=False, hatch="//", edgecolor="0.45", lw=0
                    )
                )
            interval = (
                f"[{cell.ci_low:.3f}, {cell.ci_high:.3f}]"
                if cell.ci_low is not None and cell.ci_high is not None
                else "no interval"
            )
            alone = (
                f"\nthese launches: {cell.within_launch or '-'}"
                if cell.launch_variance == LaunchVariance.left_out
                else ""
            )
            ax.text(
                x,
                y,
                f"x{cell.ratio:.3f}\n{interval}\n{cell.verdict}{alone}",
                ha="center",
                va="center",
                fontsize="small",
                bbox={"boxstyle": "round", "facecolor": "white", "alpha": 0.7, "lw": 0},
            )
        _mark_row_crossover(ax, levels, y, row.crossover)
    ax.set_xticks(range(len(levels)), [str(level) for level in levels])
    ax.set_yticks(range(len(surface.rows)), [row.value for row in surface.rows])
    ax.set_xlim(-0.5, len(levels) - 0.5)
    ax.set_xlabel(surface.levels_factor)
    ax.set_ylabel(surface.factor)
    level = min((cell.ci_level for _, cell in surface.cells), default=surface.confidence)
    ax.set_title(
        _wrapped(
            f"{surface.candidate} against {surface.baseline}: speed-up (ratio of geometric "
            f"means) with its {level:.1%} simultaneous interval; hatched: undecided; diamond: "
            f"the row's crossover with its {surface.confidence:.0%} interval (hollow: not a "
            "claim - these launches only, or noisy levels)",
            100,
        ),
        fontsize="small",
    )
    bar = fig.colorbar(image, ax=ax, format=FuncFormatter(lambda v, _: f"x{np.exp(v):.2f}"))
    bar.set_label("speed-up over the baseline")
