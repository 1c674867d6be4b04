"""``python -m specexp.compare``: verdicts between runs in MLflow, and reproduction reports.

    python -m specexp.compare --baseline speculative=none
    python -m specexp.compare --parent PARENT_RUN_ID --baseline attention_backend=flashinfer --json
    python -m specexp.compare --run-ids A B --baseline A
    python -m specexp.compare --reference cuda13_story

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
import sys
from pathlib import Path
from typing import Any, Optional

from omegaconf import OmegaConf

from specexp.analysis.arms import (
    SelectionError,
    Selector,
    baseline_pairs,
    calibrations,
    compare_arms,
    hardware_matches,
    make_arms,
    reproduce,
)
from specexp.analysis.report import caveats
from specexp.analysis.results import RunKind, RunStatus, Tag
from specexp.output import terminal
from specexp.output.markdown import comparison_markdown, reproduction_markdown
from specexp.tracking import publish
from specexp.tracking.store import TrackingStore

REFERENCE_DIR = Path(__file__).resolve().parent.parent / "conf" / "reference"


def load_reference(name: str) -> Any:
    path = Path(name) if name.endswith(".yaml") else REFERENCE_DIR / f"{name}.yaml"
    if not path.is_file():
        known = ", ".join(p.stem for p in REFERENCE_DIR.glob("*.yaml"))
        raise SelectionError(f"reference {name!r} not found; known: {known}")
    return OmegaConf.load(path)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m specexp.compare", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--tracking-uri", default=None, help="default: $MLFLOW_TRACKING_URI, else ./mlruns"
    )
    parser.add_argument("--experiment", default="specexp")
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
        "--metric", default="tok_per_s", help="higher-is-better metric logged per measured run"
    )
    parser.add_argument("--confidence", type=float, default=0.95)
    parser.add_argument(
        "--threshold", type=float, default=0.01, help="smallest relative effect worth reporting"
    )
    parser.add_argument("--power", type=float, default=0.8)
    parser.add_argument("--reference", help="also check published claims, e.g. cuda13_story")
    parser.add_argument(
        "--json", action="store_true", help="print machine-readable JSON instead of tables"
    )
    parser.add_argument("--no-log", action="store_true", help="do not log the report to MLflow")
    return parser


# The JSON document --json prints and the run logs.
COMPARISON_REPORT_FORMAT = 1


def main(argv: Optional[list[str]] = None) -> int:
    args = build_parser().parse_args(argv)

    try:
        store = TrackingStore(args.tracking_uri, args.experiment, create=False)
        labels = [t for t in args.label.split(",") if t]
        runs = store.job_runs(
            run_ids=args.run_ids, parent=args.parent, filter_string=args.filter, metric=args.metric
        )
        arms, skipped = make_arms(
            runs, label_tags=labels, confidence=args.confidence, metric=args.metric
        )
        if not arms:
            raise SelectionError("no finished runs matched the selection")
        settings = dict(confidence=args.confidence, threshold=args.threshold, power=args.power)
        selector = Selector(args.baseline) if args.baseline else None
        known = calibrations(store.calibration_runs(metric=args.metric))
        comparisons = (
            compare_arms(
                baseline_pairs(arms, selector),
                **settings,
                factor=selector.factor,
                calibration=known,
            )
            if selector
            else []
        )
        reference = load_reference(args.reference) if args.reference else None
        same_hw, measured_hw = hardware_matches(reference, arms) if reference else (False, "")
        points, claims = (
            reproduce(reference, arms, **settings, calibration=known, same_hardware=same_hw)
            if reference
            else ({}, [])
        )
    except (SelectionError, ValueError) as exc:
        terminal.console.print(f"[red]error:[/] {exc}")
        return 2

    said_once = caveats(comparisons)
    document = {
        "format_version": COMPARISON_REPORT_FORMAT,
        "metric": args.metric,
        "confidence": args.confidence,
        "threshold": args.threshold,
        "baseline": args.baseline,
        "arms": [a.to_json() for a in arms],
        "comparisons": [c.to_json() for c in comparisons],
        "skipped": skipped,
        "caveats": [dataclasses.asdict(c) for c in said_once],
    }
    markdown = comparison_markdown(arms, comparisons, said_once, args.metric)
    if reference is not None:
        document["reproduction"] = {
            "reference": reference.name,
            "hardware_matches": same_hw,
            "measured_hardware": measured_hw,
            "points": {p: (a.to_json() if a else None) for p, a in points.items()},
            "claims": [c.to_json() for c in claims],
        }
        markdown += "\n" + reproduction_markdown(reference, points, claims, same_hw, measured_hw)
    if args.json:
        print(json.dumps(document, indent=2, default=float))
    else:
        terminal.print_comparison(arms, comparisons, said_once, skipped, args.metric)
        if reference is not None:
            terminal.print_reproduction(reference, points, claims, same_hw, measured_hw)
    if not args.no_log:
        run = (
            store.run(args.parent)
            if args.parent
            else store.start_run("comparison", {Tag.kind: RunKind.comparison})
        )
        publish.log_report(run, document, markdown, arms, comparisons, args.metric)
        if not args.parent:
            run.end(RunStatus.finished)
        if not args.json:
            terminal.console.print(f"logged to MLflow run {run.run_id}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
