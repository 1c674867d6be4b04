"""The capacity sweep's runs as MLflow logged them (runs.json: each arm's per-run metrics, one
dict a measured run, in the order run), read from the store the GPU parts brought back, with
each run's requests judged by slo=interactive's rule from its job's requests.jsonl in the
sweep's folder (TTFT <= 200 ms, mean gap over its tokens <= 20 ms: `requests`, `met_by_rule`), the rule
beside.py applies to the peer's requests.

    python results/h100/capacity-gpu/runs_from_store.py STORE_URI PARENT_RUN_ID SWEEP_DIR
"""

import json
import sys
from pathlib import Path

import yaml
from mlflow.tracking import MlflowClient

KEYS = (
    "rate_asked_rps",
    "rate_achieved_rps",
    "tok_per_s",
    "goodput_rps",
    "output_tokens",
    "server_output_tokens",
    "energy_j_per_token",
    "in_flight",
    "in_flight_little",
    "acceptance_length",
    "failed_requests",
)
TTFT_S, GAP_S = 0.2, 0.02


def judged(job: Path, steps: dict[int, dict]) -> None:
    for line in (job / "requests.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record["warmup"]:
            continue
        step = steps.setdefault(record["run"], {})
        step["requests"] = step.get("requests", 0) + 1
        step["met_by_rule"] = step.get("met_by_rule", 0) + int(
            record["ok"]
            and record["ttft_s"] <= TTFT_S
            and (record["e2e_s"] - record["ttft_s"]) / (record["output_tokens"] - 1) <= GAP_S
        )


def main() -> None:
    client = MlflowClient(tracking_uri=sys.argv[1])
    parent = client.get_run(sys.argv[2])
    jobs = client.search_runs(
        [parent.info.experiment_id], f"tags.mlflow.parentRunId = '{sys.argv[2]}'"
    )
    folders = {
        yaml.safe_load(config.read_text())["multirun"]["job_label"]: config.parent
        for config in Path(sys.argv[3]).glob("*/config.yaml")
    }
    arms = {}
    for job in jobs:
        steps: dict[int, dict] = {}
        for key in KEYS:
            for metric in client.get_metric_history(job.info.run_id, key):
                steps.setdefault(metric.step, {})[key] = metric.value
        label = job.data.params.get("multirun.job_label", job.info.run_name)
        judged(folders[label], steps)
        arms[label] = {"run_id": job.info.run_id, "runs": [steps[step] for step in sorted(steps)]}
    out = Path(__file__).parent / "runs.json"
    out.write_text(json.dumps(arms, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
