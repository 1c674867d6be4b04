"""Do the client's figures agree with each server's own accounting? The same workload on
llama.cpp and vLLM (both serve the generated small pair here), client against server.

    python benchmarks/server_accounting.py [--streams 1 4] [--runs 3]

Each engine runs ``python -m specexp`` (no speculation, fixed prompt, 128 tokens per
request) at each concurrency into a temporary MLflow store; the table puts the client's
figures beside the server's for the same measured runs (README: "The server's own
accounting"). Tokens must agree exactly; the server's TTFT and end-to-end latency leave out
the HTTP exchange, detokenization and streaming that the client's include.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from mlflow.tracking import MlflowClient

ENGINES = {
    "llamacpp": [],
    "vllm": ["engine=vllm", "stack=vllm-cpu", "engine.extra_args=[--enforce-eager]"],
}
FIGURES = (  # label, client metric, server metric, scale
    ("tokens", "output_tokens_total", "server_output_tokens_total", 1),
    ("TTFT ms", "ttft_s_mean", "server_ttft_s_mean", 1000),
    ("TPOT ms", "tpot_s_mean", "server_tpot_s_mean", 1000),
    ("E2E ms", "e2e_s_mean", "server_e2e_s_mean", 1000),
)


def measure(engine: str, streams: int, runs: int, store: Path) -> dict[str, float]:
    uri = f"sqlite:///{store / 'mlflow.db'}"
    command = [
        sys.executable,
        "-m",
        "specexp",
        *ENGINES[engine],
        "model=tiny-pair-small",
        "workload=short",
        "workload.max_tokens=128",
        f"concurrency.streams={streams}",
        "stats.warmup_runs=1",
        f"stats.measured_runs={runs}",
        f"tracking.uri={uri}",
        f"hydra.run.dir={store / f'{engine}-{streams}'}",
    ]
    subprocess.run(command, check=True, capture_output=True, cwd=store)
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("specexp")
    (run,) = client.search_runs(
        [experiment.experiment_id], order_by=["attributes.start_time DESC"], max_results=1
    )
    return run.data.metrics


def cell(metrics: dict[str, float], name: str, scale: float) -> str:
    return f"{metrics[name] * scale:.1f}" if name in metrics else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    header = "| engine | streams | " + " | ".join(
        f"{label} client | {label} server" for label, *_ in FIGURES
    )
    print(header + " |\n|" + "---|" * (2 + 2 * len(FIGURES)))
    with tempfile.TemporaryDirectory() as tmp:
        for engine in ENGINES:
            for streams in args.streams:
                metrics = measure(engine, streams, args.runs, Path(tmp))
                cells = [
                    f"{cell(metrics, client, scale)} | {cell(metrics, server, scale)}"
                    for _, client, server, scale in FIGURES
                ]
                print(f"| {engine} | {streams} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
