"""Jobs beyond the sweep's process: submitit's local launcher against a real `mlflow server`,
host leases of GPUs and ports, and the checks that refuse what cannot work."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from specexp.analysis.results import Tag
from specexp.core.schemas.checks import ConfigError
from specexp.engines.records import LaunchSpec
from specexp.host.leases import ProcessCores, gpu_ids, lease_devices
from specexp.serving.server import ServerProcess
from tests.conftest import (
    TINY,
    mlflow_process,
    nothing_tracked,
    runs_in,
    server_pids,
    specexp_in_process,
    start_cli,
    store_env,
    sweep_parent,
)
from tests.slurm_cluster import PARTITION, one_node_cluster


def flat(text: str) -> str:
    """Output with rich's line wrapping undone."""
    return " ".join(text.split())


def max_overlap(intervals: list[tuple[int, int]]) -> int:
    events = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    running = peak = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    return peak


@pytest.fixture(scope="module")
def tracking_server(tmp_path_factory):
    """A real `mlflow server` with a SQLite backend, as docs/runbook.md starts it (on a copy
    of an empty store: no schema migrations at its start)."""
    store = tmp_path_factory.mktemp("mlflow-server")
    with mlflow_process(
        "server",
        "--backend-store-uri",
        store_env(store)["MLFLOW_TRACKING_URI"],
        "--artifacts-destination",
        str(store / "artifacts"),
        "--workers",
        "1",
        cwd=store,
    ) as url:
        yield url


def local_sweep(url: str, experiment: str, tmp_path: Path, *extra: str) -> list[str]:
    # A simulated two-GPU host: every server leases one of GPUs 0 and 1 (llama.cpp's CPU
    # build ignores CUDA_VISIBLE_DEVICES; the lease is what is tested).
    return [
        "-m",
        *TINY,
        "engine.threads=1",
        "hydra/launcher=submitit_local",
        "hydra.sweeper.max_batch_size=2",
        f"tracking.uri={url}",
        f"tracking.experiment={experiment}",
        "engine.gpus=1",
        "host.gpus=[0,1]",
        f"host.lease_dir={tmp_path / 'leases'}",
        # Three jobs, two at a time: a launcher that ran more at once would run all three.
        "replicate=0,1,2",
        *extra,
    ]


def parent_and_children(url: str, experiment: str):
    runs = runs_in(url, experiment)
    parent = sweep_parent(runs)
    return parent, [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]


def test_submitit_local_sweep_two_at_a_time_on_an_mlflow_server(tmp_path, tracking_server):
    url, leases = tracking_server, tmp_path / "leases"
    # Long enough (about 5 s of serving per job) for the two servers of a batch to overlap.
    result = specexp_in_process(
        *local_sweep(url, "parallel", tmp_path, "workload.max_tokens=192", "stats.measured_runs=3"),
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "sweep: 3 jobs, 3 to run" in result.stdout
    parent, children = parent_and_children(url, "parallel")
    assert len(children) == 3 and all(r.info.status == "FINISHED" for r in children)
    assert {r.info.run_name for r in children} == {"replicate=0", "replicate=1", "replicate=2"}
    # Each job started a server of its own, in its own process, and logged its log.
    assert all(r.data.tags[Tag.server_reused] == "false" for r in children)
    client = MlflowClient(url)
    for run in children:
        assert "server.log" in {a.path for a in client.list_artifacts(run.info.run_id)}
    assert all(run.data.metrics["tok_per_s_mean"] > 0 for run in children)

    # Two jobs at a time, never more; servers running together never shared a GPU or a port.
    assert max_overlap([(r.info.start_time, r.info.end_time) for r in children]) == 2
    servers = [
        (float(r.data.tags[Tag.server_started_at]), float(r.data.tags[Tag.server_stopped_at]))
        for r in children
    ]
    assert max_overlap(servers) == 2
    for i, a in enumerate(children):
        for j, b in enumerate(children[i + 1 :], i + 1):
            if servers[i][0] < servers[j][1] and servers[j][0] < servers[i][1]:
                assert a.data.tags[Tag.gpus] != b.data.tags[Tag.gpus]
                assert a.data.tags[Tag.server_url] != b.data.tags[Tag.server_url]
    assert {r.data.tags[Tag.gpus] for r in children} == {"0", "1"}
    assert not any(leases.iterdir()), "every lease is given back"
    assert not (tmp_path / "mlruns").exists(), "no job fell back to a local store"


def test_cpu_servers_side_by_side_on_two_cores_take_their_threads_in_cores_or_wait(
    tmp_path, tracking_server
):
    """Four llama.cpp jobs at once on a two-core host: those with one thread run side by side
    on a core each, those with two wait for both; no core ever serves two servers."""
    url = tracking_server
    result = specexp_in_process(
        "-m",
        *TINY,
        "hydra/launcher=submitit_local",
        "hydra.sweeper.max_batch_size=4",
        f"tracking.uri={url}",
        "tracking.experiment=cores",
        "host.cpus=[0,1]",
        f"host.lease_dir={tmp_path / 'leases'}",
        "engine.threads=1,2",
        "replicate=0,1",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    _, children = parent_and_children(url, "cores")
    assert len(children) == 4 and all(r.info.status == "FINISHED" for r in children)
    servers = [
        (
            float(r.data.tags[Tag.server_started_at]),
            float(r.data.tags[Tag.server_stopped_at]),
            set(r.data.tags[Tag.cpus].split(",")),
        )
        for r in children
    ]
    for run, (_, _, cores) in zip(children, servers, strict=True):
        assert len(cores) == int(run.data.params["engine.threads"])
        assert "--threads " + run.data.params["engine.threads"] in client_command(url, run)
    for i, (start, stop, cores) in enumerate(servers):
        for other_start, other_stop, other_cores in servers[i + 1 :]:
            if start < other_stop and other_start < stop:
                assert not cores & other_cores, "two servers at once on one core"
    assert not any((tmp_path / "leases").iterdir()), "every lease is given back"


def client_command(url: str, run) -> str:
    path = MlflowClient(url).download_artifacts(run.info.run_id, "command.txt")
    return Path(path).read_text()


def test_submitit_slurm_sweep_on_a_real_one_node_cluster(tmp_path, tracking_server):
    """Each job an array task of a real Slurm (one node, so one exclusive job at a time)."""
    with one_node_cluster(tmp_path / "slurm") as slurm_env:
        result = specexp_in_process(
            "-m",
            *TINY,
            "engine.threads=1",
            "hydra/launcher=submitit_slurm",
            f"hydra.launcher.partition={PARTITION}",
            f"tracking.uri={tracking_server}",
            "tracking.experiment=slurm",
            "speculative=none,draft",
            cwd=tmp_path,
            env=slurm_env,
        )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    parent, children = parent_and_children(tracking_server, "slurm")
    assert parent.info.status == "FINISHED"
    assert len(children) == 2 and all(r.info.status == "FINISHED" for r in children)
    assert all(
        r.data.tags[Tag.server_reused] == "false" and r.data.metrics["tok_per_s_mean"] > 0
        for r in children
    )
    # The jobs ran inside Slurm allocations, with the preset's sbatch directives.
    (script,) = tmp_path.glob("multirun/*/*/.submitit/*/*_submission.sh")
    for directive in (
        "--exclusive",
        "--ntasks-per-node=1",
        "--nodes=1",
        f"--partition={PARTITION}",
        "--array=0-1%2",
    ):
        assert f"#SBATCH {directive}" in script.read_text()
    assert "--gpus-per-node" not in script.read_text(), "a CPU server asks for no GPUs"
    environments = [
        json.loads(p.read_text())["inherited"]
        for p in tmp_path.glob("multirun/*/*/*/environment.json")
    ]
    assert len(environments) == 2 and all("SLURM_JOB_ID" in env for env in environments)


def test_an_interrupted_parallel_sweep_stops_its_jobs_and_their_servers(tmp_path, tracking_server):
    before = server_pids()
    args = local_sweep(
        tracking_server,
        "interrupted",
        tmp_path,
        "workload.max_tokens=256",
        "stats.measured_runs=20",
    )
    sweep = start_cli(*args, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 240
    while len(server_pids() - before) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert len(server_pids() - before) == 2, "two jobs were serving at once"
    sweep.send_signal(signal.SIGTERM)
    assert sweep.wait(timeout=120) != 0
    assert server_pids() - before == set()
    leftover = subprocess.run(
        ["pgrep", "-f", f"submitit.*{tmp_path}"], capture_output=True, text=True
    ).stdout
    assert not leftover.strip(), "no job process outlives the sweep"
    parent, children = parent_and_children(tracking_server, "interrupted")
    assert parent.info.status == "KILLED"
    assert len(children) == 2 and {r.info.status for r in children} == {"KILLED"}


@pytest.mark.no_engine_server
def test_parallel_launcher_refuses_a_local_sqlite_store(tmp_path, tracking_env):
    result = specexp_in_process(
        "-m",
        *TINY,
        "hydra/launcher=submitit_local",
        "speculative=none,draft",
        cwd=tmp_path,
        env=tracking_env,
    )
    assert result.returncode == 2
    out = flat(result.stdout)
    assert "is a local file" in out and "database is locked" in out
    assert (
        "mlflow server --backend-store-uri" in out and "tracking.uri=http://127.0.0.1:5000" in out
    )
    assert "nothing was launched" in out
    assert not list(tmp_path.glob("multirun/*/*/.submitit")) and nothing_tracked(tmp_path)


@pytest.mark.no_engine_server
@pytest.mark.parametrize(
    "override, message",
    [
        ("hydra.launcher.timeout_min=10", "hydra.launcher.timeout_min=10; raise it to 39"),
        (
            "hydra.launcher.gpus_per_node=4",
            "a job needs 8 GPUs (engine.gpus) but hydra.launcher.gpus_per_node=4",
        ),
    ],
)
def test_slurm_launcher_settings_that_cannot_hold_a_job_are_refused(tmp_path, override, message):
    result = specexp_in_process(
        "-m",
        "engine=sglang",
        "model=kimi-k2.5",
        "speculative=none,ngram",
        "hydra/launcher=submitit_slurm",
        override,
        "tracking.uri=http://login1:5000",
        "dry_run=true",
        cwd=tmp_path,
    )
    assert result.returncode == 2 and message in flat(result.stdout)


@pytest.mark.no_engine_server
def test_local_launcher_refuses_a_fixed_port_for_jobs_side_by_side(tmp_path):
    result = specexp_in_process(
        "-m",
        "engine=sglang",
        "model=kimi-k2.5",
        "speculative=none,ngram",
        "hydra/launcher=submitit_local",
        "tracking.uri=http://127.0.0.1:5000",
        "dry_run=true",
        cwd=tmp_path,
    )
    assert result.returncode == 2 and "engine.port=30000 is fixed" in flat(result.stdout)


@pytest.mark.no_engine_server
def test_gpu_leases_are_exclusive_and_die_with_their_holder(tmp_path: Path):
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from specexp.host.leases import lease_devices; "
            "lease_devices(Path(sys.argv[1]), 'gpu', ['0', '1'], 2, 5); print('held', flush=True); time.sleep(600)",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        # Another process holds them: a wait it can end, until host.lease_wait_s; the
        # error names the holder.
        with pytest.raises(RuntimeError, match=rf"not free after .*pid {holder.pid}"):
            lease_devices(tmp_path, "gpu", ["0", "1"], 1, wait_s=0.5, poll_s=0.1)
    finally:
        holder.kill()  # SIGKILL: no cleanup runs, the kernel drops the locks
        holder.wait()
    lease = lease_devices(tmp_path, "gpu", ["0", "1"], 2, wait_s=5)
    assert gpu_ids(lease) == "0,1"
    lease.release()
    with pytest.raises(Exception, match="needs 3 GPU"):
        lease_devices(tmp_path, "gpu", ["0", "1"], 3, wait_s=5)


@pytest.mark.no_engine_server
def test_cpu_servers_of_one_process_share_its_cores_and_other_processes_wait(tmp_path: Path):
    cores = ProcessCores()
    first, first_handle = cores.take(tmp_path, ["0", "1"], 1, wait_s=5)
    # A second server of this process (a sweep's other arm, taking turns) shares the core.
    second, second_handle = cores.take(tmp_path, ["0", "1"], 1, wait_s=5)
    assert first == second == ["0"]
    # Needing more, it leases what is missing.
    both, both_handle = cores.take(tmp_path, ["0", "1"], 2, wait_s=5)
    assert both == ["0", "1"]
    # Leased apart from them, in this process, they could never come free: refused at once.
    with pytest.raises(RuntimeError, match="waiting could never end"):
        lease_devices(tmp_path, "cpu", ["0", "1"], 1, wait_s=60, poll_s=0.1)
    for handle in (first_handle, second_handle):
        handle.release()
        handle.release()  # a server stopped twice gives back once
    with pytest.raises(RuntimeError, match="waiting could never end"):
        lease_devices(tmp_path, "cpu", ["0", "1"], 1, wait_s=60, poll_s=0.1)
    both_handle.release()  # the last server stopped: the cores go back to the host
    lease_devices(tmp_path, "cpu", ["0", "1"], 2, wait_s=1).release()
    with pytest.raises(ConfigError, match=r"needs 3 CPU core\(s\) \(one per thread\)"):
        cores.take(tmp_path, ["0", "1"], 3, wait_s=1)


@pytest.mark.no_engine_server
def test_a_server_runs_on_its_leased_cores_with_all_it_starts(tmp_path: Path):
    probe = (
        "import os, subprocess, sys; print(sorted(os.sched_getaffinity(0)), flush=True); "
        "subprocess.run([sys.executable, '-c', 'import os; print(sorted(os.sched_getaffinity(0)))'])"
    )
    server = ServerProcess(
        LaunchSpec([sys.executable, "-c", probe], {}),
        "127.0.0.1",
        1,
        "/",
        tmp_path / "log",
        (),
        ["1"],
    )
    server.start()
    assert server.process is not None and server.process.wait(timeout=60) == 0
    assert (tmp_path / "log").read_text().split() == ["[1]", "[1]"]
