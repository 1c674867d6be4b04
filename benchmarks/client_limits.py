"""The client's own limits, on this machine: what specexp's load client can send and time
before it, not the server, is what a run measures.

    python benchmarks/client_limits.py per-core      # events/s per core, microseconds per request
    python benchmarks/client_limits.py send-lag      # p99 send lag, open loop, 64 and 256 in flight
    python benchmarks/client_limits.py long-context  # 64K-token prompts, 4096-token streams
    python benchmarks/client_limits.py all [--quick]

Each part prints its figures on stdout (progress on stderr). The server is
benchmarks/paced_server.c (benchmarks/client_capacity.py builds it): one event per write,
each token due a fixed gap after the one before, in one epoll thread - never the bottleneck.

- per-core: one client process (one event loop, so its CPU is at most one core) against the
  unpaced server. Events per second per core: 64 streams of 2000-token requests, events read
  over the client's CPU seconds. Microseconds per request: 64 streams of 1-token requests
  (request, one event, the closing ones), the client's CPU over the requests.
- send-lag: open loop, uniform arrivals against the server paced at 2 ms per token, 100
  tokens a request (0.2 s each), at the rates that keep 64 and 256 requests in flight
  (Little's law: 320 and 1280 requests/s): each request's send lag (sent after it was due),
  its p50, p99 and maximum, and the rate the client achieved.
- long-context: 16 streams, prompts of 65,536 words (a token or more each with any
  tokenizer: 64K tokens or more, 0.4 MB a request) and 4096-token streamed outputs. Unpaced:
  tok/s and CPU per token against the same with 8-word prompts (a client whose send or read
  path copies per byte collapses here). Paced at 2 ms per token: the client's mean ITL error
  and its ITL p50 and p99 against the server's own record of when it wrote each token.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Optional

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from client_capacity import PACE_MS, PacedServer, cpu_of  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402

from specexp import hydra_app  # noqa: E402
from specexp.core.measurements import RunResult  # noqa: E402
from specexp.hydra_app import prepare  # noqa: E402
from specexp.serving.client import LoadClient  # noqa: E402
from specexp.serving.event_loop import run_async  # noqa: E402
from specexp.serving.stream import session  # noqa: E402

LONG_PROMPT_WORDS = 65_536
LONG_OUTPUT_TOKENS = 4096


def run_client(
    url: str, overrides: list[str], prompt: Optional[str] = None
) -> tuple[RunResult, float]:
    """One measured run of specexp's client, as a run measures, with its CPU seconds (its
    own and its worker processes')."""
    hydra_app.register()
    with initialize_config_dir(config_dir=hydra_app.CONFIG_DIR, version_base="1.3"):
        job = prepare(
            compose(
                config_name="config", overrides=["engine=vllm", f"engine.url={url}", *overrides]
            )
        )
    workload = job.config.workload
    if prompt is not None:  # too long for a command line
        workload = dataclasses.replace(workload, prompt=prompt)
    client = LoadClient(job.engine, url, job.server, workload, job.config.concurrency)

    async def go() -> RunResult:
        async with session() as http:
            return await client.run(0, False, http)

    cpu = cpu_of(children=False) + cpu_of(children=True)
    with contextlib.closing(client):
        result = run_async(go())
    cpu = cpu_of(children=False) + cpu_of(children=True) - cpu
    assert result.ok, [r.error for r in result.records if not r.ok][:3]
    return result, cpu


def cpu_s(process: subprocess.Popen) -> float:
    """A running process's CPU seconds (Linux): the server's, to show it was not the limit."""
    fields = Path(f"/proc/{process.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def closed(streams: int, requests: int, tokens: int, processes: int = 1) -> list[str]:
    return [
        f"concurrency.streams={streams}",
        f"concurrency.requests_per_stream={requests}",
        f"concurrency.client_processes={processes}",
        f"workload.max_tokens={tokens}",
    ]


def per_core(server: PacedServer, scale: int) -> None:
    process, url = server.start(0.0)
    try:
        run_client(url, closed(64, 1, 2))  # warm: connections, imports
        result, cpu = run_client(url, closed(64, 1, 2000 // scale))
        events = result.output_tokens
        print(
            f"events per second per core: {events / cpu:,.0f} ({events:,} events in "
            f"{cpu:.2f} CPU s, {result.wall_s:.2f} s wall, one client process, 64 streams)"
        )
        requests = 64 * 50 // scale
        result, cpu = run_client(url, closed(64, 50 // scale, 1))
        print(
            f"microseconds per request: {1e6 * cpu / requests:,.0f} ({requests:,} 1-token "
            f"requests in {cpu:.2f} CPU s, {result.wall_s:.2f} s wall, one client process)"
        )
    finally:
        process.kill()
        process.wait()


def send_lag(server: PacedServer, scale: int) -> None:
    tokens = 100
    latency_s = tokens * PACE_MS / 1000
    for in_flight in (64, 256):
        rate = in_flight / latency_s
        arrivals = int(rate * 8 / scale)
        process, url = server.start(PACE_MS)
        try:
            result, cpu = run_client(
                url,
                [
                    "concurrency.arrival=uniform",
                    f"concurrency.rate={rate:g}",
                    f"concurrency.arrivals={arrivals}",
                    f"workload.max_tokens={tokens}",
                ],
            )
            server_cpu = cpu_s(process)
        finally:
            process.kill()
            process.wait()
        lags_ms = np.array([r.send_lag_s for r in result.records if r.send_lag_s is not None])
        lags_ms *= 1000
        p50, p99 = np.percentile(lags_ms, [50, 99])
        print(
            f"{in_flight} in flight ({rate:g} req/s asked, {result.achieved_rate or 0:.0f} "
            f"achieved, {arrivals} arrivals): send lag p50 {p50:.2f} ms, p99 {p99:.2f} ms, "
            f"max {lags_ms.max():.2f} ms; CPU over {result.wall_s:.2f} s: client {cpu:.2f} s, "
            f"server {server_cpu:.2f} s"
        )


def long_context(server: PacedServer, scale: int, build: Path) -> None:
    words = LONG_PROMPT_WORDS
    long_prompt = " ".join(["token"] * words)
    tokens = LONG_OUTPUT_TOKENS // scale
    process, url = server.start(0.0)
    try:
        figures = {}
        for name, prompt in (("8-word prompts", "one two three four five six seven eight"),
                             (f"{words:,}-word prompts", long_prompt)):  # fmt: skip
            result, cpu = run_client(url, closed(16, 1, tokens), prompt)
            figures[name] = (result.output_tokens / result.wall_s, 1e6 * cpu / result.output_tokens)
            print(
                f"unpaced, 16 streams, {name} ({len(prompt.encode()):,} bytes), {tokens} tokens "
                f"out: {figures[name][0]:,.0f} tok/s, {figures[name][1]:.1f} CPU us per token"
            )
        short, long = figures.values()
        print(f"long over short prompts: x{long[0] / short[0]:.2f} tok/s")
    finally:
        process.kill()
        process.wait()
    gaps = build / "gaps-long.txt"
    process, url = server.start(PACE_MS, gaps)
    try:
        result, _ = run_client(url, closed(16, 1, tokens), long_prompt)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
    itl_ms = np.array([x for r in result.records for x in r.itl_s]) * 1000
    true_ms = np.loadtxt(gaps) / 1000
    ttft_ms = np.array([r.ttft_s for r in result.records if r.ttft_s is not None]) * 1000
    print(
        f"paced at {PACE_MS:g} ms, 16 streams, {words:,}-word prompts, {tokens} tokens out: "
        f"mean ITL error {itl_ms.mean() / PACE_MS - 1:+.1%}; ITL p50 "
        f"{np.percentile(itl_ms, 50):.2f} / {np.percentile(true_ms, 50):.2f} ms, p99 "
        f"{np.percentile(itl_ms, 99):.2f} / {np.percentile(true_ms, 99):.2f} ms (client / "
        f"server's own); TTFT mean {ttft_ms.mean():.1f} ms (the first token is due "
        f"{PACE_MS:g} ms after the request arrives)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("part", choices=("per-core", "send-lag", "long-context", "all"))
    parser.add_argument("--quick", action="store_true", help="a quarter of the work: a check")
    args = parser.parse_args()
    scale = 4 if args.quick else 1
    with tempfile.TemporaryDirectory() as build:
        server = PacedServer(Path(build))
        if args.part in ("per-core", "all"):
            per_core(server, scale)
        if args.part in ("send-lag", "all"):
            send_lag(server, scale)
        if args.part in ("long-context", "all"):
            long_context(server, scale, Path(build))
    print(f"measured on {os.cpu_count()} CPU(s), load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
