"""Each capacity arm's energy per output token at the rates both arms ran (the search starts
alike, so both measured 8 and 16 req/s, and each warmed up at 8), from the per-run metrics
of the store this folder's runs were logged to:
    python results/h200/gpu-path/energy_at_rates.py STORE_URI
Runs whose requests failed are left out (their energy was spent on requests cut short)."""

from __future__ import annotations

import sys

from mlflow.tracking import MlflowClient


def main(uri: str) -> None:
    client = MlflowClient(uri)
    arms = {}
    for experiment in client.search_experiments():
        for run in client.search_runs([experiment.experiment_id], max_results=500):
            label = run.data.tags.get("mlflow.runName", "")
            if run.data.metrics.get("capacity_rps") is None:
                continue
            history = {
                key: {m.step: m.value for m in client.get_metric_history(run.info.run_id, key)}
                for key in ("rate_scheduled_rps", "energy_j_per_token", "failed_requests")
            }
            arms[f"{label} ({run.info.run_id[:8]})"] = {
                round(rate, 1): history["energy_j_per_token"].get(step)
                for step, rate in history["rate_scheduled_rps"].items()
                if not history["failed_requests"].get(step)
            }
    common = sorted(set.intersection(*(set(a) for a in arms.values())))
    print("| arm | " + " | ".join(f"J/token at {r} req/s" for r in common) + " |")
    print("|---|" + "---|" * len(common))
    for label, by_rate in arms.items():
        cells = " | ".join(f"{by_rate[r]:.4f}" if by_rate[r] else "-" for r in common)
        print(f"| {label} | {cells} |")


if __name__ == "__main__":
    main(sys.argv[1])
