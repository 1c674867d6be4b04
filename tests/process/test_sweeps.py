"""Multirun on llama.cpp: shared servers, parent and child runs, resume, named sweeps."""

from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest
from mlflow.tracking import MlflowClient

from specexp.analysis.results import Tag
from tests.conftest import (
    SPECEXP,
    TINY,
    is_sweep,
    runs_in,
    server_pids,
    specexp_in_process,
    start_cli,
    sweep_parent,
)


def test_two_server_configs_by_three_levels_launch_two_servers(tmp_path, tracking_env):
    result = specexp_in_process(
        "-m",
        *TINY,
        "speculative=none,draft",
        "concurrency.streams=1,2,3",
        "engine.parallel_slots=3",
        cwd=tmp_path,
        env=tracking_env,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "sweep: 6 jobs, 6 to run, 2 server launch(es)" in result.stdout
    assert result.stdout.count("server ready at") == 2
    assert result.stdout.count("reusing the sweep's server") == 4
    runs = runs_in(tracking_env["MLFLOW_TRACKING_URI"])
    parent = sweep_parent(runs)
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert len(children) == 6 and all(r.info.status == "FINISHED" for r in children)
    assert (
        parent.data.tags["planned_server_launches"] == "2"
        and parent.data.tags[Tag.server_launches] == "2"
    )
    assert sorted(r.data.tags[Tag.server_reused] for r in children).count("false") == 2
    assert {r.data.tags[Tag.server_launch] for r in children} == {"0", "1"}
    assert len({r.data.tags["server_fingerprint"] for r in children}) == 2
    # The sweep report and the crossover analysis land on the parent, failed jobs or not.
    names = {
        a.path
        for a in MlflowClient(tracking_env["MLFLOW_TRACKING_URI"]).list_artifacts(
            parent.info.run_id, "sweep_report"
        )
    }
    assert "sweep_report/sweep_report.md" in names


def test_killed_sweep_is_resumed_with_only_the_missing_jobs(tmp_path, tracking_env):
    # Blocked: whole jobs one after another, so the first finishes while the others are
    # still to run (interleaved, the three would take turns and finish together).
    args = ["-m", *TINY, "stats.measured_runs=6", "multirun.order=blocked", "replicate=0,1,2"]
    # Resumed into the same directory: a sweep resumes what its own directory finished.
    args.append(f"hydra.sweep.dir={tmp_path}/sweep")
    before = server_pids()
    sweep = start_cli(
        "sweep", *args[1:], cwd=tmp_path, env=tracking_env, module=SPECEXP, stderr=subprocess.STDOUT
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        jobs = [r for r in runs_in(tracking_env["MLFLOW_TRACKING_URI"]) if not is_sweep(r)]
        # A job finished and the next one measuring: the signal lands inside a job, never in
        # the gap between two (whose run would not exist yet to be ended KILLED).
        if {"FINISHED", "RUNNING"} <= {r.info.status for r in jobs}:
            break
        time.sleep(0.2)
    sweep.send_signal(signal.SIGTERM)
    output = sweep.communicate(timeout=120)[0]
    assert sweep.returncode != 0
    assert server_pids() - before == set(), "the interrupted sweep left its server running"
    statuses = [r.info.status for r in runs_in(tracking_env["MLFLOW_TRACKING_URI"])]
    assert "KILLED" in statuses, output[-2000:]
    done = len(
        [
            r
            for r in runs_in(tracking_env["MLFLOW_TRACKING_URI"])
            if r.info.status == "FINISHED" and not is_sweep(r)
        ]
    )

    rerun = specexp_in_process(*args, cwd=tmp_path, env=tracking_env)
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    assert f"sweep: 3 jobs, {3 - done} to run" in rerun.stdout
    assert rerun.stdout.count("skipped") == done
    finished = [
        r
        for r in runs_in(tracking_env["MLFLOW_TRACKING_URI"])
        if r.info.status == "FINISHED" and not is_sweep(r)
    ]
    assert sorted(r.data.tags["replicate"] for r in finished) == ["0", "1", "2"]


@pytest.mark.no_engine_server
def test_a_bad_job_stops_the_sweep_before_anything_launches(tmp_path, tracking_env):
    before = server_pids()
    result = specexp_in_process(
        "-m", *TINY, "allreduce_backend=auto,nccl", cwd=tmp_path, env=tracking_env
    )
    assert result.returncode == 2
    assert (
        "allreduce_backend=nccl: allreduce_backend=nccl is not supported by engine=llamacpp"
        in result.stdout
    )
    assert "1 of 2 jobs cannot run; nothing was launched" in result.stdout
    assert server_pids() - before == set()


def test_cpu_crossover_sweep_reports_on_the_parent(tmp_path, tracking_env):
    result = specexp_in_process(
        "-m",
        "+sweep=cpu_crossover",
        "concurrency.streams=1,4",
        "stats.measured_runs=3",
        "workload.max_tokens=64",
        cwd=tmp_path,
        env=tracking_env,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "crossover:" in result.stdout and "recommended switch-off" in result.stdout
    # No NVML here and RAPL unreadable in the container: said, and no energy figure given.
    assert "energy: not measured: no NVML energy counter" in result.stdout
    assert "crossover on energy" not in result.stdout
    runs = runs_in(tracking_env["MLFLOW_TRACKING_URI"])
    parent = sweep_parent(runs)
    assert parent.data.tags[Tag.crossover]
    client = MlflowClient(tracking_env["MLFLOW_TRACKING_URI"])
    names = {a.path for a in client.list_artifacts(parent.info.run_id, "crossover")}
    assert names == {"crossover/crossover.png", "crossover/crossover.json"}
    (analysis,) = json.load(
        open(
            client.download_artifacts(parent.info.run_id, "crossover/crossover.json", str(tmp_path))
        )
    )
    assert analysis["candidate"] == "speculative=draft" and analysis["levels"] == [1, 4]
    threshold = analysis["recommendation"]["threshold"]
    if analysis["unreliable"]:  # noisy levels: named, and nothing recommended
        assert analysis["statement"].startswith("UNRELIABLE") and threshold is None
    assert threshold is None or threshold >= 1
    # The levels of each arm shared a server, with fresh prompts: no job was served
    # another's prompts, every run waited for an idle server, and the client measured
    # from the core the server did not hold.
    jobs = [r for r in runs if not is_sweep(r)]
    assert len(jobs) == 4
    for job in jobs:
        tags = job.data.tags
        assert tags["engaged.caches"] == "engaged", tags["effective.caches"]
        assert tags["effective.caches"] == "no prompt served from earlier requests"
        assert job.data.metrics["busy_start_runs"] == 0
        history = client.get_metric_history(job.info.run_id, "idle_wait_s")
        assert len(history) == 3 and all(0 <= m.value < 30 for m in history)
        assert tags["client_cpus"] != tags["cpus"]


@pytest.mark.no_engine_server
def test_the_plan_says_how_runs_are_ordered_in_time(tmp_path, tracking_env):
    args = ["-m", "speculative=none,draft", "replicate=0,1", "dry_run=true"]
    result = specexp_in_process(*args, cwd=tmp_path, env=tracking_env)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "order: interleaved: 4 job(s) take turns" in result.stdout
    assert result.stdout.count("# engine=llamacpp") == 4  # a dry run prints each job once
    result = specexp_in_process(*args, "multirun.order=blocked", cwd=tmp_path, env=tracking_env)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "order: blocked: each job's runs back to back" in result.stdout
