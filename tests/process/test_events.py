"""A real job's events, heard by an observer of the test's own: in the order the design
page gives, and none while a run is in flight but the per-request one (a write there would
land in the timestamps of the streams still running)."""

from __future__ import annotations

import time

from specexp.analysis.results import RunStatus
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
