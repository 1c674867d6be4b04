"""The capacity sweep's runs (runs.json: each arm's per-run metrics as MLflow logged them)
beside references measured another way: the energy of each run from nvidia-smi's own power
readings (power.csv, every 0.1 s, integrated over the run's window) against NVML's
total-energy counter that specexp read; llama.cpp's own token count and time per output
token against the client's; the requests in flight against Little's law.

    python results/h200/capacity-gpu/reference.py
"""

import csv
import json
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent


def power_readings() -> tuple[np.ndarray, np.ndarray]:
    """nvidia-smi's readings: Unix times (the node's clock is UTC) and watts."""
    times, watts = [], []
    with (HERE / "power.csv").open() as file:
        for row in csv.DictReader(file, skipinitialspace=True):
            stamp = datetime.strptime(row["timestamp"], "%Y/%m/%d %H:%M:%S.%f")
            times.append(stamp.replace(tzinfo=UTC).timestamp())
            watts.append(float(row["power.draw.instant [W]"]))
    return np.array(times), np.array(watts)


def joules(times: np.ndarray, watts: np.ndarray, start: float, end: float) -> float:
    """The power readings integrated from start to end (trapezoid, ends interpolated)."""
    inside = (times > start) & (times < end)
    t = np.concatenate([[start], times[inside], [end]])
    w = np.interp(t, times, watts)
    return float(np.sum(np.diff(t) * (w[1:] + w[:-1]) / 2))


def main() -> None:
    arms = json.loads((HERE / "runs.json").read_text())
    times, watts = power_readings()
    print(
        "arm | asked req/s | achieved | tok/s | goodput tok/s | SLO met | J/token NVML counter | "
        "J/token nvidia-smi power | ratio | W mean | tokens server/client | TPOT ms server/client "
        "| in flight / lambda W | steady"
    )
    for name, arm in arms.items():
        for run in arm["runs"]:
            start = run["midpoint_unix"] - run["wall_s"] / 2
            smi = joules(times, watts, start, start + run["wall_s"]) / run["output_tokens"]
            print(
                f"{name} | {run['rate_asked_rps']:.1f} | {run['rate_achieved_rps']:.1f} | "
                f"{run['tok_per_s']:.0f} | {run['goodput_tok_per_s']:.0f} | "
                f"{run['slo_attainment']:.0%} | {run['energy_j_per_token']:.4f} | {smi:.4f} | "
                f"{smi / run['energy_j_per_token']:.3f} | {run['energy_j'] / run['wall_s']:.0f} | "
                f"{run['server_output_tokens']:.0f}/{run['output_tokens']:.0f} | "
                f"{1e3 * run['server_tpot_s']:.2f}/{1e3 * run['tpot_s']:.2f} | "
                f"{run['in_flight']:.1f} / {run['in_flight_little']:.1f} | {run['steady']:.0f}"
            )


if __name__ == "__main__":
    main()
