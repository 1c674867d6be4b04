"""``python -m specexp.compare``: verdicts between runs in MLflow, and reproduction reports.

    python -m specexp.compare --baseline speculative=none
    python -m specexp.compare --parent PARENT_RUN_ID --baseline attention_backend=flashinfer --json
    python -m specexp.compare --run-ids A B --baseline A
    python -m specexp.compare --reference cuda13_story

Runs are selected from an experiment (optionally the children of a sweep's parent run, a
filter string, or explicit ids); each finished run is one arm. Its values are the per-launch
means when it had several server launches, else its measured runs. Each arm is compared with
the baseline (Holm's correction over the family); the table is printed, and logged to MLflow
as markdown, JSON and a plot - on the parent run when one is given, else on a new run.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from omegaconf import OmegaConf

from specexp import crossover, report
from specexp.stats import Comparison, Summary, compare, decide, summarize
from specexp.tracking import Tracker

REFERENCE_DIR = Path(__file__).resolve().parent.parent / "conf" / "reference"
REPRODUCED, CONTRADICTED, NOT_MEASURED = "reproduced", "contradicted", "not measured"


class SelectionError(ValueError):
    pass


@dataclass
class Arm:
    """One configuration's independent values, from one MLflow run."""

    run_id: str
    label: str
    values: list[float]
    unit: str  # "launch" or "run"
    summary: Summary
    tags: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "label": self.label, "values": self.values, "unit": self.unit,
                "mean": self.summary.mean, "std": self.summary.std, "cv": self.summary.cv,
                "ci_low": self.summary.ci_low, "ci_high": self.summary.ci_high, "n": self.summary.n}


def load_arms(tracker: Tracker, *, parent: Optional[str], filter_string: str, run_ids: list[str],
              label_tags: list[str], metric: str, confidence: float) -> tuple[list[Arm], list[str]]:
    """Finished runs as arms, plus a note for each run that was left out and why."""
    client = tracker.client
    if run_ids:
        runs = [client.get_run(run_id) for run_id in run_ids]
    else:
        clauses = [f"tags.mlflow.parentRunId = '{parent}'"] if parent else []
        if filter_string:
            clauses.append(filter_string)
        runs = client.search_runs([tracker.experiment_id], " and ".join(clauses), max_results=5000)
    arms, skipped = [], []
    for run in runs:
        name = run.info.run_name or run.info.run_id[:8]
        if run.data.tags.get("specexp.kind") in ("comparison", "sweep"):
            continue
        if run.info.status != "FINISHED":
            skipped.append(f"{name} ({run.info.run_id[:8]}): {run.info.status}, not compared")
            continue
        launches = [m.value for m in sorted(client.get_metric_history(run.info.run_id, f"launch_{metric}"),
                                              key=lambda m: m.step)]
        values, unit = (launches, "launch") if len(launches) > 1 else (
            [m.value for m in sorted(client.get_metric_history(run.info.run_id, metric), key=lambda m: m.step)], "run")
        summary = summarize(values, confidence)
        if summary is None:
            skipped.append(f"{name} ({run.info.run_id[:8]}): no {metric} values")
            continue
        label = " ".join(f"{t}={run.data.tags.get(t, '?')}" for t in label_tags) if label_tags else name
        arms.append(Arm(run.info.run_id, label, values, unit, summary, dict(run.data.tags)))
    _disambiguate(arms)
    return arms, skipped


def _disambiguate(arms: list[Arm]) -> None:
    seen: dict[str, int] = {}
    for arm in arms:
        seen[arm.label] = seen.get(arm.label, 0) + 1
    for arm in arms:
        if seen[arm.label] > 1:
            arm.label = f"{arm.label} [{arm.run_id[:8]}]"


def pick_baseline(arms: list[Arm], selector: str) -> Arm:
    """A run id (or its prefix), a label, or TAG=VALUE matching exactly one arm."""
    if "=" in selector:
        key, value = selector.split("=", 1)
        matches = [a for a in arms if a.tags.get(key) == value]
    else:
        matches = [a for a in arms if a.run_id.startswith(selector) or a.label == selector]
    if len(matches) != 1:
        found = ", ".join(f"{a.label} ({a.run_id[:8]})" for a in matches) or "none"
        raise SelectionError(f"--baseline {selector!r} must match exactly one finished run; matched: {found}. "
                             "Use a run id to choose.")
    return matches[0]


def baseline_pairs(arms: list[Arm], selector: str) -> list[tuple[Arm, Arm]]:
    """(baseline, candidate) pairs. When the selector is FACTOR=VALUE and arm labels name that
    factor (a sweep's labels, or --label), each arm is compared with the baseline that shares
    all its other settings - e.g. speculative=draft at concurrency 8 against speculative=none
    at concurrency 8. Otherwise one baseline run is compared with every other arm."""
    key = selector.split("=", 1)[0] + "="
    if "=" in selector and any(t.startswith(key) for a in arms for t in a.label.split()):
        groups: dict[str, list[Arm]] = {}
        for arm in arms:
            rest = " ".join(t for t in arm.label.split() if not t.startswith(key))
            groups.setdefault(rest, []).append(arm)
        pairs = []
        for group in groups.values():
            bases = [a for a in group if selector in a.label.split()]
            if len(bases) > 1:
                raise SelectionError(f"baseline {selector!r} matches several runs with the same settings: "
                                     f"{', '.join(a.run_id[:8] for a in bases)}; choose one by run id")
            pairs += [(bases[0], a) for a in group if bases and a is not bases[0]]
        if not pairs:
            raise SelectionError(f"baseline {selector!r} matched no run")
        return pairs
    baseline = pick_baseline(arms, selector)
    return [(baseline, a) for a in arms if a is not baseline]


NOT_ATTRIBUTABLE = "not attributable"
_CAPTURED = ("stack.", "effective.")


def drift(base: Arm, arm: Arm, factor: Optional[str]) -> list[str]:
    """Differences in captured stack and effective configuration other than the declared factor."""
    skip = {f"effective.{factor}", f"stack.{factor}"} if factor else set()
    keys = sorted(k for k in set(base.tags) | set(arm.tags) if k.startswith(_CAPTURED) and k not in skip)
    return [f"{k}: {base.tags.get(k, '-')} vs {arm.tags.get(k, '-')}" for k in keys if base.tags.get(k) != arm.tags.get(k)]


def compare_arms(pairs: list[tuple[Arm, Arm]], *, confidence: float, threshold: float, power: float,
                 factor: Optional[str] = None) -> list[Comparison]:
    """Compare each pair (Holm over the family); list drift, and refuse to attribute a
    difference to the declared factor when it did not engage in one of the arms."""
    kept = [(base, arm) for base, arm in pairs if len(arm.values) > 1 and len(base.values) > 1]
    comparisons = [compare(base.values, arm.values, confidence=confidence, threshold=threshold, power=power,
                           baseline_name=base.label, candidate_name=arm.label) for base, arm in kept]
    decide(comparisons)
    for (base, arm), comparison in zip(kept, comparisons):
        comparison.notes += [f"drift: {d}" for d in drift(base, arm, factor)]
        missed = [a.label for a in (base, arm) if factor and a.tags.get(f"engaged.{factor}") == "not engaged"]
        if missed:
            comparison.verdict = NOT_ATTRIBUTABLE
            comparison.notes.append(f"{factor} did not engage in {', '.join(missed)}: the difference is not "
                                    f"attributed to {factor}")
    return comparisons


# Reproduction of published results ---------------------------------------------------------

def load_reference(name: str) -> Any:
    path = Path(name) if name.endswith(".yaml") else REFERENCE_DIR / f"{name}.yaml"
    if not path.is_file():
        known = ", ".join(p.stem for p in REFERENCE_DIR.glob("*.yaml"))
        raise SelectionError(f"reference {name!r} not found; known: {known}")
    return OmegaConf.load(path)


def hardware_matches(reference: Any, arms: list[Arm]) -> tuple[bool, str]:
    wanted = reference.hardware
    measured = sorted({a.tags.get("hardware", "unknown") for a in arms})
    same = bool(arms) and all(wanted.gpu in a.tags.get("gpu_name", "") and
                              a.tags.get("gpu_count") == str(wanted.gpu_count) for a in arms)
    return same, ", ".join(measured)


@dataclass
class ClaimCheck:
    id: str
    text: str
    published_ratio: float
    comparison: Optional[Comparison]
    status: str

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "text": self.text, "published_ratio": self.published_ratio, "status": self.status,
                "comparison": self.comparison.to_json() if self.comparison else None}


def reproduce(reference: Any, arms: list[Arm], *, confidence: float, threshold: float,
              power: float) -> tuple[dict[str, Optional[Arm]], list[ClaimCheck]]:
    """Map runs to published points (by their reference_point tag) and check every claim as a
    ratio with its CI: reproduced (CI holds the published ratio and excludes 1 on its side),
    contradicted (CI excludes the published ratio), inconclusive, or not measured."""
    by_point: dict[str, Optional[Arm]] = {}
    for point in reference.points:
        matching = [a for a in arms if point in a.tags.get("reference_point", "").split(",")]
        by_point[point] = matching[-1] if matching else None
    checks, comparisons = [], []
    for claim in reference.claims:
        ratio = reference.points[claim.candidate].tok_per_s / reference.points[claim.baseline].tok_per_s
        base, cand = by_point.get(claim.baseline), by_point.get(claim.candidate)
        comparison = None
        if base and cand and base is not cand and len(base.values) > 1 and len(cand.values) > 1:
            comparison = compare(base.values, cand.values, confidence=confidence, threshold=threshold, power=power,
                                 baseline_name=claim.baseline, candidate_name=claim.candidate)
            comparisons.append(comparison)
        checks.append(ClaimCheck(claim.id, claim.text, ratio, comparison, NOT_MEASURED))
    decide(comparisons)
    for check in checks:
        c = check.comparison
        if c is None:
            continue
        if not c.ci_low <= check.published_ratio <= c.ci_high:
            check.status = CONTRADICTED
        elif (check.published_ratio > 1 and c.ci_low > 1) or (check.published_ratio < 1 and c.ci_high < 1):
            check.status = REPRODUCED
        else:
            check.status = "inconclusive"
    return by_point, checks


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m specexp.compare", description=__doc__.split("\n\n")[0])
    parser.add_argument("--tracking-uri", default=None, help="default: $MLFLOW_TRACKING_URI, else ./mlruns")
    parser.add_argument("--experiment", default="specexp")
    parser.add_argument("--parent", help="compare the child runs of this sweep's parent run")
    parser.add_argument("--filter", default="", help="MLflow filter string, e.g. \"tags.model = 'tiny-pair'\"")
    parser.add_argument("--run-ids", nargs="*", default=[])
    parser.add_argument("--baseline", help="run id (prefix), label, or TAG=VALUE (e.g. speculative=none)")
    parser.add_argument("--label", default="", help="tags naming each arm, comma-separated (default: run name)")
    parser.add_argument("--metric", default="tok_per_s", help="higher-is-better metric logged per measured run")
    parser.add_argument("--confidence", type=float, default=0.95)
    parser.add_argument("--threshold", type=float, default=0.01, help="smallest relative effect worth reporting")
    parser.add_argument("--power", type=float, default=0.8)
    parser.add_argument("--reference", help="also check published claims, e.g. cuda13_story")
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON instead of tables")
    parser.add_argument("--no-log", action="store_true", help="do not log the report to MLflow")
    return parser


def main(argv: Optional[list[str]] = None) -> int:
    args = build_parser().parse_args(argv)

    try:
        tracker = Tracker(args.tracking_uri, args.experiment, create=False)
        labels = [t for t in args.label.split(",") if t]
        arms, skipped = load_arms(tracker, parent=args.parent, filter_string=args.filter, run_ids=args.run_ids,
                                  label_tags=labels, metric=args.metric, confidence=args.confidence)
        if not arms:
            raise SelectionError("no finished runs matched the selection")
        settings = dict(confidence=args.confidence, threshold=args.threshold, power=args.power)
        factor = args.baseline.split("=", 1)[0] if args.baseline and "=" in args.baseline else None
        comparisons = (compare_arms(baseline_pairs(arms, args.baseline), **settings, factor=factor)
                       if args.baseline else [])
        reference = load_reference(args.reference) if args.reference else None
        points, claims = reproduce(reference, arms, **settings) if reference else ({}, [])
    except (SelectionError, ValueError) as exc:
        report.console.print(f"[red]error:[/] {exc}")
        return 2

    document = {
        "metric": args.metric, "confidence": args.confidence, "threshold": args.threshold,
        "baseline": args.baseline,
        "arms": [a.to_json() for a in arms], "comparisons": [c.to_json() for c in comparisons], "skipped": skipped,
    }
    markdown = report.comparison_markdown(arms, comparisons, args.metric)
    if reference is not None:
        same_hw, measured_hw = hardware_matches(reference, arms)
        document["reproduction"] = {
            "reference": reference.name, "hardware_matches": same_hw, "measured_hardware": measured_hw,
            "points": {p: (a.to_json() if a else None) for p, a in points.items()},
            "claims": [c.to_json() for c in claims],
        }
        markdown += "\n" + report.reproduction_markdown(reference, points, claims, same_hw, measured_hw)
    if args.json:
        print(json.dumps(document, indent=2, default=float))
    else:
        report.print_comparison(arms, comparisons, skipped, args.metric)
        if reference is not None:
            report.print_reproduction(reference, points, claims, same_hw, measured_hw)
    if not args.no_log:
        run_id = log_report(tracker, args.parent, document, markdown, arms, comparisons, args.metric)
        if not args.json:
            report.console.print(f"logged to MLflow run {run_id}")
    return 0


def log_report(tracker: Tracker, run_id: Optional[str], document: dict, markdown: str, arms: list[Arm],
               comparisons: list[Comparison], metric: str, folder: str = "comparison") -> str:
    """Log markdown, JSON and plot to ``run_id``, or to a new comparison run when None."""
    from specexp import plots

    if run_id:
        tracker.run_id = run_id
    else:
        tracker.start("comparison", {"specexp.kind": "comparison"})
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        paths = [directory / f"{folder}.md", directory / f"{folder}.json", directory / f"{folder}.png"]
        paths[0].write_text(markdown)
        paths[1].write_text(json.dumps(document, indent=2, default=float))
        plots.comparison_plot(arms, comparisons, metric, paths[2])
        tracker.log_artifacts(paths, artifact_path=folder)
    if not run_id:
        tracker.end("FINISHED")
    return tracker.run_id


def sweep_report(tracker: Tracker, parent: str, plan: Any, returns: Any, baseline_selector: Optional[str]) -> None:
    """The sweep's report on its parent run: every job's run (resumed ones too), compared
    with the baseline when one is configured. Written also when jobs failed."""
    cfg = plan.jobs[0].cfg
    children = tracker.client.search_runs([tracker.experiment_id], f"tags.mlflow.parentRunId = '{parent}'",
                                          max_results=5000)
    run_ids = [r.info.run_id for r in children] + [j.finished_run_id for j in plan.jobs if j.finished_run_id]
    failed = [r for r in children if r.info.status != "FINISHED"]
    launched = sum(1 for r in children if r.data.tags.get("server_reused") == "false")
    tracker.run_id = parent
    tracker.set_tags({"failed_jobs": str(len(failed)), "server_launches": str(launched)})
    arms, skipped = load_arms(tracker, parent=None, filter_string="", run_ids=run_ids, label_tags=[],
                              metric="tok_per_s", confidence=cfg.stats.confidence)
    comparisons, notes = [], []
    if baseline_selector and arms:
        try:
            comparisons = compare_arms(baseline_pairs(arms, baseline_selector), confidence=cfg.stats.confidence,
                                       threshold=cfg.stats.threshold, power=cfg.stats.power,
                                       factor=baseline_selector.split("=", 1)[0])
        except SelectionError as exc:
            notes.append(str(exc))
    report.console.print(f"[bold]sweep report[/] (parent run {parent}): {len(children)} job runs, "
                         f"{len(failed)} failed, {launched} server launch(es)")
    if arms:
        report.print_comparison(arms, comparisons, skipped, "tok_per_s")
    for note in notes:
        report.console.print(f"[yellow]note:[/] {note}")
    crossovers = []
    factor = cfg.multirun.crossover_factor
    if baseline_selector and factor and arms:
        crossovers = crossover.analyse(arms, baseline_selector, factor, cfg.stats.confidence)
        for result in crossovers:
            job = next((j for j in plan.jobs if result.candidate in j.label), plan.jobs[0])
            result.recommendation = crossover.recommend(result, job.cfg.speculative.num_steps,
                                                        job.cfg.speculative.num_draft_tokens)
            report.console.print(f"[bold]crossover:[/] {result.statement}")
            report.console.print(f"recommended switch-off: {json.dumps(result.recommendation)}")
        if crossovers:
            _log_crossover(tracker, parent, arms, crossovers, factor)
    document = {"parent_run_id": parent, "failed_jobs": len(failed), "server_launches": launched,
                "crossovers": [c.to_json() for c in crossovers],
                "baseline": baseline_selector, "arms": [a.to_json() for a in arms],
                "comparisons": [c.to_json() for c in comparisons], "skipped": skipped, "notes": notes}
    markdown = report.comparison_markdown(arms, comparisons, "tok_per_s") if arms else "No finished runs.\n"
    log_report(tracker, parent, document, markdown, arms, comparisons, "tok_per_s", folder="sweep_report")


def _log_crossover(tracker: Tracker, parent: str, arms: list[Arm], crossovers: list, factor: str) -> None:
    from specexp import plots

    tracker.run_id = parent
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        paths = [directory / "crossover.png", directory / "crossover.json"]
        plots.crossover_plot(crossover.families(arms, factor), crossovers, factor, paths[0])
        paths[1].write_text(json.dumps([c.to_json() for c in crossovers], indent=2))
        tracker.log_artifacts(paths, artifact_path="crossover")
    first = crossovers[0]
    tracker.set_tags({"crossover": first.statement[:5000],
                      "crossover_threshold": str(first.recommendation.get("threshold"))})
    tracker.log_metrics({f"crossover_{i}": c.estimate for i, c in enumerate(crossovers) if c.estimate})


if __name__ == "__main__":
    sys.exit(main())
