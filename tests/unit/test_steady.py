"""The steady window and Little's law of an open-loop run, on runs written out by hand."""

from __future__ import annotations

import numpy as np
import pytest

from specexp.analysis.results import Metric, Tag, steady_state_tag, steady_states
from specexp.analysis.summary import run_metrics, summarize_job
from specexp.core.measurements import RequestRecord, RunResult
from specexp.core.notes import NoteKind
from specexp.core.steady import SteadyVerdict, in_flight_area, mser_truncation, steady_state

pytestmark = pytest.mark.unit


def open_loop(latency: list[float], rate: float = 2.0, lag: float = 0.0, run: int = 0) -> RunResult:
    """Uniform arrivals at ``rate``, each with the given latency from its due time."""
    records = [
        RequestRecord(
            run, k, False, 0.0, ok=True, e2e_s=w, output_tokens=4, due_s=k / rate, send_lag_s=lag
        )
        for k, w in enumerate(latency)
    ]
    wall = max(k / rate + w for k, w in enumerate(latency))
    return RunResult(run, False, wall, records, asked_rate=rate)


def test_mser5_cuts_a_warm_up_whole_batches_at_a_time_and_at_most_half():
    settled = 1.0 + 0.01 * np.sin(np.arange(80))
    assert mser_truncation(np.concatenate([np.full(20, 5.0), settled])) == 20
    assert mser_truncation(settled) == 0
    # A trend to the end: never more than half is cut.
    assert mser_truncation(np.arange(100.0)) <= 50
    assert mser_truncation(np.ones(19)) == 0  # under four batches: nothing to choose


def test_in_flight_area_counts_only_the_part_of_each_interval_inside_the_window():
    start, end = np.array([0.0, 1.0, 3.0]), np.array([2.0, 5.0, 3.5])
    assert in_flight_area(start, end, 1.0, 4.0) == pytest.approx(1.0 + 3.0 + 0.5)


def test_a_steady_run_satisfies_littles_law_exactly():
    """Uniform arrivals at 2/s, each 0.5 s: one request in flight, lambda W = 2 x 0.5."""
    state = steady_state(open_loop([0.5] * 60))
    assert state is not None and state.verdict == SteadyVerdict.steady
    assert (state.trimmed_front, state.trimmed_back) == (0, 0)
    assert state.arrival_rate == pytest.approx(2.0)
    assert state.in_flight == pytest.approx(1.0)
    assert state.predicted_in_flight == pytest.approx(1.0)


def test_a_warm_up_is_trimmed_from_the_window():
    state = steady_state(open_loop([3.0] * 10 + [0.5] * 60))
    assert state is not None
    assert state.trimmed_front == 10 and state.start_s == pytest.approx(5.0)
    assert state.latency_s == pytest.approx(0.5)
    # The warm-up's requests still in flight at the window's start count in it (2.5 s
    # each of six): 1.25 in flight against lambda W = 1, its backlog queued before the window.
    assert state.verdict == SteadyVerdict.server_queueing


def test_a_growing_backlog_is_flagged_as_queueing_outside_the_window():
    """Latency grows 0.2 s per arrival (a server at half the rate it is offered): requests
    due late in the window leave long after it, so in flight falls short of lambda W."""
    state = steady_state(open_loop([0.2 * k for k in range(1, 81)]))
    assert state is not None and state.verdict == SteadyVerdict.server_queueing
    assert state.little_ratio < 0.8
    assert not state.ok


def test_a_client_that_sends_late_is_flagged_as_saturated():
    state = steady_state(open_loop([0.5] * 60, lag=0.3))  # 0.3 s late of a 0.5 s gap
    assert state is not None and state.verdict == SteadyVerdict.client_saturated


def test_closed_loop_runs_have_none_and_short_ones_are_not_checked():
    closed = RunResult(0, False, 1.0, [RequestRecord(0, 0, False, 0.0, ok=True, e2e_s=1.0)])
    assert steady_state(closed) is None
    short = steady_state(open_loop([0.5] * 10))
    assert short is not None and short.verdict == SteadyVerdict.too_few
    assert not short.ok and not short.flagged
    assert Metric.steady not in run_metrics(open_loop([0.5] * 10), {})


def test_the_steady_state_is_logged_per_run_and_with_the_job_and_flags_a_note():
    steady, queueing = (
        open_loop([0.5] * 60, run=0),
        open_loop([0.2 * k for k in range(1, 81)], run=1),
    )
    per_run = run_metrics(steady, {})
    assert per_run[Metric.steady] == 1.0
    assert per_run[Metric.in_flight] == pytest.approx(per_run[Metric.in_flight_predicted])
    summary = summarize_job(
        [steady, queueing],
        confidence=0.95,
        cv_warn=0.05,
        idle_timeout_s=30,
        accounting={},
        cores=2,
    )
    assert summary.metrics[Metric.not_steady_runs] == 1.0
    notes = [n for n in summary.notes if n.kind == NoteKind.not_steady]
    assert len(notes) == 1 and "[1]" in notes[0].message
    assert str(SteadyVerdict.server_queueing) in notes[0].message
    tags = {Tag.steady_state: steady_state_tag(summary.steady)}
    assert steady_states(tags) == summary.steady
    assert steady_states({}) == {}
