"""A noise model with a known effect: the ground truth the statistics are tested against.

Throughput is log-normal around a true mean. Two levels, as on real servers: each launch
draws its own offset (launch CV), each measured run adds run noise (run CV).
"""

from __future__ import annotations

import numpy as np


def launches(
    rng: np.random.Generator,
    mean: float,
    n_launches: int,
    runs_per_launch: int,
    run_cv: float,
    launch_cv: float = 0.0,
) -> list[list[float]]:
    offsets = rng.normal(0.0, launch_cv, n_launches)
    return [
        list(mean * np.exp(offset + rng.normal(0.0, run_cv, runs_per_launch))) for offset in offsets
    ]


def runs(rng: np.random.Generator, mean: float, n: int, cv: float) -> list[float]:
    return launches(rng, mean, 1, n, cv)[0]
