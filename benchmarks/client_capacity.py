"""How much load can specexp's client generate, and how exactly does it time tokens?

    python benchmarks/client_capacity.py [--quick]

Against a local fake server (tests/fake_server.py, its own process) that streams either
instantly or with a known inter-token latency, it measures: the sustained aggregate tok/s
the client handles at 1..256 concurrent streams (the client must not be the bottleneck
below 20,000 tok/s and 256 streams), and the error of the measured ITL against the
injected one at 64 streams (target: under 5%).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from hydra import compose, initialize_config_dir  # noqa: E402

from specexp import hydra_app  # noqa: E402
from specexp.client import LoadClient, session  # noqa: E402
from specexp.job import prepare  # noqa: E402
from specexp.leases import free_port  # noqa: E402


def start_fake(itl_ms: float, tokens_per_event: int = 1) -> tuple[subprocess.Popen, str]:
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.fake_server",
            "--port",
            str(port),
            "--itl-ms",
            str(itl_ms),
            "--tokens-per-event",
            str(tokens_per_event),
        ],
        cwd=REPO,
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            urllib.request.urlopen(url + "/health", timeout=1)
            return process, url
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("fake server did not start")


def measure(url: str, streams: int, max_tokens: int, requests_per_stream: int):
    hydra_app.register()
    with initialize_config_dir(config_dir=hydra_app.CONFIG_DIR, version_base="1.3"):
        job = prepare(
            compose(
                config_name="config",
                overrides=[
                    f"concurrency.streams={streams}",
                    f"concurrency.requests_per_stream={requests_per_stream}",
                    f"workload.max_tokens={max_tokens}",
                ],
            )
        )
    client = LoadClient(job.engine, url, job.server, job.config.workload, job.config.concurrency)

    async def go():
        async with session() as http:
            return await client.run(0, False, http, lambda record: None)

    return asyncio.run(go())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer tokens per request")
    args = parser.parse_args()
    tokens = 200 if args.quick else 1000

    print("Sustained throughput against an instantly streaming server (one token per event):")
    print(
        f"{'streams':>8} {'requests':>9} {'tokens':>8} {'wall s':>7} {'tok/s':>9} {'events/s':>9}"
    )
    process, url = start_fake(0.0)
    try:
        for streams in (1, 16, 64, 256):
            result = measure(url, streams, tokens, requests_per_stream=1 if streams > 16 else 4)
            assert result.ok, [r.error for r in result.records if not r.ok][:3]
            events = sum(r.events for r in result.records)
            print(
                f"{streams:>8} {len(result.records):>9} {result.output_tokens:>8} {result.wall_s:>7.2f} "
                f"{result.tok_per_s:>9.0f} {events / result.wall_s:>9.0f}"
            )
    finally:
        process.terminate()
        process.wait()

    print("\nITL accuracy against a server that waits a known time before each token:")
    print(f"{'injected ms':>11} {'streams':>8} {'measured p50 ms':>16} {'mean ms':>8} {'error':>7}")
    for itl_ms in (10.0, 25.0):
        process, url = start_fake(itl_ms)
        try:
            result = measure(url, 64, 100 if args.quick else 200, requests_per_stream=1)
            itl = [x * 1000 for r in result.records for x in r.itl_s]
            median, mean = statistics.median(itl), statistics.fmean(itl)
            print(
                f"{itl_ms:>11.1f} {64:>8} {median:>16.2f} {mean:>8.2f} {(mean - itl_ms) / itl_ms:>7.1%}"
            )
        finally:
            process.terminate()
            process.wait()


if __name__ == "__main__":
    main()
