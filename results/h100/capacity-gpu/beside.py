"""specexp's capacity runs (runs.json, sweep_report.json) beside SGLang bench_serving's at the
rates that bracket each arm's capacity (peer/*/*.jsonl.gz): throughput, and the share of
requests within slo=interactive (TTFT <= 200 ms, mean gap over the 256 tokens <= 20 ms),
judged by one rule for both clients. specexp's attainment is also given as its search
counted it (a run whose server did not keep up counts no request as met).

    python results/h100/capacity-gpu/beside.py
"""

import gzip
import json
from pathlib import Path

HERE = Path(__file__).parent
TTFT_S, GAP_S, TOKENS = 0.2, 0.02, 256


def peer_runs() -> list[tuple[str, str, dict]]:
    rows = []
    for path in sorted(HERE.glob("peer/*/*.jsonl.gz")):
        result = json.loads(gzip.open(path, "rt").read().splitlines()[-1])
        met = sum(
            1
            for ttft, gaps in zip(result["ttfts"], result["itls"], strict=True)
            if ttft <= TTFT_S and sum(gaps) / (TOKENS - 1) <= GAP_S
        )
        arm = "speculative=none" if path.parent.name == "none" else "speculative=draft"
        rows.append(
            (
                arm,
                f"{path.parent.name}/{path.name}",
                {
                    "rate": result["request_rate"],
                    "completed": result["completed"],
                    "met": met,
                    "tok_s": result["output_throughput"],
                },
            )
        )
    return rows


def main() -> None:
    report = json.loads((HERE / "sweep_report.json").read_text())
    runs = json.loads((HERE / "runs.json").read_text())
    points = {arm["label"]: arm["points"] for arm in report["capacity_arms"]}
    print("| arm | rate req/s | client | tok/s | met / requests | as the search counted it |")
    print("|---|---|---|---|---|---|")
    for arm, name, peer in peer_runs():
        print(
            f"| {arm} | {peer['rate']:.2f} | bench_serving `{name}` | {peer['tok_s']:,.0f} "
            f"| {peer['met']}/{peer['completed']} | - |"
        )
        for run in runs[arm]["runs"]:
            if abs(run["rate_achieved_rps"] - peer["rate"]) < 0.01:
                counted = next(
                    f"{good}/{requests}"
                    for rate, requests, good in points[arm]
                    if abs(rate - peer["rate"]) < 0.01
                )
                tok_s = f"{run['tok_per_s']:,.0f}" if "tok_per_s" in run else "- (server died)"
                print(
                    f"| {arm} | {run['rate_achieved_rps']:.2f} | specexp | {tok_s} | "
                    f"{run['met_by_rule']}/{run['requests']} | {counted} |"
                )


if __name__ == "__main__":
    main()
