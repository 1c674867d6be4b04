"""A job's tracked run and its files: the tags that describe it, the tracking run (the store,
or an offline journal when the store cannot be reached or fails mid-run), the files of its
output directory, what the stack holds and how each requested setting ran."""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import socket
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Protocol

from omegaconf import OmegaConf
from rich.markup import escape

from specexp.analysis.results import (
    Artifact,
    RunKind,
    RunStatus,
    Tag,
    effective_tags,
    factor_tags,
    factors_tag,
)
from specexp.core.durable import write_atomic
from specexp.core.redaction import redact_env, redact_text, redact_tree
from specexp.core.schemas import RunConfig
from specexp.engines.records import Engagement, LaunchSpec, Setting
from specexp.host import capture, owner
from specexp.host.job import Job
from specexp.host.leases import command_output
from specexp.output import terminal
from specexp.tracking.store import FailoverRun, OfflineRun, TrackingStore, flatten


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
        "engine": engine.name,
        "engine_version": engine.version(job.server)[0] or "unknown",
        "stack": cfg.stack.name,
        "model": cfg.model.name,
        "attention_backend": cfg.attention_backend.name,
        "allreduce_backend": cfg.allreduce_backend.name,
        "speculative": cfg.speculative.method,
        "concurrency": str(cfg.concurrency.streams),
        "workload": cfg.workload.name,
        "replicate": str(cfg.replicate),
        "git_commit": git_commit(),
        "host": socket.gethostname(),
        "platform": platform.platform(),
        **capture.hardware(),
        **{f"stack_version.{k}": str(v) for k, v in cfg.stack.versions.items()},
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
        Tag.order: "blocked" if cfg.multirun.part is None else "interleaved",
    }


def redacted_config(cfg: RunConfig) -> dict:
    """The config as plain data, with secret-looking environment values replaced."""
    data = json.loads(json.dumps(dataclasses.asdict(cfg)))  # enums become their values
    for group in ("stack", "engine"):
        data[group]["env"] = redact_env(data[group]["env"])
    return redact_tree(data)


def run_name(job: Job) -> str:
    cfg = job.config
    return (
        cfg.tracking.run_name
        or cfg.multirun.job_label
        or f"{job.engine.name}-{cfg.model.name}-{cfg.speculative.method}-c{cfg.concurrency.streams}"
    )


def _upload_hint(output_dir: Path) -> str:
    return f"  python -m specexp.upload {output_dir} [--tracking-uri URI]"


def _online(job: Job, output_dir: Path, name: str, tags: dict[str, str]) -> TrackedRun:
    """A run in the store, which goes on in a journal if the store fails mid-run."""
    cfg = job.config
    store = TrackingStore(cfg.tracking.uri, cfg.tracking.experiment)
    uri = redact_text(store.uri)
    journal = output_dir / Artifact.offline_journal

    def failed_over(reason: str) -> None:
        terminal.console.print(
            f"[bold yellow]MLflow store failed mid-run[/] ({uri}: {escape(reason[:200])}): "
            f"the rest of this run goes to {journal}; complete it later with:\n"
            + _upload_hint(output_dir)
        )

    store.end_abandoned()
    run = store.start_run(name, tags, parent_run_id=cfg.multirun.parent_run_id)
    return FailoverRun(run, journal, failed_over)


def _offline(
    job: Job, output_dir: Path, name: str, tags: dict[str, str], exc: Exception
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
    terminal.console.print(
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


def start_tracking(job: Job, output_dir: Path) -> Optional[TrackedRun]:
    """The job's tracking run with its tags and params, or None with tracking off."""
    cfg = job.config
    if not cfg.tracking.enabled:
        return None
    name, tags = run_name(job), run_tags(job)
    try:
        tracker = _online(job, output_dir, name, tags)
    except Exception as exc:  # any failure to reach the store: keep measuring, upload later
        tracker = _offline(job, output_dir, name, tags, exc)
    tracker.log_params(flatten(redacted_config(cfg)))
    terminal.console.print(f"MLflow run {tracker.run_id} in {redact_text(tracker.uri)}")
    return tracker


def log_stack(job: Job, tracker: TrackedRun, output_dir: Path) -> None:
    url = job.config.engine.url
    # A server specexp did not start runs on a stack it cannot see: nothing is guessed.
    info = {"external_server": url} if url else capture.stack(job.server, job.engine)
    write_atomic(output_dir / Artifact.stack, json.dumps(info, indent=2, sort_keys=True))
    tracker.set_tags({f"stack.{k}": v[:5000] for k, v in info.items()})
    tracker.log_artifacts([output_dir / Artifact.stack])


def record_effective(
    effective: Mapping[str, Setting], tracker: Optional[TrackedRun], output_dir: Path
) -> None:
    """Say loudly when a requested setting did not engage; record every setting's status."""
    write_atomic(
        output_dir / Artifact.effective,
        json.dumps({k: s.to_json() for k, s in effective.items()}, indent=2, sort_keys=True),
    )
    for name, s in effective.items():
        if s.status == Engagement.not_engaged:
            terminal.console.print(
                f"[bold red]NOT ENGAGED:[/] {name}={s.requested} was requested but the server ran "
                f"with {s.actual or 'something else'} ({s.evidence})"
            )
    if tracker:
        tracker.set_tags(effective_tags(effective))
        tracker.log_artifacts([output_dir / Artifact.effective])


def write_job_files(job: Job, launch: LaunchSpec, output_dir: Path) -> dict[Artifact, Path]:
    files = {
        a: output_dir / a
        for a in (Artifact.config, Artifact.command, Artifact.environment, Artifact.requests)
    }
    write_atomic(
        files[Artifact.config], OmegaConf.to_yaml(OmegaConf.create(redacted_config(job.config)))
    )
    write_atomic(
        files[Artifact.command], LaunchSpec(launch.argv, redact_env(launch.env)).shell_line() + "\n"
    )
    write_atomic(
        files[Artifact.environment],
        json.dumps(
            {"set_by_specexp": redact_env(launch.env), "inherited": redact_env(dict(os.environ))},
            indent=2,
            sort_keys=True,
        ),
    )
    return files


def redact_file(path: Path) -> None:
    """Credentials in URLs out of a server's log before it is copied anywhere. Rewritten only
    when it holds some; a server still running appends after (its log is opened to append)."""
    if not path.exists():
        return
    text = path.read_text(errors="replace")
    redacted = redact_text(text)
    if redacted != text:
        path.write_text(redacted)
