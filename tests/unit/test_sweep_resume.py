"""A sweep resumes what its own directory finished, not what another directory measured
(issue 61: the GPU kit's second sweep directory had its job skipped as "done" because the
first had measured the same configuration): each job directory's run.json names its run,
and multirun.resume_from names another directory to take finished jobs from."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from specexp.analysis.report import SweepFacts, compile_sweep_report
from specexp.analysis.results import JobRun, Tag, factors_tag
from specexp.core.schemas.stats import StatsConfig
from specexp.sweep.plan import Plan, mark_finished, tracked_runs
from specexp.tracking.store import TrackingStore
from tests.conftest import store_env


def job_directory(sweep_dir: Path, number: int, run_id: str) -> None:
    (sweep_dir / str(number)).mkdir(parents=True)
    (sweep_dir / str(number) / "run.json").write_text(json.dumps({"run_id": run_id}))


def finished(store: TrackingStore, fingerprint: str, status: str = "FINISHED") -> str:
    run = store.start_run(fingerprint, {Tag.config_fingerprint: fingerprint})
    run.end(status)
    return run.run_id


def planned(*fingerprints: str) -> Plan:
    jobs = [SimpleNamespace(fingerprint=f, finished_run_id=None) for f in fingerprints]
    return Plan(cast(Any, jobs))


def done(plan: Plan) -> dict[str, Any]:
    return {j.fingerprint: j.finished_run_id for j in plan.jobs}


def test_a_sweep_resumes_its_own_directorys_jobs_and_another_only_when_named(tmp_path):
    store = TrackingStore(store_env(tmp_path)["MLFLOW_TRACKING_URI"], "specexp")
    first, second, new = tmp_path / "first", tmp_path / "second", tmp_path / "new"
    a, b = finished(store, "a"), finished(store, "b")
    killed = finished(store, "c", status="KILLED")
    job_directory(first, 0, a)
    job_directory(first, 1, killed)
    job_directory(second, 0, b)
    (first / "2").mkdir()
    (first / "2" / "run.json").write_text('{"run_')  # cut short by a kill
    assert tracked_runs(first) == [a, killed]

    plan = planned("a", "b", "c")
    mark_finished(plan, store, [first])
    assert done(plan) == {"a": a, "b": None, "c": None}  # b measured elsewhere, c killed
    mark_finished(plan, store, [new])
    assert done(plan) == {"a": None, "b": None, "c": None}  # a new directory starts fresh
    mark_finished(plan, store, [new, second])  # multirun.resume_from=second
    assert done(plan) == {"a": None, "b": b, "c": None}


def test_the_sweeps_own_directory_comes_before_the_one_it_resumes_from(tmp_path):
    store = TrackingStore(store_env(tmp_path)["MLFLOW_TRACKING_URI"], "specexp")
    own, other = finished(store, "a"), finished(store, "a")
    job_directory(tmp_path / "own", 0, own)
    job_directory(tmp_path / "other", 0, other)
    plan = planned("a")
    mark_finished(plan, store, [tmp_path / "own", tmp_path / "other"])
    assert done(plan) == {"a": own}


def test_a_resumed_jobs_run_is_compared_with_the_jobs_measured_now():
    """The job the killed attempt finished (its run under that attempt's parent) and the one
    the resumed sweep measured: one sweep's arms, compared in its report."""

    def run(run_id: str, method: str, parent: str, mean: float) -> JobRun:
        factors = {"speculative": method}
        tags = {Tag.factors: factors_tag(factors), Tag.parent: parent, Tag.stack: "local"}
        values = [mean * (1 + d) for d in (-0.01, 0.0, 0.01)]
        return JobRun.from_store(run_id, f"speculative={method}", "FINISHED", tags, {}, values, [])

    facts = SweepFacts(
        parent_run_id="now",
        engine="llamacpp",
        order="blocked",
        baseline="speculative=none",
        crossover_factor=None,
        stats=StatsConfig(),
        speculative={},
        resumed=["r0"],
    )
    report = compile_sweep_report(
        facts, [run("r1", "draft", "now", 200.0)], [run("r0", "none", "killed", 100.0)], {}
    )
    (compared,) = report.comparisons
    assert (compared.baseline, compared.candidate) == ("speculative=none", "speculative=draft")
