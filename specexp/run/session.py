"""A job being measured: its files, tracking run, result so far and server, from opening
(checks, files, tracking run) to closing (server stopped, logs redacted and logged, run
ended). Measured in one go, or part by part between other jobs' parts."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from specexp.analysis.results import Artifact, RunStatus, Tag
from specexp.analysis.summary import JobSummary
from specexp.core.measurements import RunResult
from specexp.core.schemas import ConfigError
from specexp.core.tinymodels import ensure_pair
from specexp.core.trainedmodels import ModelPackageError, ensure_packaged, ensure_self_draft
from specexp.engines.records import LaunchSpec, Setting
from specexp.engines.stack import host_cpus
from specexp.host.job import Job
from specexp.host.leases import check_pool, host_gpus
from specexp.output import failure, terminal
from specexp.run.tracked import (
    TrackedRun,
    earlier_duration_s,
    log_stack,
    redact_file,
    start_tracking,
    write_job_files,
)
from specexp.serving.server import ServerProcess, port_in_use
from specexp.tracking.store import uri_in_force, uri_problem


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
    files: dict[Artifact, Path]
    tracker: Optional[TrackedRun]
    result: JobResult
    log_path: Path
    server_logs: set[Path]  # a sweep's shared server writes to its first job's log
    effective: dict[str, Setting] = field(default_factory=dict)
    # The job's own server while its runs go on (a single launch measured part by part).
    server: Optional[ServerProcess] = None


def check_prerequisites(job: Job, launch: LaunchSpec) -> None:
    """What the job needs before anything is written: its model files (generated ones made),
    the server's executable or credentials, enough GPUs and cores on this host."""
    cfg, engine = job.config, job.engine
    # A fixed port already taken is refused before anything is written or tracked (a
    # sweep's shared server holds its own port between its jobs).
    port, host = cfg.engine.port, cfg.engine.host
    alone = cfg.multirun.server_launch is None
    if port and alone and not cfg.engine.url and port_in_use(host, port):
        raise ConfigError(
            f"engine.port={port} on {host} is already in use: choose another, or 0 for a free one"
        )
    if cfg.model.generate is not None:
        with terminal.status(f"generating model {cfg.model.name} (cached after the first time)"):
            ensure_pair(cfg.model.generate, engine.model_format)
    try:
        # The self-draft's target: the packaged file (model.path is the draft's own when
        # model.serve_draft), else model.path.
        target = cfg.model.path
        if cfg.model.package is not None:
            with terminal.status(f"checking model {cfg.model.name} (assembled once, SHA-256)"):
                target = str(ensure_packaged(cfg.model.package))
        # Written only for a job that loads the draft (not for speculative=none).
        draft = cfg.model.draft_path
        if (
            cfg.model.self_draft_layers is not None
            and target
            and draft
            and str(draft) in engine.local_files(job.server)
        ):
            with terminal.status(
                f"writing the self-draft: {cfg.model.name}'s first {cfg.model.self_draft_layers} "
                "blocks (cached after the first time)"
            ):
                ensure_self_draft(Path(target), cfg.model.self_draft_layers, Path(draft))
    except (ModelPackageError, ValueError) as exc:
        raise ConfigError(str(exc)) from None
    missing = [p for p in engine.local_files(job.server) if not Path(p).is_file()]
    if missing:
        raise ConfigError(
            f"model file not found: {', '.join(missing)}; check model.path / model.draft_path"
        )
    uri_error = uri_problem(uri_in_force(cfg.tracking.uri)[0]) if cfg.tracking.enabled else None
    if uri_error:
        raise ConfigError(uri_error)
    if cfg.engine.url:
        job.request_headers()  # its key must be there before anything is tracked
    elif not os.access(launch.argv[0], os.X_OK):
        raise ConfigError(
            f"{launch.argv[0]} (stack {cfg.stack.name}) not found or not executable: "
            "create the stack's environment, or set stack.python / stack.bin_dir"
        )
    if cfg.engine.gpus and not cfg.engine.url and "CUDA_VISIBLE_DEVICES" not in launch.env:
        check_pool(host_gpus(cfg.host.gpus), cfg.engine.gpus)
    cores = engine.cpu_cores(job.server)
    if not cfg.engine.url and cores:
        check_pool(host_cpus(cfg.host.cpus), cores, "cpu")


def set_aside_earlier_attempt(output_dir: Path) -> Optional[Path]:
    """The files an earlier attempt of this job left in ``output_dir`` (it was killed, and
    a resumed sweep runs it again in its place), moved whole into ``attempt-N/`` there: never
    written over or appended to. Where they went, if anywhere."""
    earlier = [output_dir / a for a in Artifact if (output_dir / a).exists()]
    if not earlier:
        return None
    number = 1
    while (output_dir / f"attempt-{number}").exists():
        number += 1
    aside = output_dir / f"attempt-{number}"
    aside.mkdir()
    for path in earlier:
        path.rename(aside / path.name)
    return aside


def open_session(job: Job, launch: LaunchSpec, output_dir: Path) -> JobSession:
    """Check what the job needs, write its files and start its tracked run."""
    output_dir.mkdir(parents=True, exist_ok=True)
    check_prerequisites(job, launch)
    terminal.print_expected(job.config, earlier_duration_s(job))
    aside = set_aside_earlier_attempt(output_dir)
    if aside:
        terminal.console.print(f"an earlier attempt's files in {output_dir} are kept in {aside}")
    files = write_job_files(job, launch, output_dir)
    tracker = start_tracking(job, output_dir)
    result = JobResult(
        status=RunStatus.failed, run_id=tracker.run_id if tracker else None, output_dir=output_dir
    )
    log_path = output_dir / Artifact.server_log
    session = JobSession(job, files, tracker, result, log_path, {log_path})
    if tracker:
        try:
            log_stack(job, tracker, output_dir)
        except BaseException:
            close_session(session)
            raise
    return session


def stop_own_server(session: JobSession) -> None:
    server, session.server = session.server, None
    assert server is not None
    server.stop()
    if session.tracker and server.started_at:
        session.tracker.set_tags(
            {
                Tag.server_started_at: f"{server.started_at:.3f}",
                Tag.server_stopped_at: f"{server.stopped_at:.3f}",
            }
        )


def close_session(session: JobSession) -> None:
    """Stop the job's own server if it still runs, log its files, end its run: each step
    tried whatever the one before did (a full disk fails the redaction, not the run's end);
    the first error raised after."""
    tracker = session.tracker
    steps = [
        *([lambda: stop_own_server(session)] if session.server is not None else []),
        *[lambda log=log: redact_file(log) for log in session.server_logs],
        *(
            [
                lambda: tracker.log_artifacts([*session.files.values(), *session.server_logs]),
                lambda: tracker.end(session.result.status),
            ]
            if tracker
            else []
        ),
    ]
    errors = []
    for step in steps:
        try:
            step()
        except Exception as exc:
            errors.append(exc)
    if errors:
        raise errors[0]
