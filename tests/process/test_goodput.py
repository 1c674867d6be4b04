"""Open-loop load, goodput and the capacity search against test servers of known latency
(tests/fake_server.py): its pacing sets every request's latency, and with ``--at-once 1`` it
serves one request at a time, so each one's wait in its queue is known too.

The assertions hold however loaded the machine is: a server cannot be faster than its
pacing, so what it makes slow is certain; what a slow client could add is bounded by margins
of hundreds of milliseconds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from specexp.analysis.results import Metric, Tag, capacity_points
from specexp.core.schemas.slo import SloConfig
from specexp.core.slo import run_goodput
from tests.conftest import (
    QUICK,
    fake_llama_server,
    is_sweep,
    runs_in,
    specexp_in_process,
    sweep_parent,
)
from tests.process.test_client import fake_server, run_against


def test_open_loop_arrivals_keep_their_schedule_while_the_server_queues_them():
    """20 requests/s to a server that takes 80 ms each, one at a time: a closed-loop client
    would wait and see none of the queue; the open-loop one sends each on time and counts
    the wait in its latency (no coordinated omission)."""
    process, url = fake_server("--itl-ms", "10", "--at-once", "1")
    try:
        result = run_against(
            url,
            "concurrency=poisson",
            "concurrency.arrival=uniform",
            "concurrency.rate=20",
            "concurrency.arrivals=24",
            "workload.max_tokens=8",
        )
    finally:
        process.kill()
        process.wait()
    records = sorted(result.records, key=lambda r: r.due_s)
    assert result.ok and len(records) == 24
    assert [r.due_s for r in records] == [k / 20 for k in range(24)]
    assert result.asked_rate == 20 and result.scheduled_rate == 20
    assert 0.8 < result.achieved_rate / 20 < 1.25
    # Each request was sent before the one ahead of it in the queue had finished...
    sent = [r.due_s + r.send_lag_s for r in records]
    done = [r.due_s + r.e2e_s for r in records]
    assert all(sent[k] < done[k - 1] for k in range(2, 24))
    # ...and its latency counts its wait: the k-th can start only after k requests of at
    # least 80 ms, due k/20 s after the first.
    for k, r in enumerate(records):
        assert r.ttft_s >= k * (0.08 - 0.05) - 0.005
    assert records[-1].ttft_s > 0.6


def test_an_overloaded_open_loop_run_counts_its_stalled_requests_as_misses():
    """One slot, held forever by a request that stalls: every later arrival waits in the
    queue until the stall timeout. In an open loop that is overload - each such request has
    missed every SLO - not a fault that ends the job."""
    process, url = fake_server("--itl-ms", "5", "--at-once", "1", "--stall-after", "2")
    try:
        result = run_against(
            url,
            "concurrency=poisson",
            "concurrency.rate=10",
            "concurrency.arrivals=4",
            "workload.max_tokens=8",
            "workload.stall_timeout_s=1",
        )
    finally:
        process.kill()
        process.wait()
    assert all(r.stalled and not r.ok for r in result.records) and len(result.records) == 4
    assert result.faults == []
    goodput = run_goodput(result, SloConfig(name="test", e2e_s=60))
    assert goodput is not None and goodput.good == 0


def test_goodput_against_a_server_of_known_pacing_is_exact():
    """Six requests back to back, each paced 10 ms per token slower than the one before
    (10, 20 ... 60 ms): a mean-ITL SLO of 35 ms is met by exactly the first three."""
    process, url = fake_server("--itl-ms", "10", "--slowdown-per-request", "1")
    try:
        result = run_against(url, "concurrency.requests_per_stream=6", "workload.max_tokens=8")
    finally:
        process.kill()
        process.wait()
    goodput = run_goodput(result, SloConfig(name="test", itl_s=0.035))
    assert goodput is not None and (goodput.requests, goodput.good) == (6, 3)
    assert goodput.attainment == 0.5
    assert goodput.requests_per_s == 3 / result.wall_s
    assert goodput.tok_per_s == 3 * 8 / result.wall_s
    # Its end-to-end latency says the same of a 200 ms SLO (8 tokens of 20 ms: 160 ms).
    ended = run_goodput(result, SloConfig(name="test", e2e_s=0.2))
    assert ended is not None and ended.good == 2


def test_a_capacity_search_finds_the_rate_a_one_slot_server_takes(tmp_path, tracking_env):
    """A server that serves one request of 80 ms at a time, uniform arrivals, and a TTFT
    SLO of 300 ms at 90%: below 12.5 requests/s nothing waits; above it the k-th request
    waits k times the excess, so that 22 of 24 meet the SLO up to ~15 requests/s and no
    more than 10 of 24 at 20. Two identical arms, compared in the sweep's report.

    A loaded machine only slows the server: its requests take longer than 80 ms, so the
    capacity falls and never rises. The assertions hold for requests of up to ~125 ms (8
    requests/s still passes) and at any slowness above 20 requests/s; a slowed server can
    fail 12 requests/s (CI saw it), so nothing is asserted between 8 and 20."""
    bin_dir = fake_llama_server(tmp_path, "--itl-ms", "10", "--at-once", "1")
    result = specexp_in_process(
        "-m",
        *QUICK,
        f"stack.bin_dir={bin_dir}",
        "concurrency=capacity",
        "concurrency.arrival=uniform",
        # From 8/s, not 4 or 2: the doubling still brackets the capacity (8, 16), and a
        # job's runs take ~13 s of arrivals instead of 19 (24 arrivals at 4/s took 6 s, and
        # a rate that far below the capacity adds nothing to the fit).
        "concurrency.search.start_rate=8",
        "workload.max_tokens=8",
        "slo=interactive",
        "slo.ttft_s=0.3",
        "slo.itl_s=null",
        "stats.warmup_runs=0",
        # The rates the search measured from 4/s, less the 4: 8, 16, three bisecting, and one
        # beside the fitted capacity, inside the bracket.
        "stats.measured_runs=6",
        "replicate=0,1",
        "multirun.baseline='replicate=0'",
        cwd=tmp_path,
        env=tracking_env,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    uri = tracking_env["MLFLOW_TRACKING_URI"]
    runs = runs_in(uri)
    jobs = [r for r in runs if not is_sweep(r)]
    assert len(jobs) == 2
    for job in jobs:
        metrics = job.data.metrics
        assert Metric.capacity_rps in metrics, result.stdout[-4000:]
        assert 8 < metrics[Metric.capacity_rps] < 20, metrics
        low, high = (
            metrics.get(Metric.capacity_ci_low_rps),
            metrics.get(Metric.capacity_ci_high_rps),
        )
        assert low is None or low <= metrics[Metric.capacity_rps] <= high
        searched = capacity_points(job.data.tags)
        # Doubled until it failed; each point at the rate the client offered (sent).
        assert [p.rate for p in searched[:2]] == pytest.approx([8, 16], rel=0.15)
        assert all(p.attainment >= 0.9 for p in searched if p.rate <= 9)
        assert all(p.attainment < 0.9 for p in searched if p.rate >= 20)
        # 8/s, met by every request, stopped sending once that was decided (18 met in a row),
        # short of its 24 arrivals.
        assert searched[0].requests < 24, searched
        assert Tag.capacity_points in job.data.tags
    parent = sweep_parent(runs)
    client = MlflowClient(uri)
    report_path = client.download_artifacts(
        parent.info.run_id, "sweep_report/sweep_report.json", str(tmp_path / "report")
    )
    report = json.loads(Path(report_path).read_text())
    assert report["arms"] == [] and report["comparisons"] == []  # no tok/s verdict on a search
    (compared,) = report["capacities"]
    # Its interval brackets the ratio, or is unbounded (None) where the fit cannot bound it: a
    # run whose server fell behind counts no request as good, so the attainment curve can be
    # a clean step that a logistic fit separates perfectly.
    ratio, low, high = compared["ratio"], compared["ci_low"], compared["ci_high"]
    assert ratio is not None
    assert (low is None or low <= ratio) and (high is None or ratio <= high)
    assert len(report["capacity_arms"]) == 2
    # What the report fits is printed and in the sweep's description, not only in the store.
    for said in (result.stdout, parent.data.tags["mlflow.note.content"]):
        assert all(column in said for column in ("C1 s", "C2 ms", "completed", "knee")), said
    assert "No finished runs" not in parent.data.tags["mlflow.note.content"]
    # No tok/s pooled over runs at different rates: no mean, CV warning or outlier.
    assert "CV" not in result.stdout and "outlier" not in result.stdout
    plots = {a.path for a in client.list_artifacts(parent.info.run_id, "goodput")}
    assert plots == {"goodput/attainment.png", "goodput/latency_curve.png"}
    # Each arm's runs as a rate curve, with its knee and latency model where they fit.
    assert all(len(arm["curve"]) == 6 for arm in report["capacity_arms"])
    assert "Capacity under the SLO" in parent.data.tags["mlflow.note.content"]
    assert "capacity under the SLO" in result.stdout


@pytest.mark.load_tolerant
def test_a_capacity_search_goes_on_past_a_rate_that_kills_its_server(tmp_path, tracking_env):
    """A test server of 80 ms requests that aborts (SIGABRT, after an assertion line on
    stderr, as llama.cpp does) when a third request is in flight: uniform arrivals at 8 and
    16/s keep at most two in flight, 32/s three (from the third arrival on: 12 a rate are
    plenty). The rate that kills it is measured once more on a new server, and a failed
    point when that one dies too, each death said in one line naming the process, its
    signal, the log's reason and the log; the search goes on and finds a capacity. A
    loaded machine slows the server, so it dies at a lower rate, never at none: the search
    doubles to its 64/s bound before it gives up (capacity_gpu's draft arm died at 13.5
    req/s and ended its job)."""
    bin_dir = fake_llama_server(tmp_path, "--itl-ms", "10", "--abort-above", "2")
    result = specexp_in_process(
        *QUICK,
        f"stack.bin_dir={bin_dir}",
        "concurrency=capacity",
        "concurrency.arrival=uniform",
        "concurrency.arrivals=12",
        "concurrency.search.start_rate=8",
        "concurrency.search.max_rate=64",
        "workload.max_tokens=8",
        "slo=interactive",
        "slo.ttft_s=0.3",
        "slo.itl_s=null",
        "stats.warmup_runs=0",
        "stats.measured_runs=6",
        cwd=tmp_path,
        env=tracking_env,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    died = [line for line in output.splitlines() if line.startswith("server died: ")]
    assert died, output[-4000:]
    assert all(
        "llama-server (pid " in line
        and "was killed by SIGABRT during run" in line
        and "GGML_ASSERT(in_flight <= 2) failed" in line
        for line in died
    ), died
    # One line each, naming the log; the log's own lines stay in the log.
    assert all("(log: " in line and "server.log" in line for line in died), died
    assert sum("GGML_ASSERT" in line for line in output.splitlines()) == len(died)
    # A rate's first death is measured once more on a new server; only a second one there
    # counts it as failed.
    first = sum("measured once more on a new server" in line for line in died)
    second = sum("it died at this rate before: the rate counts as failed" in line for line in died)
    assert first + second == len(died) and first >= 1
    (job,) = runs_in(tracking_env["MLFLOW_TRACKING_URI"])
    assert job.info.status == "FINISHED"
    searched = capacity_points(job.data.tags)
    # Every run of the budget measured; a first death counted only once its rate died again.
    assert len(searched) == 6 - (first - second)
    assert sum(p.attainment < 0.9 for p in searched) >= 2 * second
    assert Metric.capacity_rps in job.data.metrics
    history = MlflowClient(tracking_env["MLFLOW_TRACKING_URI"]).get_metric_history
    failed_steps = {m.step for m in history(job.info.run_id, Metric.failed_requests)}
    measured_steps = {m.step for m in history(job.info.run_id, Metric.tok_per_s)}
    assert len(failed_steps) >= len(died) and not failed_steps & measured_steps
