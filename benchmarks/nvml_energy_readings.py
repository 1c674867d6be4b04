"""Record NVML's total-energy counter and power readings on a GPU, idle and under load, as
the fixture specexp's energy tests read (tests/unit/readings/nvml_energy_*.json):

    python benchmarks/nvml_energy_readings.py OUT.json [--seconds 6] [--every-ms 2]

Reads GPU 0 every ``--every-ms`` for ``--seconds``: the first third idle, the middle third
under a matrix-multiply load (torch, when installed), the last third idle again. Each
reading: the time (s, monotonic), the counter (mJ), the power (mW). The H200's fixture was
recorded by this loop (run inline on the GPU host, every 2 ms asked, about 6 ms got): its
counter moves every 100 ms, and its power reading trails the load by about a second."""

from __future__ import annotations

import argparse
import json
import threading
import time

import pynvml


def load(stop: threading.Event) -> None:
    try:
        import torch  # noqa: PLC0415 - optional: the load, where the GPU's host has it
    except ImportError:
        return
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    while not stop.is_set():
        a = (a @ a).clamp_(-1, 1)
    torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--every-ms", type=float, default=2.0)
    args = parser.parse_args()
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    readings, stop = [], threading.Event()
    worker = threading.Thread(target=load, args=(stop,), daemon=True)
    start = time.monotonic()
    while (now := time.monotonic() - start) < args.seconds:
        if now >= args.seconds / 3 and not worker.is_alive() and not stop.is_set():
            worker.start()
        if now >= 2 * args.seconds / 3:
            stop.set()
        readings.append(
            [
                round(now, 6),
                pynvml.nvmlDeviceGetTotalEnergyConsumption(handle),
                pynvml.nvmlDeviceGetPowerUsage(handle),
            ]
        )
        time.sleep(args.every_ms / 1000)
    stop.set()
    with open(args.out, "w") as out:
        json.dump(
            {
                "gpu": pynvml.nvmlDeviceGetName(handle),
                "driver": pynvml.nvmlSystemGetDriverVersion(),
                "every_ms": args.every_ms,
                "load": "torch bf16 8192x8192 matmuls, middle third",
                "columns": ["time_s", "energy_mj", "power_mw"],
                "readings": readings,
            },
            out,
        )


if __name__ == "__main__":
    main()
