"""``specexp compare``: verdicts between runs in MLflow, and reproduction reports.

    specexp compare --baseline speculative=none
    specexp compare --parent PARENT_RUN_ID --baseline attention_backend=flashinfer --json
    specexp compare --run-ids A B --baseline A
    specexp compare --reference cuda13_story

Runs are selected from an experiment (optionally the children of a sweep's parent run, a
filter string, or explicit ids); each finished run is one arm. Its values are the per-launch
means when it had several server launches, else its measured runs. Each arm is compared with
the baseline (one family, simultaneous intervals); the table is printed, and logged to MLflow
as markdown, JSON and a plot - on the parent run when one is given, else on a new run.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from omegaconf import OmegaConf

from specexp import options
from specexp.analysis.arms import (
    Arm,
    SelectionError,
    Selector,
    baseline_pairs,
    make_arms,
    pairing_said,
)
from specexp.analysis.calibration import calibrations, with_launches
from specexp.analysis.comparisons import compare_arms, judge_sequences
from specexp.analysis.report import Caveat, caveats
from specexp.analysis.reproduction import ClaimCheck, hardware_matches, reproduce
from specexp.analysis.results import Metric, RunKind, RunStatus, Tag
from specexp.core.records import unstructure
from specexp.core.schemas.stats import StatsConfig
from specexp.core.schemas.tracking import TrackingConfig
from specexp.core.sequential import SequentialComparison
from specexp.core.stats.comparison import Comparison
from specexp.hydra_app import CONFIG_DIR
from specexp.output.markdown import comparison_markdown, reproduction_markdown
from specexp.output.terminal.comparison import print_comparison, print_reproduction
from specexp.output.terminal.screen import console
from specexp.tracking import publish
from specexp.tracking.store import TrackingStore

REFERENCE_DIR = Path(CONFIG_DIR) / "reference"


def load_reference(name: str) -> Any:
    path = Path(name) if name.endswith(".yaml") else REFERENCE_DIR / f"{name}.yaml"
    if not path.is_file():
        known = ", ".join(p.stem for p in REFERENCE_DIR.glob("*.yaml"))
        raise SelectionError(f"reference {name!r} not found; known: {known}")
    return OmegaConf.load(path)


@dataclass
class Reproduction:
    """Published claims checked against the arms (``--reference``)."""

    reference: Any
    hardware_matches: bool
    measured_hardware: str
    points: dict[str, Optional[Arm]]
    claims: list[ClaimCheck]


@dataclass
class ComparisonReport:
    """What a comparison found: the arms, each compared with the baseline (one family,
    simultaneous intervals), the caveats said once, the runs left out and why, and the
    reproduction when a reference was given."""

    metric: str
    confidence: float
    threshold: float
    baseline: Optional[str]
    arms: list[Arm]
    comparisons: list[Comparison]
    caveats: list[Caveat]
    skipped: list[str]
    reproduction: Optional[Reproduction] = None
    # How the arms were paired beyond the named factor (analysis.arms.pairing_said).
    pairing: list[str] = dataclasses.field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The JSON document ``--json`` prints and the run logs."""
        document: dict[str, Any] = {
            "format_version": COMPARISON_REPORT_FORMAT,
            "metric": self.metric,
            "confidence": self.confidence,
            "threshold": self.threshold,
            "baseline": self.baseline,
            "arms": [a.to_json() for a in self.arms],
            "comparisons": [c.to_json() for c in self.comparisons],
            "skipped": self.skipped,
            "pairing": self.pairing,
            "caveats": [dataclasses.asdict(c) for c in self.caveats],
        }
        if self.reproduction is not None:
            r = self.reproduction
            document["reproduction"] = {
                "reference": r.reference.name,
                "hardware_matches": r.hardware_matches,
                "measured_hardware": r.measured_hardware,
                "points": {p: (a.to_json() if a else None) for p, a in r.points.items()},
                "claims": unstructure(r.claims),
            }
        return document

    def markdown(self) -> str:
        text = comparison_markdown(self.arms, self.comparisons, self.caveats, self.metric)
        if self.reproduction is not None:
            r = self.reproduction
            text += "\n" + reproduction_markdown(
                r.reference, r.points, r.claims, r.hardware_matches, r.measured_hardware
            )
        return text


# The JSON document --json prints and the run logs.
COMPARISON_REPORT_FORMAT = 1
_STATS = StatsConfig()


def compare_runs(
    *,
    baseline: Optional[str] = None,
    parent: Optional[str] = None,
    run_ids: Sequence[str] = (),
    filter_string: str = "",
    label_tags: Sequence[str] = (),
    metric: str = Metric.tok_per_s,
    confidence: float = _STATS.confidence,
    threshold: float = _STATS.threshold,
    power: float = _STATS.power,
    reference: Optional[str] = None,
    tracking_uri: Optional[str] = None,
    experiment: str = TrackingConfig.experiment,
) -> ComparisonReport:
    """Compare finished runs of an experiment, each one arm, with the baseline: the runs of
    a sweep (``parent``), of a filter, or by id. ``baseline`` is a run id (prefix), a label
    or FACTOR=VALUE (``speculative=none``). Raises
    :class:`~specexp.analysis.arms.SelectionError` when nothing matches. Defaults are the
    statistics config's (conf/stats/default.yaml's schema).

    Example (the runs of a sweep over ``speculative=none,draft``)::

        report = specexp.compare_runs(baseline="speculative=none", parent=PARENT_RUN_ID)
        for c in report.comparisons:
            print(c.candidate, c.change, c.ci_low, c.ci_high, c.verdict)
    """
    store = TrackingStore(tracking_uri, experiment, create=False)
    runs = store.job_runs(
        run_ids=run_ids, parent=parent, filter_string=filter_string, metric=metric
    )
    arms, skipped = make_arms(runs, label_tags=label_tags, confidence=confidence, metric=metric)
    if not arms:
        raise SelectionError("no finished runs matched the selection")
    settings = dict(confidence=confidence, threshold=threshold, power=power)
    selector = Selector(baseline) if baseline else None
    known = with_launches(
        calibrations(store.calibration_runs(metric=metric)),
        store.configuration_runs(runs, metric=metric),
    )
    comparisons: list[Comparison] = []
    if selector:
        pairs = baseline_pairs(arms, selector)
        comparisons = compare_arms(pairs, **settings, factor=selector.factor, calibration=known)
        judge_sequences(pairs, comparisons, _sequences_of(store, arms))
    reproduction = None
    if reference:
        loaded = load_reference(reference)
        same_hw, measured_hw = hardware_matches(loaded, arms)
        points, claims = reproduce(
            loaded, arms, **settings, calibration=known, same_hardware=same_hw
        )
        reproduction = Reproduction(loaded, same_hw, measured_hw, points, claims)
    return ComparisonReport(
        metric,
        confidence,
        threshold,
        baseline,
        arms,
        comparisons,
        caveats(comparisons),
        skipped,
        reproduction,
        pairing_said(arms, selector) if selector else [],
    )


def _sequences_of(
    store: TrackingStore, arms: Sequence[Arm]
) -> dict[str, list[SequentialComparison]]:
    """The comparisons each sweep among the arms' parents measured until decided."""
    sweeps = sorted({p for a in arms if (p := a.run.tags.get(Tag.parent))})
    return {sweep: store.sweep_sequences(sweep) for sweep in sweeps}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``specexp compare``'s options (and ``python -m specexp.compare``'s)."""
    options.store(parser)
    parser.add_argument("--parent", help="compare the child runs of this sweep's parent run")
    parser.add_argument(
        "--filter", default="", help="MLflow filter string, e.g. \"tags.model = 'tiny-pair'\""
    )
    parser.add_argument("--run-ids", nargs="*", default=[])
    parser.add_argument(
        "--baseline", help="run id (prefix), label, or TAG=VALUE (e.g. speculative=none)"
    )
    parser.add_argument(
        "--label", default="", help="tags naming each arm, comma-separated (default: run name)"
    )
    parser.add_argument(
        "--metric", default=Metric.tok_per_s, help="higher-is-better metric logged per measured run"
    )
    options.statistics(parser)
    parser.add_argument("--reference", help="also check published claims, e.g. cuda13_story")
    options.json(parser)
    parser.add_argument("--no-log", action="store_true", help="do not log the report to MLflow")


def run(args: argparse.Namespace) -> int:
    """``specexp compare``: the report printed (or its JSON) and logged to MLflow."""
    try:
        report = compare_runs(
            baseline=args.baseline,
            parent=args.parent,
            run_ids=args.run_ids,
            filter_string=args.filter,
            label_tags=[t for t in args.label.split(",") if t],
            metric=args.metric,
            confidence=args.confidence,
            threshold=args.threshold,
            power=args.power,
            reference=args.reference,
            tracking_uri=args.tracking_uri,
            experiment=args.experiment,
        )
    except (SelectionError, ValueError) as exc:
        console.print(f"[red]error:[/] {exc}")
        return 2
    document = report.to_json()
    if args.json:
        print(json.dumps(document, indent=2, default=float))
    else:
        print_comparison(
            report.arms, report.comparisons, report.caveats, report.skipped, report.metric
        )
        for line in report.pairing:
            console.print(f"note: {line}", markup=False)
        if report.reproduction is not None:
            r = report.reproduction
            print_reproduction(
                r.reference, r.points, r.claims, r.hardware_matches, r.measured_hardware
            )
    if not args.no_log:
        store = TrackingStore(args.tracking_uri, args.experiment, create=False)
        run = (
            store.run(args.parent)
            if args.parent
            else store.start_run("comparison", {Tag.kind: RunKind.comparison})
        )
        publish.log_report(
            run, document, report.markdown(), report.arms, report.comparisons, report.metric
        )
        if not args.parent:
            run.end(RunStatus.finished)
        if not args.json:
            console.print(f"logged to MLflow run {run.run_id}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specexp compare", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    return parser
