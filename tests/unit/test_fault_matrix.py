"""Issue 45's fault matrix, the cells that need no server: the store down at each step of a
job, a kill while `specexp.upload` replays a journal, and a kill while a sweep publishes its
report - each checked for nothing lost, nothing duplicated and nothing left RUNNING after
the next command. A job here is its calls on its tracked run, in the order specexp's job
makes them (start_tracking, then warm-up, measured runs, summary, artifacts, end);
tests/process/test_faults.py runs the real job against a store killed between measured
runs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Optional

import pytest
from mlflow.tracking import MlflowClient

from specexp import cli
from specexp.analysis.report import SweepFacts
from specexp.analysis.results import Artifact, Metric, RunStatus, Tag
from specexp.core.schemas.stats import StatsConfig
from specexp.output.terminal.screen import console
from specexp.sweep import observer, report
from specexp.tracking import observer as tracked
from specexp.tracking.journal import OfflineRun
from specexp.tracking.observer import TrackedRun, start_tracking
from specexp.tracking.store import TrackingStore
from tests.conftest import REPO, compose_job, store_env
from tests.unit.test_durability import dead_owner

# The steps of a job at which the store can go down, as the job makes its calls.
JOB_STEPS = ("start", "warm-up", "measured", "mid-run", "end")


def runs(uri: str) -> list[Any]:
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("specexp")
    return client.search_runs([experiment.experiment_id]) if experiment else []


def contents(uri: str, run: Any) -> dict[str, Any]:
    """What a run holds, times left out: every metric's whole history, params (the store's
    URI aside: each test has its own), tags (the journal's id aside: only an uploaded new
    run has one), artifacts, status."""
    client = MlflowClient(uri)
    return {
        "status": run.info.status,
        "params": {k: v for k, v in run.data.params.items() if k != "tracking.uri"},
        "tags": {k: v for k, v in run.data.tags.items() if k != Tag.journal},
        "metrics": {
            key: sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, key))
            for key in run.data.metrics
        },
        "artifacts": sorted(a.path for a in client.list_artifacts(run.info.run_id)),
    }


def run_job(job_dir: Path, uri: str, before: Callable[[str], None]) -> TrackedRun:
    """A job's calls on its run, ``before(step)`` called as each step begins."""
    job_dir.mkdir()
    before("start")
    job = compose_job("dry_run=true", f"tracking.uri={uri}")
    tracker = start_tracking(job, job_dir, console.print)
    assert tracker is not None
    before("warm-up")
    tracker.set_tags({"stack.engine": "llama.cpp"})
    tracker.log_metrics({Metric.server_ready_s: 1.5}, step=0)
    before("measured")
    tracker.log_metrics({Metric.tok_per_s: 10.0}, step=0)
    before("mid-run")
    tracker.log_metrics({Metric.tok_per_s: 11.0}, step=1)
    (job_dir / Artifact.requests).write_text('{"ok": true}\n')
    before("end")
    tracker.log_metrics({Metric.tok_per_s_mean: 10.5})
    tracker.set_tags({Tag.engaged: "yes"})
    tracker.log_artifacts([job_dir / Artifact.requests])
    tracker.end(RunStatus.finished)
    return tracker


class Store:
    """Makes the store go down (every call raises), or take calls and lose the replies."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.down, self.replies_lost = False, False
        for name in ("create_run", "log_batch", "log_artifact", "set_terminated"):
            monkeypatch.setattr(MlflowClient, name, self._wrap(getattr(MlflowClient, name)))

    def _wrap(self, call: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            if self.down:
                raise ConnectionError("store down")
            result = call(*args, **kwargs)
            if self.replies_lost:
                raise ConnectionError("connection reset (the store took the call)")
            return result

        return wrapped


@pytest.fixture(scope="module")
def gone() -> str:
    return dead_owner()


@pytest.fixture
def killed_job(monkeypatch, gone) -> None:
    """The job's run owned by a process that is gone by the upload, as a job's is: the
    upload's first step ends the run KILLED, and the journal's replay takes that back."""
    monkeypatch.setattr(tracked.owner, "this_process", lambda: gone)


@pytest.fixture
def reference(tmp_path_factory, killed_job) -> dict[str, Any]:
    """The run a job makes with its store up all along."""
    directory = tmp_path_factory.mktemp("reference")
    uri = store_env(directory)["MLFLOW_TRACKING_URI"]
    run_job(directory / "job", uri, lambda step: None)
    (run,) = runs(uri)
    return contents(uri, run)


@pytest.mark.parametrize(
    "step, replies_lost",
    # A run the store created whose reply was lost is not the job's (see the Limits).
    [(step, False) for step in JOB_STEPS] + [(step, True) for step in JOB_STEPS[1:]],
    ids=[f"{step}-down" for step in JOB_STEPS] + [f"{s}-reply-lost" for s in JOB_STEPS[1:]],
)
def test_a_store_down_at_any_step_of_a_job_loses_nothing_and_upload_restores_the_run(
    tmp_path, monkeypatch, capsys, killed_job, reference, step, replies_lost
):
    """The store goes down as ``step`` begins (or takes that step's first call and loses
    the reply): the job completes, its journal holds every call from there on, and the
    upload makes the store's run what it would have been had the store stayed up - one run,
    every metric point once, FINISHED, no failure said (the job's process, gone by then,
    had the run ended KILLED by the upload's first step)."""
    uri = store_env(tmp_path)["MLFLOW_TRACKING_URI"]
    store = Store(monkeypatch)

    def fail(now: str) -> None:
        if now == step:
            store.down, store.replies_lost = not replies_lost, replies_lost

    tracker = run_job(tmp_path / "job", uri, fail)
    assert "MLflow store" in capsys.readouterr().out  # said, with the upload command
    store.down = store.replies_lost = False
    journal = tmp_path / "job" / Artifact.offline_journal
    assert journal.exists() and tracker is not None
    assert cli.main(["upload", str(tmp_path / "job")]) == 0
    (run,) = runs(uri)
    assert contents(uri, run) == reference
    assert not journal.exists()


def upload_killed_at(job_dir: Path, uri: str, call: str) -> None:
    """``specexp upload`` killed (SIGKILL) as it makes ``call`` on the run it replays into."""
    script = (
        "import os, signal, sys\n"
        "from specexp import cli\n"
        "from specexp.tracking.store import RunLog\n"
        "def killed(*args, **kwargs): os.kill(os.getpid(), signal.SIGKILL)\n"
        f"setattr(RunLog, {call!r}, killed)\n"
        "cli.main(['upload', *sys.argv[1:]])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(job_dir), "--tracking-uri", uri],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == -9, done.stderr.decode()[-2000:]


def offline_job(job_dir: Path, owner: str, reference_uri: Optional[str] = None) -> Path:
    """A job measured with its store down: its journal, whole; uploaded into
    ``reference_uri`` too when given (a copy of the directory, untouched)."""
    job_dir.mkdir()
    run = OfflineRun(
        job_dir / Artifact.offline_journal,
        "sqlite:///unused.db",
        "specexp",
        "unreachable",
        "job",
        {Tag.kind: "job", Tag.process: owner},
    )
    run.log_params({"model": "tiny"})
    for step, value in enumerate([10.0, 11.0, 12.0]):
        run.log_metrics({Metric.tok_per_s: value}, step=step)
    (job_dir / Artifact.requests).write_text('{"ok": true}\n')
    run.log_artifacts([job_dir / Artifact.requests])
    run.set_tags({Tag.engaged: "yes"})
    run.end(RunStatus.finished)
    if reference_uri:
        copy = shutil.copytree(job_dir, job_dir.with_name("reference-job"))
        assert cli.main(["upload", str(copy), "--tracking-uri", reference_uri]) == 0
    return job_dir


@pytest.mark.parametrize("call", ["log_metrics", "end"])
def test_an_upload_killed_mid_replay_and_run_again_completes_the_one_run(tmp_path, call):
    """Issue 45: an upload killed after it created the run made a second run when run
    again. Killed (SIGKILL) as it replays ``call``, the run is ended KILLED by the next
    command; the upload run again completes that same run: one run, FINISHED, each
    metric point once, as an upload that was never killed leaves it."""
    (tmp_path / "ref").mkdir()
    reference_uri = store_env(tmp_path / "ref")["MLFLOW_TRACKING_URI"]
    uri = store_env(tmp_path)["MLFLOW_TRACKING_URI"]
    job_dir = offline_job(tmp_path / "job", dead_owner(), reference_uri)
    upload_killed_at(job_dir, uri, call)
    (killed,) = runs(uri)
    assert (job_dir / Artifact.offline_journal).exists()
    assert TrackingStore(uri, "specexp").end_abandoned() == [killed.info.run_id]
    assert cli.main(["upload", str(job_dir), "--tracking-uri", uri]) == 0
    (run,) = runs(uri)
    (expected,) = runs(reference_uri)
    assert run.info.run_id == killed.info.run_id
    assert contents(uri, run) == contents(reference_uri, expected)
    assert run.data.tags[Tag.journal] and Tag.failure not in run.data.tags


SWEEP_KILLED_WHILE_PUBLISHING = """
import os, signal, sys
from pathlib import Path
from specexp.sweep import observer, report
from specexp.tracking.store import TrackingStore
from tests.unit.test_fault_matrix import facts, publish_half_then

uri, sweep_dir, parent_id = sys.argv[1:]
store = TrackingStore(uri, "specexp")
report.sweep_report = publish_half_then(lambda: os.kill(os.getpid(), signal.SIGKILL))
observer.publish_end(store, store.run(parent_id), facts(parent_id), "FINISHED", True, Path(sweep_dir), print)
"""


def facts(parent_run_id: str) -> SweepFacts:
    return SweepFacts(
        parent_run_id=parent_run_id,
        engine="llamacpp",
        order="interleaved",
        baseline=None,
        crossover_factor=None,
        stats=StatsConfig(),
        speculative={},
    )


def publish_half_then(stop: Callable[[], None]) -> Callable[..., None]:
    """Stands in for the report's publishing (its compilation is tested elsewhere): logs a
    metric on the parent and each child, calls ``stop`` part-way, then the description."""

    def publish(store: TrackingStore, parent: Any, facts: SweepFacts) -> None:
        parent.log_metrics({"jobs_compared": 2.0})
        children = f"tags.`mlflow.parentRunId` = '{parent.run_id}'"
        for child in store.client.search_runs([store.experiment_id], children):
            store.run(child.info.run_id).log_metrics({Metric.speedup_pct: 12.5})
        stop()
        parent.set_tags({"mlflow.note.content": "the report"})

    return publish


@pytest.mark.parametrize("next_command", ["upload", "resumed-sweep"])
def test_a_sweep_killed_while_publishing_its_report_loses_and_doubles_nothing(
    tmp_path, monkeypatch, next_command
):
    """Issue 45: a sweep killed (SIGKILL) while it published its report left its parent
    RUNNING and the report lost. Journaled before publishing, it is published by the next
    upload, or by the sweep resumed in the same directory, on the same parent: FINISHED,
    nothing RUNNING, each metric point once, the journal not published twice."""
    uri = store_env(tmp_path)["MLFLOW_TRACKING_URI"]
    store = TrackingStore(uri, "specexp")
    owner = dead_owner()
    parent = store.start_run("sweep", {Tag.process: owner})
    child = store.start_run("job", {Tag.process: owner}, parent_run_id=parent.run_id)
    child.end(RunStatus.finished)
    sweep_dir = tmp_path / "sweep"
    sweep_dir.mkdir()
    killed = subprocess.run(
        [sys.executable, "-c", SWEEP_KILLED_WHILE_PUBLISHING, uri, str(sweep_dir), parent.run_id],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        timeout=120,
    )
    assert killed.returncode == -9, killed.stderr.decode()[-2000:]
    journal = sweep_dir / Artifact.report_journal
    assert journal.exists()
    assert store.end_abandoned() == [parent.run_id]  # the next command: nothing RUNNING

    monkeypatch.setattr(report, "sweep_report", publish_half_then(lambda: None))
    if next_command == "upload":
        assert cli.main(["upload", str(sweep_dir), "--tracking-uri", uri]) == 0
    else:
        observer.publish_left_report(store, sweep_dir, print)
    assert not journal.exists()
    assert (
        cli.main(["upload", str(sweep_dir), "--tracking-uri", uri]) == 2
    )  # nothing left to publish
    published = store.client.get_run(parent.run_id)
    assert published.info.status == RunStatus.finished and Tag.failure not in published.data.tags
    assert published.data.tags["mlflow.note.content"] == "the report"
    for run_id, key in [(parent.run_id, "jobs_compared"), (child.run_id, Metric.speedup_pct)]:
        assert len(store.client.get_metric_history(run_id, key)) == 1
    assert {r.info.status for r in runs(uri)} == {RunStatus.finished}


def test_a_left_report_the_resumed_sweep_cannot_publish_is_kept_where_upload_finds_it(
    tmp_path, monkeypatch, capsys
):
    """The store failing as a resumed sweep publishes the report an earlier run left: the
    sweep goes on, the journal is moved out of the way of this run's own (which would
    replace it) into a folder `specexp.upload SWEEP_DIR` searches, and published from there."""
    uri = store_env(tmp_path)["MLFLOW_TRACKING_URI"]
    store = TrackingStore(uri, "specexp")
    parent = store.start_run("sweep", {Tag.process: dead_owner()})
    sweep_dir = tmp_path / "sweep"
    sweep_dir.mkdir()
    report.journal_sweep_end(sweep_dir, store, facts(parent.run_id), "FINISHED", True, 1)

    def down(*args: Any) -> None:
        raise ConnectionError("store down")

    monkeypatch.setattr(report, "sweep_report", down)
    observer.publish_left_report(store, sweep_dir, print)
    assert "could not be published" in capsys.readouterr().out
    assert not (sweep_dir / Artifact.report_journal).exists()
    (kept,) = sweep_dir.glob(f"unpublished-*/{Artifact.report_journal}")

    monkeypatch.setattr(report, "sweep_report", publish_half_then(lambda: None))
    assert cli.main(["upload", str(sweep_dir), "--tracking-uri", uri]) == 0
    assert store.client.get_run(parent.run_id).info.status == RunStatus.finished
    assert not kept.exists()
