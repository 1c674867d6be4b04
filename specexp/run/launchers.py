"""Jobs beyond the sweep's own process: Hydra launcher plugins and what they need.

specexp schedules nothing itself. ``hydra/launcher=submitit_slurm`` submits each job to
Slurm as one task on one exclusive node with the server's GPUs; ``submitit_local`` runs
jobs as local processes (``hydra.sweeper.max_batch_size`` of them at a time) to try the
same thing on one machine. The presets in ``conf/hydra/launcher/`` carry the plugin's names,
so Hydra validates them against the plugin's own schemas. Jobs in other processes, or on
other nodes, cannot share a server with the sweep or write one SQLite file safely, so the
sweep checks the launcher against the plan before anything is submitted, and tells each job
where to log.
"""

from __future__ import annotations

import math
import os
import shlex
import signal
import sys
import warnings
from enum import StrEnum
from typing import Any, Optional, Sequence
from urllib.parse import urlparse

import psutil
from submitit.slurm import slurm

from specexp.core.schemas.concurrency import ConcurrencyConfig, requests_per_stream
from specexp.core.schemas.engine import EngineConfig
from specexp.core.schemas.run import RunConfig
from specexp.core.schemas.stats import StatsConfig
from specexp.core.schemas.workload import WorkloadConfig

# A floor for the output rate of one stream when sizing a job's time limit: a job killed at
# its limit loses its measurements, one that ends early costs nothing.
FLOOR_TOK_PER_S = 10.0
# Start-up of the job itself (interpreter, stack capture, MLflow) and the server's stop.
JOB_OVERHEAD_S = 300.0


def job_minutes(
    stats: StatsConfig,
    workload: WorkloadConfig,
    concurrency: ConcurrencyConfig,
    engine: EngineConfig,
) -> int:
    """A time limit for one job: every launch's readiness timeout (model load) plus its
    warm-up and measured runs at :data:`FLOOR_TOK_PER_S` per stream, plus overhead. Of the
    sections it reads, so that the presets' resolver (``hydra_app``) converts only those:
    the composed config is whole only in the job."""
    runs = stats.warmup_runs + stats.measured_runs
    if concurrency.duration_s:
        run_s = concurrency.duration_s + workload.max_tokens / FLOOR_TOK_PER_S
    else:
        requests = requests_per_stream(workload, concurrency)
        run_s = requests * workload.max_tokens / FLOOR_TOK_PER_S
    seconds = stats.launches * (engine.ready_timeout_s + runs * run_s) + JOB_OVERHEAD_S
    return math.ceil(seconds / 60)


def quiet_preset_validation() -> None:
    """The presets keep the plugin's names on purpose (that is how users select them), and
    Hydra's schema matching by name, which validates them against the plugin's schemas,
    warns about it."""
    warnings.filterwarnings(
        "ignore", message=r"(?s).*is validated against ConfigStore schema with the same name"
    )


class LauncherKind(StrEnum):
    # Hydra's basic launcher: jobs one after another inside the sweep's process.
    in_process = "in process"
    # Jobs as parallel processes on this host (submitit_local, joblib).
    local = "local processes"
    # Jobs submitted to Slurm, on other nodes.
    slurm = "slurm"


def launcher_kind(launcher: Any) -> LauncherKind:
    """By class name: Hydra's basic launcher is not public API, so it is not imported."""
    name = type(launcher).__name__
    return {"BasicLauncher": LauncherKind.in_process, "SlurmLauncher": LauncherKind.slurm}.get(
        name, LauncherKind.local
    )


def local_store(uri: str) -> bool:
    """A tracking URI that is a file on this machine (SQLite, or MLflow's file store)."""
    return urlparse(uri).scheme in ("", "file", "sqlite")


def check(
    launcher: Any, jobs: Sequence[RunConfig], uri: str, batch_size: Optional[int] = None
) -> list[str]:
    """Why this launcher cannot run these jobs as configured; empty when it can."""
    kind = launcher_kind(launcher)
    if kind == LauncherKind.in_process:
        return []
    slurm_jobs = kind == LauncherKind.slurm
    name = type(launcher).__name__
    errors = []
    tracked = (
        bool(jobs) and jobs[0].tracking.enabled
    )  # checked in dry runs too: they say what would fail
    if tracked and local_store(uri):
        errors.append(
            f"{name} runs jobs in parallel processes{' on other nodes' if slurm_jobs else ''}, and the "
            f"tracking store {uri} is a local file: concurrent writers to one SQLite file fail with 'database is "
            f"locked'{', and other nodes cannot reach it' if slurm_jobs else ''}. Start a tracking server "
            f"and log to it: `mlflow server --backend-store-uri sqlite:///mlflow-server/mlflow.db "
            f"--artifacts-destination mlflow-server/artifacts --host 127.0.0.1 --port 5000`, then add "
            f"tracking.uri=http://127.0.0.1:5000 (see docs/runbook.md)"
        )
    params = getattr(launcher, "params", {})
    side_by_side = not slurm_jobs and min(batch_size or len(jobs), len(jobs)) > 1
    for cfg in jobs:
        if side_by_side and cfg.engine.port:
            errors.append(
                f"engine.port={cfg.engine.port} is fixed, and {name} runs jobs side by side on this host, "
                f"where their servers would clash: set engine.port=0 (each server leases a free port)"
            )
        gpus = params.get("gpus_per_node")
        if slurm_jobs and gpus is not None and gpus < cfg.engine.gpus:
            errors.append(
                f"a job needs {cfg.engine.gpus} GPUs (engine.gpus) but hydra.launcher.gpus_per_node={gpus}"
            )
        limit = params.get("timeout_min")
        needed = job_minutes(cfg.stats, cfg.workload, cfg.concurrency, cfg.engine)
        if limit is not None and limit < needed:
            errors.append(
                f"a job may need {needed} min (readiness timeout plus runs at {FLOOR_TOK_PER_S:.0f} "
                f"tok/s per stream) but hydra.launcher.timeout_min={limit}; raise it to {needed}"
            )
    return list(dict.fromkeys(errors))


def job_overrides(launcher: Any, uri: str) -> list[str]:
    """What jobs outside the sweep's process must be told: the sweep's tracking store (the
    parent run is there) and that no server outlives its job."""
    if launcher_kind(launcher) == LauncherKind.in_process:
        return []
    quoted = uri.replace("\\", "\\\\").replace("'", "\\'")  # Hydra's quoted-string escapes
    return [f"tracking.uri='{quoted}'", "multirun.reuse_servers=false"]


def sbatch_preview(launcher: Any, jobs: int) -> str:
    """The sbatch script a Slurm launcher would submit for an array of ``jobs``, written by
    submitit's own script builder from the launcher's parameters (renamed as submitit's
    executor renames them). Submitit's executor itself refuses to start without ``srun``, so
    a dry run on a machine without Slurm goes through these module-level helpers instead -
    private ones (``_make_sbatch_string``, ``_convert_mem``): submitit has no public way to
    write the script without submitting it. tests/process/test_runbook.py pins the script they write."""
    renames = slurm.SlurmExecutor._equivalence_dict()
    params: dict[str, Any] = {
        str(renames.get(k, k)): v
        for k, v in launcher.params.items()
        if k not in ("submitit_folder", "max_num_timeout")
    }
    if params.get("mem") is not None:
        params["mem"] = slurm._convert_mem(params["mem"])
    folder = launcher.params["submitit_folder"]
    command = shlex.join([sys.executable, "-u", "-m", "submitit.core._submit", folder])
    return slurm._make_sbatch_string(command=command, folder=folder, map_count=jobs, **params)


def stop_local_jobs(grace_s: float = 30.0) -> None:
    """Interrupt the jobs a local parallel launcher started from this process, so that each
    stops its server and ends its run: SIGINT to the job processes - this process's
    descendants in its session with no child there (the launcher's own helpers, such as
    submitit's controller, would SIGKILL a job one second after interrupting it). Servers run
    in sessions of their own and are stopped by their jobs. What is left after ``grace_s``
    is killed; a server dies with its job (see server.py)."""
    session = os.getsid(0)
    ours = [p for p in psutil.Process().children(recursive=True) if _session(p) == session]
    jobs = [p for p in ours if not any(_session(c) == session for c in _children(p))]
    for process in jobs:
        _signal(process, signal.SIGINT)
    psutil.wait_procs(jobs, timeout=grace_s)
    _, left = psutil.wait_procs(ours, timeout=5)
    for process in left:
        _signal(process, signal.SIGKILL)


def _session(process: Any) -> Optional[int]:
    try:
        return os.getsid(process.pid)
    except OSError:
        return None


def _children(process: Any) -> list:
    try:
        return process.children()
    except psutil.Error:
        return []


def _signal(process: Any, sig: int) -> None:
    try:
        process.send_signal(sig)
    except psutil.Error:
        pass
