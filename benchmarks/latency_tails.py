"""Are the client's latency tails true? Its inter-token percentiles against the server's own.

    python benchmarks/latency_tails.py [--quick]

The server is benchmarks/paced_server.c (one event per write, each token due 2 ms after the
one before), started with a file to which it writes, when terminated, the gap between every
two consecutive token writes of a stream: the true inter-token latencies, at the server. At
1 to 256 streams, from one client process and from two (a run's default is one per
64 streams, at most one per core), specexp's client measures the same streams; the table
sets the percentiles of its two series - per-token ITL (a read's gap shared by the tokens
it brought) and chunk gaps (one gap per read) - beside the server's, with the share of
events that arrived in one read with an earlier one (their spacing, lost to the client).

SLOs are read at p90-p99: a client that falls behind reads several events at once, and its
even share hides the tail; chunk gaps then overstate it. Whichever is nearer the server's
says where the client's figures can be trusted, on this machine.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from client_capacity import PACE_MS, PacedServer, specexp_run  # noqa: E402

from specexp.core.schemas.concurrency import ConcurrencyConfig  # noqa: E402

QUANTILES = (50, 90, 99)


def percentiles_ms(values_s) -> list[float]:
    return [float(np.percentile(values_s, q)) * 1000 for q in QUANTILES]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer tokens per request")
    args = parser.parse_args()
    tokens = 200 if args.quick else 500
    # Every level from one client process and from two (one per core: what a run uses by
    # default from 65 streams on), so that what the processes change is seen at each.
    cells = [
        (streams, processes)
        for streams in (1, 4, 16, 64, 256)
        for processes in (1, 2)
        if processes <= streams
    ]
    defaults = {
        streams: ConcurrencyConfig(name="default", streams=streams).processes()
        for streams, _ in cells
    }
    rows = []
    with tempfile.TemporaryDirectory() as build:
        server = PacedServer(Path(build))
        for streams, processes in cells:
            gaps_file = Path(build) / f"gaps-{streams}-{processes}.txt"
            process, url = server.start(PACE_MS, gaps_file)
            try:
                result = specexp_run(url, streams, 1, tokens, processes)
            finally:
                process.send_signal(signal.SIGTERM)
                process.wait(timeout=30)
            truth = np.loadtxt(gaps_file) / 1e6  # microseconds -> seconds
            itl = [x for r in result.records for x in r.itl_s]
            chunks = [x for r in result.records for x in r.chunk_gaps_s]
            together = sum(r.events_read_together for r in result.records)
            rows.append(
                (
                    streams,
                    processes,
                    percentiles_ms(truth),
                    percentiles_ms(itl),
                    percentiles_ms(chunks),
                    together / max(1, result.output_tokens),
                )
            )
            print(f"  {streams:>4} streams, {processes} process(es): done", file=sys.stderr)

    print(f"\nInter-token latency at {PACE_MS:g} ms per token: p50 / p90 / p99 (ms)")
    print(
        f"{'streams':>7} {'procs':>5} {'server (true)':>22} {'client per-token ITL':>24} "
        f"{'client chunk gaps':>22} {'read together':>14}"
    )
    for streams, processes, truth, itl, chunks, together in rows:

        def cell(values: list[float]) -> str:
            return " / ".join(f"{v:.2f}" for v in values)

        default = "*" if defaults[streams] == processes else " "
        print(
            f"{streams:>7} {processes:>4}{default} {cell(truth):>22} {cell(itl):>24} "
            f"{cell(chunks):>22} {together:>13.1%}"
        )
    print("* the client processes a run uses by default at that level")
    print(
        f"\nmeasured on {os.cpu_count()} CPU(s), load average {os.getloadavg()[0]:.2f}; "
        "the server's gaps are its writes' (a late write is late for every client)"
    )


if __name__ == "__main__":
    main()
