"""``specexp upload OUTPUT_DIR [...] [--tracking-uri URI]``: log runs that were measured
while the MLflow store was unreachable (their ``mlflow_offline.json`` journals), then the
reports of sweeps whose store failed at their end (``mlflow_offline_report.json``), under the
same parent runs."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.markup import escape

from specexp.analysis.results import Artifact
from specexp.core.durable import read_json_lines
from specexp.core.redaction import REDACTED
from specexp.host import failure
from specexp.output.terminal.screen import console
from specexp.sweep.report import replay_sweep_end
from specexp.tracking.address import uri_problem
from specexp.tracking.journal import journals_under, replay, uploaded


def _requests_note(directory: Path) -> str:
    """What the job's requests.jsonl holds, a line cut short at its end said."""
    path = directory / Artifact.requests
    if not path.exists():
        return ""
    read = read_json_lines(path)
    return f"; {len(read.records)} request record(s)" + (
        f", its last line cut short ({len(read.torn)} bytes), skipped" if read.torn else ""
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``specexp upload``'s options (and ``python -m specexp.upload``'s)."""
    parser.add_argument(
        "directories", nargs="+", type=Path, help="job output directories (searched recursively)"
    )
    parser.add_argument(
        "--tracking-uri",
        help="default: the URI the run was meant for (journals keep it without credentials: "
        "give it here when it had them)",
    )


def run(args: argparse.Namespace) -> int:
    """``specexp upload``: each journal under the directories replayed into its store."""
    problem = uri_problem(args.tracking_uri) if args.tracking_uri else None
    if problem:
        console.print(f"[red]{escape(problem)}[/]")
        return 2
    found = journals_under(args.directories)
    if not any(found.values()):
        console.print(
            f"[red]no {Artifact.offline_journal} or {Artifact.report_journal} under "
            f"{', '.join(map(str, args.directories))}[/]"
        )
        return 2
    unreadable = 0
    for name, journals in found.items():
        for journal in journals:
            try:
                meant_for = json.loads(journal.read_text())["tracking_uri"]
            except (ValueError, KeyError) as exc:
                console.print(f"[red]{journal}: not a whole journal ({exc}); left as it is[/]")
                unreadable += 1
                continue
            if args.tracking_uri is None and REDACTED in meant_for:
                console.print(
                    f"[red]{journal}: the run was meant for a store whose URI had credentials, "
                    "which were not written down; give it with --tracking-uri[/]"
                )
                return 2
            if name == Artifact.report_journal:
                parent = replay_sweep_end(journal, args.tracking_uri)
                console.print(f"published the report of sweep {journal.parent} on run {parent}")
                continue
            done = replay(journal, args.tracking_uri)
            if done.already:
                console.print(f"{journal}: already uploaded, as run {done.run_id}; nothing changed")
                continue
            journal.rename(uploaded(journal))
            cut = (
                "; the journal stopped before the run's end, so the run is ended FAILED"
                if done.cut_short
                else ""
            )
            console.print(
                f"uploaded {journal.parent} as run {done.run_id}: {done.calls} call(s)"
                f"{_requests_note(journal.parent)}{cut}"
            )
    return failure.RUN_FAILED if unreadable else 0
