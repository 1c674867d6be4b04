"""How much load can specexp's client generate, and how exactly does it time tokens?

    python benchmarks/client_capacity.py [--quick] [--peers-python PY] [--sglang DIR]

The server is benchmarks/paced_server.c, compiled here with ``cc``: one OpenAI-style event
per write, each token due at a fixed time after the request's start, in a single epoll
thread that costs a small part of a core - what a client measures against it is the
client. Two measurements, each client against the same server:

- unpaced: tokens as fast as the client reads; the client's capacity (tok/s, and its CPU
  per token);
- paced (2 ms per token, so 500 tok/s per stream): the error of the client's mean ITL
  against the injected one (target: under 5% at 64 streams, under 10% at 256).

Clients: specexp's (the code a run uses), a minimal aiohttp client (the floor: readline,
json.loads, a timestamp), and - where installed - SGLang's ``bench_serving`` (``--sglang``:
an SGLang source tree; its interpreter ``--peers-python`` needs ``datasets`` and
``transformers``), run offline, and NVIDIA AIPerf (``aiperf`` on that interpreter's PATH)
in its request-rate mode capped at the streams. Peers are run as their users run them, each
in its own process; every client's CPU has its start-up taken off (a run of one request);
paced, every client's ITL p50 and p99 are set beside the server's own (it records when it
wrote each token). The table gives each client's figures and specexp's ratio to the best
peer.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import aiohttp
import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from hydra import compose, initialize_config_dir  # noqa: E402

from specexp import hydra_app  # noqa: E402
from specexp.core.measurements import RunResult  # noqa: E402
from specexp.core.stats.summaries import percentiles  # noqa: E402
from specexp.core.tinymodels import ModelFormat, TinyPairSpec, ensure_pair  # noqa: E402
from specexp.host.leases import free_port  # noqa: E402
from specexp.hydra_app import prepare  # noqa: E402
from specexp.serving.client import LoadClient  # noqa: E402
from specexp.serving.event_loop import run_async  # noqa: E402
from specexp.serving.stream import session  # noqa: E402

PACE_MS = 2.0


@dataclass
class Figures:
    tokens: int
    wall_s: float
    cpu_s: float
    mean_itl_ms: Optional[float]
    itl_p50_ms: Optional[float] = None
    itl_p99_ms: Optional[float] = None

    @property
    def tok_per_s(self) -> float:
        return self.tokens / self.wall_s

    def itl_error(self, injected_ms: float) -> Optional[float]:
        return None if self.mean_itl_ms is None else self.mean_itl_ms / injected_ms - 1


def itl_figures(tokens: int, wall_s: float, cpu_s: float, itl_s: list[float]) -> Figures:
    """A client's figures from its own inter-token latencies (seconds)."""
    if not itl_s:  # requests of one token each: no gap
        return Figures(tokens, wall_s, cpu_s, None)
    found = percentiles(itl_s, (50, 99))
    return Figures(
        tokens,
        wall_s,
        cpu_s,
        statistics.fmean(itl_s) * 1000,
        found["p50"] * 1000,
        found["p99"] * 1000,
    )


class PacedServer:
    """benchmarks/paced_server.c, built once, one process per pace."""

    def __init__(self, build_dir: Path):
        compiler = shutil.which("cc") or shutil.which("gcc")
        if not compiler:
            sys.exit("a C compiler (cc) is needed to build the paced server")
        self.binary = build_dir / "paced_server"
        source = Path(__file__).with_name("paced_server.c")
        subprocess.run([compiler, "-O2", "-o", str(self.binary), str(source)], check=True)

    def start(
        self, gap_ms: float, gaps_file: Optional[Path] = None
    ) -> tuple[subprocess.Popen, str]:
        """The server on a free port; with ``gaps_file``, it writes its own token-write gaps
        there when it is terminated."""
        port = free_port()
        process = subprocess.Popen(
            [str(self.binary), str(port), str(int(gap_ms * 1000))]
            + ([str(gaps_file)] if gaps_file else [])
        )
        url = f"http://127.0.0.1:{port}"
        for _ in range(100):
            try:
                urllib.request.urlopen(url + "/health", timeout=1)
                return process, url
            except OSError:
                time.sleep(0.05)
        process.kill()
        raise RuntimeError("paced server did not start")


def cpu_of(children: bool) -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN if children else resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def specexp_run(
    url: str, streams: int, requests: int, tokens: int, processes: Optional[int] = None
) -> RunResult:
    """One run of specexp's client as a run measures (``processes``: its client processes;
    None, the default for the streams)."""
    hydra_app.register()
    with initialize_config_dir(config_dir=hydra_app.CONFIG_DIR, version_base="1.3"):
        job = prepare(
            compose(
                config_name="config",
                overrides=[
                    "engine=vllm",
                    f"engine.url={url}",
                    f"concurrency.streams={streams}",
                    f"concurrency.requests_per_stream={requests}",
                    f"workload.max_tokens={tokens}",
                ]
                + ([f"concurrency.client_processes={processes}"] if processes else []),
            )
        )
    client = LoadClient(job.engine, url, job.server, job.config.workload, job.config.concurrency)

    async def go():
        async with session() as http:
            return await client.run(0, False, http)

    with contextlib.closing(client):
        result = run_async(go())
    assert result.ok, [r.error for r in result.records if not r.ok][:3]
    return result


def specexp_client(url: str, streams: int, requests: int, tokens: int) -> Figures:
    # Its own CPU and, once they have ended, its worker processes'.
    cpu = cpu_of(children=False) + cpu_of(children=True)
    result = specexp_run(url, streams, requests, tokens)
    cpu = cpu_of(children=False) + cpu_of(children=True) - cpu
    itl = [x for r in result.records for x in r.itl_s]
    return itl_figures(result.output_tokens, result.wall_s, cpu, itl)


def minimal_client(url: str, streams: int, requests: int, tokens: int) -> Figures:
    """What anyone would write in twenty lines: the floor for an aiohttp client."""
    itl: list[float] = []
    counted = 0

    async def one(http: aiohttp.ClientSession) -> None:
        nonlocal counted
        body = {"model": "paced", "prompt": "hi", "max_tokens": tokens, "stream": True}
        async with http.post(url + "/v1/completions", json=body) as response:
            last = None
            async for line in response.content:
                if not line.startswith(b"data:") or line.startswith(b"data: [DONE]"):
                    continue
                json.loads(line[5:])
                now = time.perf_counter()
                if last is not None:
                    itl.append(now - last)
                last = now
                counted += 1

    async def stream(http: aiohttp.ClientSession) -> None:
        for _ in range(requests):
            await one(http)

    async def go() -> float:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
            start = time.perf_counter()
            await asyncio.gather(*(stream(http) for _ in range(streams)))
            return time.perf_counter() - start

    cpu = cpu_of(children=False)
    wall = asyncio.run(go())
    return itl_figures(counted, wall, cpu_of(children=False) - cpu, itl)


# bench_serving, run offline: a local tokenizer needs no hub, and without these each call
# spends tens of seconds on look-ups that fail on a machine without the hub.
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


def bench_serving(
    python: str, sglang: Path, tokenizer: Path
) -> Callable[[str, int, int, int], Figures]:
    def measure(url: str, streams: int, requests: int, tokens: int) -> Figures:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "out.jsonl"
            argv = [
                python, "-m", "sglang.bench_serving", "--backend", "vllm", "--base-url", url,
                "--model", "paced", "--tokenizer", str(tokenizer), "--dataset-name", "random-ids",
                "--random-input-len", "8", "--random-output-len", str(tokens),
                "--random-range-ratio", "1", "--num-prompts", str(streams * requests),
                "--max-concurrency", str(streams), "--request-rate", "inf",
                "--output-file", str(out), "--disable-tqdm",
            ]  # fmt: skip
            env = {**os.environ, **OFFLINE, "PYTHONPATH": str(sglang)}
            cpu = cpu_of(children=True)
            subprocess.run(argv, env=env, check=True, capture_output=True)
            cpu = cpu_of(children=True) - cpu
            result = json.loads(out.read_text().splitlines()[-1])
        return Figures(
            result["total_output_tokens"],
            result["duration"],
            cpu,
            result["mean_itl_ms"],
            result["median_itl_ms"],
            result["p99_itl_ms"],
        )

    return measure


def aiperf(aiperf_bin: str, tokenizer: Path) -> Callable[[str, int, int, int], Figures]:
    def measure(url: str, streams: int, requests: int, tokens: int) -> Figures:
        with tempfile.TemporaryDirectory() as tmp:
            # Its request-rate mode, capped at the streams: its concurrency mode alone
            # busy-waits for a free slot, which takes the cores the streams need.
            argv = [
                aiperf_bin, "profile", "--model", "paced", "--url", url,
                "--endpoint-type", "completions", "--streaming",
                "--tokenizer", str(tokenizer), "--concurrency", str(streams),
                "--request-rate", "100000", "--arrival-pattern", "constant",
                "--request-count", str(streams * requests),
                "--synthetic-input-tokens-mean", "8", "--output-tokens-mean", str(tokens),
                "--extra-inputs", "ignore_eos:true", "--artifact-dir", tmp,
                "--ui-type", "none",
            ]  # fmt: skip
            cpu = cpu_of(children=True)
            subprocess.run(argv, check=True, capture_output=True)
            cpu = cpu_of(children=True) - cpu
            (export,) = Path(tmp).rglob("profile_export_aiperf.json")
            result = json.loads(export.read_text())
        tokens_out = result["output_token_count"]["avg"] * result["request_count"]["avg"]
        itl = result["inter_token_latency"]
        return Figures(
            round(tokens_out),
            tokens_out / result["output_token_throughput"]["avg"],
            cpu,
            itl["avg"],
            itl.get("p50"),
            itl.get("p99"),
        )

    return measure


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer tokens per request")
    parser.add_argument("--peers-python", help="interpreter with the peers' dependencies")
    parser.add_argument("--sglang", type=Path, help="SGLang source tree (for bench_serving)")
    args = parser.parse_args()
    scale = 4 if args.quick else 1

    clients: dict[str, Callable[[str, int, int, int], Figures]] = {
        "specexp": specexp_client,
        "minimal aiohttp": minimal_client,
    }
    if args.peers_python:
        # The peers make their prompts with a tokenizer: a generated model's will do.
        tokenizer = ensure_pair(
            TinyPairSpec(vocab_size=512, embedding_length=512, feed_forward_length=1408),
            ModelFormat.hf,
        ).target
        if args.sglang:
            clients["bench_serving"] = bench_serving(args.peers_python, args.sglang, tokenizer)
        aiperf_bin = Path(args.peers_python).with_name("aiperf")
        if aiperf_bin.exists():
            clients["AIPerf"] = aiperf(str(aiperf_bin), tokenizer)
    peers = [name for name in clients if name != "specexp"]

    # (streams, requests per stream, tokens per request): ~100-200k events per cell.
    unpaced = [(1, 20, 2000), (16, 4, 2000), (64, 2, 1000), (256, 1, 600)]
    paced = [(64, 1, 500), (256, 1, 500)]

    table: dict[tuple[str, int, str], Figures] = {}
    truth: dict[tuple[str, int], tuple[float, float]] = {}  # the server's own p50, p99 (ms)
    with tempfile.TemporaryDirectory() as build:
        server = PacedServer(Path(build))
        process, url = server.start(0.0)
        try:
            for streams, requests, tokens in unpaced:
                for name, measure in clients.items():
                    # CPU counted alike: what the client spends to start and send each
                    # stream one 2-token request (a peer's interpreter loading its
                    # libraries, the client processes specexp starts at that level) is
                    # taken off, so that the CPU per token is the measuring's.
                    startup = measure(url, streams, 1, 2).cpu_s
                    figures = measure(url, streams, requests, max(tokens // scale, 50))
                    figures.cpu_s = max(0.0, figures.cpu_s - startup)
                    table[(name, streams, "unpaced")] = figures
                    print(
                        f"  {name:16} {streams:>4} streams unpaced  "
                        f"{figures.tok_per_s:>9.0f} tok/s",
                        file=sys.stderr,
                    )
        finally:
            process.kill()
            process.wait()
        # Paced: a server of its own for each client and level, which writes down when it
        # wrote every token - the true inter-token latencies the client's are checked on.
        for streams, requests, tokens in paced:
            for name, measure in clients.items():
                gaps = Path(build) / f"gaps-{streams}-{len(truth)}.txt"
                process, url = server.start(PACE_MS, gaps)
                try:
                    figures = measure(url, streams, requests, max(tokens // scale, 50))
                finally:
                    process.send_signal(signal.SIGTERM)
                    process.wait(timeout=30)
                true_ms = percentiles(np.loadtxt(gaps) / 1000, (50, 99))  # microseconds -> ms
                truth[(name, streams)] = (true_ms["p50"], true_ms["p99"])
                table[(name, streams, "paced")] = figures
                print(
                    f"  {name:16} {streams:>4} streams paced    {figures.tok_per_s:>9.0f} tok/s",
                    file=sys.stderr,
                )

    print("\nUnpaced (the client's capacity): tok/s (client CPU per token, with what it spends")
    print("to start and send each stream a 2-token request taken off)")
    print(f"{'client':16}" + "".join(f"{f'{s} streams':>20}" for s, *_ in unpaced))
    for name in clients:
        cells = [table[(name, s, "unpaced")] for s, *_ in unpaced]
        print(
            f"{name:16}"
            + "".join(f"{f.tok_per_s:>9.0f} ({1e6 * f.cpu_s / f.tokens:>4.1f} us)" for f in cells)
        )
    if peers:
        print(f"{'specexp / best':16}", end="")
        for streams, *_ in unpaced:
            best = max(table[(p, streams, "unpaced")].tok_per_s for p in peers)
            print(f"{table[('specexp', streams, 'unpaced')].tok_per_s / best:>20.2f}", end="")
        print()

    def ms(value: Optional[float]) -> str:
        return "-" if value is None else f"{value:.2f}"

    print(f"\nPaced at {PACE_MS:g} ms per token: tok/s sustained, the mean ITL's error, and ITL")
    print("p50 and p99 (ms) as the client measured them / as the server wrote the tokens")
    for streams, *_ in paced:
        print(f"{streams} streams:")
        for name in clients:
            f = table[(name, streams, "paced")]
            true50, true99 = truth[(name, streams)]
            print(
                f"  {name:16} {f.tok_per_s:>8.0f} tok/s {f.itl_error(PACE_MS):>+8.1%}"
                f"   p50 {ms(f.itl_p50_ms):>6} / {true50:.2f}"
                f"   p99 {ms(f.itl_p99_ms):>6} / {true99:.2f}"
            )
    print(
        f"\ntargets: ITL error < 5% at 64 streams, < 10% at 256; "
        f"measured on {os.cpu_count()} CPU(s), load average {os.getloadavg()[0]:.2f}"
    )


if __name__ == "__main__":
    main()
