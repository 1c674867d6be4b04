"""Reports as MLflow artifacts: a comparison (markdown, JSON, plot) and a crossover, logged
on the run they belong to - a sweep's parent, or a comparison run of their own.

The plots (matplotlib) are imported where one is drawn: a job draws none, and every
``specexp`` start imports this module."""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path
from typing import Any, Optional, Sequence

from specexp.analysis import crossover
from specexp.analysis.arms import Arm
from specexp.analysis.crossover import Crossover, SwitchOffCheck
from specexp.analysis.report import SweepReport
from specexp.analysis.results import Metric, Tag
from specexp.analysis.surface import Surface
from specexp.core.stats.comparison import Comparison
from specexp.output.markdown import sweep_markdown
from specexp.tracking.store import MAX_TAG, SWEEP_REPORT, RunLog, TrackingStore
from specexp.tracking.ui import NOTE


def log_report(
    run: RunLog,
    document: dict[str, Any],
    markdown: str,
    arms: Sequence[Arm],
    comparisons: Sequence[Comparison],
    metric: str,
    folder: str = "comparison",
) -> None:
    """Markdown, JSON and plot of a comparison, under ``folder`` of ``run``'s artifacts."""
    import specexp.output.plots as plots  # noqa: PLC0415 (DEFERRED)

    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        paths = [
            directory / f"{folder}.md",
            directory / f"{folder}.json",
            directory / f"{folder}.png",
        ]
        paths[0].write_text(markdown)
        paths[1].write_text(json.dumps(document, indent=2, default=float))
        plots.comparison_plot(arms, comparisons, metric, paths[2])
        run.log_artifacts(paths, artifact_path=folder)


def log_crossover(
    run: RunLog,
    families: dict[str, dict[int, Arm]],
    crossovers: Sequence[Crossover],
    factor: str,
    checks: Sequence[SwitchOffCheck] = (),
) -> None:
    import specexp.output.plots as plots  # noqa: PLC0415 (DEFERRED)

    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        paths = [directory / "crossover.png", directory / "crossover.json"]
        plots.crossover_plot(families, crossovers, factor, paths[0])
        paths[1].write_text(json.dumps([c.to_json() for c in crossovers], indent=2))
        if checks:
            paths.append(directory / "switch_off_check.json")
            paths[2].write_text(json.dumps([c.to_json() for c in checks], indent=2, default=float))
        run.log_artifacts(paths, artifact_path="crossover")
    first = crossovers[0]
    run.set_tags(
        {
            Tag.crossover: first.statement[:MAX_TAG],
            Tag.crossover_threshold: str(first.recommendation.threshold),
        }
    )
    run.log_metrics({f"crossover_{i}": c.estimate for i, c in enumerate(crossovers) if c.estimate})


def log_surfaces(run: RunLog, surfaces: Sequence[Surface]) -> None:
    """The surfaces beside the sweep report: their heat map and their records (none
    where the sweep varied nothing beside concurrency and the baseline's factor)."""
    import specexp.output.plots as plots  # noqa: PLC0415 (DEFERRED)

    if not surfaces:
        return
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        paths = [directory / "surface.png", directory / "surface.json"]
        plots.surface_plot(surfaces, paths[0])
        paths[1].write_text(json.dumps([s.to_json() for s in surfaces], indent=2))
        run.log_artifacts(paths, artifact_path=SWEEP_REPORT)


def change_metrics(c: Comparison) -> dict[str, float]:
    """A comparison's change and its simultaneous interval, in percent."""
    return {
        Metric.speedup_pct: c.change * 100,
        Metric.speedup_ci_low_pct: (c.ci_low - 1) * 100,
        Metric.speedup_ci_high_pct: (c.ci_high - 1) * 100,
    }


def log_verdicts(
    store: TrackingStore, arms: Sequence[Arm], comparisons: Sequence[Comparison]
) -> None:
    """Each compared job's verdict and change on its own run, where the runs table and the
    compare view show them; "baseline" on the baselines' runs."""
    by_label = {a.label: a for a in arms}
    for c in comparisons:
        run = store.run(by_label[c.candidate].run_id)
        run.set_tags({Tag.verdict: c.label})
        if c.testable:
            run.log_metrics(change_metrics(c))
    for label in {c.baseline for c in comparisons}:
        store.run(by_label[label].run_id).set_tags({Tag.verdict: "baseline"})


def _metric_name(text: str) -> str:
    """``text`` in the characters MLflow allows in metric names on every platform."""
    return re.sub(r"[^\w.\- /]", "-", text)


def log_levels(
    run: RunLog, arms: Sequence[Arm], comparisons: Sequence[Comparison], factor: Optional[str]
) -> None:
    """On the sweep's parent, for its charts: each configuration's tok/s (mean and interval)
    and each comparison's change, one series per curve with the level of ``factor`` as the
    step (without one: step 0, a series per configuration)."""
    by_label = {a.label: a for a in arms}

    def series(arm: Arm) -> tuple[str, int]:
        if factor and factor in arm.factors:
            return _metric_name(crossover.family(arm, factor)), crossover.level(arm, factor)
        return _metric_name(arm.label), 0

    for arm in arms:
        name, step = series(arm)
        values = {f"{Metric.tok_per_s_mean}/{name}": arm.summary.mean}
        if arm.summary.n > 1:
            values[f"{Metric.tok_per_s}_ci_low/{name}"] = arm.summary.ci_low
            values[f"{Metric.tok_per_s}_ci_high/{name}"] = arm.summary.ci_high
        run.log_metrics(values, step=step)
    for c in comparisons:
        if c.testable:
            name, step = series(by_label[c.candidate])
            run.log_metrics({f"{k}/{name}": v for k, v in change_metrics(c).items()}, step=step)


def log_sweep_report(
    store: TrackingStore, parent: RunLog, report: SweepReport, description: str
) -> None:
    """The sweep report on the sweep's runs: its counts, each job's verdict and change, the
    levels for the charts, the crossover, ``description`` as the parent's description, and
    the report as markdown, JSON and plot."""
    import specexp.output.plots as plots  # noqa: PLC0415 (DEFERRED)

    parent.set_tags(
        {Tag.failed_jobs: str(report.failed), Tag.server_launches: str(report.server_launches)}
    )
    if report.crossovers:
        log_crossover(
            parent,
            report.families(),
            report.crossovers,
            report.crossover_factor or "",
            report.checks,
        )
    if report.prompt_comparisons:
        with tempfile.TemporaryDirectory() as tmp:
            path = plots.acceptance_plot(report.prompt_comparisons, Path(tmp) / "acceptance.png")
            parent.log_artifacts([path], artifact_path="prompts")
    ramps = any(len(levels) > 1 for levels in report.families().values())
    if report.capacity_arms or ramps:
        with tempfile.TemporaryDirectory() as tmp:
            made = []
            if report.goodput_crossovers:
                made.append(
                    plots.goodput_crossover_plot(
                        report.goodput_crossovers,
                        report.crossover_factor or "",
                        Path(tmp) / "crossover.png",
                    )
                )
            if report.capacity_arms:
                made.append(
                    plots.attainment_plot(report.capacity_arms, Path(tmp) / "attainment.png")
                )
                if any(a.curve for a in report.capacity_arms):
                    made.append(
                        plots.latency_curve_plot(
                            report.capacity_arms, Path(tmp) / "latency_curve.png"
                        )
                    )
            if ramps:
                made.append(
                    plots.pareto_plot(
                        report.families(), report.crossover_factor or "", Path(tmp) / "pareto.png"
                    )
                )
            parent.log_artifacts(made, artifact_path="goodput")
    if report.energy and report.energy.crossovers:
        with tempfile.TemporaryDirectory() as tmp:
            path = plots.energy_crossover_plot(
                report.energy,
                report.crossovers,
                report.crossover_factor or "",
                Path(tmp) / "crossover.png",
            )
            parent.log_artifacts([path], artifact_path="energy")
    log_surfaces(parent, report.surfaces)
    log_verdicts(store, report.arms, report.comparisons)
    for bound in report.efficiencies:
        store.run(bound.candidate_run_id).log_metrics(bound.metrics())
    log_levels(parent, report.arms, report.comparisons, report.crossover_factor)
    parent.set_tags({NOTE: description})
    log_report(
        parent,
        report.to_json(),
        sweep_markdown(report, Metric.tok_per_s),
        report.arms,
        report.comparisons,
        Metric.tok_per_s,
        folder=SWEEP_REPORT,
    )
