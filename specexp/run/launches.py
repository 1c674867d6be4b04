"""A job's launches as durable units: each launch measured whole (a job of several launches)
is one line of ``launches.jsonl`` - its runs, its time, how its settings ran - written by the
files observer as the launch ends. A sweep resumed in the job's directory takes back the
launches the killed attempt completed (:func:`completed_launches`) instead of measuring them
again; a launch cut short by the kill has no line and is measured anew."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from specexp.analysis.results import Artifact
from specexp.core.durable import read_json_lines
from specexp.core.measurements import RunResult
from specexp.core.records import History, Record, RecordError, Version
from specexp.engines.records import Setting


@dataclass
class CompletedLaunch(Record):
    """One launch measured whole: a line of ``launches.jsonl``."""

    HISTORY = History(
        "completed launch",
        (
            Version(
                1,
                "a launch measured whole: the job's configuration fingerprint, the launch's "
                "runs (warm-ups included) with where each one's energy was read, its time from "
                "its server's start to its stop, how the job's settings ran by then",
            ),
        ),
    )

    config_fingerprint: str
    launch: int
    wall_s: float
    runs: list[RunResult]
    energy_sources: list[Optional[str]]  # per run; None: its energy was not read
    effective: dict[str, Setting]

    def __post_init__(self) -> None:
        if len(self.energy_sources) != len(self.runs):
            raise ValueError(f"{len(self.energy_sources)} energy sources for {len(self.runs)} runs")


def completed_launches(output_dir: Path, fingerprint: str) -> list[CompletedLaunch]:
    """The launches an earlier attempt of the job configured as ``fingerprint`` completed in
    ``output_dir``, from its first on: a launch of another configuration, or one after a
    launch missing, ends them. None without ``launches.jsonl`` (no launch completed, or an
    older specexp's attempt); its last line cut short by the kill is skipped."""
    path = output_dir / Artifact.launches
    if not path.exists():
        return []
    found: list[CompletedLaunch] = []
    for number, line in enumerate(read_json_lines(path).records, 1):
        try:
            launch = CompletedLaunch.from_json(line)
        except RecordError as exc:
            raise RecordError(f"{path}:{number}: {exc}") from None
        if launch.config_fingerprint != fingerprint or launch.launch != len(found):
            break
        found.append(launch)
    return found
