"""Command-line options that mean the same in every command, declared once here; their
defaults are the config schemas' (specexp.core.schemas.stats and .tracking), so a command and
a run agree."""

from __future__ import annotations

import argparse
import difflib
from typing import Sequence

from specexp.core.schemas.stats import StatsConfig
from specexp.core.schemas.tracking import TrackingConfig

_STATS, _TRACKING = StatsConfig(), TrackingConfig()


def store(parser: argparse.ArgumentParser) -> None:
    """Which MLflow store and experiment to read (and write reports to)."""
    tracking_uri(parser)
    parser.add_argument(
        "--experiment",
        default=_TRACKING.experiment,
        help=f"the MLflow experiment (default: {_TRACKING.experiment})",
    )


def tracking_uri(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--tracking-uri",
        default=_TRACKING.uri,
        help="the MLflow store (default: tracking.uri, else $MLFLOW_TRACKING_URI, else ./mlruns)",
    )


def confidence(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--confidence",
        type=float,
        default=_STATS.confidence,
        help=f"confidence of the intervals (default: stats.confidence, {_STATS.confidence})",
    )


def statistics(parser: argparse.ArgumentParser) -> None:
    """The comparison's statistics: confidence, the smallest effect worth reporting, power."""
    confidence(parser)
    parser.add_argument(
        "--threshold",
        type=float,
        default=_STATS.threshold,
        help="smallest relative effect worth reporting "
        f"(default: stats.threshold, {_STATS.threshold})",
    )
    parser.add_argument(
        "--power",
        type=float,
        default=_STATS.power,
        help=f"power wanted at the threshold (default: stats.power, {_STATS.power})",
    )


def json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--json", action="store_true", help="print machine-readable JSON instead of tables"
    )


# The exit status of a command that cannot run as given (a usage error, a refused config).
USAGE_EXIT = 2


class UsageError(ValueError):
    """The command as given cannot run: an unknown config group, option, key or value.
    The command line exits 2 with its message, which names the nearest valid spelling."""


class NotRun(RuntimeError):
    """The job ended without a result: ``what`` stopped it (a "config error" its checks
    found, which exits :data:`USAGE_EXIT`; "failed": an error outside its measuring, its
    runs ended) and ``why``. The Python API raises it; the command line prints it and exits
    with ``exit_status``."""

    def __init__(self, exit_status: int, what: str, why: str):
        super().__init__(f"{what}: {why}")
        self.exit_status, self.what, self.why = exit_status, what, why


def unknown(what: str, given: str, valid: Sequence[str]) -> str:
    """``unknown WHAT``, with the nearest valid spelling when one is near."""
    near = difflib.get_close_matches(given, list(valid), n=1, cutoff=0.5)
    return f"unknown {what}" + (f"; did you mean {near[0]!r}?" if near else "")
