"""A real job's events, heard by an observer of the test's own: in the order the design
page gives, and none while a run is in flight but the per-request one (a write there would
land in the timestamps of the streams still running)."""

from __future__ import annotations

import time
from typing import Any

from specexp.analysis.results import Artifact, RunStatus
from specexp.core.redaction import redact_env
from specexp.engines.llamacpp import LlamaCppEngine
from specexp.engines.records import LaunchSpec, ServerCommand
from specexp.output.files import FilesObserver
from specexp.run import measure
from specexp.run.events import (
    JobClosed,
    JobEvent,
    JobFinished,
    JobOpened,
    MeasuringStarted,
    Preparing,
    RequestDone,
    RunMeasured,
    ServerReady,
    ServerStarting,
    ServerStopped,
    SettingsReadBack,
)
from specexp.run.job_run import run_job
from tests.conftest import QUICK, compose_job, fake_llama_server


class Heard:
    """Every event, with when it came."""

    def __init__(self) -> None:
        self.events: list[tuple[float, JobEvent]] = []

    def notify(self, event: JobEvent) -> None:
        self.events.append((time.time(), event))


def test_a_job_says_each_step_in_order_and_nothing_but_requests_during_a_run(tmp_path):
    bin_dir = fake_llama_server(tmp_path, "--itl-ms", "5")
    job = compose_job(
        *QUICK,
        "workload.max_tokens=16",
        "stats.warmup_runs=1",
        "stats.measured_runs=3",
        f"stack.bin_dir={bin_dir}",
        "tracking.enabled=false",
    )
    heard = Heard()
    result = run_job(job, tmp_path / "job", lambda job, output_dir: [heard])
    assert result.status == RunStatus.finished, result.error
    kinds = [type(e) for _, e in heard.events if not isinstance(e, RequestDone)]
    opened = kinds.index(JobOpened)
    assert set(kinds[:opened]) <= {Preparing}  # the generated model, checked
    assert kinds[opened:] == [
        JobOpened,
        ServerStarting,
        ServerReady,
        MeasuringStarted,
        *[RunMeasured] * 4,
        SettingsReadBack,
        ServerStopped,
        JobFinished,
        JobClosed,
    ]
    runs = [(r.started_unix, r.started_unix + r.wall_s) for r in result.runs]
    assert len(runs) == 4 and sum(isinstance(e, RequestDone) for _, e in heard.events) >= 4
    during = [
        type(e).__name__
        for at, e in heard.events
        if not isinstance(e, RequestDone) and any(start < at < end for start, end in runs)
    ]
    assert during == []
    assert not any((tmp_path / "job").glob("*.json*")), "no observer wrote anything"


def test_the_command_is_built_once_and_each_launch_takes_it_at_the_one_port_it_leases(
    tmp_path, monkeypatch
):
    """The server's argv was built three times per job (checks, launch, fingerprint) and two
    ports were reserved: now the job builds it once, each launch leases one port and takes
    the command at it, and command.txt is the first launch as launched."""
    built: list[ServerCommand] = []
    leased: list[int] = []
    build, lease = LlamaCppEngine.server_command, measure.lease_port

    def counted_build(engine: LlamaCppEngine, server: Any) -> ServerCommand:
        built.append(build(engine, server))
        return built[-1]

    def counted_lease(*args: Any) -> Any:
        port, held = lease(*args)
        leased.append(port)
        return port, held

    monkeypatch.setattr(LlamaCppEngine, "server_command", counted_build)
    monkeypatch.setattr(measure, "lease_port", counted_lease)
    bin_dir = fake_llama_server(tmp_path)
    job = compose_job(
        *QUICK,
        "workload.max_tokens=8",
        "stats.launches=2",
        "stats.warmup_runs=0",
        "stats.measured_runs=1",
        f"stack.bin_dir={bin_dir}",
        "tracking.enabled=false",
    )
    heard = Heard()
    output_dir = tmp_path / "job"
    result = run_job(job, output_dir, lambda job, output_dir: [FilesObserver(print), heard])
    assert result.status == RunStatus.finished, result.error
    launched = [e.command for _, e in heard.events if isinstance(e, ServerStarting)]
    job.server_fingerprint()  # the MLflow observer's tag, and a shared server's key
    assert len(built) == 1 and len(launched) == 2
    assert [c.argv for c in launched if c] == [job.command.at(port).argv for port in leased]
    first = launched[0]
    assert first is not None
    written = LaunchSpec(first.argv, redact_env(first.env)).shell_line()
    assert (output_dir / Artifact.command).read_text() == written + "\n"
