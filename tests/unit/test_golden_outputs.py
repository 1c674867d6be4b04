"""No behaviour change, proven: what a person reads is byte for byte what it was. Recorded
inputs (tests/unit/golden/*.input.json: what the store gave a sweep's report back, a job's
measured runs) go through the functions the CLI renders with, and their outputs are
compared with the expected files beside them:

- a sweep (`python -m specexp -m ...`'s end): the terminal's sweep report, the artifacts
  sweep_report.md and sweep_report.json, the parent run's description, and every tag and
  metric the report logs on the sweep's runs;
- a job (`python -m specexp`): the terminal's expected duration and summary, and the
  metrics its run logs (a job's run has no description);
- `specexp compare` of two recorded runs: its terminal output.

The terminal is a 100-column console without colour; the plots are stood in for (their
images are not compared, and drawing them takes seconds). After a change meant to change
what is printed, rewrite the expected files, and read their diff before committing it:

    SPECEXP_GOLDEN_WRITE=1 python -m pytest tests/unit/test_golden_outputs.py

The inputs are recorded by tests/unit/golden/record.py."""

from __future__ import annotations

import contextlib
import difflib
import io
import json
import math
import os
import sys
import types
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

import pytest
from rich.console import Console

from specexp import compare_command
from specexp.analysis.report import SweepFacts
from specexp.analysis.results import JobRun, Metric, Tag
from specexp.analysis.summary import summarize_job
from specexp.core.measurements import RunResult
from specexp.core.records import structure, unstructure
from specexp.core.sequential import SequentialComparison
from specexp.output.terminal.job_summary import print_summary
from specexp.output.terminal.progress import print_expected
from specexp.output.terminal.screen import WIDTH, console
from specexp.sweep.report import sweep_report
from specexp.tracking.ui import NOTE
from tests.conftest import compose_job

GOLDEN = Path(__file__).parent / "golden"
WRITE = os.environ.get("SPECEXP_GOLDEN_WRITE") == "1"
SWEEPS = ("sweep_crossover", "sweep_energy", "sweep_capacity", "sweep_cross_stack")
RUN = "run_two_launches"


def check(name: str, produced: str) -> None:
    """``produced`` is the expected file ``name``'s text, or with SPECEXP_GOLDEN_WRITE=1
    becomes it."""
    path = GOLDEN / name
    if WRITE:
        path.write_text(produced, encoding="utf-8")
        return
    expected = path.read_text(encoding="utf-8")
    if produced != expected and not (
        name.endswith(".json") and _same(json.loads(expected), json.loads(produced))
    ):
        diff = difflib.unified_diff(
            expected.splitlines(keepends=True),
            produced.splitlines(keepends=True),
            f"expected {name}",
            "produced",
        )
        pytest.fail(f"{name} changed:\n{''.join(diff)}", pytrace=False)


def _same(expected: Any, produced: Any) -> bool:
    """The same data, a float allowed to differ in its last digits: a sum's rounding depends
    on the CPU's vector width (one ulp apart on two machines of the same suite). What a
    person reads - the terminal, Markdown, every string but a JSON artifact's - is still
    compared byte for byte."""
    if isinstance(expected, str) and isinstance(produced, str) and expected.startswith(("[", "{")):
        with contextlib.suppress(ValueError):
            return _same(json.loads(expected), json.loads(produced))
    if isinstance(expected, float) and isinstance(produced, float):
        return math.isclose(expected, produced, rel_tol=1e-12, abs_tol=1e-300)
    if isinstance(expected, dict) and isinstance(produced, dict):
        return expected.keys() == produced.keys() and all(
            _same(expected[k], produced[k]) for k in expected
        )
    if isinstance(expected, list) and isinstance(produced, list):
        return len(expected) == len(produced) and all(map(_same, expected, produced))
    return type(expected) is type(produced) and expected == produced


def recorded(name: str) -> dict[str, Any]:
    return json.loads((GOLDEN / f"{name}.input.json").read_text())


@pytest.fixture
def screen(monkeypatch) -> Console:
    """The terminal's one console, whoever imported it, as 100 columns without colour that
    keep what was printed."""
    monkeypatch.setattr(console, "file", io.StringIO())
    monkeypatch.setattr(console, "width", WIDTH)
    monkeypatch.setattr(console, "_color_system", None)
    monkeypatch.setattr(console, "record", True)
    console.export_text(clear=True)  # what an earlier test printed
    return console


def _stand_in_plot(*args: Any) -> Path:
    """A plot's file, empty: where the report logs it, under its name."""
    path = next(a for a in reversed(args) if isinstance(a, Path))
    path.write_bytes(b"")
    return path


@pytest.fixture
def no_plots(monkeypatch) -> None:
    """specexp.output.plots with every plot an empty file (the module imports matplotlib)."""
    stand_in = types.ModuleType("specexp.output.plots")
    stand_in.__getattr__ = lambda name: _stand_in_plot  # type: ignore[method-assign]
    monkeypatch.setitem(sys.modules, "specexp.output.plots", stand_in)
    monkeypatch.setattr("specexp.output.plots", stand_in, raising=False)


class LoggedRun:
    """A run of the store that keeps what is logged on it, as the store holds it (in no
    order of the calls: the report logs its baselines' verdicts from a set): its tags, its
    metrics by step, the text of its artifacts (a plot by its name)."""

    def __init__(self, run_id: str, logged: dict[str, Any], artifacts: dict[str, str]):
        self.run_id = run_id
        self.logged = logged
        self.artifacts = artifacts

    def set_tags(self, tags: dict[str, Any]) -> None:
        self.logged.setdefault("tags", {}).update(tags)

    def log_metrics(self, metrics: dict[str, float], step: int = 0) -> None:
        self.logged.setdefault("metrics", {}).setdefault(str(step), {}).update(metrics)

    def log_artifacts(self, paths: Iterable[Path], artifact_path: Optional[str] = None) -> None:
        for path in paths:
            text = "(plot)" if path.suffix == ".png" else path.read_text(encoding="utf-8")
            self.artifacts[f"{artifact_path}/{path.name}"] = text


class RecordedStore:
    """The store as it answered the recorded sweep: its job runs read for each metric."""

    uri = "http://mlflow.example:5000"

    def __init__(self, record: dict[str, Any]):
        self.facts = structure(SweepFacts, record["facts"])
        self.runs = {
            metric: [JobRun.from_json(r) for r in runs]
            for metric, runs in record["job_runs"].items()
        }
        self.configuration = [JobRun.from_json(r) for r in record["configuration_runs"]]
        self.logged: dict[str, dict[str, Any]] = {}
        self.artifacts: dict[str, str] = {}

    def job_runs(
        self,
        *,
        run_ids: Iterable[str] = (),
        parent: Optional[str] = None,
        filter_string: str = "",
        metric: str = Metric.tok_per_s,
    ) -> list[JobRun]:
        assert not filter_string, "the recording holds the sweep's runs, not a search"
        wanted = set(run_ids)
        return [
            r
            for r in self.runs.get(metric, [])
            if (r.run_id in wanted if wanted else r.tags.get(Tag.parent) == parent)
        ]

    def calibration_runs(self, metric: str = Metric.tok_per_s) -> list[JobRun]:
        return []

    def configuration_runs(
        self, runs: Iterable[JobRun], metric: str = Metric.tok_per_s
    ) -> list[JobRun]:
        return list(self.configuration)

    def job_prompts(self, run_ids: Iterable[str]) -> dict[str, Any]:
        return {}

    def sweep_sequences(self, parent_run_id: str) -> Sequence[SequentialComparison]:
        return list(self.facts.sequences) if parent_run_id == self.facts.parent_run_id else []

    def view_link(self, view_id: str) -> str:
        return f"#/experiments/1/runs?viewStateShareKey={view_id}"

    def run_link(self, run_id: str) -> str:
        return f"#/experiments/1/runs/{run_id}"

    def run(self, run_id: str) -> LoggedRun:
        return LoggedRun(run_id, self.logged.setdefault(run_id, {}), self.artifacts)


@pytest.mark.parametrize("name", SWEEPS)
def test_a_sweeps_report_reads_as_recorded(name, screen, no_plots):
    store = RecordedStore(recorded(name))
    parent = store.run(store.facts.parent_run_id)
    sweep_report(store, parent, store.facts)  # type: ignore[arg-type]
    check(f"{name}.console.txt", screen.export_text())
    check(f"{name}.sweep_report.md", store.artifacts.pop("sweep_report/sweep_report.md"))
    check(f"{name}.sweep_report.json", store.artifacts.pop("sweep_report/sweep_report.json"))
    check(f"{name}.description.md", store.logged[parent.run_id]["tags"].pop(NOTE))
    logged = {"runs": store.logged, "artifacts": store.artifacts}
    check(f"{name}.logged.json", json.dumps(logged, indent=1, sort_keys=True) + "\n")


def test_a_jobs_summary_reads_as_recorded(screen):
    record = recorded(RUN)
    cfg = compose_job(*record["overrides"]).config
    runs = [RunResult.from_json(r) for r in record["runs"]]
    summary = summarize_job(
        [r for r in runs if not r.warmup],
        confidence=cfg.stats.confidence,
        cv_warn=cfg.stats.cv_warn,
        idle_timeout_s=cfg.stats.idle_timeout_s,
        accounting=record["accounting"],
        cores=record["cores"],
        greedy=cfg.workload.temperature == 0,
        slo=cfg.slo,
        capacity_search=cfg.concurrency.search is not None,
    )
    print_expected(cfg, None)
    print_summary(cfg, summary, runs)
    check(f"{RUN}.console.txt", screen.export_text())
    logged = {"metrics": dict(summary.metrics), "notes": unstructure(list(summary.notes))}
    check(f"{RUN}.metrics.json", json.dumps(logged, indent=1, sort_keys=True) + "\n")


def test_a_comparison_of_two_runs_reads_as_recorded(screen, monkeypatch):
    store = RecordedStore(recorded("sweep_crossover"))
    monkeypatch.setattr(compare_command, "TrackingStore", lambda *args, **kwargs: store)
    args = compare_command.build_parser().parse_args(
        ["--baseline", "speculative=none", "--no-log", "--run-ids", "none8run", "draft8run"]
    )
    assert compare_command.run(args) == 0
    check("compare_two_runs.console.txt", screen.export_text())
