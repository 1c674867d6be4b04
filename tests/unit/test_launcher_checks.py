"""What a launcher is refused before anything is submitted, and what its jobs are told."""

from __future__ import annotations

from hydra import compose

from specexp import hydra_app
from specexp.run import launchers
from specexp.run.launchers import LauncherKind, check, job_minutes, job_overrides, launcher_kind
from tests.conftest import compose_job


class BasicLauncher:  # named like Hydra's, which specexp recognises by name
    params: dict = {}


class SlurmLauncher:
    def __init__(self, **params):
        self.params = params


class LocalLauncher(SlurmLauncher):
    pass


def configs(*overrides: str, jobs: int = 2):
    return [compose_job(*overrides, f"replicate={r}").config for r in range(jobs)]


def test_launchers_are_told_apart_by_kind():
    assert launcher_kind(BasicLauncher()) is LauncherKind.in_process
    assert launcher_kind(SlurmLauncher()) is LauncherKind.slurm
    assert launcher_kind(LocalLauncher()) is LauncherKind.local


def test_in_process_jobs_need_nothing():
    assert check(BasicLauncher(), configs(), "sqlite:///x.db") == []
    assert job_overrides(BasicLauncher(), "sqlite:///x.db") == []


def test_parallel_jobs_refuse_a_local_store_and_say_what_to_start_instead():
    (error,) = check(LocalLauncher(), configs(), "sqlite:///mlruns/mlflow.db")
    assert (
        "database is locked" in error
        and "mlflow server" in error
        and "tracking.uri=http://127.0.0.1:5000" in error
    )
    assert check(LocalLauncher(), configs(), "http://127.0.0.1:5000") == []
    (slurm,) = check(SlurmLauncher(), configs(), "file:///tmp/mlruns")
    assert "other nodes cannot reach it" in slurm


def test_a_fixed_port_is_refused_only_for_jobs_side_by_side():
    fixed = configs("engine.port=8080")
    (error,) = check(LocalLauncher(), fixed, "http://h:5000")
    assert "engine.port=8080 is fixed" in error
    assert check(LocalLauncher(), fixed, "http://h:5000", batch_size=1) == []
    assert check(SlurmLauncher(), fixed, "http://h:5000") == []  # one job per node


def test_slurm_limits_that_cannot_hold_a_job():
    jobs = configs("engine=sglang", "model=kimi-k2.5", "tracking.enabled=false")
    needed = job_minutes(jobs[0].stats, jobs[0].workload, jobs[0].concurrency, jobs[0].engine)
    errors = check(SlurmLauncher(gpus_per_node=4, timeout_min=needed - 1), jobs, "")
    assert errors == [
        "a job needs 8 GPUs (engine.gpus) but hydra.launcher.gpus_per_node=4",
        f"a job may need {needed} min (readiness timeout plus runs at 10 tok/s per stream) but "
        f"hydra.launcher.timeout_min={needed - 1}; raise it to {needed}",
    ]


def test_jobs_elsewhere_are_told_the_sweeps_store_quoted_for_hydra():
    assert job_overrides(LocalLauncher(), "http://u:p'q@h:5000") == [
        "tracking.uri='http://u:p\\'q@h:5000'",
        "multirun.reuse_servers=false",
    ]


def test_job_minutes_covers_loading_and_runs_at_the_floor_rate():
    (cfg,) = configs(
        "workload=short",
        "workload.max_tokens=600",
        "stats.warmup_runs=1",
        "stats.measured_runs=2",
        jobs=1,
    )
    seconds = (
        cfg.engine.ready_timeout_s + 3 * 600 / launchers.FLOOR_TOK_PER_S + launchers.JOB_OVERHEAD_S
    )
    assert job_minutes(cfg.stats, cfg.workload, cfg.concurrency, cfg.engine) == -(-seconds // 60)
    # A prompt set: each stream sends its share of the set every run (5 prompts over 2
    # streams: 3 for stream 0).
    (sets,) = configs(
        "workload=humaneval",
        "workload.dataset_limit=5",
        "concurrency.streams=2",
        "workload.max_tokens=600",
        "stats.warmup_runs=1",
        "stats.measured_runs=2",
        jobs=1,
    )
    seconds = (
        sets.engine.ready_timeout_s
        + 3 * 3 * 600 / launchers.FLOOR_TOK_PER_S
        + launchers.JOB_OVERHEAD_S
    )
    assert job_minutes(sets.stats, sets.workload, sets.concurrency, sets.engine) == -(
        -seconds // 60
    )


def test_the_presets_time_limit_is_the_jobs_from_its_typed_sections():
    """The resolver converts the sections job_minutes reads (the sweep's composed config,
    Hydra's node among it, does not convert whole) and nothing below it takes a DictConfig."""
    overrides = ("workload=short", "workload.max_tokens=600", "stats.measured_runs=4")
    hydra_app.register()
    with hydra_app.composing():
        composed = compose(
            config_name="config",
            overrides=["hydra/launcher=submitit_slurm", *overrides],
            return_hydra_config=True,
        )
    cfg = compose_job(*overrides).config
    needed = job_minutes(cfg.stats, cfg.workload, cfg.concurrency, cfg.engine)
    assert composed.hydra.launcher.timeout_min == needed > 0
