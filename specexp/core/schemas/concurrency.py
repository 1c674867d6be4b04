"""The concurrency config group: how a run's requests are started (streams, open-loop
arrivals, a capacity search), and what one run sends and how long it takes."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Optional

from omegaconf import MISSING

from specexp.core.datasets import DatasetFormat, load_dataset
from specexp.core.schemas.checks import ConfigError, at_least
from specexp.core.schemas.workload import WorkloadConfig


class Arrival(StrEnum):
    """How a run's requests are started: by streams that each send the next when the last
    ends (closed loop), or at times of their own whatever the server does (open loop)."""

    closed = "closed"
    poisson = "poisson"  # exponential gaps of mean 1/rate, seeded
    uniform = "uniform"  # a fixed schedule: one request every 1/rate seconds
    trace = "trace"  # the arrival times of workload.trace, replayed


@dataclass
class CapacitySearchConfig:
    """The search for the highest arrival rate whose SLO attainment stays at or above
    ``slo.target``: each measured run is one rate, chosen from the runs before it (bracket
    by doubling or halving, then bisect in log rate); ``stats.measured_runs`` is its budget."""

    start_rate: float = 1.0
    min_rate: float = 0.01
    max_rate: float = 1000.0
    # Once the bracket is this narrow (high / low - 1), runs go either side of the fitted
    # capacity (never at or above a rate that failed).
    precision: float = 0.1
    # Each run stops sending arrivals once its attainment against slo.target is decided
    # (a sequential test; concurrency.arrivals is its cap), not before 2 x concurrency.streams.
    stop_when_decided: bool = True

    def __post_init__(self) -> None:
        if not 0 < self.min_rate <= self.start_rate <= self.max_rate:
            raise ConfigError(
                "concurrency.search needs 0 < min_rate <= start_rate <= max_rate, got "
                f"{self.min_rate}, {self.start_rate}, {self.max_rate}"
            )
        if self.precision <= 0:
            raise ConfigError(f"concurrency.search.precision must be > 0, got {self.precision}")


@dataclass
class ConcurrencyConfig:
    name: str = MISSING
    # Streams kept in flight during one measured run; 1 is the single-stream benchmark.
    streams: int = 1
    # The levels a sweep measures, one job each (concurrency.streams set to each), unless
    # the sweep or the command line sets concurrency.streams itself; empty: ``streams`` only.
    levels: list[int] = field(default_factory=list)
    # Requests each stream sends per measured run, back to back...
    requests_per_stream: int = 1
    # ...or, when set, as many as it can start within this many seconds.
    duration_s: Optional[float] = None
    # Client processes the streams are shared over (one event loop each); null: one per 64
    # streams, at most one per CPU core. One loop keeps up with about 64 streams at 500
    # tokens/s each; past that its timestamps lag (benchmarks/client_capacity.py).
    client_processes: Optional[int] = None
    # Open loop: requests arrive at ``rate`` per second (poisson or uniform), ``arrivals`` per
    # measured run, each sent when due however many are still in flight; ``seed`` seeds the
    # arrival times (each run's own, the same in every arm). ``streams`` then sizes only the
    # server (the requests it serves at once, e.g. llama.cpp's slots; more wait in its queue).
    arrival: Arrival = Arrival.closed
    rate: Optional[float] = None
    arrivals: int = 32
    seed: int = 0
    # Set: each measured run's rate is chosen by the capacity search (open loop only).
    search: Optional[CapacitySearchConfig] = None

    @property
    def open_loop(self) -> bool:
        return self.arrival != Arrival.closed

    def processes(self) -> int:
        if self.client_processes is not None:
            return self.client_processes
        if self.open_loop:  # how many will be in flight is the server's doing: one loop
            return 1
        return max(1, min(os.cpu_count() or 1, -(-self.streams // 64)))

    def __post_init__(self) -> None:
        at_least(
            "concurrency", 1, streams=self.streams, requests_per_stream=self.requests_per_stream
        )
        if self.client_processes is not None:
            at_least("concurrency", 1, client_processes=self.client_processes)
        if any(level < 1 for level in self.levels) or len(set(self.levels)) < len(self.levels):
            raise ConfigError(
                f"concurrency.levels must be distinct stream counts >= 1, got {self.levels}"
            )
        if self.duration_s is not None and self.duration_s <= 0:
            raise ConfigError(
                f"concurrency.duration_s must be > 0 (or null), got {self.duration_s}"
            )
        if self.open_loop:
            at_least("concurrency", 1, arrivals=self.arrivals)
            if self.duration_s is not None:
                raise ConfigError(
                    "concurrency.duration_s is for closed-loop streams; an open-loop run sends "
                    "concurrency.arrivals requests"
                )
            if self.arrival == Arrival.trace and (self.rate is not None or self.search is not None):
                raise ConfigError(
                    "concurrency.arrival=trace replays the trace's arrival times: leave "
                    "concurrency.rate and concurrency.search null (workload.trace.speedup "
                    "scales the rate)"
                )
            if (
                self.arrival != Arrival.trace
                and self.search is None
                and (self.rate is None or self.rate <= 0)
            ):
                raise ConfigError(
                    f"concurrency.arrival={self.arrival} needs concurrency.rate > 0 (requests "
                    "per second) or concurrency.search"
                )
        elif self.rate is not None or self.search is not None:
            raise ConfigError(
                "concurrency.rate and concurrency.search are for open-loop arrivals: set "
                "concurrency.arrival=poisson (or uniform)"
            )


def requests_per_stream(
    workload: WorkloadConfig, concurrency: ConcurrencyConfig, stream: int = 0
) -> int:
    """Requests stream ``stream`` sends in a run: concurrency.requests_per_stream, or with a
    prompt set its share of the set (stream s takes prompts s, s + streams, ...) that many
    times, so that a run sends every prompt once per requests_per_stream. Stream 0 has the
    largest share."""
    if workload.dataset is None:
        return concurrency.requests_per_stream
    prompts = load_dataset(
        str(workload.dataset), DatasetFormat(workload.dataset_format), workload.dataset_limit
    )
    share = len(range(stream, len(prompts), concurrency.streams))
    return concurrency.requests_per_stream * max(1, share)


# The rate a run's duration is estimated at when neither an earlier run of its configuration
# nor model.expected_tok_per_s says better: output tokens per second per stream.
ASSUMED_TOK_PER_S_PER_STREAM = 50.0


def run_requests(workload: WorkloadConfig, concurrency: ConcurrencyConfig) -> Optional[int]:
    """Requests one run sends (None: as many as fit its duration_s)."""
    if concurrency.duration_s:
        return None
    if concurrency.open_loop:
        return concurrency.arrivals
    return sum(requests_per_stream(workload, concurrency, s) for s in range(concurrency.streams))


def expected_run_seconds(
    workload: WorkloadConfig, concurrency: ConcurrencyConfig, tok_per_s: float
) -> float:
    """How long one run takes at ``tok_per_s`` per stream: its duration, its arrivals at
    their rate (a capacity search's at its start rate, the search's first), or its longest
    stream's requests at max_tokens each."""
    if concurrency.duration_s:
        return concurrency.duration_s
    rate = concurrency.rate or (concurrency.search.start_rate if concurrency.search else None)
    if concurrency.open_loop and rate:
        return concurrency.arrivals / rate
    tokens = requests_per_stream(workload, concurrency, 0) * workload.max_tokens
    return tokens / tok_per_s
