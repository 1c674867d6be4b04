"""``specexp upload OUTPUT_DIR [...] [--tracking-uri URI]``: log runs that were
measured while the MLflow store was unreachable (their ``mlflow_offline.json`` journals)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from specexp.analysis.results import Artifact
from specexp.core.redaction import REDACTED
from specexp.output.terminal import console
from specexp.tracking.store import replay


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


def main(argv: list[str] | None = None) -> int:
    """``python -m specexp.upload``: the same as ``specexp upload``."""
    parser = argparse.ArgumentParser(prog="specexp upload", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


def run(args: argparse.Namespace) -> int:
    """``specexp upload``: each journal under the directories replayed into its store."""
    journals = [j for d in args.directories for j in sorted(d.rglob(str(Artifact.offline_journal)))]
    if not journals:
        console.print(
            f"[red]no mlflow_offline.json under {', '.join(map(str, args.directories))}[/]"
        )
        return 2
    for journal in journals:
        if (
            args.tracking_uri is None
            and REDACTED in json.loads(journal.read_text())["tracking_uri"]
        ):
            console.print(
                f"[red]{journal}: the run was meant for a store whose URI had credentials, which "
                "were not written down; give it with --tracking-uri[/]"
            )
            return 2
        run_id = replay(journal, args.tracking_uri)
        journal.rename(journal.with_name("mlflow_offline.uploaded.json"))  # not uploaded twice
        console.print(f"uploaded {journal.parent} as run {run_id}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
