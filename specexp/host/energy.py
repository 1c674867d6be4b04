"""Energy per output token: what the server's hardware drew over a run, from a cumulative
counter read beside the client.

Sources, best first: on GPUs NVML's total-energy counter (``nvmlDeviceGetTotalEnergyConsumption``:
millijoules since the driver loaded, summed over the server's GPUs); where NVML has no counter
(GPUs before Volta), NVML's power readings sampled and integrated (trapezoid); on CPUs the
RAPL package counters (``/sys/class/powercap/intel-rapl:N/energy_uj``, microjoules, wrapping
at ``max_energy_range_uj``) where readable; else not measured.

A run's energy is the counter's change over it, each end interpolated between the
readings either side of it (the monitor reads every ``stats.telemetry_interval_s``). The
error is at most the change in power across one reading interval at each end: relative to
the run, about ``interval / run length``, so a run must be ``interval / error`` long for
that error (``shortest_window_s``). A counter that moves less often than it is read (an
H200's NVML counter moves every 100 ms) is interpolated across its own period instead, so
the window is set by the longer of the two; the counter's quantum (1 mJ NVML, 1 uJ RAPL)
is far below either. Pure but for the readers.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

RAPL_ROOT = Path("/sys/class/powercap")


class EnergySource(StrEnum):
    nvml_counter = "NVML total-energy counter"
    nvml_power = "NVML power, sampled"
    rapl = "RAPL package counters"
    none = "not measured"


@dataclass(frozen=True)
class EnergyReading:
    """The meter's cumulative joules at a time (Unix seconds)."""

    time_unix: float
    joules: float


class NvmlCounter:
    """The server's GPUs' total-energy counters, summed (joules)."""

    source = EnergySource.nvml_counter

    def __init__(self, nvml: Any, indices: Sequence[int]):
        self._nvml = nvml
        self._handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in indices]

    def read(self) -> float:
        return sum(self._nvml.nvmlDeviceGetTotalEnergyConsumption(h) for h in self._handles) / 1e3


class RaplCounter:
    """The CPU packages' RAPL counters, summed and unwrapped (joules)."""

    source = EnergySource.rapl

    def __init__(self, domains: Sequence[Path]):
        self._domains = list(domains)
        self._ranges = [int((d / "max_energy_range_uj").read_text()) for d in self._domains]
        self._last = [self._raw(d) for d in self._domains]
        self._total_uj = 0

    @staticmethod
    def _raw(domain: Path) -> int:
        return int((domain / "energy_uj").read_text())

    def read(self) -> float:
        for k, domain in enumerate(self._domains):
            raw = self._raw(domain)
            self._total_uj += unwrapped_step(self._last[k], raw, self._ranges[k])
            self._last[k] = raw
        return self._total_uj / 1e6


def unwrapped_step(previous: int, current: int, wrap: int) -> int:
    """A wrapping counter's step from ``previous`` to ``current`` (it wrapped once when it
    went down: counters wrap at ``wrap``, RAPL's every few minutes to hours)."""
    return current - previous if current >= previous else current + wrap - previous


def rapl_domains(root: Path = RAPL_ROOT) -> list[Path]:
    """The readable RAPL package domains (``intel-rapl:N``, not their subdomains, which the
    package's count already holds)."""
    found = []
    for domain in sorted(root.glob("intel-rapl:*")):
        if domain.name.count(":") != 1:
            continue
        with contextlib.suppress(OSError, ValueError):
            int((domain / "energy_uj").read_text())  # root-only on many kernels
            found.append(domain)
    return found


def open_counter(nvml: Any, gpu_indices: Sequence[int]) -> Optional[NvmlCounter | RaplCounter]:
    """The best counter here: the GPUs' when they have one, else the CPU packages' RAPL
    when readable; None (GPUs without a counter: their power is sampled instead)."""
    if nvml is not None and gpu_indices:
        try:
            counter = NvmlCounter(nvml, gpu_indices)
            counter.read()
            return counter
        except Exception:  # NVMLError_NotSupported before Volta, or no such GPU
            return None
    domains = rapl_domains()
    return RaplCounter(domains) if domains else None


def cumulative_at(readings: Sequence[EnergyReading], time_unix: float) -> Optional[float]:
    """The counter at ``time_unix``, interpolated between the readings either side of it;
    None outside them."""
    times = np.array([r.time_unix for r in readings])
    if not len(times) or time_unix < times[0] or time_unix > times[-1]:
        return None
    return float(np.interp(time_unix, times, [r.joules for r in readings]))


def energy_between(
    readings: Sequence[EnergyReading], start_unix: float, end_unix: float
) -> Optional[float]:
    """Joules drawn from ``start_unix`` to ``end_unix``; None unless readings bracket both."""
    start, end = cumulative_at(readings, start_unix), cumulative_at(readings, end_unix)
    return end - start if start is not None and end is not None else None


def integrated_power(times_unix: Sequence[float], watts: Sequence[float]) -> list[EnergyReading]:
    """Power readings as a cumulative counter (trapezoid): the fallback where there is none."""
    times, power = np.asarray(times_unix, dtype=float), np.asarray(watts, dtype=float)
    if not times.size:
        return []
    steps = np.diff(times) * (power[1:] + power[:-1]) / 2
    joules = np.concatenate([[0.0], np.cumsum(steps)])
    return [EnergyReading(float(t), float(j)) for t, j in zip(times, joules, strict=True)]


def counter_period_s(readings: Sequence[EnergyReading]) -> Optional[float]:
    """How often the counter moves: the median time between readings that changed it (a
    counter read faster than it updates repeats its value)."""
    changed = [
        r.time_unix for a, r in zip(readings, readings[1:], strict=False) if r.joules != a.joules
    ]
    gaps = np.diff(changed)
    return float(np.median(gaps)) if len(gaps) else None


# The relative error a run's energy is resolved to from its shortest window on.
WINDOW_ERROR = 0.05


def shortest_window_s(interval_s: float, error: float = WINDOW_ERROR) -> float:
    """The shortest run whose energy is within ``error`` (relative) whatever power does at
    its ends: each end is interpolated across one reading interval, at most the interval's
    share of the run's energy between them."""
    return 2 * interval_s / error


@dataclass(frozen=True)
class RunEnergy:
    """One run's energy, per output token, and where it came from."""

    source: EnergySource
    joules: Optional[float]
    tokens: int
    window_s: float
    shortest_window_s: float

    @property
    def joules_per_token(self) -> Optional[float]:
        return self.joules / self.tokens if self.joules is not None and self.tokens else None

    @property
    def resolved(self) -> bool:
        """Long enough for its error bound (``shortest_window_s``)."""
        return self.window_s >= self.shortest_window_s

    def metrics(self) -> dict[str, float]:
        if self.joules is None:
            return {}
        # Named as specexp.analysis.results.Metric names them (a band above this one).
        figures = {
            "energy_j": self.joules,
            "energy_resolved": float(self.resolved),
            "energy_shortest_window_s": self.shortest_window_s,
        }
        if self.joules_per_token is not None:
            figures["energy_j_per_token"] = self.joules_per_token
        return figures


def run_energy(
    source: EnergySource,
    readings: Sequence[EnergyReading],
    start_unix: float,
    wall_s: float,
    tokens: int,
    interval_s: float,
) -> RunEnergy:
    """A run's energy from its meter's readings (none: not measured), read every
    ``interval_s``: its shortest window from the longer of that and the counter's own period
    (:func:`counter_period_s`)."""
    joules = (
        energy_between(readings, start_unix, start_unix + wall_s)
        if source != EnergySource.none
        else None
    )
    return RunEnergy(
        source if joules is not None else EnergySource.none,
        joules,
        tokens,
        wall_s,
        shortest_window_s(max(interval_s, counter_period_s(readings) or 0.0)),
    )
