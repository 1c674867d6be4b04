"""When a run's requests go: once the server is idle, its streams dealt out to the client's
processes, and open-loop arrivals on their schedule."""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Optional

from specexp.core.schemas.concurrency import Arrival, ConcurrencyConfig
from specexp.engines.records import ServerLoad


@dataclass(frozen=True)
class IdleWait:
    """How a run's start waited for the server: for how long, its last reading (None: the
    server says nothing of its load), and how many requests reset its state (caches emptied,
    slots put in order)."""

    waited_s: float
    load: Optional[ServerLoad]
    flushed: int = 0

    @property
    def idle(self) -> bool:
        """Idle, or not known otherwise (an engine without load gauges is taken as it is)."""
        return self.load is None or self.load.idle


async def wait_until_idle(
    probe: Callable[[], Awaitable[Optional[ServerLoad]]],
    timeout_s: float,
    poll_s: float = 0.05,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
) -> IdleWait:
    """Probe the server's load until it is idle (or says nothing of it), at most
    ``timeout_s``; the wait and the last reading."""
    started = clock()
    while True:
        load = await probe()
        waited = clock() - started
        if load is None or load.idle or waited >= timeout_s:
            return IdleWait(waited, load)
        await sleep(poll_s)


def stream_shares(streams: int, processes: int) -> list[list[int]]:
    """Stream indices dealt round-robin over ``processes`` (never more than there are streams)."""
    count = max(1, min(processes, streams))
    return [list(range(k, streams, count)) for k in range(count)]


def arrival_offsets(
    level: ConcurrencyConfig, rate: float, launch: int, run: int, warmup: bool
) -> list[float]:
    """When each of a run's open-loop requests is due, in seconds after its start: uniform
    (one each 1/rate s), or Poisson - conditioned on its first and last arrival: a Poisson
    process with arrivals at 0 and at ``(arrivals - 1) / rate`` has the others uniform in
    between, sorted. Bursts and lulls as Poisson's, but every run's schedule has exactly the
    asked rate, (arrivals - 1) gaps over its span, as a uniform one does (an unconditioned
    schedule of 20 arrivals strays from it by 20% or more, run to run; one conditioned on
    its count alone, its first moved to 0, by 0.97-1.37x). Seeded by the seed, launch and
    run, so that every arm is sent the same schedule (at another rate the same, rescaled)."""
    if level.arrival == Arrival.uniform or level.arrivals < 3:
        return [k / rate for k in range(level.arrivals)]
    rng = random.Random(f"{level.seed}/{launch}/{run}/{warmup}")
    span = (level.arrivals - 1) / rate
    inner = sorted(rng.random() * span for _ in range(level.arrivals - 2))
    return [0.0, *inner, span]
