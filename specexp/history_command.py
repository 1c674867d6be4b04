"""``specexp history``: what changed in a configuration's throughput over time.

    specexp history --experiment specexp
    specexp history --filter "params.speculative.method = 'none'" --json
    specexp history --fail-on-regression 0.03     # exit 3 on a regression > 3%
    specexp history --across engine.threads       # a setting's changes as events
    specexp history --reference cuda13_story      # the published story replayed
    specexp history --describe                    # into the experiment's MLflow page

The experiment's finished job runs are grouped into histories (one configuration, its
stack aside, on one hardware class), each in time order; change points in its mean tok/s
are found by binary segmentation that holds on a wandering machine (see
specexp.analysis.history), each with its size, interval and p-value, and what differs
between the runs before and after it, clean splits and effective settings first. With
``--fail-on-regression``, the exit status is 3 when a history's newest change is a
regression beyond the threshold, so a deployment's pipeline can be guarded by it.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any, Optional

from hydra import compose

from specexp import hydra_app, options
from specexp.analysis.history import (
    FOLLOWED_METRICS,
    Change,
    HistoryPoint,
    MetricChanges,
    find_changes,
    histories,
    metric_changes,
    newest_regression,
    published_changes,
)
from specexp.compare_command import load_reference
from specexp.core.records import unstructure
from specexp.output import markdown
from specexp.output.tables import Rows, pct
from specexp.output.terminal.rendering import rich_table
from specexp.output.terminal.screen import console
from specexp.tracking.store import TrackingStore

REGRESSION_EXIT = 3


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``specexp history``'s options (and ``specexp history``'s)."""
    options.store(parser)
    parser.add_argument("--filter", default="", help="an MLflow filter string on the runs")
    parser.add_argument(
        "--max-pvalue",
        type=float,
        default=0.05,
        help="change points' significance, against the least favourable run-to-run wandering",
    )
    options.confidence(parser)
    parser.add_argument(
        "--across",
        default="",
        help="comma-separated settings (e.g. engine.threads,attention_backend) whose changes "
        "are events inside one history, not separate histories",
    )
    parser.add_argument(
        "--fail-on-regression",
        type=float,
        default=None,
        metavar="FRACTION",
        help="exit 3 when a history's newest change is a regression beyond this (0.03: 3%%)",
    )
    parser.add_argument(
        "--reference",
        default=None,
        help="replay a published story's history (conf/reference/NAME.yaml: its points "
        "with the settings each case's dry run predicts) instead of reading runs",
    )
    options.json(parser)
    parser.add_argument(
        "--describe",
        action="store_true",
        help="also write the histories into the experiment's MLflow description (its page in "
        "the UI), replacing the history written there before",
    )


def reference_history(name: str) -> list[HistoryPoint]:
    """A published story's history: each point's published tok/s, with what its case's
    command runs with - the stack, the settings asked for, and the attention backend the
    engine will choose where it is left to it (from the engine's own code, for the story's
    GPU)."""
    reference = load_reference(name)
    hydra_app.register()
    points = []
    with hydra_app.composing():
        for order, entry in enumerate(reference.history):
            cfg = compose(
                config_name="config",
                overrides=[
                    "engine=sglang",
                    "model=kimi-k2.5",
                    f"+case={entry.point}",
                    f"host.gpu_compute_capability={reference.compute_capability}",
                    *entry.overrides,
                ],
            )
            job = hydra_app.prepare(cfg)
            resolution = job.predicted_resolution(job.planned_launch())
            chosen = dict(resolution.chosen) if resolution else {}
            config = job.config
            settings = {
                f"stack.{package}": str(version)
                for package, version in config.stack.versions.items()
            }
            settings["config.attention_backend"] = config.attention_backend.name
            settings["config.allreduce_backend"] = config.allreduce_backend.name
            settings["effective.attention_backend"] = chosen.get(
                "attention_backend", config.attention_backend.name
            )
            points.append(
                HistoryPoint(
                    entry.point,
                    entry.point,
                    float(order),
                    float(reference.points[entry.point].tok_per_s),
                    settings,
                    {},
                )
            )
    return points


def change_rows(changes: list[Change]) -> Rows:
    table = Rows(
        ["from run", "when", "before", "after", "change (CI)", "p", "what differs, likeliest first"]
    )
    for c in changes:
        causes = "; ".join(f"{d.kind}: {d.key} {d.before} -> {d.after}" for d in c.differences[:4])
        table.add(
            [
                c.run_id[:8] if len(c.run_id) == 32 else c.run_id,  # MLflow ids: their prefix
                time.strftime("%Y-%m-%d %H:%M", time.gmtime(c.at_unix))
                if c.at_unix > 1e6
                else f"#{c.index}",
                f"{c.before_mean:.2f}",
                f"{c.after_mean:.2f}",
                f"{pct(c.change)} [{pct(c.ci_low)}, {pct(c.ci_high)}]",
                f"{c.p_value:.2g}",
                causes or "nothing recorded differs",
            ]
        )
    return table


def history_title(points: list[HistoryPoint], changes: list[Change]) -> str:
    return f"{points[0].name}: {len(points)} points, {len(changes)} change(s)"


def history_markdown(
    found: list[tuple[list[HistoryPoint], list[Change]]],
    max_pvalue: float,
    followed: Optional[dict[str, list[MetricChanges]]] = None,
) -> str:
    """The histories as the experiment's description shows them: a table of changes each,
    and what the ``followed`` metrics (by a history's first run) did along it."""
    sections = [
        f"### {history_title(points, changes)}\n\n"
        + (
            markdown.table(change_rows(changes))
            if changes
            else f"no change at p < {max_pvalue:g}\n"
        )
        + "".join(
            f"\n- {m.describe(max_pvalue)}\n"
            + (f"\n{markdown.table(change_rows(m.changes))}" if m.changes else "")
            for m in (followed or {}).get(points[0].run_id, [])
        )
        for points, changes in found
    ]
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return (
        f"Written {stamp}; change points by binary segmentation, each split's t deflated "
        f"for autocorrelation and tested against wandering machines (p < {max_pvalue:g}).\n\n"
        + ("\n".join(sections) or "no finished job runs\n")
    )


# Each history's points and their changes, in the order found.
Found = list[tuple[list[HistoryPoint], list[Change]]]


def run(args: argparse.Namespace) -> int:
    """``specexp history``: the histories printed (or their JSON), and the exit status."""
    if args.describe and args.reference:
        raise options.UsageError(
            "--describe writes an experiment's history; --reference reads none"
        )
    found, followed = _reference_histories(args) if args.reference else _store_histories(args)
    if args.json:
        print(json.dumps(_documents(found, followed), indent=1, default=str))
    else:
        _print_histories(found, followed, args.max_pvalue)
    if args.fail_on_regression is not None and _regressed(found, args.fail_on_regression):
        return REGRESSION_EXIT
    return 0


def _reference_histories(args: argparse.Namespace) -> tuple[Found, dict[str, list[MetricChanges]]]:
    """A reference's published points as one history."""
    points = reference_history(args.reference)
    method = load_reference(args.reference).method
    changes = published_changes(
        points,
        cv_max=float(method.published_cv_max),
        runs=int(method.measured_runs),
        confidence=args.confidence,
    )
    return [(points, changes)], {}


def _store_histories(args: argparse.Namespace) -> tuple[Found, dict[str, list[MetricChanges]]]:
    """The store's histories, with acceptance length and goodput along each (by its first
    run); with ``--describe``, written to the experiment's description."""
    store = TrackingStore(args.tracking_uri, args.experiment, create=False)
    across = [key for key in args.across.split(",") if key]
    runs = store.job_runs(filter_string=args.filter)
    by_id = {run.run_id: run for run in runs}
    found: Found = []
    followed: dict[str, list[MetricChanges]] = {}
    for points in histories(runs, across):
        changes = find_changes(points, max_pvalue=args.max_pvalue, confidence=args.confidence)
        found.append((points, changes))
        followed[points[0].run_id] = [
            metric_changes(points, by_id, m, max_pvalue=args.max_pvalue, confidence=args.confidence)
            for m in FOLLOWED_METRICS
        ]
    if args.describe:
        store.describe_history(history_markdown(found, args.max_pvalue, followed))
    return found, followed


def _documents(found: Found, followed: dict[str, list[MetricChanges]]) -> list[dict[str, Any]]:
    return [
        {
            "runs": [p.run_id for p in points],
            "first": points[0].name,
            "changes": unstructure(changes),
            "metrics": unstructure(followed.get(points[0].run_id, [])),
        }
        for points, changes in found
    ]


def _print_histories(
    found: Found, followed: dict[str, list[MetricChanges]], max_pvalue: float
) -> None:
    for points, changes in found:
        title = history_title(points, changes)
        if changes:
            console.print(rich_table(title, change_rows(changes)))
        else:
            console.print(f"{title}: no change at p < {max_pvalue:g}")
        for metric in followed.get(points[0].run_id, []):
            console.print(f"  {metric.describe(max_pvalue)}")
            if metric.changes:
                console.print(rich_table(metric.metric, change_rows(metric.changes)))


def _regressed(found: Found, limit: float) -> bool:
    """Whether a history's newest change is a regression beyond ``limit``, each one said."""
    regressed = [c for _, changes in found if (c := newest_regression(changes, limit)) is not None]
    for c in regressed:
        console.print(
            f"[red]regression[/] from run {c.run_id[:8]}: {pct(c.change)} "
            f"[{pct(c.ci_low)}, {pct(c.ci_high)}], beyond -{limit:.0%}"
        )
    return bool(regressed)
