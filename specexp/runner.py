"""One job: resolve the config, launch the server, warm up, measure, summarise, track.

Raw per-request records are appended to ``requests.jsonl`` in the job's output directory
after each run (never during one: a write would land in the timestamps of the streams
still running), so a job that dies keeps every run it finished; the same file is logged to
MLflow at the end, with the server log and the exact command.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import platform
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

from omegaconf import OmegaConf
from rich.markup import escape

from specexp import capture, report, telemetry
from specexp.client import LoadClient, run_async
from specexp.engines.base import Engagement, Engine, LaunchSpec, Setting
from specexp.job import Job
from specexp.leases import (
    PROCESS_CORES,
    away_from,
    check_pool,
    command_output,
    free_port,
    gpu_ids,
    host_cpus,
    host_gpus,
    lease_devices,
    lease_port,
)
from specexp.measurements import RunResult
from specexp.redaction import redact_env, redact_text, redact_tree
from specexp.results import (
    Artifact,
    Metric,
    RunKind,
    RunStatus,
    Tag,
    effective_tags,
    factor_tags,
    factors_tag,
    launch_metric,
)
from specexp.schemas import ConfigError, RunConfig
from specexp.server import POOL, ExternalServer, ServerError, ServerProcess
from specexp.stats import Summary, percentiles, summarize, variance_components, warnings_for
from specexp.tinymodels import ensure_pair
from specexp.tracking import FailoverRun, OfflineRun, TrackingStore, flatten

# Where a job's run is logged: the store, or a journal when the store cannot be reached.
Tracking = Union[FailoverRun, OfflineRun]


@dataclass
class JobResult:
    status: RunStatus
    run_id: Optional[str] = None
    summary: Optional[Summary] = None
    runs: list[RunResult] = field(default_factory=list)
    error: Optional[str] = None
    output_dir: Optional[Path] = None


def git_commit() -> str:
    out = command_output(["git", "rev-parse", "HEAD"], 10, Path(__file__).resolve().parent)
    return (out or "").strip() or "unknown"


def run_tags(job: Job) -> dict[str, str]:
    cfg, engine = job.config, job.engine
    return {
        Tag.kind: RunKind.job,
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


def run_metrics(result: RunResult, engine: Engine) -> dict[str, float]:
    """Metrics of one measured run (logged with the run index as step): the client's, and
    beside them as server_* what the server's own accounting says of the same run."""
    ok = [r for r in result.records if r.ok]
    metrics: dict[str, Any] = {
        Metric.tok_per_s: result.tok_per_s,
        "request_tok_per_s": result.request_tok_per_s,
        "decode_tok_per_s": result.decode_tok_per_s,
        "requests": len(result.records),
        "output_tokens": result.output_tokens,
        Metric.wall_s: result.wall_s,
        Metric.midpoint_unix: result.midpoint_unix,
        "ttft_s": result.ttft_s_mean,
        "tpot_s": result.tpot_s_mean,
        "e2e_s": result.e2e_s_mean,
        "acceptance_length": result.acceptance_length,
        "acceptance_rate": result.acceptance_rate,
        Metric.idle_wait_s: result.idle_wait_s,
        Metric.busy_start: float(result.busy_at_start is not None),
    }
    server = engine.server_accounting(result.accounting_deltas)
    metrics.update({f"server_{k.removesuffix('_mean')}": v for k, v in server.items()})
    metrics.update(result.telemetry)
    itl = [x for r in ok for x in r.itl_s]
    metrics.update({f"itl_{k}_s": v for k, v in percentiles(itl).items()})
    return {k: float(v) for k, v in metrics.items() if v is not None}


def summary_metrics(
    measured: list[RunResult], cfg: RunConfig, engine: Engine
) -> tuple[Optional[Summary], dict[str, float], list[str]]:
    """Summary metrics and warnings. With several launches, tok/s is summarised over the
    per-launch means (runs inside one launch share its launch-level variance). The server's
    own accounting over all measured runs is summarised beside the client's figures, and a
    token count that differs from the client's is a warning."""
    confidence = cfg.stats.confidence
    by_launch = runs_by_launch(measured)
    run_values = [r.tok_per_s for r in measured]
    unit_values = (
        [sum(v) / len(v) for v in by_launch.values()] if len(by_launch) > 1 else run_values
    )
    tok = summarize(unit_values, confidence)
    metrics: dict[str, float] = tok.as_dict(Metric.tok_per_s) if tok else {}
    metrics[Metric.launches] = float(len(by_launch))
    metrics[Metric.measured_runs] = float(len(measured))
    components = variance_components(list(by_launch.values()))
    if components:
        metrics[Metric.var_within_launch] = components.within_launch
        metrics[Metric.var_between_launch] = components.between_launch
    ttft = [rec.ttft_s for r in measured for rec in r.records if rec.ok and rec.ttft_s]
    if ttft:
        metrics["ttft_s_mean"] = sum(ttft) / len(ttft)
    metrics.update({f"ttft_s_{k}": v for k, v in percentiles(ttft).items()})
    for name in ("request_tok_per_s", "decode_tok_per_s"):
        values = [getattr(r, name) for r in measured if getattr(r, name)]
        if values:
            metrics[f"{name}_mean"] = sum(values) / len(values)
    for name in ("itl_s", "chunk_gaps_s"):
        values = [x for r in measured for rec in r.records if rec.ok for x in getattr(rec, name)]
        metrics.update({f"{name}_{k}": v for k, v in percentiles(values).items()})
    for name in ("acceptance_length", "acceptance_rate", "tpot_s_mean", "e2e_s_mean"):
        values = [getattr(r, name) for r in measured if getattr(r, name) is not None]
        if values:
            metrics[name if name.endswith("_mean") else f"{name}_mean"] = sum(values) / len(values)
    warnings = warnings_for(unit_values, cfg.stats.cv_warn)
    busy_starts = [r for r in measured if r.busy_at_start is not None]
    metrics[Metric.busy_start_runs] = float(len(busy_starts))
    metrics[Metric.busy_machine_runs] = float(
        sum(1 for r in measured if telemetry.BUSY in r.machine_warnings)
    )
    if busy_starts:
        warnings.append(
            f"measured run(s) {[r.run for r in busy_starts]} started on a busy server (after "
            f"{cfg.stats.idle_timeout_s:.0f} s of waiting, stats.idle_timeout_s: "
            f"{busy_starts[0].busy_at_start}): another client uses it, or it is still working "
            "on earlier requests"
        )
    for note in dict.fromkeys(n for r in measured for n in r.machine_warnings):
        hit = [r for r in measured if note in r.machine_warnings]
        busiest = max(r.telemetry.get("cpu_other_cores", 0.0) for r in hit)
        warnings.append(
            f"{note} in measured run(s) {[r.run for r in hit]}"
            + (f", up to {busiest:.2f} of {os.cpu_count()} cores" if note == telemetry.BUSY else "")
        )
    totals: dict[str, float] = {}
    for run in measured:
        for name, delta in run.accounting_deltas.items():
            totals[name] = totals.get(name, 0.0) + delta
    server = engine.server_accounting(totals)
    # Totals are named apart from the per-run series of the same figure.
    metrics.update(
        {
            f"server_{k.replace('output_tokens', 'output_tokens_total')}": v
            for k, v in server.items()
        }
    )
    client_tokens = sum(r.output_tokens for r in measured)
    metrics["output_tokens_total"] = float(client_tokens)
    if "output_tokens" in server and server["output_tokens"] != client_tokens:
        warnings.append(
            f"the server counted {server['output_tokens']:.0f} tokens generated during the "
            f"measured runs, the client received {client_tokens}: another client used this "
            "server, or tokens were lost on the way"
        )
    return tok, metrics, warnings


def runs_by_launch(runs: list[RunResult]) -> dict[int, list[float]]:
    groups: dict[int, list[float]] = {}
    for r in runs:
        groups.setdefault(r.launch, []).append(r.tok_per_s)
    return groups


@dataclass
class JobSession:
    """A job being measured: in one go, or part by part between other jobs' parts (an
    interleaved sweep), staying open in between."""

    job: Job
    files: dict[Artifact, Path]
    tracker: Optional[Tracking]
    result: JobResult
    log_path: Path
    server_logs: set[Path]  # a sweep's shared server writes to its first job's log
    effective: dict[str, Setting] = field(default_factory=dict)
    # The job's own server while its runs go on (a single launch measured part by part).
    server: Optional[ServerProcess] = None


# Jobs of this process measured part by part, between their parts, by output directory.
_OPEN: dict[Path, JobSession] = {}


def run_job(job: Job, output_dir: Path) -> JobResult:
    """Run a job, or with ``multirun.part`` set one part of it (see ``StatsConfig.parts``):
    the first part opens the job, the last one summarises and ends it."""
    cfg = job.config
    launch = job.planned_launch()
    if cfg.dry_run:
        report.print_dry_run(job, launch, job.predicted_resolution(launch))
        return JobResult(status=RunStatus.dry_run, output_dir=output_dir)
    part = cfg.multirun.part
    if part:
        session = _OPEN.pop(output_dir, None)
        if session is None:  # it ended in an earlier part, which said why
            return JobResult(status=RunStatus.skipped, output_dir=output_dir)
    else:
        session = _open(job, launch, output_dir)
    result = session.result
    parts = range(cfg.stats.parts) if part is None else range(part, part + 1)
    try:
        if cfg.stats.launches > 1:
            for launch_index in parts:
                runs = cfg.stats.measured_runs
                _measure_part(
                    session, launch_index, range(launch_index * runs, (launch_index + 1) * runs)
                )
        else:
            _measure_part(session, 0, parts)
        if parts.stop < cfg.stats.parts:
            _OPEN[output_dir] = session
            return dataclasses.replace(result, status=RunStatus.measuring)
        measured = [r for r in result.runs if not r.warmup]
        result.summary, metrics, notes = summary_metrics(measured, cfg, job.engine)
        if session.tracker:
            session.tracker.log_metrics(metrics)
            if notes:
                session.tracker.set_tags({Tag.warnings: " | ".join(notes)[:5000]})
        result.status = RunStatus.finished
        report.print_summary(cfg, result.summary, metrics, notes, result.runs)
        if session.tracker:
            report.console.print(
                f"MLflow: run {session.tracker.run_id} in {redact_text(session.tracker.uri)}"
            )
    except ServerError as exc:
        result.error = str(exc)
        report.console.print(
            f"[red]server failed:[/] {escape(redact_text(str(exc)))}\n"
            f"[dim]{escape(redact_text(exc.log_tail))}[/]"
        )
        if session.tracker:
            session.tracker.set_tags({Tag.failure: exc.reason[:500] or str(exc)[:500]})
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM (see __main__): clean up, then stop
        result.status, result.error = RunStatus.killed, "interrupted"
        raise
    except Exception as exc:  # the run is marked failed; what was measured stays on disk
        result.error = f"{type(exc).__name__}: {exc}"
        report.console.print(f"[red]run failed:[/] {result.error}")
        if session.tracker:
            session.tracker.set_tags({Tag.failure: result.error[:500]})
    finally:
        if output_dir not in _OPEN:
            _close(session)
    return result


def end_open_jobs(status: RunStatus) -> None:
    """End the jobs still waiting for their next part (an interrupted or failed sweep)."""
    while _OPEN:
        session = _OPEN.popitem()[1]
        session.result.status = status
        _close(session)


def _open(job: Job, launch: LaunchSpec, output_dir: Path) -> JobSession:
    """Check what the job needs, write its files and start its tracked run."""
    cfg, engine = job.config, job.engine
    output_dir.mkdir(parents=True, exist_ok=True)
    if cfg.model.generate is not None:
        with report.status(f"generating model {cfg.model.name} (cached after the first time)"):
            ensure_pair(cfg.model.generate, engine.model_format)
    missing = [p for p in engine.local_files(job.server) if not Path(p).is_file()]
    if missing:
        raise ConfigError(
            f"model file not found: {', '.join(missing)}; check model.path / model.draft_path"
        )
    if cfg.engine.url:
        job.request_headers()  # its key must be there before anything is tracked
    elif not os.access(launch.argv[0], os.X_OK):
        raise ConfigError(
            f"{launch.argv[0]} (stack {cfg.stack.name}) not found or not executable: "
            "create the stack's environment, or set stack.python / stack.bin_dir"
        )
    if cfg.engine.gpus and not cfg.engine.url and "CUDA_VISIBLE_DEVICES" not in launch.env:
        check_pool(host_gpus(cfg.host.gpus), cfg.engine.gpus)
    cores = job.engine.cpu_cores(job.server)
    if not cfg.engine.url and cores:
        check_pool(host_cpus(cfg.host.cpus), cores, "cpu")
    files = _write_job_files(job, launch, output_dir)
    tracker = _start_tracking(job, output_dir)
    result = JobResult(
        status=RunStatus.failed, run_id=tracker.run_id if tracker else None, output_dir=output_dir
    )
    log_path = output_dir / Artifact.server_log
    session = JobSession(job, files, tracker, result, log_path, {log_path})
    if tracker:
        try:
            _log_stack(job, tracker, output_dir)
        except BaseException:
            _close(session)
            raise
    return session


def _close(session: JobSession) -> None:
    """Stop the job's own server if it still runs, log its files, end its run."""
    if session.server is not None:
        _stop_own_server(session)
    for log in session.server_logs:
        _redact_file(log)
    if session.tracker:
        session.tracker.log_artifacts([*session.files.values(), *session.server_logs])
        session.tracker.end(session.result.status)


def _redact_file(path: Path) -> None:
    """Credentials in URLs out of a server's log before it is copied anywhere. Rewritten only
    when it holds some; a server still running appends after (its log is opened to append)."""
    if not path.exists():
        return
    text = path.read_text(errors="replace")
    redacted = redact_text(text)
    if redacted != text:
        path.write_text(redacted)


def _measure_part(session: JobSession, launch: int, runs: range) -> None:
    """Measured runs ``runs`` of launch ``launch``: with several launches, all of a launch on
    a new server; else some of the runs on the job's one server, the warm-ups before the
    first. Raises if any request failed."""
    job, tracker = session.job, session.tracker
    cfg, engine = job.config, job.engine
    stats = cfg.stats
    per_launch = stats.launches > 1
    warmups = stats.warmup_runs if per_launch or runs.start == 0 else 0
    last_of_launch = per_launch or runs.stop == stats.measured_runs
    shared = (
        cfg.multirun.server_launch is not None and cfg.multirun.reuse_servers and not per_launch
    )
    label = f"launch {launch + 1}/{stats.launches}: " if per_launch else ""
    try:
        if shared:
            with report.status(f"starting {engine.name} on {cfg.engine.host}"):
                server, reused, ready_s = POOL.acquire(
                    job.server_fingerprint(),
                    lambda: _new_server(job, session.log_path),
                    cfg.engine.ready_timeout_s,
                )
        elif session.server is None:
            with report.status(
                f"{label}starting {engine.name} on {cfg.engine.host} (log: {session.log_path})"
            ):
                server = session.server = _new_server(job, session.log_path)
                server.start()
                reused, ready_s = False, server.wait_ready(cfg.engine.ready_timeout_s)
        else:
            server, reused, ready_s = session.server, True, 0.0
        if server.log_path not in session.server_logs or not reused:
            _announce_server(session, server, reused, ready_s, label, launch)
        gpus = server.launch.env.get("CUDA_VISIBLE_DEVICES", "")
        with (
            away_from(server.cores) as client_cores,
            telemetry.monitoring(
                server.server_pid(),
                [int(g) for g in gpus.split(",") if g.strip().isdigit()],
                stats.telemetry_interval_s,
            ) as monitor,
        ):
            if client_cores and tracker:
                tracker.set_tags({Tag.client_cpus: ",".join(client_cores)})
            records = run_async(
                _measure(
                    job,
                    server,
                    launch,
                    warmups,
                    runs,
                    session.files[Artifact.requests],
                    tracker,
                    monitor,
                )
            )
        session.result.runs += records
        session.effective.update(
            engine.effective(
                job.server, server.base_url, server.log_path.read_text(errors="replace"), records
            )
        )
        if last_of_launch:
            _report_effective(session.effective, tracker, session.log_path.parent)
        failed = [rec for r in records for rec in r.records if not rec.ok]
        if failed:
            raise RuntimeError(f"{len(failed)} request(s) failed; first: {failed[0].error}")
    except BaseException:
        if shared:
            POOL.close()  # a failed job's server is not handed to the next one
        raise
    finally:
        if session.server is not None and last_of_launch:
            _stop_own_server(session)
    if tracker and per_launch:
        measured = [r for r in records if not r.warmup]
        tracker.log_metrics(
            {
                launch_metric(Metric.tok_per_s): sum(r.tok_per_s for r in measured) / len(measured),
                launch_metric(Metric.midpoint_unix): sum(r.midpoint_unix for r in measured)
                / len(measured),
            },
            step=launch,
        )


def _announce_server(
    session: JobSession,
    server: ServerProcess,
    reused: bool,
    ready_s: float,
    label: str,
    launch: int,
) -> None:
    """Say which server the job measures on (a new one, or the sweep's), and record it."""
    session.server_logs.add(server.log_path)
    tracker = session.tracker
    if reused:
        report.console.print(
            f"reusing the sweep's server {server.base_url} (log: {server.log_path})"
        )
    else:
        (session.log_path.parent / Artifact.command).write_text(
            f"# not started by specexp: measured the running server at {server.base_url}\n"
            if isinstance(server, ExternalServer)
            else LaunchSpec(server.launch.argv, redact_env(server.launch.env)).shell_line() + "\n"
        )
        report.console.print(
            f"{label}[green]server ready[/] at {server.base_url} after {ready_s:.1f} s"
        )
    if tracker:
        gpus = server.launch.env.get("CUDA_VISIBLE_DEVICES")
        tracker.set_tags(
            {
                **({Tag.cpus: ",".join(server.cores)} if server.cores else {}),
                Tag.server_reused: str(reused).lower(),
                Tag.server_url: server.base_url,
                # With the URL, which server instance the runs were on (shared ones included).
                Tag.server_started_at: f"{server.started_at:.3f}",
                **({Tag.gpus: gpus} if gpus is not None else {}),
            }
        )
        if not reused:
            tracker.log_metrics({Metric.server_ready_s: ready_s}, step=launch)


def _stop_own_server(session: JobSession) -> None:
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


def _new_server(job: Job, log_path: Path) -> ServerProcess:
    """A server with a port and GPUs of its own, leased so that jobs sharing this host
    (parallel launchers) never get the same ones. Nothing is started yet."""
    cfg, engine = job.config, job.engine
    if cfg.engine.url:
        return ExternalServer(cfg.engine.url, engine.health_path, log_path, job.request_headers())
    host, lease_dir = cfg.engine.host, Path(cfg.host.lease_dir)
    leases = []
    try:
        port = cfg.engine.port
        if not port:
            port, port_lease = lease_port(lease_dir, host, free_port)
            leases.append(port_lease)
        launch = engine.launch_spec(job.server, port)
        if (
            cfg.engine.gpus and "CUDA_VISIBLE_DEVICES" not in launch.env
        ):  # a pinned stack keeps its devices
            gpus = lease_devices(
                lease_dir,
                "gpu",
                host_gpus(cfg.host.gpus),
                cfg.engine.gpus,
                cfg.host.lease_wait_s,
                on_wait=lambda: report.console.print(
                    f"waiting for {cfg.engine.gpus} GPU(s): other jobs on this host hold them"
                ),
            )
            leases.append(gpus)
            launch.env["CUDA_VISIBLE_DEVICES"] = gpu_ids(gpus)
        cores: Optional[list[str]] = None
        wanted = engine.cpu_cores(job.server)
        if wanted != 0:
            pool = host_cpus(cfg.host.cpus)
            count = wanted or len(pool)
            cores, held = PROCESS_CORES.take(
                lease_dir,
                pool,
                count,
                cfg.host.lease_wait_s,
                on_wait=lambda: report.console.print(
                    f"waiting for {count} CPU core(s): other jobs' servers on this host hold them"
                ),
            )
            leases.append(held)
            engine.pin_cores(launch, cores)
    except BaseException:
        for lease in leases:
            lease.release()
        raise
    return ServerProcess(launch, host, port, engine.health_path, log_path, leases, cores)


async def _measure(
    job: Job,
    server: ServerProcess,
    launch: int,
    warmups: int,
    runs: range,
    records_path: Path,
    tracker: Optional[Tracking],
    monitor: Optional[telemetry.Monitor],
) -> list[RunResult]:
    """``warmups`` warm-up runs, then the measured runs numbered ``runs``, each with what
    ``monitor`` saw of the machine meanwhile."""
    cfg = job.config
    client = LoadClient(
        job.engine,
        server.base_url,
        job.server,
        cfg.workload,
        cfg.concurrency,
        headers=job.request_headers(),
        prompt_namespace=job.prompt_namespace(),
        idle_timeout_s=cfg.stats.idle_timeout_s,
    )
    results: list[RunResult] = []
    with (
        open(records_path, "a", buffering=1) as sink,
        report.run_progress(warmups + len(runs)) as progress,
        contextlib.closing(client),
    ):
        async with client.session() as http:
            schedule = [(i, True) for i in range(warmups)] + [(i, False) for i in runs]
            for run, warmup in schedule:
                result = await client.run(run, warmup, http, launch=launch)
                if monitor:
                    samples = monitor.between(
                        result.started_unix, result.started_unix + result.wall_s
                    )
                    result.telemetry = telemetry.summarize(samples)
                    result.machine_warnings = telemetry.warnings_for(samples)
                # Written between runs, never during one: a write's cost would land in the
                # timestamps of the streams still running.
                sink.writelines(json.dumps(r.to_json()) + "\n" for r in result.records)
                sink.flush()
                os.fsync(sink.fileno())
                results.append(result)
                if not warmup and tracker:
                    tracker.log_metrics(run_metrics(result, job.engine), step=run)
                progress.advance(result)
                if not result.ok:
                    break
    return results


def _log_stack(job: Job, tracker: Tracking, output_dir: Path) -> None:
    url = job.config.engine.url
    # A server specexp did not start runs on a stack it cannot see: nothing is guessed.
    info = {"external_server": url} if url else capture.stack(job.server, job.engine)
    (output_dir / Artifact.stack).write_text(json.dumps(info, indent=2, sort_keys=True))
    tracker.set_tags({f"stack.{k}": v[:5000] for k, v in info.items()})
    tracker.log_artifacts([output_dir / Artifact.stack])


def _report_effective(
    effective: dict[str, Setting], tracker: Optional[Tracking], output_dir: Path
) -> None:
    """Say loudly when a requested setting did not engage; record every setting's status."""
    (output_dir / Artifact.effective).write_text(
        json.dumps({k: s.to_json() for k, s in effective.items()}, indent=2, sort_keys=True)
    )
    for name, s in effective.items():
        if s.status == Engagement.not_engaged:
            report.console.print(
                f"[bold red]NOT ENGAGED:[/] {name}={s.requested} was requested but the server ran "
                f"with {s.actual or 'something else'} ({s.evidence})"
            )
    if tracker:
        tracker.set_tags(effective_tags(effective))
        tracker.log_artifacts([output_dir / Artifact.effective])


def _write_job_files(job: Job, launch: LaunchSpec, output_dir: Path) -> dict[Artifact, Path]:
    files = {
        a: output_dir / a
        for a in (Artifact.config, Artifact.command, Artifact.environment, Artifact.requests)
    }
    files[Artifact.config].write_text(
        OmegaConf.to_yaml(OmegaConf.create(redacted_config(job.config)))
    )
    files[Artifact.command].write_text(
        LaunchSpec(launch.argv, redact_env(launch.env)).shell_line() + "\n"
    )
    files[Artifact.environment].write_text(
        json.dumps(
            {"set_by_specexp": redact_env(launch.env), "inherited": redact_env(dict(os.environ))},
            indent=2,
            sort_keys=True,
        )
    )
    return files


def redacted_config(cfg: RunConfig) -> dict:
    """The config as plain data, with secret-looking environment values replaced."""
    data = json.loads(json.dumps(dataclasses.asdict(cfg)))  # enums become their values
    for group in ("stack", "engine"):
        data[group]["env"] = redact_env(data[group]["env"])
    return redact_tree(data)


def _start_tracking(job: Job, output_dir: Path) -> Optional[Tracking]:
    cfg = job.config
    if not cfg.tracking.enabled:
        return None
    name = (
        cfg.tracking.run_name
        or cfg.multirun.job_label
        or (
            f"{job.engine.name}-{cfg.model.name}-{cfg.speculative.method}-c{cfg.concurrency.streams}"
        )
    )
    tags = run_tags(job)
    try:
        store = TrackingStore(cfg.tracking.uri, cfg.tracking.experiment)
        uri = redact_text(store.uri)
        journal = output_dir / Artifact.offline_journal

        def failed_over(reason: str) -> None:
            report.console.print(
                f"[bold yellow]MLflow store failed mid-run[/] ({uri}: {escape(reason[:200])}): "
                f"the rest of this run goes to {journal}; complete it later with:\n"
                f"  python -m specexp.upload {output_dir} [--tracking-uri URI]"
            )

        tracker: Tracking = FailoverRun(
            store.start_run(name, tags, parent_run_id=cfg.multirun.parent_run_id),
            journal,
            failed_over,
        )
    except Exception as exc:  # any failure to reach the store: keep measuring, upload later
        journal = output_dir / Artifact.offline_journal
        uri = redact_text(
            cfg.tracking.uri or os.environ.get("MLFLOW_TRACKING_URI") or "the default store"
        )
        problem = (
            "MLflow is not installed here"
            if isinstance(exc, ModuleNotFoundError) and exc.name == "mlflow"
            else "MLflow store unreachable"
        )
        report.console.print(
            f"[bold yellow]{problem}[/] ({uri}: "
            f"{escape(redact_text(str(exc).splitlines()[0][:200]))}). "
            f"Measurements stay in {output_dir}; upload them later with:\n"
            f"  python -m specexp.upload {output_dir} [--tracking-uri URI]"
        )
        tracker = OfflineRun(
            journal,
            uri,
            cfg.tracking.experiment,
            redact_text(str(exc)[:500]),
            name,
            tags,
            cfg.multirun.parent_run_id,
        )
    tracker.log_params(flatten(redacted_config(cfg)))
    report.console.print(f"MLflow run {tracker.run_id} in {uri}")
    return tracker
