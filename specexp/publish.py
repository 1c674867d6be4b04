"""Reports as MLflow artifacts: a comparison (markdown, JSON, plot) and a crossover, logged
on the run they belong to - a sweep's parent, or a comparison run of their own."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any, Sequence

from specexp import plots
from specexp.analysis import Arm
from specexp.crossover import Crossover, SwitchOffCheck
from specexp.results import Tag
from specexp.stats import Comparison
from specexp.tracking import RunLog


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
            Tag.crossover: first.statement[:5000],
            Tag.crossover_threshold: str(first.recommendation.get("threshold")),
        }
    )
    run.log_metrics({f"crossover_{i}": c.estimate for i, c in enumerate(crossovers) if c.estimate})
