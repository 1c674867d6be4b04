"""The stats config group: launches and runs per configuration, the statistics' levels,
and how comparisons are measured until decided."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from specexp.core.schemas.checks import ConfigError, at_least, fraction


@dataclass
class SequentialConfig:
    """Comparisons measured until decided (specexp.core.sequential): arms on servers of their
    own take turns launch by launch (ABBA), tested after every round with intervals that
    hold over all looks, until the interval decides or the budget is spent."""

    enabled: bool = True
    # Launches per arm before the first look (three: with two, Welch's t has one or two
    # degrees of freedom and the first look can hardly decide), and at most.
    min_launches: int = 3
    max_launches: int = 12
    # Server time the whole comparison may take (every arm's launches, start-up included).
    max_server_minutes: float = 120.0
    # The relative effect found with stats.power when the sequence runs full; null: twice
    # stats.threshold.
    design_effect: Optional[float] = None
    spending: str = "pocock"  # pocock | obrien_fleming

    def __post_init__(self) -> None:
        at_least("stats.sequential", 2, min_launches=self.min_launches)
        if self.max_launches < self.min_launches:
            raise ConfigError(
                f"stats.sequential.max_launches ({self.max_launches}) must be at least "
                f"min_launches ({self.min_launches})"
            )
        if self.max_server_minutes <= 0:
            raise ConfigError(
                f"stats.sequential.max_server_minutes must be > 0, got {self.max_server_minutes}"
            )
        if self.design_effect is not None and self.design_effect <= 0:
            raise ConfigError(
                f"stats.sequential.design_effect must be > 0 (or null), got {self.design_effect}"
            )
        if self.spending not in ("pocock", "obrien_fleming"):
            raise ConfigError(
                f"stats.sequential.spending must be pocock or obrien_fleming, got {self.spending!r}"
            )


@dataclass
class StatsConfig:
    # Server launches per configuration; each gets its warm-ups and measured runs. With
    # more than one, tests use per-launch means (launch-level variance is often the largest).
    launches: int = 1
    warmup_runs: int = 2
    measured_runs: int = 5
    confidence: float = 0.95
    # Smallest relative difference worth reporting; equivalence is tested within it.
    threshold: float = 0.01
    power: float = 0.8
    # A coefficient of variation above this marks the summary as noisy.
    cv_warn: float = 0.05
    # Seconds between samples of the machine (CPU load; the server's GPUs through NVML)
    # while runs are measured; 0: no telemetry.
    telemetry_interval_s: float = 0.5
    # Before each run the client waits until the server holds no request and has done its
    # work after the last one (its own gauges say so), at most this long; a run that still
    # starts on a busy server is flagged.
    idle_timeout_s: float = 30.0
    # How a sweep's comparisons of arms on servers of their own are measured.
    sequential: SequentialConfig = field(default_factory=SequentialConfig)

    def __post_init__(self) -> None:
        at_least("stats", 1, measured_runs=self.measured_runs, launches=self.launches)
        at_least(
            "stats",
            0,
            warmup_runs=self.warmup_runs,
            telemetry_interval_s=self.telemetry_interval_s,
            idle_timeout_s=self.idle_timeout_s,
        )
        fraction("stats", confidence=self.confidence, threshold=self.threshold, power=self.power)

    @property
    def parts(self) -> int:
        """The pieces a job is measured in, so that an interleaved sweep can alternate them
        with other jobs' pieces: one per launch with several launches (each on a new server),
        else one per measured run (the first with the warm-ups) on one server."""
        return self.launches if self.launches > 1 else self.measured_runs
