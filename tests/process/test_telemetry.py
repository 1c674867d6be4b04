"""A busy machine is named in the run's warnings: another process holds a core while
llama.cpp is measured (on two cores, `llama-server --threads 2` runs many times slower)."""

from __future__ import annotations

import subprocess
import sys

from specexp.host import telemetry
from tests.conftest import QUICK, run_cli, runs_in, store_env


def test_a_process_holding_a_core_makes_a_busy_machine_warning(tmp_path):
    env = store_env(tmp_path)
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        result = run_cli(
            *QUICK,
            # One core for llama.cpp, the other the hog's: the run is not slowed ~14x, and
            # long enough for several telemetry samples (0.5 s apart).
            "engine.threads=1",
            "workload.max_tokens=256",
            "stats.warmup_runs=0",
            "stats.measured_runs=2",
            cwd=tmp_path,
            env=env,
        )
    finally:
        hog.kill()
    assert result.returncode == 0, result.stdout[-3000:]
    assert telemetry.BUSY.message in result.stdout
    (run,) = runs_in(env["MLFLOW_TRACKING_URI"])
    assert telemetry.BUSY.message in run.data.tags["warnings"]
    # The hog's core, give or take what the machine's other processes did.
    assert run.data.metrics["cpu_other_cores"] > 0.7
