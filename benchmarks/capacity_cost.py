"""What a capacity costs when each rate's run stops once its attainment is decided, against
every run sending all its arrivals.

    python benchmarks/capacity_cost.py [--searches 200] [--arrivals 320] [--service-s 5]

Whole searches as the CLI makes them (specexp.core.capacity: ``next_rate``, ``estimate``,
and each run's ``RateDecision``) against simulated servers of known capacity (1 req/s):
attainment logistic in log rate (or rising again above the capacity: a TPOT on the SLO's
limit), each run's logit shifted by its own load, each request met or not at the run's
share. A request's outcome is known ``--service-s`` after it arrived (capacity_gpu: 256
tokens at about 20 ms); a run's server time is its arrivals' span plus that. For each
server: the arrivals and server-minutes per search, both ways, their ratio, and the share
of searches whose 95% interval covers the true capacity (and is bounded).
"""

from __future__ import annotations

import argparse
import math
from typing import Callable, Optional

import numpy as np

from specexp.core.capacity import Capacity, RateDecision, RatePoint, estimate, next_rate
from specexp.core.schemas.concurrency import CapacitySearchConfig

TARGET = 0.9


def logistic(slope: float) -> Callable[[float], float]:
    return lambda rate: math.log(TARGET / (1 - TARGET)) + slope * math.log(rate)


def on_the_limit(rate: float) -> float:
    falling = math.log(TARGET / (1 - TARGET)) - 25 * math.log(rate)
    if rate <= 1:
        return falling
    return falling + 6.0 * math.exp(-((math.log(rate / 1.4) / 0.12) ** 2))


SERVERS = {
    "steep (capacity_gpu)": (logistic(-30.0), 0.3),
    "shallow, noisy": (logistic(-4.0), 0.6),
    "not monotone": (on_the_limit, 0.3),
}


def search(
    seed: int,
    logit: Callable[[float], float],
    excess: float,
    runs: int,
    arrivals: int,
    service_s: float,
    decision: Optional[RateDecision],
) -> tuple[Capacity, int, float]:
    """One search: its estimate, the arrivals it sent and its server-seconds."""
    rng = np.random.default_rng(seed)
    config = CapacitySearchConfig(
        start_rate=float(math.exp(rng.uniform(-1.2, 1.2))), min_rate=0.01, max_rate=100.0
    )
    points: list[RatePoint] = []
    sent_total, server_s = 0, 0.0
    for _ in range(runs):
        rate = next_rate(points, config, TARGET)
        share = 1 / (1 + math.exp(-(logit(rate) + rng.normal(0.0, excess))))
        outcomes = list(rng.random(arrivals) < share)
        sent = arrivals
        if decision is not None:
            # Before arrival k is sent (at k / rate), the outcomes known are those of the
            # arrivals that came service_s before it.
            lag = math.ceil(service_s * rate)
            for k in range(arrivals):
                if decision.verdict(outcomes[: max(0, k - lag)]) is not None:
                    sent = k
                    break
        sent_total += sent
        server_s += (sent - 1) / rate + service_s
        points.append(RatePoint(rate, sent, int(sum(outcomes[:sent]))))
    return estimate(points, TARGET, 0.95), sent_total, server_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--searches", type=int, default=200)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--arrivals", type=int, default=320)
    parser.add_argument("--slots", type=int, default=64)
    parser.add_argument("--service-s", type=float, default=5.0)
    args = parser.parse_args()
    decision = RateDecision(TARGET, min(2 * args.slots, args.arrivals))
    print(
        f"{args.searches} searches of {args.runs} runs per server, at most {args.arrivals} "
        f"arrivals a run, 'met' no sooner than {decision.least_met}; outcome known "
        f"{args.service_s:g} s after arrival"
    )
    print(
        f"{'server':<22} {'plan':<10} {'arrivals':>8} {'server-min':>10} "
        f"{'covered':>8} {'bounded':>8}"
    )
    for name, (logit, excess) in SERVERS.items():
        figures = {}
        for plan, decides in (("all", None), ("decided", decision)):
            found = [
                search(seed, logit, excess, args.runs, args.arrivals, args.service_s, decides)
                for seed in range(args.searches)
            ]
            bracketed = [c for c, _, _ in found if c.rate is not None]
            covered = sum((c.ci_low or 0.0) <= 1.0 <= (c.ci_high or math.inf) for c in bracketed)
            bounded = sum(c.ci_low is not None and c.ci_high is not None for c in bracketed)
            arrivals = float(np.mean([n for _, n, _ in found]))
            minutes = float(np.mean([s for _, _, s in found])) / 60
            figures[plan] = (arrivals, minutes)
            print(
                f"{name:<22} {plan:<10} {arrivals:8.0f} {minutes:10.1f} "
                f"{covered / max(1, len(bracketed)):8.3f} {bounded / max(1, len(bracketed)):8.3f}"
            )
        (all_arrivals, all_minutes), (arrivals, minutes) = figures["all"], figures["decided"]
        print(
            f"{'':<22} {'ratio':<10} {arrivals / all_arrivals:8.2f} {minutes / all_minutes:10.2f}"
        )


if __name__ == "__main__":
    main()
