"""A peer's client beside a capacity sweep (issue 61 item 7): for each arm of the sweep in
SWEEP_DIR, its server started again from the job's command.txt (same binary, model, flags)
and SGLang's bench_serving sent Poisson arrivals at the rates that bracket the arm's
capacity - the highest rate specexp found met, the capacity itself, the lowest rate above it
found failed - after one warm-up run. Each request is judged by the sweep's SLO rule (TTFT <=
ttft, mean inter-token latency <= itl); the table sets the peer's attainment beside specexp's.
    python peer_beside.py SWEEP_DIR OUT_DIR --inputs DIR --report SWEEP_REPORT_JSON [--arrivals 192]"""

import argparse
import json
import os
import shlex
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import yaml

TTFT_S, ITL_S, TOKENS, INPUT_TOKENS = 0.2, 0.02, 256, 39  # slo=interactive; capacity_gpu's requests


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(command_txt: Path, log: Path) -> tuple[subprocess.Popen, int]:
    words = shlex.split(command_txt.read_text().strip())
    env = dict(os.environ)
    while words and "=" in words[0] and not words[0].startswith("-"):
        name, value = words.pop(0).split("=", 1)
        env[name] = value
    port = free_port()
    words[words.index("--port") + 1] = str(port)
    server = subprocess.Popen(words, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)
    for _ in range(240):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
            return server, port
        except OSError:
            if server.poll() is not None:
                break
            time.sleep(0.5)
    server.kill()
    raise SystemExit(f"server from {command_txt} did not come up: see {log}")


def bench(inputs: Path, port: int, rate: float, arrivals: int, seed: int, out: Path) -> dict:
    subprocess.run(
        [
            sys.executable,
            str(inputs / "bench_serving.py"),
            "--backend",
            "sglang-oai",
            "--base-url",
            f"http://127.0.0.1:{port}",
            "--model",
            str(inputs / "tok"),
            "--tokenizer",
            str(inputs / "tok"),
            "--dataset-name",
            "random",
            "--dataset-path",
            str(inputs / "prompts.json"),
            "--random-input-len",
            str(INPUT_TOKENS),
            "--random-output-len",
            str(TOKENS),
            "--random-range-ratio",
            "1.0",
            "--num-prompts",
            str(arrivals),
            "--request-rate",
            f"{rate:.4f}",
            "--seed",
            str(seed),
            "--output-file",
            str(out),
            "--output-details",
            "--disable-tqdm",
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    result = json.loads(out.read_text().splitlines()[-1])
    met = sum(
        1
        for ttft, itls in zip(result["ttfts"], result["itls"], strict=True)
        if ttft <= TTFT_S and sum(itls) / (TOKENS - 1) <= ITL_S
    )
    return {
        "rate": rate,
        "arrivals": arrivals,
        "completed": result["completed"],
        "met": met,
        "tok_s": result["output_throughput"],
        "duration_s": result["duration"],
    }


def bracket(arm: dict) -> list[tuple[str, float, float | None]]:
    points = sorted(arm["points"])
    share = {rate: good / requests for rate, requests, good in points}
    met = [rate for rate in share if share[rate] >= arm["target"]]
    low = max(met) if met else None
    failed = [
        rate for rate in share if low is not None and rate > low and share[rate] < arm["target"]
    ]
    high = min(failed) if failed else None
    rates = [
        ("highest met", low, share.get(low)),
        ("capacity", arm["rate"], None),
        ("lowest failed above", high, share.get(high)),
    ]
    return [(what, rate, specexp) for what, rate, specexp in rates if rate]


class ArmServer:
    """One arm's server, started again from its job's command.txt; a server that dies under
    the peer's arrivals (the draft arm's CUDA illegal instruction) is named and the rate
    measured once more on a new one, as specexp's search does."""

    def __init__(self, job: Path, label: str, out: Path) -> None:
        self.job, self.label, self.out, self.launches = job, label, out, 0
        self.server, self.port = self.launch()

    def launch(self) -> tuple[subprocess.Popen, int]:
        self.launches += 1
        return serve(self.job / "command.txt", self.out / f"server-{self.launches}.log")

    def measure(self, inputs: Path, rate: float, arrivals: int, seed: int, name: str) -> dict:
        for attempt in range(2):
            try:
                return bench(inputs, self.port, rate, arrivals, seed, self.out / name)
            except subprocess.CalledProcessError:
                if self.server.poll() is None:
                    raise
                died = {"arm": self.label, "rate": rate, "server_died": self.launches}
                print(json.dumps({**died, "attempt": attempt}), flush=True)
                self.server, self.port = self.launch()
        return {"rate": rate, "died_twice": True}

    def stop(self) -> None:
        self.server.kill()
        self.server.wait()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("sweep_dir", type=Path)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--inputs", type=Path, required=True)
    parser.add_argument("--arrivals", type=int, default=192)
    parser.add_argument("--report", type=Path, required=True)
    args = parser.parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    report = json.loads(args.report.read_text())
    arms = {arm["label"]: arm for arm in report["capacity_arms"]}
    rows = []
    for config in sorted(args.sweep_dir.glob("*/config.yaml")):
        job = config.parent
        label = yaml.safe_load(config.read_text())["multirun"]["job_label"]
        if label not in arms or not (job / "command.txt").is_file():
            continue
        out = args.out_dir / label.replace("=", "-")
        out.mkdir(exist_ok=True)
        server = ArmServer(job, label, out)
        try:
            warm = bracket(arms[label])[0][1]
            server.measure(args.inputs, warm, args.arrivals, 100, "warmup.jsonl")
            for seed, (what, rate, specexp) in enumerate(bracket(arms[label])):
                peer = server.measure(args.inputs, rate, args.arrivals, seed, f"bench-{seed}.jsonl")
                rows.append(
                    {
                        "arm": label,
                        "what": what,
                        "specexp_attainment": specexp,
                        "capacity": arms[label]["rate"],
                        **peer,
                    }
                )
                print(json.dumps(rows[-1]), flush=True)
        finally:
            server.stop()
    (args.out_dir / "peer.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
