"""scripts/gpu-steps.sh, the kit for a lent GPU machine, on the CPU with test servers (steps
of the test's own, GPU_STEPS_FILE): steps started detached and polled into parts; the
machine lost (its folder removed) and polled bare, which says at once that the steps' disk
is gone; the parts unpacked into a new folder and the steps started again, which measures
nothing already done. Two sweeps of one configuration into two directories are both
measured (a new sweep directory starts fresh), a third resumes from another directory when
told (multirun.resume_from)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, TINY, fake_llama_server, is_sweep, runs_in, store_env

SCRIPT = REPO / "scripts" / "gpu-steps.sh"

STEPS = """
tiny=({tiny} "stack.bin_dir={bin_dir}" replicate=0,1 multirun.order=blocked
  stats.sequential.enabled=false)
step_first() {{ python3 -m specexp -m "${{tiny[@]}}" hydra.sweep.dir=gpu-store/first >"$logs/first.log" 2>&1; }}
step_second() {{ python3 -m specexp -m "${{tiny[@]}}" hydra.sweep.dir=gpu-store/second >"$logs/second.log" 2>&1; }}
step_third() {{
  python3 -m specexp -m "${{tiny[@]}}" hydra.sweep.dir=gpu-store/third \\
    multirun.resume_from=gpu-store/first >"$logs/third.log" 2>&1
}}
"""


def new_machine(root: Path) -> None:
    """A fresh checkout of the kit where the last one was (a lent machine's checkout is at
    the same path each time): nothing of what the steps wrote."""
    shutil.rmtree(root, ignore_errors=True)
    (root / "scripts").mkdir(parents=True)
    shutil.copy(SCRIPT, root / "scripts")


def kit(root: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", "scripts/gpu-steps.sh", "-", *args],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def finished_jobs(uri: str) -> list[str]:
    return sorted(
        r.info.run_id for r in runs_in(uri) if r.info.status == "FINISHED" and not is_sweep(r)
    )


@pytest.mark.no_engine_server
def test_a_lost_machine_is_said_at_once_and_resuming_from_the_parts_measures_nothing_again(
    tmp_path,
):
    root, out = tmp_path / "checkout", tmp_path / "out"
    out.mkdir()
    bin_dir = fake_llama_server(tmp_path, "--itl-ms", "1")
    steps = tmp_path / "steps.sh"
    steps.write_text(STEPS.format(tiny=" ".join(TINY), bin_dir=bin_dir))
    new_machine(root)
    (root / "mlruns").mkdir()
    env = {
        **{k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"},
        # The store under the checkout (its default place), which the parts carry.
        **store_env(root / "mlruns"),
        "OUT": str(out),
        "GPU_STEPS_FILE": str(steps),
    }
    uri = env["MLFLOW_TRACKING_URI"]

    assert kit(root, env, "start", "first", "second").returncode == 0
    polled = kit(root, env, "poll", "300")
    assert polled.returncode == 0, polled.stdout + polled.stderr
    assert "finished" in polled.stdout and "collected:" in polled.stdout
    # One configuration into two directories: the second is measured, not "done".
    second = (root / "gpu-store" / "logs" / "second.log").read_text()
    assert "sweep: 2 jobs, 2 to run" in second and "skipped" not in second
    measured = finished_jobs(uri)
    assert len(measured) == 4
    parts = sorted(out.glob("gpu-store.tar.gz.*"))
    assert parts

    # The machine is lost (as if while `second` ran: its done marker never written).
    new_machine(root)
    started = time.monotonic()
    bare = kit(root, env, "poll", "300")
    assert bare.returncode == 4, bare.stdout + bare.stderr
    assert "the disk they ran on\nis gone" in bare.stdout and "tar xzf -" in bare.stdout
    assert time.monotonic() - started < 60  # said at once, not after the poll's limit

    with subprocess.Popen(["tar", "xzf", "-"], cwd=root, stdin=subprocess.PIPE) as unpack:
        assert unpack.stdin is not None
        for part in parts:
            unpack.stdin.write(part.read_bytes())
    assert unpack.returncode == 0
    (root / "gpu-store" / "done" / "second").unlink()
    (root / "gpu-store" / "logs" / "second.log").unlink()
    for part in parts:
        part.unlink()
    # The unpacked run.pid is the lost machine's process: not running here.
    assert kit(root, env, "start", "first", "second", "third").returncode == 0
    polled = kit(root, env, "poll", "300")
    assert polled.returncode == 0, polled.stdout + polled.stderr
    logs = root / "gpu-store" / "logs"
    assert "first: done already" in (logs / "steps.txt").read_text()
    # The sweep cut short resumes in its own directory; the third takes the first's jobs.
    for step in ("second", "third"):
        log = (logs / f"{step}.log").read_text()
        assert "sweep: 2 jobs, 0 to run" in log and log.count("skipped") == 2, log[-2000:]
    assert finished_jobs(uri) == measured


WRITER = """
step_writer() {
  mkdir -p gpu-store/writer
  # A server writing its log as fast as a busy one, until the test says stop.
  until [ -e gpu-store/stop ]; do
    head -c 100000 /dev/zero >>gpu-store/writer/server.log
    sleep 0.01
  done
}
"""


@pytest.mark.no_engine_server
def test_a_poll_while_a_server_writes_its_log_returns_the_parts(tmp_path):
    """tar exits 1 when a file changes as it reads it (a server writing its log): both
    mid-run polls of the H100 kit returned nothing; what tar read comes back now."""
    root, out = tmp_path / "checkout", tmp_path / "out"
    out.mkdir()
    steps = tmp_path / "steps.sh"
    steps.write_text(WRITER)
    new_machine(root)
    env = {**os.environ, "OUT": str(out), "GPU_STEPS_FILE": str(steps)}
    assert kit(root, env, "start", "writer").returncode == 0
    log = root / "gpu-store" / "writer" / "server.log"
    deadline = time.monotonic() + 120
    while not (log.exists() and log.stat().st_size > 1_000_000) and time.monotonic() < deadline:
        time.sleep(0.1)
    polled = kit(root, env, "poll", "1")
    assert polled.returncode == 3, polled.stdout + polled.stderr
    assert "collected:" in polled.stdout and "still running" in polled.stdout
    listed = subprocess.run(
        "cat gpu-store.tar.gz.* | tar tzf -", shell=True, cwd=out, capture_output=True, text=True
    )
    assert "gpu-store/writer/server.log" in listed.stdout.split()
    (root / "gpu-store" / "stop").touch()
    assert kit(root, env, "poll", "120").returncode == 0
