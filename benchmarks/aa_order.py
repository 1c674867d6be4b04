"""A/A on one llama.cpp server, in blocks and interleaved: what each order concludes.

    python benchmarks/aa_order.py [--repeats 3] [--max-tokens 512]

Runs the issue's A/A sweep (`speculative=none replicate=0,1`, one shared server, default
stats: 2 warm-ups and 5 measured runs per arm) ``--repeats`` times in each order,
alternating the orders, and prints for each: the ratio and simultaneous interval of the
values as measured with the verdict they give (what a blocked design without drift
fitting reports), the drift fitted, and specexp's verdict. Run it on a quiet machine:
anything else holding a core changes llama.cpp's speed by far more than the drift.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from mlflow.tracking import MlflowClient
from scipy import stats

from specexp.core.stats.verdicts import interval, read_verdict

REPO = Path(__file__).resolve().parent.parent


def aa_sweep(workdir: Path, order: str, max_tokens: int, index: int) -> dict:
    uri = f"sqlite:///{workdir / 'aa.db'}"
    experiment = f"aa-{order}-{index}"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "specexp",
            "-m",
            "speculative=none",
            "replicate=0,1",
            f"workload.max_tokens={max_tokens}",
            "multirun.baseline='replicate=0'",
            f"multirun.order={order}",
            f"tracking.uri={uri}",
            f"tracking.experiment={experiment}",
            f"hydra.sweep.dir={workdir / experiment}",
        ],
        cwd=workdir,
        check=True,
        capture_output=True,
    )
    client = MlflowClient(uri)
    (experiment_id,) = [
        e.experiment_id for e in client.search_experiments() if e.name == experiment
    ]
    (parent,) = client.search_runs([experiment_id], "tags.`specexp.kind` = 'sweep'")
    path = client.download_artifacts(
        parent.info.run_id, "sweep_report/sweep_report.json", str(workdir / experiment)
    )
    (comparison,) = json.loads(Path(path).read_text())["comparisons"]
    return comparison


def as_measured(c: dict) -> str:
    """The ratio, interval and verdict of the values as measured (no drift fitted)."""
    low, high = interval(c["log_diff"], c["se"], c["df"], 1 - c["confidence"])
    p = 2 * stats.t.sf(abs(c["log_diff"]) / c["se"], c["df"])
    verdict = read_verdict(low, high, c["threshold"])
    ratio = math.exp(c["log_diff"])
    return f"{ratio - 1:+.1%} [{low - 1:+.1%}, {high - 1:+.1%}] p={p:.3f} {verdict}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=512)
    args = parser.parse_args()
    os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] = "false"
    print("order        as measured (no drift fitted)              drift        specexp")
    with tempfile.TemporaryDirectory() as directory:
        for index in range(args.repeats):
            for order in ("blocked", "interleaved"):
                c = aa_sweep(Path(directory), order, args.max_tokens, index)
                drift = c["drift"]
                slope = f"{math.expm1(drift['slope_per_min']):+.2%}/min" if drift else "-"
                print(f"{order:12} {as_measured(c):42} {slope:12} {c['verdict']}", flush=True)


if __name__ == "__main__":
    main()
