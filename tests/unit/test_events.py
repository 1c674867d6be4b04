"""A job's events and the files observer: each file written once, from what actually ran,
and a run's requests appended whole when the run has ended."""

from __future__ import annotations

import json
import signal
from types import SimpleNamespace

import pytest

from specexp.analysis.results import Artifact, RunStatus
from specexp.core.measurements import RequestRecord, RunResult
from specexp.engines.records import LaunchSpec
from specexp.host import interrupt
from specexp.output.files import FilesObserver
from specexp.run import job_run
from specexp.run.events import Emitter, JobFailed, JobOpened, RunMeasured, ServerStarting
from specexp.run.session import JobResult
from specexp.serving.server import ServerError
from tests.conftest import QUICK, compose_job


def _starting(tmp_path, port: int) -> ServerStarting:
    command = LaunchSpec(["llama-server", "--port", str(port)], {"TOKEN": "x"})
    return ServerStarting(
        "", "llamacpp", "127.0.0.1", f"http://127.0.0.1:{port}", tmp_path, command
    )


def test_the_command_is_written_once_from_the_servers_real_launch(tmp_path):
    """command.txt was written twice, first from a planned launch with a port of its own."""
    job = compose_job("dry_run=true")
    said: list[str] = []
    emit = Emitter([FilesObserver(said.append)])
    emit(JobOpened(job, tmp_path))
    assert not (tmp_path / Artifact.command).exists()  # nothing launched yet
    emit(_starting(tmp_path, 41001))
    emit(_starting(tmp_path, 41002))  # a second launch of the same job
    command = (tmp_path / Artifact.command).read_text()
    assert "--port 41001" in command and "41002" not in command
    assert {Artifact.config, Artifact.environment} <= {p.name for p in tmp_path.iterdir()}
    assert said == []


def test_a_runs_requests_are_appended_whole_when_it_has_ended(tmp_path):
    job = compose_job("dry_run=true")
    emit = Emitter([FilesObserver(print)])
    emit(JobOpened(job, tmp_path))
    for run in range(2):
        records = [
            RequestRecord(run=run, stream=s, warmup=False, start_unix=1.0, ok=True)
            for s in range(3)
        ]
        result = RunResult(run=run, warmup=False, wall_s=1.0, records=records, counter_deltas={})
        emit(RunMeasured(result, {}, None))
        lines = (tmp_path / Artifact.requests).read_text().splitlines()
        assert [json.loads(line)["run"] for line in lines] == [
            r for r in range(run + 1) for _ in range(3)
        ]


def test_an_earlier_attempts_files_are_set_aside_when_the_job_opens(tmp_path):
    (tmp_path / Artifact.requests).write_text("earlier\n")
    said: list[str] = []
    Emitter([FilesObserver(said.append)])(JobOpened(compose_job("dry_run=true"), tmp_path))
    assert (tmp_path / "attempt-1" / Artifact.requests).read_text() == "earlier\n"
    assert not (tmp_path / Artifact.requests).exists() and "attempt-1" in said[0]


@pytest.mark.parametrize(
    "error", [RuntimeError("Event loop stopped before Future completed"), ServerError("gone")]
)
def test_a_job_stopped_by_a_signal_that_became_an_error_ends_killed_not_failed(
    tmp_path, monkeypatch, error
):
    """Stopping a parallel sweep sends its jobs SIGINT; where the interrupt lands in code that
    makes it an error of its own, the job asks what was received: KILLED, and the interrupt
    goes on up (once seen as FAILED under load). Without a signal the same error fails it."""
    job = compose_job(*QUICK)
    ended: list[JobFailed] = []
    session = SimpleNamespace(
        result=JobResult(status=RunStatus.measuring, output_dir=tmp_path), emit=ended.append
    )

    def stopped(*args):
        raise error

    monkeypatch.setattr(job_run, "open_session", lambda *args: session)
    monkeypatch.setattr(job_run, "close_session", lambda s: None)
    monkeypatch.setattr(job_run, "_measure_parts", stopped)
    monkeypatch.setattr(interrupt, "_received", [])
    result = job_run.run_job(job, tmp_path, lambda job, directory: [])
    assert result.status != RunStatus.killed and [type(e) for e in ended] == [JobFailed]
    ended.clear()
    interrupt.remember(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        job_run.run_job(job, tmp_path, lambda job, directory: [])
    assert session.result.status == RunStatus.killed and ended == []
