"""The crossover as a surface, on the surface an H200 measured (results/h200/surface-gpu:
the generated GPU pair with and without its draft, prompts of 128, 2048 and 6144 tokens at
1 and 8 streams): its cells are the sweep's comparisons, its rows' crossovers the sweep's,
and it reaches the report's markdown, the terminal and the parent run's artifacts."""

from __future__ import annotations

import dataclasses
import json

import mlflow
import pytest

from specexp.analysis.arms import Selector
from specexp.analysis.report import SweepFacts, SweepReport, compile_sweep_report
from specexp.analysis.results import JobRun, Tag, factors_tag
from specexp.analysis.surface import LaunchVariance, Surface, row_factor, surfaces
from specexp.core.schemas.speculative import SpeculativeConfig
from specexp.core.schemas.stats import StatsConfig
from specexp.core.stats.verdicts import Verdict
from specexp.output.markdown import sweep_description, sweep_markdown
from specexp.output.terminal.screen import console
from specexp.output.terminal.sweep_report import print_surface
from specexp.tracking import publish
from specexp.tracking.store import SWEEP_REPORT, TrackingStore
from tests.conftest import REPO

RECORDED = REPO / "results" / "h200" / "surface-gpu" / "sweep_report.json"


def recorded() -> SweepReport:
    """The recorded report (format 5, before surfaces) with its surfaces found."""
    report = SweepReport.from_json(json.loads(RECORDED.read_text()))
    assert report.crossover_factor is not None and report.baseline is not None
    report.surfaces = surfaces(
        report.arms,
        report.comparisons,
        report.crossovers,
        Selector(report.baseline),
        report.crossover_factor,
        report.confidence,
    )
    return report


def test_the_recorded_surface_is_the_sweeps_comparisons_cell_by_cell():
    report = recorded()
    (surface,) = report.surfaces
    assert (surface.candidate, surface.baseline) == ("speculative=draft", "speculative=none")
    assert (surface.factor, surface.levels_factor) == (
        "workload.prompt_tokens",
        "concurrency.streams",
    )
    assert [row.value for row in surface.rows] == ["128", "2048", "6144"]  # by value, not text
    assert surface.levels == [1, 8]
    by_candidate = {c.candidate: c for c in report.comparisons}
    assert len(surface.cells) == len(by_candidate) == 6
    for value, cell in surface.cells:
        row = by_candidate[cell.candidate]
        assert f"workload.prompt_tokens={value}" in cell.candidate
        assert f"concurrency.streams={cell.level}" in cell.candidate
        assert cell.baseline == row.baseline
        assert (cell.ratio, cell.ci_low, cell.ci_high) == (row.ratio, row.ci_low, row.ci_high)
        assert (cell.verdict, cell.ci_level) == (row.finding, row.ci_level)
        assert cell.within_launch == row.within_launch
        assert (cell.launch_variance == LaunchVariance.left_out) == row.launches_only


def test_the_recorded_cells_and_verdicts():
    """As the job rows of results/h200/surface-gpu/sweep_report.md have them."""
    (surface,) = recorded().surfaces
    cells = {(value, cell.level): cell for value, cell in surface.cells}
    long_and_busy = cells[("6144", 8)]
    assert long_and_busy.ratio == pytest.approx(0.7796, abs=1e-4)
    assert (long_and_busy.ci_low, long_and_busy.ci_high) == pytest.approx((0.6405, 0.9488), 1e-3)
    assert long_and_busy.verdict == Verdict.slower
    assert long_and_busy.launch_variance == LaunchVariance.calibration
    short_and_alone = cells[("128", 1)]
    assert short_and_alone.ratio == pytest.approx(1.1992, abs=1e-4)
    assert short_and_alone.verdict == Verdict.inconclusive
    # One launch each, no calibration that applies: the cell holds for these launches only.
    assert short_and_alone.launch_variance == LaunchVariance.left_out
    assert short_and_alone.within_launch == Verdict.inconclusive
    assert cells[("2048", 8)].launch_variance == LaunchVariance.calibration
    assert cells[("2048", 1)].launch_variance == LaunchVariance.left_out
    assert surface.decided == [("6144", 8)]


def test_each_rows_crossover_is_the_sweeps_own():
    report = recorded()
    (surface,) = report.surfaces
    for row in surface.rows:
        (found,) = [c for c in report.crossovers if c.candidate.endswith(f"={row.value}")]
        assert row.crossover is found
    assert surface.rows[2].crossover is not None
    assert surface.rows[2].crossover.launch_variance_from.startswith("calibration runs")
    assert surface.rows[0].crossover is not None and surface.rows[0].crossover.launches_only


def test_a_sweep_report_compiled_from_its_runs_holds_the_surface():
    """Draft twice as fast alone at 128 tokens, 30% slower at 8 streams of 2048; each value
    a launch's mean, so every cell carries launch-to-launch variance."""
    speed = {("128", 1): 2.0, ("128", 8): 1.2, ("2048", 1): 1.5, ("2048", 8): 0.7}
    runs = []
    for (length, streams), ratio in speed.items():
        for method, mean in (("none", 100.0 * streams), ("draft", 100.0 * streams * ratio)):
            factors = {
                "speculative": method,
                "workload.prompt_tokens": length,
                "concurrency.streams": str(streams),
            }
            values = [mean * (1 + d) for d in (-0.01, 0.0, 0.01, 0.005, -0.005)]
            tags = {Tag.factors: factors_tag(factors), Tag.config_fingerprint: method}
            name = " ".join(f"{k}={v}" for k, v in factors.items())
            runs.append(JobRun.from_store(name, name, "FINISHED", tags, {}, values, values))
    facts = SweepFacts(
        parent_run_id="p",
        engine="llamacpp",
        order="interleaved",
        baseline="speculative=none",
        crossover_factor="concurrency.streams",
        stats=StatsConfig(threshold=0.02),
        speculative={m: SpeculativeConfig(method=m) for m in ("none", "draft")},
    )
    report = compile_sweep_report(facts, runs, [], {})
    (surface,) = report.surfaces
    assert [row.value for row in surface.rows] == ["128", "2048"]
    assert {cell.launch_variance for _, cell in surface.cells} == {LaunchVariance.launches}
    assert surface.decided == [("128", 1), ("128", 8), ("2048", 1), ("2048", 8)]
    verdicts = [cell.verdict for _, cell in surface.cells]
    assert verdicts == [Verdict.faster, Verdict.faster, Verdict.faster, Verdict.slower]
    short, long = (row.crossover for row in surface.rows)
    assert short is not None and short.estimate is None  # pays at both levels
    assert long is not None and long.estimate is not None and 1 < long.estimate < 8


def test_a_sweep_over_concurrency_alone_has_no_surface():
    report = recorded()
    one_length = [a for a in report.arms if a.factors["workload.prompt_tokens"] == "2048"]
    labels = {a.label for a in one_length}
    compared = [c for c in report.comparisons if c.candidate in labels]
    assert len(compared) == 2
    assert (
        surfaces(
            one_length,
            compared,
            report.crossovers,
            Selector("speculative=none"),
            "concurrency.streams",
            0.95,
        )
        == []
    )


def test_the_rows_run_over_prompt_length_first_else_the_other_factor_swept():
    arms = recorded().arms
    # The recorded sweep's arms, with a draft length swept beside the prompt length.
    drafts = [
        dataclasses.replace(a, factors={**a.factors, "speculative.num_draft_tokens": str(k)})
        for a in arms
        for k in (2, 4)
    ]
    assert row_factor(drafts, "concurrency.streams", "speculative") == "workload.prompt_tokens"
    one_length = [d for d in drafts if d.factors["workload.prompt_tokens"] == "128"]
    assert row_factor(one_length, "concurrency.streams", "speculative") == (
        "speculative.num_draft_tokens"
    )


def test_the_surface_is_a_record_that_reads_back_and_so_is_the_report_holding_it():
    report = recorded()
    (surface,) = report.surfaces
    document = json.loads(json.dumps(surface.to_json()))
    assert document["decided"] == [["6144", 8]]
    assert Surface.from_json(document).to_json() == surface.to_json()
    again = SweepReport.from_json(json.loads(json.dumps(report.to_json(), default=float)))
    assert again.to_json() == report.to_json()


def test_the_surface_section_fits_100_columns_in_markdown_and_the_terminal():
    report = recorded()
    text = sweep_markdown(report, "tok_per_s")
    section = text[text.index("\n## Surface\n") :]
    table = [line for line in section.splitlines() if line.startswith("|")]
    assert len(table) == 2 + 6
    assert max(len(line) for line in table) <= 100
    assert "| 6144 | 8 | x0.780 | x0.641..x0.949 | slower | calibration | - |" in table
    assert "| 128 | 1 | x1.199 | x0.660..x2.179 | inconclusive | left out | inconclusive |" in table
    assert "1 of 6 cells decided: prompt_tokens=6144 at streams=8 (slower)" in section
    assert "- prompt_tokens=6144: not shown to pay at streams 1, the lowest level" in section
    assert (
        "- prompt_tokens=128: stops paying at streams 4.2 (95% CI 1.0..beyond 8); holds for "
        "these launches only; noisy at 1, 8: no claim"
    ) in section
    with console.capture() as captured:
        width = console.width
        console.width = 100
        try:
            print_surface(report.surfaces[0])
        finally:
            console.width = width
    printed = captured.get()
    # The table fits; prose lines stay whole (the console soft-wraps them).
    drawn = printed[: printed.index("1 of 6 cells decided")].splitlines()
    assert len(drawn) > 6 and max(len(line) for line in drawn) <= 100
    assert "1 of 6 cells decided" in printed and "x0.641..x0.949" in printed


def test_the_heat_map_and_the_record_are_logged_beside_the_sweep_report(tracking_env):
    """The whole sweep report published on a parent run of a real store: the recorded
    arms' runs stand in as runs of that store."""
    store = TrackingStore(tracking_env["MLFLOW_TRACKING_URI"], "specexp")
    report = recorded()
    parent = store.start_run("sweep", {})
    renamed = {a.run_id: store.start_run(a.label, {}, parent.run_id).run_id for a in report.arms}
    report.arms = [
        dataclasses.replace(a, run=dataclasses.replace(a.run, run_id=renamed[a.run_id]))
        for a in report.arms
    ]
    report.efficiencies = []  # their runs' metrics are not under test here
    description = sweep_description(
        report, view_link="v", run_link=str, plot_link=str, limit=100_000
    )
    assert "**Surface:** speculative=draft against speculative=none" in description
    assert "sweep_report/surface.png" in description
    publish.log_sweep_report(store, parent, report, description)
    client = mlflow.MlflowClient(tracking_env["MLFLOW_TRACKING_URI"])
    logged = {a.path for a in client.list_artifacts(parent.run_id, SWEEP_REPORT)}
    assert {f"{SWEEP_REPORT}/surface.png", f"{SWEEP_REPORT}/surface.json"} <= logged
    path = client.download_artifacts(parent.run_id, f"{SWEEP_REPORT}/surface.json")
    with open(path) as written:
        (document,) = json.load(written)
    assert Surface.from_json(document).to_json() == report.surfaces[0].to_json()
    png = client.download_artifacts(parent.run_id, f"{SWEEP_REPORT}/surface.png")
    with open(png, "rb") as image:
        assert image.read(8) == b"\x89PNG\r\n\x1a\n"
