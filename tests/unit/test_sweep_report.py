"""What the MLflow UI is given to show: the sweep's description, its per-level series, each
job's verdict, and the saved views of the runs table."""

from __future__ import annotations

import json

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

from specexp.analysis import crossover
from specexp.analysis.arms import Selector, baseline_pairs, make_arms
from specexp.analysis.comparisons import compare_arms
from specexp.analysis.report import SweepFacts, SweepReport, compile_sweep_report, server_launches
from specexp.analysis.results import Engaged, JobRun, Metric, RunKind, Tag, factors_tag, flag_tag
from specexp.core.notes import NoteKind
from specexp.core.schemas.speculative import SpeculativeConfig
from specexp.core.schemas.stats import StatsConfig
from specexp.output import plots
from specexp.output.markdown import sweep_description
from specexp.tracking import publish
from specexp.tracking.ui import RESULT_COLUMNS, view_state

# Draft twice as fast at 1 stream, 30% slower at 8: it stops paying in between.
MEANS = {("none", 1): 100.0, ("draft", 1): 200.0, ("none", 8): 400.0, ("draft", 8): 280.0}


def sweep_runs(not_engaged: str = "", launches: bool = False) -> list[JobRun]:
    """The sweep's job runs: single launches (each arm's values its runs), or with
    ``launches`` each value the mean of a launch of its own."""
    runs = []
    for (method, streams), mean in MEANS.items():
        factors = {"speculative": method, "concurrency.streams": str(streams)}
        tags = {Tag.factors: factors_tag(factors), Tag.engaged: Engaged.yes}
        if method == "draft" and streams == 8 and not_engaged:
            tags |= {Tag.not_engaged: not_engaged, Tag.engaged: f"{Engaged.no}: {not_engaged}"}
        values = [mean * (1 + d) for d in (-0.01, 0.0, 0.01, 0.005, -0.005)]
        name = " ".join(f"{k}={v}" for k, v in factors.items())
        tags[Tag.config_fingerprint] = method
        runs.append(
            JobRun.from_store(
                f"{method}{streams}", name, "FINISHED", tags, {}, values, values if launches else []
            )
        )
    return runs


def sweep_arms(not_engaged: str = ""):
    arms, _ = make_arms(sweep_runs(not_engaged), label_tags=[], confidence=0.95, metric="tok_per_s")
    comparisons = compare_arms(
        baseline_pairs(arms, Selector("speculative=none")),
        confidence=0.95,
        threshold=0.02,
        power=0.8,
    )
    return arms, comparisons


def compiled(
    not_engaged: str = "", crossover_factor=None, failed: int = 1, launches: bool = False
) -> SweepReport:
    """The report on the sweep of ``sweep_runs``, compiled as the sweep does, plus ``failed``
    job runs that did not finish."""
    facts = SweepFacts(
        parent_run_id="p",
        engine="vllm",
        order="interleaved",
        baseline="speculative=none",
        crossover_factor=crossover_factor,
        stats=StatsConfig(threshold=0.02),
        speculative={m: SpeculativeConfig(method=m) for m in ("none", "draft")},
    )
    broken = [JobRun.from_store(f"x{i}", "broken", "FAILED", {}, {}, [], []) for i in range(failed)]
    return compile_sweep_report(facts, sweep_runs(not_engaged, launches) + broken, [], {})


def describe(report: SweepReport, limit=8000):
    return sweep_description(
        report,
        view_link="#/experiments/7/runs?viewStateShareKey=sweep-p",
        run_link=lambda run_id: f"#/experiments/7/runs/{run_id}",
        plot_link=lambda path: f"get-artifact?path={path}&run_uuid=p",
        limit=limit,
    )


def test_the_description_leads_with_the_findings_and_links_every_job():
    report = compiled(not_engaged="speculative", crossover_factor="concurrency.streams")
    arms = report.arms
    text = describe(report)
    first = text.splitlines()[0]
    assert first.startswith("**Crossover:**") and "stops paying" in first
    # One launch per arm and level: no setting, and what to run to get one.
    assert "**vllm setting**" not in text
    assert "**Setting:** no switch-off recommended: one launch per arm and level" in text
    assert "stats.launches=3" in text
    # Single launches: what their runs say is shown apart, never as the verdict.
    assert "**Verdicts** against speculative=none: 2 inconclusive" in text
    assert "1 job(s) failed" in text
    assert "](#/experiments/7/runs?viewStateShareKey=sweep-p)" in text
    assert "![crossover](get-artifact?path=crossover/crossover.png&run_uuid=p)" in text
    for arm in arms:
        assert f"[{arm.label}](#/experiments/7/runs/{arm.run_id})" in text
    rows = {line.split("]")[0].lstrip("| ["): line for line in text.splitlines() if "](#/" in line}
    assert "| inconclusive | faster | yes |" in rows["speculative=draft concurrency.streams=1"]
    assert (
        "| inconclusive | slower | NO: speculative |"
        in rows["speculative=draft concurrency.streams=8"]
    )
    assert "| baseline | - | yes |" in rows["speculative=none concurrency.streams=1"]
    assert "NOT ENGAGED: speculative=draft concurrency.streams=8: speculative" in text
    # Findings, then verdicts, then caveats.
    assert text.index("**Crossover:**") < text.index("**Verdicts**") < text.index("**Caveats**")


def test_a_crossover_over_launches_recommends_each_engines_setting():
    text = describe(compiled(crossover_factor="concurrency.streams", launches=True))
    assert text.splitlines()[0].startswith("**Crossover:** speculative=draft stops paying")
    assert "**Switch off from 4**" in text
    rows = {line.split(" | ")[0].lstrip("| "): line for line in text.splitlines()}
    for engine, form in (
        ("vllm", "num_speculative_tokens_per_batch_size"),
        ("trtllm", "draft_len_schedule"),
        ("llamacpp", "servers"),
    ):
        assert form in rows[engine], engine
    assert "EAGLE/EAGLE3 chains" in rows["sglang"]  # a draft model: SGLang takes none


def test_what_holds_for_every_comparison_is_said_once():
    """Both comparisons hold for their launches only and cannot see small effects: the
    report says each once, for both, with the range of what they would need."""
    report = compiled()
    text = describe(report)
    assert text.count("say something of these launches only") == 1
    assert "all 2 comparisons: one launch per arm" in text
    kinds = [c.kind for c in report.caveats]
    assert kinds.count(NoteKind.launches_only) == 1
    shared = next(c for c in report.caveats if c.kind == NoteKind.launches_only)
    assert len(shared.subjects) == 2


def test_the_sweep_report_is_one_value_that_loads_back_from_its_json():
    report = compiled(crossover_factor="concurrency.streams")
    document = json.loads(json.dumps(report.to_json(), default=float))
    again = SweepReport.from_json(document)
    assert again.to_json() == report.to_json()
    assert [c.finding for c in again.comparisons] == [c.finding for c in report.comparisons]
    assert again.failed == 1 and again.crossovers[0].statement == report.crossovers[0].statement
    assert describe(again) == describe(report)
    document["format_version"] = 99
    with pytest.raises(ValueError, match="format 99"):
        SweepReport.from_json(document)


def test_a_description_too_long_for_a_tag_is_cut_at_a_line_and_says_where_the_rest_is():
    text = describe(compiled(), limit=600)
    assert len(text) <= 600
    assert text.endswith("the full report is the artifact sweep_report/sweep_report.md)\n")


class Recorder:
    """A run's log that keeps what it is given."""

    def __init__(self):
        self.metrics: list[tuple[str, float, int]] = []

    def log_metrics(self, metrics, step=0):
        self.metrics += [(name, value, step) for name, value in metrics.items()]


def test_the_parent_gets_one_series_per_curve_with_the_level_as_the_step():
    arms, comparisons = sweep_arms()
    run = Recorder()
    publish.log_levels(run, arms, comparisons, "concurrency.streams")
    series = {(name, step): value for name, value, step in run.metrics}
    assert series[("tok_per_s_mean/speculative-draft", 8)] == arms[3].summary.mean
    assert series[("tok_per_s_mean/speculative-none", 1)] == arms[0].summary.mean
    assert series[("speedup_pct/speculative-draft", 1)] > 90
    low, high = (
        series[("speedup_ci_low_pct/speculative-draft", 8)],
        series[("speedup_ci_high_pct/speculative-draft", 8)],
    )
    assert low < -30 < high < 0
    # Without a factor to step along, each configuration is a series of its own at step 0.
    run = Recorder()
    publish.log_levels(run, arms, comparisons, None)
    assert {step for _, _, step in run.metrics} == {0}
    assert ("speedup_pct/speculative-draft concurrency.streams-8", 0) in {
        (name, step) for name, _, step in run.metrics
    }


def test_a_saved_view_holds_every_field_the_ui_takes_whole():
    state = json.loads(view_state(RESULT_COLUMNS, "tags.`mlflow.parentRunId` = 'p'"))
    assert state["selectedColumns"] == RESULT_COLUMNS
    assert "metrics.`tok_per_s_mean`" in RESULT_COLUMNS and "tags.`verdict`" in RESULT_COLUMNS
    ui_fields = [
        "columnOrder",
        "columnWidths",
        "runsExpanded",
        "runsPinned",
        "runsHidden",
        "runsVisibilityMap",
        "runsHiddenMode",
        "viewMaximized",
        "runListHidden",
        "isAccordionReordered",
        "groupBy",
        "groupsExpanded",
        "globalLineChartConfig",
    ]
    assert all(name in state for name in ui_fields)
    assert state["searchFilter"] == "tags.`mlflow.parentRunId` = 'p'"


def test_the_crossover_plot_shows_its_findings_whole_inside_the_figure():
    arms, _ = sweep_arms()
    found = crossover.analyse(arms, Selector("speculative=none"), "concurrency.streams", 0.95)
    found = found * 3  # three long statements: more than one line holds
    figure = plots.crossover_figure(
        crossover.families(arms, "concurrency.streams"), found, "concurrency.streams"
    )
    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    title = figure.axes[0].title
    assert " ".join(title.get_text().split()) == "; ".join(c.statement for c in found)
    box = title.get_window_extent(canvas.get_renderer())
    assert figure.bbox.x0 <= box.x0 and box.x1 <= figure.bbox.x1
    assert figure.bbox.y0 <= box.y0 and box.y1 <= figure.bbox.y1


def switch_off_report(launches: bool) -> SweepReport:
    """A sweep of no speculation, the draft, and the draft switched off from 8 streams,
    at 1 and 8 streams; each job on a server of its own."""
    means = {"none": (100.0, 400.0), "draft": (200.0, 280.0), "adaptive": (200.0, 400.0)}
    settings = {
        "none": SpeculativeConfig(method="none"),
        "draft": SpeculativeConfig(method="draft"),
        "adaptive": SpeculativeConfig(method="draft", switch_off_at=8),
    }
    runs = []
    for name, by_level in means.items():
        for streams, mean in zip((1, 8), by_level, strict=True):
            factors = {"speculative": name, "concurrency.streams": str(streams)}
            tags = {Tag.factors: factors_tag(factors), Tag.config_fingerprint: name}
            values = [mean * (1 + d) for d in (-0.01, 0.0, 0.01, 0.005, -0.005)]
            runs.append(
                JobRun.from_store(
                    f"{name}{streams}",
                    f"{name} {streams}",
                    "FINISHED",
                    tags,
                    {},
                    values,
                    values if launches else [],
                )
            )
    facts = SweepFacts(
        parent_run_id="p",
        engine="vllm",
        order="interleaved",
        baseline="speculative=none",
        crossover_factor="concurrency.streams",
        stats=StatsConfig(threshold=0.02),
        speculative=settings,
    )
    return compile_sweep_report(facts, runs, [], {})


def test_the_switch_off_check_judges_no_level_from_single_launches():
    (check,) = switch_off_report(launches=False).checks
    assert check.outcomes == [crossover.ONE_LAUNCH_EACH] * 2
    assert "re-run with stats.launches=3" in check.statement
    (over_launches,) = switch_off_report(launches=True).checks
    assert over_launches.outcomes == ["tracks", "tracks"]
    assert over_launches.followed == ["speculative=draft", "speculative=none"]


def test_a_sweeps_server_launches_count_every_launch_of_a_job_measured_launch_by_launch():
    """A sequential sweep's two arms, measured over 3 and 3 launches, and a job that reused
    a server: 6 servers started, not the 2 the jobs that did not reuse one would say."""

    def job(name: str, reused: bool, launches: int) -> JobRun:
        tags = {Tag.server_reused: flag_tag(reused)}
        metrics = {Metric.launches: float(launches)}
        return JobRun(name, name, "FINISHED", RunKind.job, {}, tags, {}, metrics, (1.0, 2.0))

    jobs = [job("none", False, 3), job("draft", False, 3), job("again", True, 1)]
    assert server_launches(jobs) == 6
