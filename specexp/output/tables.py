"""The rows of the report tables, built once from the analysis values and drawn by the
terminal (rich) and markdown renderers. Each row may carry a mark: the state its marked
column shows (a verdict, a claim's status), which a renderer may colour, never parse."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

from specexp.analysis.arms import Arm, ci_label, stack_of
from specexp.analysis.capacity import ArmCapacity, CapacityComparison
from specexp.analysis.crossover import SwitchOffCheck
from specexp.analysis.energy_arms import EnergyReport, in_energy_words
from specexp.analysis.prompts import PromptComparison
from specexp.analysis.report import SweepReport
from specexp.analysis.reproduction import ClaimCheck
from specexp.analysis.results import Unit
from specexp.analysis.schedule import DraftSchedule
from specexp.analysis.surface import LaunchVariance, Surface, SurfaceRow
from specexp.core.capacity import interval_text
from specexp.core.sequential import SequentialComparison, SequentialRecord
from specexp.core.stats.comparison import Comparison
from specexp.core.stats.verdicts import Verdict
from specexp.engines.records import ScheduleSetting


@dataclass
class Rows:
    headers: list[str]
    rows: list[list[str]] = field(default_factory=list)
    marks: list[Optional[str]] = field(default_factory=list)
    marked: Optional[str] = None  # the header of the column the marks are of

    def add(self, row: list[str], mark: Optional[str] = None) -> None:
        self.rows.append(row)
        self.marks.append(mark)


def fmt(value: Optional[float], digits: int = 2) -> str:
    return "-" if value is None or value != value else f"{value:.{digits}f}"


def pct(value: Optional[float]) -> str:
    return "-" if value is None or value != value else f"{value:+.1%}"


def p_value(value: Optional[float]) -> str:
    if value is None or value != value:
        return "-"
    return f"{value:.2g}" if value >= 1e-4 else "<1e-4"


def mark(c: Comparison) -> str:
    """A comparison's state: its verdict, or "caveat" where the verdict does not stand."""
    return c.verdict if c.finding == c.verdict else "caveat"


def interval(c: Comparison) -> str:
    """The ratio's interval as changes; none for a comparison that cannot be tested."""
    return f"[{pct(c.ci_low - 1)}, {pct(c.ci_high - 1)}]" if c.testable else "-"


def within_launch(c: Comparison) -> str:
    """What the runs of single launches say, apart from the verdict, which they cannot make."""
    return str(c.within_launch) if c.within_launch else "-"


def launches_needed(record: SequentialRecord) -> str:
    """The launches per arm the sequence needs to find its design effect at its power, and
    the cap (``max_launches``) where that is more: it stops at the cap, decided or not (the
    column said "planned", which read as launches it would run)."""
    needed = record.planned_launches
    if needed is None:
        return "-"
    cap = record.design.max_launches
    return f"{needed} (cap {cap})" if needed > cap else str(needed)


def sequence_rows(sequences: Sequence[SequentialComparison]) -> Rows:
    """Each sequential comparison: its looks, what it spent and why it stopped."""
    table = Rows(
        [
            "comparison",
            "looks",
            "launches",
            "needed",
            "runs per launch",
            "server-min",
            "last interval",
            "level",
            "verdict",
            "stopped",
        ],
        marked="verdict",
    )
    for sequence in sequences:
        record = sequence.record
        last = record.looks[-1] if record.looks else None
        table.add(
            [
                f"{sequence.candidate_label} vs {sequence.baseline_label}",
                str(len(record.looks)),
                f"{last.launches_baseline}+{last.launches_candidate}" if last else "-",
                launches_needed(record),
                str(record.runs_per_launch or "-"),
                f"{last.server_s / 60:.1f}" if last else "-",
                f"[{pct(last.ci_low - 1)}, {pct(last.ci_high - 1)}]" if last else "-",
                f"{last.level:.2%}" if last else "-",
                str(record.verdict),
                str(record.stop or "-"),
            ],
            str(record.verdict),
        )
    return table


def arm_interval(arm: Arm) -> str:
    return f"[{fmt(arm.summary.ci_low)}, {fmt(arm.summary.ci_high)}]"


def several_stacks(arms: Sequence[Arm]) -> bool:
    """Whether the arms ran on more than one stack: then each row names its own, so that a
    comparison across stacks shows the stack of each side."""
    return len({stack_of(a) for a in arms}) > 1


def comparison_rows(arms: Sequence[Arm], comparisons: Sequence[Comparison]) -> Rows:
    stacks = several_stacks(arms)
    table = Rows(
        [
            "configuration",
            *(["stack"] if stacks else []),
            "n",
            "mean",
            ci_label(arms),
            "CV",
            "vs baseline",
            "ratio CI (simultaneous)",
            "p Welch (Bonferroni)",
            "p Mann-Whitney",
            "verdict",
            "one launch each says",
            "MDE",
            "per arm for threshold",
        ],
        marked="verdict",
    )
    by_label = {c.candidate: c for c in comparisons}
    baselines = {c.baseline for c in comparisons}
    for arm in arms:
        s, c = arm.summary, by_label.get(arm.label)
        row = [
            arm.label + (" (baseline)" if arm.label in baselines else ""),
            *([stack_of(arm)] if stacks else []),
            Unit(arm.unit).counted(s.n),
            fmt(s.mean),
            arm_interval(arm),
            f"{s.cv:.1%}",
        ]
        if c is None:
            table.add(row + ["-"] * 8)
            continue
        row += [
            pct(c.change)
            + (" (drift out)" if c.drift else "")
            + ("" if len(baselines) == 1 else f" vs {c.baseline}"),
            interval(c),
            f"{p_value(c.p_welch)} ({p_value(c.p_welch_adjusted)})",
            p_value(c.p_mannwhitney),
            c.label,
            within_launch(c),
            pct(c.mde).lstrip("+"),
            f"{c.plan.launches} launches x {c.plan.runs}" if c.plan else str(c.runs_needed or "-"),
        ]
        table.add(row, mark(c))
    return table


def energy_rows(energy: EnergyReport) -> Rows:
    """The comparison table on joules per token: its verdicts in energy's words, marked as
    what they mean (more energy per token is the worse outcome, as slower is for tok/s)."""
    table = comparison_rows(energy.arms, energy.comparisons)
    swapped = {Verdict.faster: Verdict.slower, Verdict.slower: Verdict.faster}
    words = [table.headers.index(h) for h in ("verdict", "one launch each says")]
    for row, arm in zip(table.rows, energy.arms, strict=True):
        for column in words:
            row[column] = in_energy_words(row[column])
        # Three significant figures: a small model's joules per token is a few thousandths.
        s, mean = arm.summary, table.headers.index("mean")
        row[mean] = f"{s.mean:.3g}"
        row[mean + 1] = f"[{s.ci_low:.3g}, {s.ci_high:.3g}]" if s.n > 1 else "-"
    table.marks = [str(swapped[Verdict(m)]) if m in swapped else m for m in table.marks]
    return table


def share(part: int, whole: int) -> str:
    return f"{part}/{whole}" if whole else "-"


def category_rows(compared: PromptComparison) -> Rows:
    """Spec-Bench's table: per category, what the candidate accepted and what it bought."""
    table = Rows(
        [
            "category",
            "prompts",
            "accepted of drafted",
            f"{compared.baseline} tok/s",
            f"{compared.candidate} tok/s",
            "speedup",
            f"{compared.confidence:.0%} CI (simultaneous)",
            "verdict",
            "identical outputs",
        ],
        marked="verdict",
    )
    for row in compared.rows:
        c = row.comparison
        table.add(
            [
                row.category,
                str(row.prompts),
                "-" if row.acceptance is None else f"{row.acceptance:.0%}",
                fmt(c.mean_baseline, 1),
                fmt(c.mean_candidate, 1),
                pct(c.change),
                interval(c),
                c.label,
                share(row.identical, row.prompts),
            ],
            mark(c),
        )
    return table


def switch_off_rows(check: SwitchOffCheck) -> Rows:
    table = Rows(
        [
            "level",
            "faster fixed arm",
            "adaptive vs it",
            "ratio CI (simultaneous)",
            "verdict",
            "outcome",
        ],
        marked="verdict",
    )
    for level, followed, c, outcome in zip(
        check.levels, check.followed, check.comparisons, check.outcomes, strict=True
    ):
        table.add([str(level), followed, pct(c.change), interval(c), c.label, outcome], mark(c))
    return table


def point_rows(reference: Any, points: dict[str, Optional[Arm]], same_hardware: bool) -> Rows:
    measured = [arm for arm in points.values() if arm is not None]
    table = Rows(["point", "published tok/s", "measured tok/s", ci_label(measured), "run"])
    for point, arm in points.items():
        published = f"{reference.points[point].tok_per_s:.1f}"
        if arm is None:
            table.add([point, published, "not measured", "-", "-"])
        elif same_hardware:
            table.add([point, published, fmt(arm.summary.mean), arm_interval(arm), arm.run_id[:8]])
        else:
            other = f"({fmt(arm.summary.mean)}, other hardware)"
            table.add([point, published, other, "-", arm.run_id[:8]])
    return table


def claim_rows(claims: Sequence[ClaimCheck]) -> Rows:
    table = Rows(
        [
            "claim",
            "published",
            "measured",
            "ratio CI",
            "verdict",
            "measured / published (CI)",
            "status",
            "one launch each says",
        ],
        marked="status",
    )
    for check in claims:
        c = check.comparison
        agreement = (
            f"[{fmt(check.agreement_low, 3)}, {fmt(check.agreement_high, 3)}]"
            if check.agreement_low is not None
            else "-"
        )
        table.add(
            [
                f"{check.id}: {check.text}",
                pct(check.published_ratio - 1),
                pct(c.change) if c else "-",
                interval(c) if c else "-",
                c.label if c else "-",
                agreement,
                check.status,
                str(check.within_launch or "-"),
            ],
            check.status,
        )
    return table


def capacity_rows(arms: Sequence[ArmCapacity], comparisons: Sequence[CapacityComparison]) -> Rows:
    """Each capacity-search arm's capacity under the SLO, the highest rate its runs completed,
    its latency model's C1 and C2 and its knee, each with its interval (or why not), its
    energy per token at each rate (runs whose server died left out); against its baseline
    the ratio with its interval and what it says."""
    against = {c.candidate.run_id: c for c in comparisons}
    table = Rows(
        [
            "arm",
            "capacity req/s [CI]",
            "completed req/s",
            "C1 s [CI]",
            "C2 ms [CI]",
            "knee req/s [CI]",
            "J/token by req/s",
            "vs baseline",
            "ratio CI",
            "verdict",
        ],
        marked="verdict",
    )
    for arm in arms:
        compared = against.get(arm.run_id)
        ratio = (
            (
                pct(compared.ratio - 1),
                interval_text(compared.ci_low, compared.ci_high, lambda v: pct(v - 1)),
            )
            if compared and compared.ratio is not None
            else ("-", "-")
        )
        model, knee = arm.latency_model, arm.knee
        completed = max((p.completed_rps for p in arm.curve), default=None)
        verdict = str(compared.verdict) if compared else "-"
        table.add(
            [
                arm.label,
                arm.describe(),
                f"{completed:.3g}" if completed is not None else "-",
                f"{model.c1:.3g} {interval_text(*model.c1_ci)}" if model else arm.no_model or "-",
                f"{model.c2 * 1e3:.3g} {interval_text(model.c2_ci[0] * 1e3, model.c2_ci[1] * 1e3)}"
                if model
                else arm.no_model or "-",
                f"{knee.rate:.3g} {interval_text(knee.ci_low, knee.ci_high)}"
                if knee and knee.rate is not None
                else knee.reason or "-"
                if knee
                else "no runs on the rate curve",
                ", ".join(
                    f"{p.rate:.3g}: {p.energy_j_per_token:.3g}"
                    for p in sorted(arm.curve, key=lambda p: p.rate)
                    if p.energy_j_per_token is not None
                )
                or "not metered",
                *ratio,
                verdict,
            ],
            verdict,
        )
    return table


def death_summary(report: SweepReport) -> str:
    """The sweep's server deaths in one line: how many, in warm-ups, at which rates, and how
    many rates they counted as failed (a rate's second death)."""
    deaths = [death for _, death in report.deaths]
    warmups = sum(d.warmup for d in deaths)
    rates = sorted({d.rate for d in deaths if not d.warmup and d.rate is not None})
    failed = sum(d.again for d in deaths)
    return (
        f"{len(deaths)} server(s) died under the capacity searches"
        + (f", {warmups} in a warm-up" if warmups else "")
        + (f", at {', '.join(f'{r:.3g}' for r in rates)} req/s" if rates else "")
        + f"; each rate whose server died was measured once more on a new server, and "
        f"{failed} rate(s) died there too and count as failed"
    )


def schedule_rows(schedule: DraftSchedule) -> Rows:
    """Each level's draft length to deploy, its speedup over none, and the lengths the
    intervals cannot tell from it."""
    table = Rows([schedule.factor, "draft tokens", "speedup vs none [CI]", "not told apart", "why"])
    for c in sorted(schedule.choices, key=lambda c: c.level):
        speedup = (
            f"{pct(c.speedup - 1)} [{pct(c.ci_low - 1)}, {pct(c.ci_high - 1)}]"
            if c.speedup is not None and c.ci_low is not None and c.ci_high is not None
            else "-"
        )
        tied = ", ".join(map(str, c.indistinguishable)) or "-"
        table.add(
            [
                str(c.level),
                str(c.draft_tokens) if c.draft_tokens else "0 (off)",
                speedup,
                tied,
                c.reason,
            ]
        )
    return table


def setting_rows(settings: Mapping[str, ScheduleSetting]) -> Rows:
    """Each engine's own setting for a schedule (a switch-off is one): what to set, how to
    use it, and where its form was read; "-" where the engine cannot take it."""
    table = Rows(["engine", "setting", "how", "read from"])
    for engine, setting in settings.items():
        given = {
            k: v
            for k, v in (
                ("speculative_config", setting.speculative_config),
                ("flags", " ".join(setting.flags)),
                ("files", setting.files),
                (
                    "servers",
                    {r: " ".join(f) or "no speculation" for r, f in setting.launches.items()},
                ),
            )
            if v
        }
        table.add(
            [engine, json.dumps(given) if given else "-", setting.note, setting.source or "-"],
            "exported" if setting.exported else "none",
        )
    return table


def short_name(factor: str) -> str:
    """A setting's last part as a column header: prompt_tokens for workload.prompt_tokens."""
    return factor.rsplit(".", 1)[-1]


def surface_rows(surface: Surface) -> Rows:
    """Each cell of a surface: the speed-up, its interval (simultaneous over the sweep's
    comparisons, as the job rows'), its verdict, how
    launch-to-launch variance entered, and what one launch each says where that is all."""
    table = Rows(
        [
            short_name(surface.factor),
            short_name(surface.levels_factor),
            "speed-up",
            "interval",
            "verdict",
            "launch variance",
            "one launch says",
        ],
        marked="verdict",
    )
    for value, cell in surface.cells:
        interval_ = (
            f"x{cell.ci_low:.3f}..x{cell.ci_high:.3f}"
            if cell.ci_low is not None and cell.ci_high is not None
            else "-"
        )
        alone = cell.launch_variance == LaunchVariance.left_out and cell.within_launch
        table.add(
            [
                value,
                str(cell.level),
                f"x{cell.ratio:.3f}",
                interval_,
                str(cell.verdict),
                str(cell.launch_variance),
                str(cell.within_launch) if alone else "-",
            ],
            str(cell.verdict),
        )
    return table


def surface_crossover(surface: Surface, row: SurfaceRow) -> str:
    """A row's crossover in one line: where speculation stops paying, with its interval,
    and why it is no claim where it is none."""
    found, levels = row.crossover, surface.levels
    head = f"{short_name(surface.factor)}={row.value}"
    if found is None:
        # Fewer than two levels compared, or an arm that switches itself off (checked instead).
        return f"{head}: no crossover analysed"
    at = short_name(surface.levels_factor)
    if found.estimate is None:
        text = f"{head}: pays at every level measured ({at} {levels[0]}..{levels[-1]})"
    elif found.estimate == levels[0] and found.effect[0] <= found.scale.no_effect:
        shown = "does not pay even" if found.never_pays else "not shown to pay"
        text = f"{head}: {shown} at {at} {levels[0]}, the lowest level"
    else:
        text = f"{head}: stops paying at {at} {found.estimate:.1f}"
        if found.ci_low is None:
            text += " (no interval)"
        else:
            high = f"{found.ci_high:.1f}" if found.ci_high is not None else f"beyond {levels[-1]}"
            text += f" ({surface.confidence:.0%} CI {found.ci_low:.1f}..{high})"
    if found.launches_only:
        text += "; holds for these launches only"
    if not found.reliable:
        text += f"; noisy at {', '.join(map(str, found.unreliable))}: no claim"
    return text


def surface_decided(surface: Surface) -> str:
    """Which cells are decided, in one line."""
    row, column = short_name(surface.factor), short_name(surface.levels_factor)
    decided = [
        f"{row}={value} at {column}={cell.level} ({cell.verdict})"
        for value, cell in surface.cells
        if cell.decided
    ]
    count = f"{len(decided)} of {len(surface.cells)} cells decided"
    return f"{count}: {', '.join(decided)}" if decided else count
