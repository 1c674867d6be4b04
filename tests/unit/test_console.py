"""What a person reads: every renderer's text whole (no template left unrendered), tables
that fit 100 columns without cutting a figure, one way of writing an unbounded interval,
and no third-party INFO lines unless asked for."""

from __future__ import annotations

import importlib
import json
import logging
import math
import pkgutil
import re
import time

import numpy as np
import pytest
from hydra.core.utils import JobReturn, JobStatus
from mlflow.environment_variables import MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR
from omegaconf import OmegaConf
from rich.console import Console

from specexp.analysis.capacity import ArmCapacity, CapacityComparison, CapacityVerdict
from specexp.analysis.results import RunStatus, Unit
from specexp.core.capacity import Bracket, Capacity
from specexp.core.measurements import RequestRecord
from specexp.core.sequential import SequentialDesign, SequentialRecord
from specexp.output import terminal
from specexp.output.markdown import comparison_markdown, sweep_markdown
from specexp.output.tables import Rows, capacity_rows, comparison_rows, launches_needed
from specexp.output.terminal.loggers import (
    HYDRA_LAUNCHER_LOGGERS,
    VERBOSE,
    hide_internal_overrides,
    quiet_libraries,
)
from specexp.output.terminal.progress import print_expected, run_progress
from specexp.output.terminal.rendering import rich_table
from specexp.output.terminal.screen import _Console, console, log_traceback, logged_to
from specexp.output.terminal.sweep_report import print_sweep_report
from specexp.sweep.launch import failed_jobs
from specexp.sweep.plan import overrides_for
from specexp.sweep.report import ui_address
from tests import energy_sweep
from tests.conftest import TINY, compose_job
from tests.unit.test_surface import recorded
from tests.unit.test_sweep_plan import planned
from tests.unit.test_sweep_report import compiled, describe

# `{name}` or `{call(`: an f-string's field whose f was lost.
UNRENDERED = re.compile(r"\{[A-Za-z_][A-Za-z0-9_.]*[}(]")


@pytest.fixture
def screen(monkeypatch) -> Console:
    """The terminal as a 100-column screen that keeps what was printed."""
    recording = _Console(width=100, record=True, highlight=False, soft_wrap=True)
    for found in pkgutil.iter_modules(terminal.__path__):
        module = importlib.import_module(f"{terminal.__name__}.{found.name}")
        if hasattr(module, "console"):
            monkeypatch.setattr(module, "console", recording)
    return recording


def report():
    return compiled(not_engaged="speculative", crossover_factor="concurrency.streams")


def test_no_renderer_leaves_a_template_unrendered(screen):
    """The sweep description once printed `{ci_label(report.arms)}` as its header (an f
    lost); every renderer is read here: markdown, the terminal and JSON."""
    swept = report()
    texts = {
        "description": describe(swept),
        "sweep markdown": sweep_markdown(swept, "tok_per_s"),
        "comparison markdown": comparison_markdown(
            swept.arms, swept.comparisons, swept.caveats, "tok_per_s"
        ),
        "json": json.dumps(swept.to_json()),
    }
    print_sweep_report(swept, "MLflow UI: here")
    texts["terminal"] = screen.export_text()
    for name, text in texts.items():
        assert not UNRENDERED.findall(text), name
    assert "95% CI" in texts["description"]  # the header the template stood for


def test_the_surface_and_schedule_sections_leave_no_template_unrendered(screen):
    """The recorded H200 surface (its Surface section, each row's crossover and the engines'
    settings) through every renderer."""
    swept = recorded()
    print_sweep_report(swept, "MLflow UI: here")
    texts = [screen.export_text(), describe(swept), sweep_markdown(swept, "tok_per_s")]
    assert all("surface" in text.lower() for text in texts)
    assert not [UNRENDERED.findall(text) for text in texts if UNRENDERED.findall(text)]


def test_the_energy_section_renders_whole_in_100_columns(screen):
    """Energy's table, its crossover and the disagreement with speed's (tests.energy_sweep)."""
    swept = energy_sweep.simulate(
        np.random.default_rng(0), lambda c: 0.8 * math.exp(0.1 * math.log2(c))
    )
    print_sweep_report(swept, "MLflow UI: here")
    text = screen.export_text()
    assert not UNRENDERED.findall(text) and not UNRENDERED.findall(describe(swept))
    assert "SPEED AND ENERGY DISAGREE" in text and "crossover on energy:" in text
    table_lines = [line for line in text.splitlines() if line[:1] in "┏┃│└┡┗"]
    assert max(map(len, table_lines)) <= 100 and "…" not in text
    assert "less energy per" in text and "more energy per" in text


def test_the_template_check_catches_a_lost_f():
    assert UNRENDERED.findall("| job | {ci_label(report.arms)} |")
    assert UNRENDERED.findall("tok/s {mean}")
    assert not UNRENDERED.findall('{"a": 1} [99.0, 101.0]')


def test_tables_fit_100_columns_and_keep_every_figure_whole(screen):
    """The 13-column comparison once came out as `[99.…` and `inco…` at 100 columns."""
    swept = report()
    print_sweep_report(swept, "MLflow UI: here")
    text = screen.export_text()
    table_lines = [line for line in text.splitlines() if line[:1] in "┏┃│└┡┗"]
    assert table_lines and max(map(len, table_lines)) <= 100
    assert "…" not in text
    words = {line.strip("│┃ ") for line in table_lines}
    shown = " ".join(words)
    for row in comparison_rows(swept.arms, swept.comparisons).rows:
        for cell in row:
            for word in cell.split():
                assert word in shown, word


def capacity(low, high) -> Capacity:
    return Capacity(0.9, 0.95, (), Bracket(None, None), rate=2.0, ci_low=low, ci_high=high)


def test_an_unbounded_interval_is_written_one_way_everywhere():
    """Once `[-inf, inf]` in one report and `[-, unbounded]` in another."""
    assert capacity(None, None).describe() == "2 req/s [unbounded, unbounded]"
    assert capacity(1.5, None).describe() == "2 req/s [1.5, unbounded]"
    arm = ArmCapacity("a", "r", 2.0, None, None, None)
    assert arm.describe() == "2 [unbounded, unbounded]"
    versus = CapacityComparison(arm, arm, 0.95, 1.2, None, 1.5, CapacityVerdict.inconclusive)
    (row,) = capacity_rows([arm], [versus]).rows
    assert "[unbounded, +50.0%]" in row


def test_third_party_info_lines_are_hidden_unless_verbose(monkeypatch):
    monkeypatch.delenv(VERBOSE, raising=False)
    monkeypatch.delenv("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", raising=False)
    quiet_libraries()
    assert not logging.getLogger("mlflow").isEnabledFor(logging.INFO)
    # MLflow's own switch for its "Downloading artifacts" bar, read when it downloads.
    assert MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR.get() is False
    assert not logging.getLogger("alembic.runtime.migration").isEnabledFor(logging.INFO)
    monkeypatch.setenv(VERBOSE, "1")
    quiet_libraries()
    assert logging.getLogger("mlflow").isEnabledFor(logging.INFO)
    monkeypatch.delenv(VERBOSE)
    quiet_libraries()


def test_the_log_gets_the_lines_and_tracebacks_the_terminal_does_not_keep(tmp_path, screen):
    """specexp.log was 0 bytes: the run's lines went to the terminal only."""
    log = tmp_path / "specexp.log"
    with logged_to(log):
        screen.print("[bold]tok/s 12.5[/]")
        screen.log_only("run 1: 12.5 tok/s")
        try:
            raise RuntimeError("the server went away")
        except RuntimeError:
            log_traceback()
    screen.print("after")
    text = log.read_text()
    assert "tok/s 12.5" in text and "run 1: 12.5 tok/s" in text
    assert "Traceback" in text and "RuntimeError: the server went away" in text
    assert "after" not in text and "[bold]" not in text
    assert "run 1" not in screen.export_text()


def test_the_ui_link_of_a_local_store_assumes_no_port():
    """The sweep's UI link once hard-coded http://127.0.0.1:5000/."""
    local = ui_address("sqlite:////tmp/mlruns/mlflow.db")
    assert (
        ":5000" not in local
        and "specexp ui --tracking-uri sqlite:////tmp/mlruns/mlflow.db" in local
    )
    assert (
        ui_address("http://user:secret@mlflow.example:8080")
        == "http://user:***@mlflow.example:8080/"
    )


def test_hydras_job_lines_show_the_jobs_own_overrides_only(caplog):
    """Hydra's job lines once showed `multirun.parent_run_id=...` and the sweep's store."""
    job = planned("speculative=draft", "concurrency.streams=2")
    told = overrides_for(job, "abc123", part=1) + ["tracking.uri='sqlite:///x y.db'"]
    hide_internal_overrides()
    logger = logging.getLogger(HYDRA_LAUNCHER_LOGGERS[0])
    with caplog.at_level(logging.INFO, logger=logger.name):
        logger.info(f"\t#0 : {' '.join(told)}")
    assert caplog.records[-1].getMessage() == "\t#0 : speculative=draft concurrency.streams=2"


def test_a_sweep_names_its_failed_jobs_once_each():
    """A sweep with failed jobs once exited 0 without saying which."""

    def job(label: str, status: JobStatus, value: object) -> JobReturn:
        cfg = OmegaConf.create({"multirun": {"job_label": label}})
        return JobReturn(cfg=cfg, status=status, _return_value=value)

    returns = [
        job("speculative=none", JobStatus.COMPLETED, RunStatus.finished),
        job("speculative=draft", JobStatus.COMPLETED, RunStatus.failed),
        job("speculative=ngram", JobStatus.FAILED, RuntimeError("composing failed")),
        job("speculative=draft", JobStatus.COMPLETED, RunStatus.failed),
    ]
    assert failed_jobs(returns) == ["speculative=draft", "speculative=ngram"]


def test_progress_moves_from_the_first_request_with_its_tok_s(screen):
    """The bar once sat at 0/7 for 3 minutes: it counted runs, not requests."""
    with run_progress(2, requests=4) as bar:
        bar.request_done(
            RequestRecord(
                run=0, stream=0, warmup=False, start_unix=time.time() - 2, output_tokens=32
            )
        )
        (task,) = bar.progress.tasks
        assert (task.completed, task.total) == (1, 8)
        assert re.fullmatch(r"run 0: 1/4 requests, \d+\.\d tok/s", task.description)


def test_the_expected_duration_is_said_before_a_run_with_its_basis(screen):
    """The first run was once announced as "about 40 s" at an assumed 50 tok/s per stream and
    took about 95 s: the default model states the rate it was measured at (21-23 tok/s on
    two cores), and every line says it is an estimate and on what basis."""
    default = compose_job().config  # `specexp run`: Gemma 3 270M, 7 runs of 6 x 48 tokens
    print_expected(default, None)
    unstated = compose_job(*TINY, "model.expected_tok_per_s=null").config
    print_expected(unstated, None)
    print_expected(default, 250.0)
    first, second, third = screen.export_text().splitlines()
    assert first == (
        "expected: about 2 min of measuring, an estimate - 7 runs of 6 request(s) of up to 48 "
        "tokens at 20 tok/s per stream (model.expected_tok_per_s) - plus the server's start"
    )
    assert second.startswith("expected: about 1 s of measuring, an estimate - 2 runs of 1")
    assert "at an assumed 50 tok/s per stream (model.expected_tok_per_s states none)" in second
    assert third == "expected: about 4 min (an earlier run of this configuration took that long)"


def test_an_arm_measured_until_decided_expects_its_least_to_its_most_launches(screen):
    """A sequential comparison's arm once announced its whole budget ("about 72 s ... 84
    runs": 12 launches) for a comparison that was decided after 3."""
    cfg = compose_job(
        *TINY, "stats.launches=12", "multirun.part_runs=5", "stats.warmup_runs=1"
    ).config
    print_expected(cfg, None)
    (line,) = screen.export_text().splitlines()
    assert line.startswith("expected: about ") and " to " in line
    assert "3 to 12 launches (measured until decided) of 6 runs of" in line
    least, most = (int(t) for t in re.findall(r"about (\d+) s to (\d+) s", line)[0])
    assert most == 4 * least


def test_the_expected_rate_is_not_part_of_what_a_run_measures():
    """Stating a model's expected rate changes no fingerprint: earlier runs stay comparable."""
    stated, unstated = compose_job(*TINY), compose_job(*TINY, "model.expected_tok_per_s=null")
    assert stated.config.model.expected_tok_per_s == 300
    assert stated.config_fingerprint() == unstated.config_fingerprint()


def test_the_expected_duration_of_a_capacity_search_names_no_rate(screen):
    """A capacity search's rate is the search's to pick (None in the config): the line once
    raised TypeError formatting it, failing every capacity job before it started. Its runs are
    timed by their arrivals at the search's start rate, never by tok/s: on the H200 it once
    said "about 41 s" (at an assumed 50 tok/s per stream) for an arm that took 4 minutes."""
    cfg = compose_job(*TINY, "concurrency=capacity", "slo=interactive").config
    assert cfg.concurrency.rate is None
    print_expected(cfg, None)
    (line,) = screen.export_text().splitlines()
    assert line.startswith(
        "expected: about 2 min of measuring, an estimate - 2 runs of 24 arrivals, each run timed "
        "at the capacity search's start rate 0.5 req/s"
    )
    assert "tok/s" not in line


def test_an_arms_independent_values_are_counted_in_words():
    """The comparison table once printed "5 launchs"."""
    assert Unit.launch.counted(5) == "5 launches"
    assert Unit.run.counted(1) == "1 run" and Unit.run.counted(3) == "3 runs"


def test_a_sequences_launches_needed_name_the_cap_it_stops_at_when_they_exceed_it():
    design = SequentialDesign(alpha=0.05, threshold=0.02, design_effect=0.02, power=0.8)
    record = SequentialRecord(design, planned_launches=747)
    assert launches_needed(record) == "747 (cap 20)"
    assert launches_needed(SequentialRecord(design, planned_launches=8)) == "8"
    assert launches_needed(SequentialRecord(design)) == "-"


def test_a_table_whose_words_do_not_fit_the_console_overflows_instead_of_failing():
    """A sweep's report raised ValueError (max() of an empty sequence) when no column could
    be narrowed further: the sweep then journaled its report as if the store had failed and
    exited 75 (test_drift's A/A, 5 December)."""
    rows = Rows(["configuration", "verdict"])
    rows.add(["x" * (console.width + 10), "inconclusive"])
    assert len(rich_table("wide", rows).renderables) == 1  # one table, overflowing
