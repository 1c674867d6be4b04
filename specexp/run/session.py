"""A job being measured: its result so far, its server and the observers that hear it,
from opening (checks, then :class:`JobOpened`) to closing (server stopped, then
:class:`JobClosed`). Measured in one go, or part by part between other jobs' parts."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from specexp.analysis.results import Artifact, RunStatus
from specexp.analysis.summary import JobSummary
from specexp.core.durable import release_space, reserve_space
from specexp.core.measurements import RunResult
from specexp.core.schemas.checks import ConfigError
from specexp.core.tinymodels import ensure_pair
from specexp.core.trainedmodels import ModelPackageError, ensure_packaged, ensure_self_draft
from specexp.engines.records import Setting
from specexp.engines.stack import host_cpus
from specexp.host import failure
from specexp.host.job import Job
from specexp.host.leases import check_pool, host_gpus
from specexp.run.events import (
    JobClosed,
    JobEmitter,
    JobOpened,
    LaunchesTakenBack,
    LaunchMeasured,
    Preparing,
    RunMeasured,
    ServerStopped,
    SettingsReadBack,
)
from specexp.run.launches import CompletedLaunch, completed_launches
from specexp.serving.server import ServerProcess, port_in_use


@dataclass
class JobResult:
    status: RunStatus
    run_id: Optional[str] = None
    summary: Optional[JobSummary] = None
    runs: list[RunResult] = field(default_factory=list)
    error: Optional[str] = None
    output_dir: Optional[Path] = None
    exit_status: int = failure.RUN_FAILED  # a single run's, when it failed


@dataclass
class JobSession:
    """A job being measured: in one go, or part by part between other jobs' parts (an
    interleaved sweep), staying open in between."""

    job: Job
    emit: JobEmitter
    result: JobResult
    log_path: Path
    server_logs: set[Path]  # a sweep's shared server writes to its first job's log
    effective: dict[str, Setting] = field(default_factory=dict)
    # The job's own server while its runs go on (a single launch measured part by part).
    server: Optional[ServerProcess] = None
    # Each launch measured whole, or taken back: its time from its server's start to its stop.
    launch_s: dict[int, float] = field(default_factory=dict)


def check_prerequisites(job: Job, emit: JobEmitter) -> None:
    """What the job needs before anything is written: its model files (generated ones made),
    the server's executable or credentials, enough GPUs and cores on this host."""
    _check_port(job)
    _ensure_models(job, emit)
    cfg, engine = job.config, job.launching
    missing = [p for p in engine.local_files(job.server) if not Path(p).is_file()]
    if missing:
        raise ConfigError(
            f"model file not found: {', '.join(missing)}; check model.path / model.draft_path"
        )
    if cfg.engine.url:
        job.request_headers()  # its key must be there before anything is tracked
    else:
        _check_host(job)


def _check_port(job: Job) -> None:
    """A fixed port already taken is refused before anything is written or tracked (a
    sweep's shared server holds its own port between its jobs)."""
    cfg = job.config
    port, host = cfg.engine.port, cfg.engine.host
    alone = cfg.multirun.server_launch is None
    if port and alone and not cfg.engine.url and port_in_use(host, port):
        raise ConfigError(
            f"engine.port={port} on {host} is already in use: choose another, or 0 for a free one"
        )


def _ensure_models(job: Job, emit: JobEmitter) -> None:
    """A generated pair made, a packaged model assembled and checked, a self-draft written
    (only for a job that loads the draft, not for speculative=none)."""
    model = job.config.model
    if model.generate is not None:
        emit(Preparing(f"generating model {model.name} (cached after the first time)"))
        ensure_pair(model.generate, job.launching.model_format)
    try:
        # The self-draft's target: the packaged file (model.path is the draft's own when
        # model.serve_draft), else model.path.
        target = model.path
        if model.package is not None:
            emit(Preparing(f"checking model {model.name} (assembled once, SHA-256)"))
            target = str(ensure_packaged(model.package))
        draft = model.draft_path
        if (
            model.self_draft_layers is not None
            and target
            and draft
            and str(draft) in job.launching.local_files(job.server)
        ):
            emit(
                Preparing(
                    f"writing the self-draft: {model.name}'s first {model.self_draft_layers} "
                    "blocks (cached after the first time)"
                )
            )
            ensure_self_draft(Path(target), model.self_draft_layers, Path(draft))
    except (ModelPackageError, ValueError) as exc:
        raise ConfigError(str(exc)) from None


def _check_host(job: Job) -> None:
    """The server's executable, and enough GPUs and cores on this host."""
    cfg, engine, command = job.config, job.launching, job.command
    if not os.access(command.program, os.X_OK):
        raise ConfigError(
            f"{command.program} (stack {cfg.stack.name}) not found or not executable: "
            "create the stack's environment, or set stack.python / stack.bin_dir"
        )
    if cfg.engine.gpus and "CUDA_VISIBLE_DEVICES" not in command.env:
        check_pool(host_gpus(cfg.host.gpus), cfg.engine.gpus)
    cores = engine.cpu_cores(job.server)
    if cores:
        check_pool(host_cpus(cfg.host.cpus), cores, "cpu")


def open_session(
    job: Job, output_dir: Path, emit: JobEmitter, take_back: bool = False
) -> JobSession:
    """Check what the job needs, then open it: its observers make its files and tracked run.
    With ``take_back`` (a resumed sweep), the launches an earlier attempt completed in
    ``output_dir`` are the job's own, read before its observers set that attempt aside."""
    output_dir.mkdir(parents=True, exist_ok=True)
    check_prerequisites(job, emit)
    earlier = completed_launches(output_dir, job.config_fingerprint()) if take_back else []
    log_path = output_dir / Artifact.server_log
    result = JobResult(status=RunStatus.failed, output_dir=output_dir)
    session = JobSession(job, emit, result, log_path, {log_path})
    try:
        reserve_space(output_dir)
        emit(JobOpened(job, output_dir))
        if earlier:
            _take_back(session, earlier)
    except BaseException:
        close_session(session)
        raise
    return session


def _take_back(session: JobSession, launches: list[CompletedLaunch]) -> None:
    """Launches an earlier attempt completed, the session's as if measured now, and said
    again as they were first (this attempt's files and run then hold every launch)."""
    emit, engine = session.emit, session.job.launching
    emit(LaunchesTakenBack(len(launches)))
    for launch in launches:
        for run, energy_source in zip(launch.runs, launch.energy_sources, strict=True):
            session.result.runs.append(run)
            emit(RunMeasured(run, engine.server_accounting(run.accounting_deltas), energy_source))
        session.effective.update(launch.effective)
        emit(SettingsReadBack(dict(session.effective)))
        session.launch_s[launch.launch] = launch.wall_s
        measured = tuple(r for r in launch.runs if not r.warmup)
        emit(LaunchMeasured(launch.launch, measured, launch.wall_s))


def stop_own_server(session: JobSession) -> None:
    server, session.server = session.server, None
    assert server is not None
    server.stop()
    if server.started_at and server.stopped_at:
        session.emit(ServerStopped(server.started_at, server.stopped_at))


def close_session(session: JobSession) -> None:
    """Stop the job's own server if it still runs, then say the job is closed (its observers
    log its files and end its run) whatever the stop did, then give back the space it set
    aside; the first error raised after."""
    errors = []
    if session.server is not None:
        try:
            stop_own_server(session)
        except Exception as exc:
            errors.append(exc)
    try:
        session.emit(JobClosed(session.result.status, tuple(sorted(session.server_logs))))
    except Exception as exc:
        errors.append(exc)
    if session.result.output_dir is not None:
        release_space(session.result.output_dir)
    if errors:
        raise errors[0]
