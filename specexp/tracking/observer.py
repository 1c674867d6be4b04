"""The MLflow observer: the only writer of a job's tags, params, metrics and artifacts. It
opens the job's run (in the store, or an offline journal when the store cannot be reached
or fails mid-run), tags what the job is and what ran, logs each measured run, launch and
the summary as they come, and ends the run when the job closes."""

from __future__ import annotations

import json
import os
import platform
import socket
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Protocol

from rich.markup import escape

from specexp.analysis.results import (
    STACK,
    STACK_VERSION,
    Artifact,
    Metric,
    RunKind,
    RunStatus,
    ServerDeath,
    Tag,
    capacity_points_tag,
    effective_tags,
    factor_tags,
    factors_tag,
    flag_tag,
    launch_metric,
    rate_curve_tag,
    server_deaths_tag,
    steady_state_tag,
)
from specexp.analysis.summary import run_metrics
from specexp.core.durable import write_atomic
from specexp.core.redaction import redact_text
from specexp.core.schemas.multirun import JobOrder
from specexp.core.slo import run_goodput
from specexp.host import capture, owner
from specexp.host.job import Job
from specexp.host.leases import command_output
from specexp.output.files import JOB_FILES, RUN_FILE, redact_file, redacted_config
from specexp.run.events import (
    JobClosed,
    JobEvent,
    JobFailed,
    JobFinished,
    JobOpened,
    LaunchMeasured,
    MeasuringStarted,
    RunMeasured,
    ServerDied,
    ServerReady,
    ServerStopped,
    SettingsReadBack,
)
from specexp.tracking.address import uri_in_force
from specexp.tracking.journal import FailoverRun, OfflineRun
from specexp.tracking.store import MAX_TAG, TrackingStore, flatten, stored_values


class TrackedRun(Protocol):
    """What a job needs of its tracking run (a run in the store, one that fails over to a
    journal, or a journal alone)."""

    run_id: str
    uri: str

    def log_params(self, params: dict[str, Any]) -> None: ...
    def log_metrics(self, metrics: dict[str, float], step: int = 0) -> None: ...
    def set_tags(self, tags: dict[str, Any]) -> None: ...
    def log_artifacts(self, paths: Iterable[Path], artifact_path: Optional[str] = None) -> None: ...
    def end(self, status: str = RunStatus.finished) -> None: ...


def git_commit() -> str:
    out = command_output(["git", "rev-parse", "HEAD"], 10, Path(__file__).resolve().parent)
    return (out or "").strip() or "unknown"


def run_tags(job: Job) -> dict[str, str]:
    cfg, engine = job.config, job.engine
    return {
        Tag.kind: RunKind.job,
        Tag.process: owner.this_process(),
        Tag.engine: engine.name,
        Tag.engine_version: engine.version(job.server)[0] or "unknown",
        Tag.stack: cfg.stack.name,
        Tag.model: cfg.model.name,
        Tag.attention_backend: cfg.attention_backend.name,
        Tag.allreduce_backend: cfg.allreduce_backend.name,
        Tag.speculative: cfg.speculative.method,
        Tag.concurrency: str(cfg.concurrency.streams),
        Tag.workload: cfg.workload.name,
        Tag.replicate: str(cfg.replicate),
        Tag.git_commit: git_commit(),
        Tag.host: socket.gethostname(),
        Tag.platform: platform.platform(),
        **capture.hardware(),
        **{f"{STACK_VERSION}{k}": str(v) for k, v in cfg.stack.versions.items()},
        **({Tag.reference_point: cfg.reference_point} if cfg.reference_point else {}),
        Tag.config_fingerprint: job.config_fingerprint(),
        Tag.server_fingerprint: job.server_fingerprint(),
        **(
            {Tag.server_launch: str(cfg.multirun.server_launch)}
            if cfg.multirun.server_launch is not None
            else {}
        ),
        **({Tag.factors: factors_tag(job.factors())} if cfg.multirun.factors else {}),
        **factor_tags(job.factors()),
        Tag.order: JobOrder.blocked if cfg.multirun.part is None else JobOrder.interleaved,
    }


def run_name(job: Job) -> str:
    cfg = job.config
    return (
        cfg.tracking.run_name
        or cfg.multirun.job_label
        or f"{job.engine.name}-{cfg.model.name}-{cfg.speculative.method}-c{cfg.concurrency.streams}"
    )


def _upload_hint(output_dir: Path) -> str:
    return f"  python -m specexp.upload {output_dir} [--tracking-uri URI]"


def _online(
    job: Job, output_dir: Path, name: str, tags: dict[str, str], say: Callable[[str], None]
) -> TrackedRun:
    """A run in the store, which goes on in a journal if the store fails mid-run."""
    cfg = job.config
    store = TrackingStore(cfg.tracking.uri, cfg.tracking.experiment)
    uri = redact_text(store.uri)
    journal = output_dir / Artifact.offline_journal

    def failed_over(reason: str) -> None:
        say(
            f"[bold yellow]MLflow store failed mid-run[/] ({uri}: {escape(reason[:200])}): "
            f"the rest of this run goes to {journal}; complete it later with:\n"
            + _upload_hint(output_dir)
        )

    store.end_abandoned()
    run = store.start_run(name, tags, parent_run_id=cfg.multirun.parent_run_id)
    return FailoverRun(run, journal, failed_over)


def _offline(
    job: Job,
    output_dir: Path,
    name: str,
    tags: dict[str, str],
    exc: Exception,
    say: Callable[[str], None],
) -> TrackedRun:
    """A journal of the run, to upload later: the store could not be reached."""
    cfg = job.config
    uri = redact_text(
        cfg.tracking.uri or os.environ.get("MLFLOW_TRACKING_URI") or "the default store"
    )
    problem = (
        "MLflow is not installed here"
        if isinstance(exc, ModuleNotFoundError) and exc.name == "mlflow"
        else "MLflow store unreachable"
    )
    say(
        f"[bold yellow]{problem}[/] ({uri}: "
        f"{escape(redact_text(str(exc).splitlines()[0][:200]))}). "
        f"Measurements stay in {output_dir}; upload them later with:\n" + _upload_hint(output_dir)
    )
    return OfflineRun(
        output_dir / Artifact.offline_journal,
        uri,
        cfg.tracking.experiment,
        redact_text(str(exc)[:500]),
        name,
        tags,
        cfg.multirun.parent_run_id,
    )


def earlier_duration_s(job: Job) -> Optional[float]:
    """How long the newest finished run of the job's configuration took (None: there is
    none, tracking is off, or the store cannot say)."""
    cfg = job.config
    if not cfg.tracking.enabled:
        return None
    try:
        store = TrackingStore(cfg.tracking.uri, cfg.tracking.experiment, create=False)
        return store.finished_duration_s(job.config_fingerprint())
    except Exception:  # no store yet, or one unreachable: the estimate falls back on the config
        return None


def start_tracking(job: Job, output_dir: Path, say: Callable[[str], None]) -> Optional[TrackedRun]:
    """The job's tracking run with its tags and params, or None with tracking off."""
    cfg = job.config
    if not cfg.tracking.enabled:
        return None
    name, tags = run_name(job), run_tags(job)
    try:
        tracker = _online(job, output_dir, name, tags, say)
    except Exception as exc:  # any failure to reach the store: keep measuring, upload later
        tracker = _offline(job, output_dir, name, tags, exc, say)
    tracker.log_params(flatten(redacted_config(cfg)))
    say(f"MLflow run {tracker.run_id} in {redact_text(tracker.uri)}")
    return tracker


def log_stack(job: Job, tracker: TrackedRun, output_dir: Path) -> None:
    url = job.config.engine.url
    # A server specexp did not start runs on a stack it cannot see: nothing is guessed.
    info = stored_values({"external_server": url} if url else capture.stack(job.server, job.engine))
    write_atomic(output_dir / Artifact.stack, json.dumps(info, indent=2, sort_keys=True))
    tracker.set_tags({f"{STACK}{k}": v[:MAX_TAG] for k, v in info.items()})
    tracker.log_artifacts([output_dir / Artifact.stack])


class MlflowObserver:
    """Logs a job to MLflow as its events come (nothing with tracking off); ``say`` tells
    the user which run it is and when the store fails."""

    def __init__(self, say: Callable[[str], None]):
        self.say = say
        self.job: Optional[Job] = None
        self.output_dir: Optional[Path] = None
        self.tracker: Optional[TrackedRun] = None
        self._energy_tagged = False
        self._deaths: list[ServerDeath] = []
        self._handlers: dict[type, Callable[[Any], None]] = {
            JobOpened: self._opened,
            ServerReady: self._ready,
            ServerDied: self._died,
            MeasuringStarted: self._measuring,
            RunMeasured: self._run,
            LaunchMeasured: self._launch,
            SettingsReadBack: self._settings,
            ServerStopped: self._stopped,
            JobFinished: self._finished,
            JobFailed: self._failed,
            JobClosed: self._closed,
        }

    @property
    def run_id(self) -> Optional[str]:
        return self.tracker.run_id if self.tracker else None

    def notify(self, event: JobEvent) -> None:
        handler = self._handlers.get(type(event))
        if handler is not None and (self.tracker is not None or isinstance(event, JobOpened)):
            handler(event)

    def _opened(self, event: JobOpened) -> None:
        job, output_dir = event.job, event.output_dir
        self.job, self.output_dir = job, output_dir
        self.tracker = start_tracking(job, output_dir, self.say)
        if self.tracker is None:
            return
        cfg = job.config
        write_atomic(
            output_dir / RUN_FILE,
            json.dumps(
                {
                    "run_id": self.tracker.run_id,
                    "parent_run_id": cfg.multirun.parent_run_id,
                    "experiment": cfg.tracking.experiment,
                    "tracking_uri": redact_text(uri_in_force(cfg.tracking.uri)[0]),
                }
            ),
        )
        log_stack(job, self.tracker, output_dir)

    def _ready(self, event: ServerReady) -> None:
        assert self.tracker is not None
        self.tracker.set_tags(
            {
                **({Tag.cpus: ",".join(event.cores)} if event.cores else {}),
                Tag.server_reused: flag_tag(event.reused),
                Tag.server_url: event.url,
                # With the URL, which server instance the runs were on (shared ones included).
                Tag.server_started_at: f"{event.started_at:.3f}",
                **({Tag.gpus: event.gpus} if event.gpus is not None else {}),
            }
        )
        if not event.reused:
            self.tracker.log_metrics(
                {Metric.server_ready_s: event.ready_s}, step=event.launch_index
            )

    def _died(self, event: ServerDied) -> None:
        assert self.tracker is not None
        self._deaths.append(
            ServerDeath(
                redact_text(event.what),
                event.run,
                event.warmup,
                event.rate,
                str(event.log_path),
                event.again,
            )
        )
        self.tracker.set_tags({Tag.server_deaths: server_deaths_tag(self._deaths)})

    def _measuring(self, event: MeasuringStarted) -> None:
        assert self.tracker is not None
        if event.client_cores:
            self.tracker.set_tags({Tag.client_cpus: ",".join(event.client_cores)})

    def _run(self, event: RunMeasured) -> None:
        assert self.tracker is not None and self.job is not None
        result = event.result
        if result.warmup:
            return
        if event.energy_source is not None and not self._energy_tagged:
            self.tracker.set_tags({Tag.energy_source: event.energy_source})
            self._energy_tagged = True
        self.tracker.log_metrics(
            run_metrics(result, event.accounting, self.job.config.slo), step=result.run
        )

    def _launch(self, event: LaunchMeasured) -> None:
        assert self.tracker is not None and self.job is not None
        measured = event.runs
        goodput = [g for g in (run_goodput(r, self.job.config.slo) for r in measured) if g]
        per_token = [
            v for r in measured if (v := r.telemetry.get(Metric.energy_j_per_token)) is not None
        ]
        self.tracker.log_metrics(
            {
                launch_metric(Metric.tok_per_s): sum(r.tok_per_s for r in measured) / len(measured),
                launch_metric(Metric.midpoint_unix): sum(r.midpoint_unix for r in measured)
                / len(measured),
                # A launch's goodput, for comparisons of it across launches (its crossover).
                **(
                    {
                        launch_metric(Metric.goodput_tok_per_s): sum(g.tok_per_s for g in goodput)
                        / len(goodput)
                    }
                    if goodput
                    else {}
                ),
                # A launch's energy per token, where every run of it was metered.
                **(
                    {launch_metric(Metric.energy_j_per_token): sum(per_token) / len(per_token)}
                    if per_token and len(per_token) == len(measured)
                    else {}
                ),
            },
            step=event.launch_index,
        )

    def _settings(self, event: SettingsReadBack) -> None:
        assert self.tracker is not None and self.output_dir is not None
        self.tracker.set_tags(effective_tags(event.effective))
        written = self.output_dir / Artifact.effective
        if written.exists():
            self.tracker.log_artifacts([written])

    def _stopped(self, event: ServerStopped) -> None:
        assert self.tracker is not None
        self.tracker.set_tags(
            {
                Tag.server_started_at: f"{event.started_at:.3f}",
                Tag.server_stopped_at: f"{event.stopped_at:.3f}",
            }
        )

    def _finished(self, event: JobFinished) -> None:
        assert self.tracker is not None
        summary, tracker = event.summary, self.tracker
        tracker.log_metrics(dict(summary.metrics))
        if summary.capacity:
            tracker.set_tags({Tag.capacity_points: capacity_points_tag(summary.capacity.points)})
        if summary.curve:
            tracker.set_tags({Tag.rate_curve: rate_curve_tag(summary.curve)})
        if summary.steady:
            tracker.set_tags({Tag.steady_state: steady_state_tag(summary.steady)})
        if event.trace_metrics:
            tracker.log_metrics(dict(event.trace_metrics))
        doubts = [n.message for n in summary.notes if n.doubtful]
        if doubts:
            tracker.set_tags({Tag.warnings: " | ".join(doubts)[:MAX_TAG]})
        self.say(f"MLflow: run {tracker.run_id} in {redact_text(tracker.uri)}")

    def _failed(self, event: JobFailed) -> None:
        assert self.tracker is not None
        self.tracker.set_tags({Tag.failure: event.reason})

    def _closed(self, event: JobClosed) -> None:
        """The job's files and server logs logged (credentials out first), the run ended:
        each step tried whatever the one before did, the first error raised after."""
        assert self.tracker is not None and self.output_dir is not None
        tracker, output_dir = self.tracker, self.output_dir
        files = [output_dir / a for a in JOB_FILES if (output_dir / a).exists()]
        steps: list[Callable[[], None]] = [
            *[lambda log=log: redact_file(log) for log in event.server_logs],
            lambda: tracker.log_artifacts([*files, *event.server_logs]),
            lambda: tracker.end(event.status),
        ]
        errors = []
        for step in steps:
            try:
                step()
            except Exception as exc:
                errors.append(exc)
        if errors:
            raise errors[0]
