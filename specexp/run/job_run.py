"""One job end to end: open it, measure it - in one go, or part by part between other
jobs' parts - then summarise and close it, saying each step as an event to the observers
its caller chose (:mod:`specexp.run.events`)."""

from __future__ import annotations

import dataclasses
import os
from contextvars import ContextVar, Token
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

from specexp.analysis import acceptance
from specexp.analysis.results import Metric, RunStatus, position_metric
from specexp.analysis.summary import JobSummary, accounting_totals, summarize_job
from specexp.core.measurements import RunResult
from specexp.core.notes import Note, NoteKind
from specexp.core.schemas.speculative import SpeculativeMethod
from specexp.core.traces import trace_stats
from specexp.host import failure, interrupt
from specexp.host.job import Job
from specexp.run.events import DryRunPlanned, Emitter, JobFailed, JobFinished, JobObserver
from specexp.run.measure import measure_part
from specexp.run.session import JobResult, JobSession, close_session, open_session
from specexp.serving.server import ServerError

# The observers of a job, made when it opens (a job measured part by part opens once).
ObserversFor = Callable[[Job, Path], Sequence[JobObserver]]


class OpenJobs:
    """Jobs measured part by part between other jobs' parts (an interleaved sweep), kept
    open between their parts, by output directory. A sweep owns one for as long as it
    launches jobs (``with OpenJobs() as open_jobs:``); Hydra's launcher calls each job with
    nothing but its config, so the job finds it as the one in force."""

    def __init__(self) -> None:
        self._sessions: dict[Path, JobSession] = {}
        self._token: Optional[Token[Optional[OpenJobs]]] = None

    def __enter__(self) -> OpenJobs:
        self._token = _IN_FORCE.set(self)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._token is not None
        _IN_FORCE.reset(self._token)

    def take(self, output_dir: Path) -> Optional[JobSession]:
        return self._sessions.pop(output_dir, None)

    def keep(self, output_dir: Path, session: JobSession) -> None:
        self._sessions[output_dir] = session

    def holds(self, output_dir: Path) -> bool:
        return output_dir in self._sessions

    def sessions(self) -> list[JobSession]:
        return list(self._sessions.values())

    def finish_all(self) -> None:
        """Summarise and end the jobs kept open whose measuring is over before their last
        part (a sequential comparison that decided early)."""
        while self._sessions:
            session = self._sessions.popitem()[1]
            try:
                _finish(session)
            finally:
                close_session(session)

    def fail(self, session: JobSession, why: str) -> None:
        """End one job kept open as failed, saying ``why`` (its sequential comparison stopped
        for the other arm's failure: its launches are half a comparison, not a result)."""
        for output_dir, held in list(self._sessions.items()):
            if held is session:
                del self._sessions[output_dir]
                session.result.status = RunStatus.failed
                try:
                    _failed(session, "run failed", why, why)
                finally:
                    close_session(session)

    def end_all(self, status: RunStatus) -> None:
        """End the jobs still waiting for their next part (an interrupted or failed sweep)."""
        while self._sessions:
            session = self._sessions.popitem()[1]
            session.result.status = status
            close_session(session)


_IN_FORCE: ContextVar[Optional[OpenJobs]] = ContextVar("open_jobs", default=None)


def run_job(job: Job, output_dir: Path, observers_for: ObserversFor) -> JobResult:
    """Run a job, or with ``multirun.part`` set one part of it (see ``StatsConfig.parts``):
    the first part opens the job (with the observers ``observers_for`` makes), the last one
    summarises and ends it."""
    cfg = job.config
    if cfg.dry_run:
        launch = job.planned_launch()
        emit = Emitter(observers_for(job, output_dir))
        emit(DryRunPlanned(job, launch, job.predicted_resolution(launch)))
        return JobResult(status=RunStatus.dry_run, output_dir=output_dir)
    part, open_jobs = cfg.multirun.part, _IN_FORCE.get()
    if part is not None and open_jobs is None:
        raise RuntimeError(
            "multirun.part is set by an interleaving sweep, which keeps the job open"
        )
    if part:
        assert open_jobs is not None
        session = open_jobs.take(output_dir)
        if session is None:  # it ended in an earlier part, which said why
            return JobResult(status=RunStatus.skipped, output_dir=output_dir)
    else:
        emit = Emitter(observers_for(job, output_dir))
        # A resumed sweep takes back the launches the job's killed attempt completed.
        take_back = part is not None and cfg.multirun.resume
        session = open_session(job, output_dir, emit, take_back)
    parts = range(cfg.stats.parts) if part is None else range(part, part + 1)
    try:
        _measure_parts(session, parts, cfg.multirun.part_runs)
        if parts.stop < cfg.stats.parts:
            assert open_jobs is not None
            open_jobs.keep(output_dir, session)
            return dataclasses.replace(session.result, status=RunStatus.measuring)
        _finish(session)
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM (see __main__): clean up, then stop
        session.result.status, session.result.error = RunStatus.killed, "interrupted"
        raise
    except Exception as exc:
        if interrupt.received() is not None:
            # The interrupt landed in code that made it an error of its own (a transport
            # callback, the event loop): the job was stopped, it did not fail.
            session.result.status, session.result.error = RunStatus.killed, "interrupted"
            raise KeyboardInterrupt(f"signal {interrupt.received()}") from exc
        _failed_with(session, exc)
    finally:
        if not (open_jobs and open_jobs.holds(output_dir)):
            close_session(session)
    return session.result


def _failed_with(session: JobSession, exc: Exception) -> None:
    """The run is marked failed for ``exc``: a server's failure with its log, anything else
    with its traceback in the log file."""
    if isinstance(exc, ServerError):
        _failed(
            session, "server failed", str(exc), exc.reason[:500] or str(exc)[:500], exc.log_tail
        )
    else:
        failure.log_traceback(exc)
        error = f"{type(exc).__name__}: {exc}"
        session.result.exit_status = failure.exit_status(exc, failure.RUN_FAILED)
        _failed(session, "run failed", error, error[:500])


def _measure_parts(session: JobSession, parts: range, part_runs: Optional[int]) -> None:
    """Parts are launches with several launches (``part_runs`` measured runs each, when a
    sequential comparison plans them; none for a launch taken back), else slices of the one
    launch's runs."""
    stats = session.job.config.stats
    if stats.launches > 1:
        for launch_index in parts:
            if launch_index in session.launch_s:  # taken back from an earlier attempt
                continue
            done = sum(not r.warmup for r in session.result.runs)
            runs = part_runs or stats.measured_runs
            measure_part(session, launch_index, range(done, done + runs))
    else:
        measure_part(session, 0, parts)


def _finish(session: JobSession) -> None:
    """Summarise the measured runs, and say so."""
    job, result = session.job, session.result
    cfg, engine = job.config, job.launching
    measured = [r for r in result.runs if not r.warmup]
    summary = summarize_job(
        measured,
        confidence=cfg.stats.confidence,
        cv_warn=cfg.stats.cv_warn,
        idle_timeout_s=cfg.stats.idle_timeout_s,
        accounting=engine.server_accounting(accounting_totals(measured)),
        cores=os.cpu_count() or 1,
        greedy=cfg.workload.temperature == 0,
        slo=cfg.slo,
        capacity_search=cfg.concurrency.search is not None,
    )
    summary, profile = _with_acceptance(job, summary, measured)
    trace = cfg.workload.trace
    result.summary = summary
    session.emit(
        JobFinished(
            summary,
            tuple(result.runs),
            profile,
            trace_stats(trace.replay()).as_dict() if trace is not None else {},
        )
    )
    result.status = RunStatus.finished


def _with_acceptance(
    job: Job, summary: JobSummary, measured: list[RunResult]
) -> tuple[JobSummary, Optional[Mapping[str, Any]]]:
    """A speculative job's acceptance per draft position: its marginal rates and
    per-request length as metrics, runs whose counts fail the acceptance identity as notes,
    and the profile as a document (``speculation_profile.json``)."""
    cfg, engine = job.config, job.launching
    spec = cfg.speculative
    found = (
        acceptance.profile(measured, spec.num_draft_tokens, cfg.stats.confidence)
        if spec.method != SpeculativeMethod.none
        else None
    )
    if found is None:
        return summary, None
    conditions: dict[str, Any] = {
        "engine": engine.name,
        "concurrency": cfg.concurrency.streams,
        "workload": cfg.workload.name,
        "temperature": cfg.workload.temperature,
        "measured_runs": len(measured),
    }
    notes = found.notes()
    metrics = {position_metric(i): r.value for i, r in enumerate(found.marginal)}
    if spec.synthetic_acceptance_length is not None:
        pinned = acceptance.check_pinned(
            found.counts,
            spec.num_draft_tokens,
            spec.synthetic_acceptance_length,
            cfg.stats.confidence,
            engine.pinned_marginals(spec.synthetic_acceptance_length, spec.num_draft_tokens),
        )
        conditions["synthetic_acceptance"] = pinned.describe()
        metrics[Metric.synthetic_acceptance_agrees] = float(pinned.agrees)
        if not pinned.agrees:
            notes.append(Note(NoteKind.synthetic_acceptance, pinned.describe()))
    profile = found.to_json(spec.method, cfg.model.path, spec.draft_model, conditions)
    metrics[Metric.acceptance_identity_failures] = float(
        len(found.failed_runs) + (not found.identity.passed)
    )
    if found.per_request is not None:
        metrics[Metric.acceptance_length_per_request] = found.per_request
    summary = dataclasses.replace(
        summary,
        metrics={**summary.metrics, **metrics},
        notes=summary.notes + tuple(notes),
    )
    return summary, profile


def _failed(session: JobSession, what: str, error: str, reason: str, log_tail: str = "") -> None:
    """The run is marked failed with its reason; what was measured stays on disk."""
    session.result.error = error
    # Neither store nor journal may take it (a full disk under both): ended all the same.
    try:
        session.emit(JobFailed(what, error, reason, log_tail))
    except Exception as exc:
        failure.log_traceback(exc)
