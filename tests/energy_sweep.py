"""A concurrency sweep's job runs as the store gives them back, read for tok/s and for
energy per token, from values whose truth the test knows: the sweep report's input."""

from __future__ import annotations

import json
import math
from typing import Callable, Mapping, Sequence

import numpy as np

from specexp.analysis.report import SweepFacts, SweepReport, compile_sweep_report
from specexp.analysis.results import JobRun, Metric, Tag
from specexp.core.schemas.speculative import SpeculativeConfig
from specexp.core.schemas.stats import StatsConfig
from specexp.host.energy import EnergySource
from tests import noise

FACTOR = "concurrency.streams"
LEVELS = (1, 2, 4, 8, 16, 32)


def speed_ratio(c: float) -> float:
    """The draft's tok/s over none's: x1.5 at 1 stream, 0.1 less in log ratio per doubling,
    so it stops paying at 2 ** (ln 1.5 / 0.1) = 16.6 streams."""
    return 1.5 * math.exp(-0.1 * math.log2(c))


def facts() -> SweepFacts:
    return SweepFacts(
        parent_run_id="p",
        engine="llamacpp",
        order="interleaved",
        baseline="speculative=none",
        crossover_factor=FACTOR,
        stats=StatsConfig(),
        speculative={m: SpeculativeConfig(method=m) for m in ("none", "draft")},
    )


def job_runs(
    values: Mapping[tuple[str, int], Sequence[float]],
    metric: str,
    source: EnergySource = EnergySource.nvml_counter,
    metrics: Mapping[str, float] = {},
) -> list[JobRun]:
    """One job run per (method, level), its values one per launch (several launches)."""
    runs = []
    for (method, streams), launch_values in values.items():
        factors = {"speculative": method, FACTOR: str(streams)}
        tags = {
            Tag.factors: json.dumps(factors),
            Tag.config_fingerprint: method,
            Tag.energy_source: str(source),
        }
        figures = {Metric.measured_runs: 3.0 * len(launch_values), **metrics}
        if metric == Metric.energy_j_per_token:
            figures[f"{Metric.energy_j_per_token}_mean"] = sum(launch_values) / len(launch_values)
        runs.append(
            JobRun.from_store(
                f"{method}{streams}",
                f"{method} {streams}",
                "FINISHED",
                tags,
                {},
                [],
                list(launch_values),
                figures,
            )
        )
    return runs


def simulate(
    rng: np.random.Generator,
    energy_ratio: Callable[[float], float],
    launches: int = 4,
    runs_per_launch: int = 3,
    run_cv: float = 0.01,
    launch_cv: float = 0.0,
) -> SweepReport:
    """The sweep report on draft against none over LEVELS (launch means as values): tok/s
    from :func:`speed_ratio`, the draft's joules per token ``energy_ratio(c)`` times none's;
    both with log-normal noise per run and per launch (tests.noise)."""
    tok, joules = {}, {}
    for c in LEVELS:
        for method, speed, energy in (
            ("none", 1.0, 1.0),
            ("draft", speed_ratio(c), energy_ratio(c)),
        ):
            for values, mean in ((tok, 100 * c**0.5 * speed), (joules, energy / c**0.3)):
                drawn = noise.launches(rng, mean, launches, runs_per_launch, run_cv, launch_cv)
                values[(method, c)] = [float(np.mean(launch)) for launch in drawn]
    metered = {Metric.energy_shortest_window_s: 20.0, Metric.energy_unresolved_runs: 0.0}
    return compile_sweep_report(
        facts(),
        job_runs(tok, Metric.tok_per_s),
        [],
        {},
        energy_runs=job_runs(joules, Metric.energy_j_per_token, metrics=metered),
    )
