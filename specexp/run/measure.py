"""Measuring a job on a server: the server it runs on (its own, or the sweep's shared one,
with the port, GPUs and cores it is leased), the warm-ups and measured runs, what the
machine did meanwhile, and every request written to ``requests.jsonl`` after each run
(never during one: a write would land in the timestamps of the streams still running), so
a job that dies keeps every run it finished."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Optional, Sequence

from specexp.analysis.results import Artifact, Metric, Tag, launch_metric
from specexp.analysis.summary import run_metrics
from specexp.core.capacity import next_rate, rate_points
from specexp.core.durable import append_whole, write_atomic
from specexp.core.measurements import RunResult
from specexp.core.redaction import redact_env
from specexp.core.schemas import run_requests
from specexp.core.slo import run_goodput
from specexp.engines.records import LaunchSpec
from specexp.engines.stack import host_cpus, server_share
from specexp.host import telemetry
from specexp.host.energy import run_energy
from specexp.host.job import Job
from specexp.host.leases import (
    PROCESS_CORES,
    away_from,
    free_port,
    gpu_ids,
    host_gpus,
    lease_devices,
    lease_port,
)
from specexp.output import terminal
from specexp.run.session import JobSession, stop_own_server
from specexp.run.tracked import TrackedRun, record_effective
from specexp.serving.client import LoadClient, run_async
from specexp.serving.server import POOL, ExternalServer, ServerProcess


def _server_for(session: JobSession, label: str, shared: bool) -> tuple[ServerProcess, bool, float]:
    """(server, reused, seconds to ready): the sweep's shared server, the job's own one
    started now, or the job's own one still running from its earlier parts."""
    job = session.job
    cfg, engine = job.config, job.engine
    if shared:
        with terminal.status(f"starting {engine.name} on {cfg.engine.host}"):
            return POOL.acquire(
                job.server_fingerprint(),
                lambda: new_server(job, session.log_path),
                cfg.engine.ready_timeout_s,
            )
    if session.server is None:
        with terminal.status(
            f"{label}starting {engine.name} on {cfg.engine.host} (log: {session.log_path})"
        ):
            server = session.server = new_server(job, session.log_path)
            server.start()
            return server, False, server.wait_ready(cfg.engine.ready_timeout_s)
    return session.server, True, 0.0


def measure_part(session: JobSession, launch: int, runs: range) -> None:
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
        server, reused, ready_s = _server_for(session, label, shared)
        if server.log_path not in session.server_logs or not reused:
            _announce_server(session, server, reused, ready_s, label, launch)
        records = _monitored_runs(session, server, launch, warmups, runs, session.result.runs)
        session.result.runs += records
        log = server.log_path.read_text(errors="replace")
        session.effective.update(engine.effective(job.server, server.base_url, log, records))
        if last_of_launch:
            record_effective(session.effective, tracker, session.log_path.parent)
        failed = [rec for r in records for rec in r.faults]
        if failed:
            raise RuntimeError(f"{len(failed)} request(s) failed; first: {failed[0].error}")
    except BaseException:
        if shared:
            POOL.close()  # a failed job's server is not handed to the next one
        raise
    finally:
        if session.server is not None and last_of_launch:
            stop_own_server(session)
    if tracker and per_launch:
        measured = [r for r in records if not r.warmup]
        goodput = [g for g in (run_goodput(r, cfg.slo) for r in measured) if g]
        per_token = [
            v for r in measured if (v := r.telemetry.get(Metric.energy_j_per_token)) is not None
        ]
        tracker.log_metrics(
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
            step=launch,
        )


def _monitored_runs(
    session: JobSession,
    server: ServerProcess,
    launch: int,
    warmups: int,
    runs: range,
    earlier: Sequence[RunResult],
) -> list[RunResult]:
    """The runs, measured from cores away from the server's, with the machine watched."""
    job, tracker = session.job, session.tracker
    gpus = server.launch.env.get("CUDA_VISIBLE_DEVICES", "")
    with (
        away_from(server.cores) as client_cores,
        telemetry.monitoring(
            server.server_pid(),
            [int(g) for g in gpus.split(",") if g.strip().isdigit()],
            job.config.stats.telemetry_interval_s,
        ) as monitor,
    ):
        if client_cores and tracker:
            tracker.set_tags({Tag.client_cpus: ",".join(client_cores)})
        return run_async(
            _measure(
                job,
                server,
                launch,
                warmups,
                runs,
                session.files[Artifact.requests],
                tracker,
                monitor,
                earlier,
            )
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
        terminal.console.print(
            f"reusing the sweep's server {server.base_url} (log: {server.log_path})"
        )
    else:
        write_atomic(
            session.log_path.parent / Artifact.command,
            f"# not started by specexp: measured the running server at {server.base_url}\n"
            if isinstance(server, ExternalServer)
            else LaunchSpec(server.launch.argv, redact_env(server.launch.env)).shell_line() + "\n",
        )
        terminal.console.print(
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


def new_server(job: Job, log_path: Path) -> ServerProcess:
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
                on_wait=lambda: terminal.console.print(
                    f"waiting for {cfg.engine.gpus} GPU(s): other jobs on this host hold them"
                ),
            )
            leases.append(gpus)
            launch.env["CUDA_VISIBLE_DEVICES"] = gpu_ids(gpus)
        cores: Optional[list[str]] = None
        wanted = engine.cpu_cores(job.server)
        if wanted != 0:
            pool = host_cpus(cfg.host.cpus)
            count = wanted or server_share(len(pool))
            cores, held = PROCESS_CORES.take(
                lease_dir,
                pool,
                count,
                cfg.host.lease_wait_s,
                on_wait=lambda: terminal.console.print(
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
    tracker: Optional[TrackedRun],
    monitor: Optional[telemetry.Monitor],
    earlier: Sequence[RunResult] = (),
) -> list[RunResult]:
    """``warmups`` warm-up runs, then the measured runs numbered ``runs``, each with what
    ``monitor`` saw of the machine meanwhile. With a capacity search, each measured run's
    rate is chosen from the job's runs before it (``earlier``: its earlier parts')."""
    cfg = job.config
    search = cfg.concurrency.search

    def rate_for(warmup: bool, done: Sequence[RunResult]) -> Optional[float]:
        if search is None:
            return None
        if warmup:
            return search.start_rate
        return next_rate(rate_points([*earlier, *done], cfg.slo), search, cfg.slo.target)

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
        terminal.run_progress(
            warmups + len(runs), run_requests(cfg.workload, cfg.concurrency)
        ) as progress,
        contextlib.closing(client),
    ):
        client.on_request = progress.request_done
        async with client.session() as http:
            schedule = [(i, True) for i in range(warmups)] + [(i, False) for i in runs]
            for run, warmup in schedule:
                rate = rate_for(warmup, results)
                result = await client.run(run, warmup, http, launch=launch, rate=rate)
                if monitor:
                    samples = monitor.between(
                        result.started_unix, result.started_unix + result.wall_s
                    )
                    result.telemetry = telemetry.summarize(samples)
                    result.machine_warnings = telemetry.warnings_for(samples)
                    energy = run_energy(
                        monitor.energy_source,
                        monitor.energy_readings(),
                        result.started_unix,
                        result.wall_s,
                        result.output_tokens,
                        monitor.interval_s,
                    )
                    result.telemetry.update(energy.metrics())
                    if tracker and not warmup and run == runs[0]:
                        tracker.set_tags({Tag.energy_source: str(energy.source)})
                # Written between runs, never during one: a write's cost would land in the
                # timestamps of the streams still running.
                append_whole(records_path, (json.dumps(r.to_json()) + "\n" for r in result.records))
                results.append(result)
                if not warmup and tracker:
                    accounting = job.engine.server_accounting(result.accounting_deltas)
                    tracker.log_metrics(run_metrics(result, accounting, cfg.slo), step=run)
                progress.advance(result)
                if result.faults:
                    break
    return results
