"""Measuring a job on a server: the server it runs on (its own, or the sweep's shared one,
with the port, GPUs and cores it is leased), the warm-ups and measured runs, and what the
machine did meanwhile. Each run is said as it ends (:class:`RunMeasured`, between runs,
never during one: its observers write its requests then), so a job that dies keeps every
run it finished."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Optional, Sequence

from specexp.core.capacity import RateDecision, next_rate, rate_points
from specexp.core.measurements import RunResult
from specexp.core.schemas.concurrency import run_requests
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
from specexp.run.events import (
    JobEmitter,
    LaunchMeasured,
    MeasuringStarted,
    RequestDone,
    RunMeasured,
    ServerDied,
    ServerReady,
    ServerStarting,
    SettingsReadBack,
    Waiting,
)
from specexp.run.session import JobSession, stop_own_server
from specexp.serving.client import LoadClient
from specexp.serving.event_loop import run_async
from specexp.serving.server import POOL, ExternalServer, ServerError, ServerProcess


def _server_for(session: JobSession, label: str, shared: bool) -> tuple[ServerProcess, bool, float]:
    """(server, reused, seconds to ready): the sweep's shared server, the job's own one
    started now, or the job's own one still running from its earlier parts."""
    job, emit = session.job, session.emit
    cfg = job.config
    if shared:
        return POOL.acquire(
            job.server_fingerprint(),
            lambda: _starting(new_server(job, session.log_path, emit), label, job, emit),
            cfg.engine.ready_timeout_s,
        )
    if session.server is None:
        # One server at a time in a process: the sweep's shared one, which the jobs before
        # this one left running, would hold the GPUs this one leases (a wait without end).
        POOL.close()
        server = session.server = new_server(job, session.log_path, emit)
        _starting(server, label, job, emit).start()
        return server, False, server.wait_ready(cfg.engine.ready_timeout_s)
    return session.server, True, 0.0


def _measured(
    session: JobSession,
    server: ServerProcess,
    launch: int,
    warmups: int,
    runs: range,
    label: str,
    shared: bool,
) -> tuple[ServerProcess, list[RunResult], Optional[Exception]]:
    """The runs measured on ``server``: (the server they ended on, the last server's runs,
    the error that ends the job, if one does). A run ends at its first failed request; in a
    capacity search a run whose server died is measured once more on a new server (the
    search asks the same rate again: :func:`rate_points` leaves out a rate's first death),
    and counts as a failed rate only when that server dies too; the search goes on."""
    records = _monitored_runs(session, server, launch, warmups, runs, session.result.runs)
    session.result.runs += records
    while records and records[-1].faults:
        dead, failed = records[-1], records[-1].faults
        during = "during the warm-up" if dead.warmup else f"during run {dead.run}"
        died = server.death(during, failed[0].error or "")
        if died is None or session.job.config.concurrency.search is None:
            return (
                server,
                records,
                died or RuntimeError(f"{len(failed)} request(s) failed; first: {failed[0].error}"),
            )
        again = not dead.warmup and any(
            r.faults and r.asked_rate == dead.asked_rate and r is not dead
            for r in session.result.runs
            if not r.warmup
        )
        session.emit(
            ServerDied(
                str(died),
                died.log_tail,
                server.log_path,
                dead.run,
                dead.warmup,
                dead.asked_rate,
                again,
            )
        )
        measured = [r.run for r in session.result.runs if not r.warmup and r.run in runs]
        left = range(max(measured) + 1 if measured else runs.start, runs.stop)
        if not left:
            break
        server, ready_s = _restarted(session, label, shared)
        session.emit(_ready(server, launch, label, False, ready_s))
        records = _monitored_runs(session, server, launch, warmups, left, session.result.runs)
        session.result.runs += records
    return server, records, None


def _restarted(session: JobSession, label: str, shared: bool) -> tuple[ServerProcess, float]:
    """A new server in place of one that died: (the server, seconds to ready)."""
    if shared:
        POOL.close()
    elif session.server is not None:
        stop_own_server(session)
    server, _, ready_s = _server_for(session, label, shared)
    return server, ready_s


def _starting(server: ServerProcess, label: str, job: Job, emit: JobEmitter) -> ServerProcess:
    """Say that ``server`` is about to start, with its real launch."""
    external = isinstance(server, ExternalServer)
    emit(
        ServerStarting(
            label,
            job.launching.name,
            job.config.engine.host,
            server.base_url,
            server.log_path,
            None if external else server.launch,
        )
    )
    return server


def measure_part(session: JobSession, launch: int, runs: range) -> None:
    """Measured runs ``runs`` of launch ``launch``: with several launches, all of a launch on
    a new server; else some of the runs on the job's one server, the warm-ups before the
    first. Raises if any request failed."""
    job, emit = session.job, session.emit
    stats = job.config.stats
    per_launch = stats.launches > 1
    warmups = stats.warmup_runs if per_launch or runs.start == 0 else 0
    last_of_launch = per_launch or runs.stop == stats.measured_runs
    shared = (
        job.config.multirun.server_launch is not None
        and job.config.multirun.reuse_servers
        and not per_launch
    )
    label = f"launch {launch + 1}/{stats.launches}: " if per_launch else ""
    started = time.monotonic()
    try:
        server, reused, ready_s = _server_for(session, label, shared)
        if server.log_path not in session.server_logs or not reused:
            session.server_logs.add(server.log_path)
            emit(_ready(server, launch, label, reused, ready_s))
        server, records, error = _measured(session, server, launch, warmups, runs, label, shared)
        log = server.log_path.read_text(errors="replace")
        # A server that ended or went silent (its health too) is not asked for its state.
        answering = not isinstance(error, ServerError)
        session.effective.update(
            job.launching.effective(
                job.server, job.command, server.base_url if answering else None, log, records
            )
        )
        if last_of_launch:
            emit(SettingsReadBack(dict(session.effective)))
        if error is not None:
            raise error
    except BaseException:
        if shared:
            POOL.close()  # a failed job's server is not handed to the next one
        raise
    finally:
        if session.server is not None and last_of_launch:
            stop_own_server(session)
    if per_launch:
        # The launch's server time, its start-up and stop included (a sequence's budget).
        session.launch_s[launch] = time.monotonic() - started
        measured = tuple(r for r in records if not r.warmup)
        emit(LaunchMeasured(launch, measured, session.launch_s[launch]))


def _ready(
    server: ServerProcess, launch: int, label: str, reused: bool, ready_s: float
) -> ServerReady:
    """Which server the job measures on: a new one (its real launch), or the sweep's."""
    return ServerReady(
        launch_index=launch,
        label=label,
        url=server.base_url,
        log_path=server.log_path,
        reused=reused,
        ready_s=ready_s,
        started_at=server.started_at,
        cores=tuple(server.cores or ()),
        gpus=server.launch.env.get("CUDA_VISIBLE_DEVICES"),
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
    job = session.job
    gpus = server.launch.env.get("CUDA_VISIBLE_DEVICES", "")
    with (
        away_from(server.cores) as client_cores,
        telemetry.monitoring(
            server.server_pid(),
            [int(g) for g in gpus.split(",") if g.strip().isdigit()],
            job.config.stats.telemetry_interval_s,
        ) as monitor,
    ):
        session.emit(
            MeasuringStarted(
                warmups + len(runs),
                run_requests(job.config.workload, job.config.concurrency),
                tuple(client_cores or ()),
            )
        )
        return run_async(
            _measure(job, server, launch, warmups, runs, session.emit, monitor, earlier)
        )


def new_server(job: Job, log_path: Path, emit: JobEmitter) -> ServerProcess:
    """A server with a port and GPUs of its own, leased so that jobs sharing this host
    (parallel launchers) never get the same ones. Nothing is started yet."""
    cfg, engine = job.config, job.launching
    if cfg.engine.url:
        return ExternalServer(cfg.engine.url, engine.health_path, log_path, job.request_headers())
    host, lease_dir = cfg.engine.host, Path(cfg.host.lease_dir)
    holder = f"the server of {cfg.multirun.job_label or 'a job'}"
    leases = []
    try:
        port = cfg.engine.port
        if not port:
            port, port_lease = lease_port(lease_dir, host, free_port)
            leases.append(port_lease)
        launch = job.command.at(port)
        if (
            cfg.engine.gpus and "CUDA_VISIBLE_DEVICES" not in launch.env
        ):  # a pinned stack keeps its devices
            gpus = lease_devices(
                lease_dir,
                "gpu",
                host_gpus(cfg.host.gpus),
                cfg.engine.gpus,
                cfg.host.lease_wait_s,
                on_wait=lambda holders: emit(
                    Waiting(f"waiting for {cfg.engine.gpus} GPU(s): held by {holders}")
                ),
                holder=holder,
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
                on_wait=lambda holders: emit(
                    Waiting(f"waiting for {count} CPU core(s): held by {holders}")
                ),
                holder=holder,
            )
            leases.append(held)
            engine.pin_cores(launch, cores)
    except BaseException:
        for lease in leases:
            lease.release()
        raise
    return ServerProcess(launch, host, port, engine.health_path, log_path, leases, cores)


def _energy_of(result: RunResult, monitor: Optional[telemetry.Monitor]) -> Optional[str]:
    """What ``monitor`` saw of the machine during the run, put on it; where its energy was
    read (None: nothing watched)."""
    if monitor is None:
        return None
    samples = monitor.between(result.started_unix, result.started_unix + result.wall_s)
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
    return str(energy.source)


async def _measure(
    job: Job,
    server: ServerProcess,
    launch: int,
    warmups: int,
    runs: range,
    emit: JobEmitter,
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
    # A search's run stops sending once its attainment is decided (not a warm-up's: it
    # measures nothing), not before twice the server's slots have arrived.
    decision = (
        RateDecision(cfg.slo.target, min(2 * cfg.concurrency.streams, cfg.concurrency.arrivals))
        if search is not None and search.stop_when_decided
        else None
    )
    results: list[RunResult] = []
    with contextlib.closing(client):
        client.on_request = lambda record: emit(RequestDone(record))
        async with client.session() as http:
            schedule = [(i, True) for i in range(warmups)] + [(i, False) for i in runs]
            for run, warmup in schedule:
                rate = rate_for(warmup, results)
                result = await client.run(
                    run,
                    warmup,
                    http,
                    launch=launch,
                    rate=rate,
                    decided=None
                    if decision is None or warmup
                    else lambda sent: decision.decided(sent, cfg.slo),
                )
                energy_source = _energy_of(result, monitor)
                results.append(result)
                # Said between runs, never during one: what its observers write would land
                # in the timestamps of the streams still running.
                accounting = job.launching.server_accounting(result.accounting_deltas)
                emit(RunMeasured(result, accounting, energy_source))
                if result.faults:
                    break
    return results
