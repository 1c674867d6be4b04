"""What the machine did while runs were measured, sampled in a thread beside the client.

CPU: the cores busy in all, and those busy with neither the server's processes nor
specexp's own (another process on a two-core machine slows ``llama-server --threads 2``
about fourteen-fold). GPUs the server was given: SM and memory clocks, power, temperature,
utilisation, memory used, the active clock-throttle reasons and the processes on the GPU
that are not the server's, read through NVML (as AIPerf and MLflow's system metrics read
them; MLflow's sampler is not used: it logs every 10 s, without throttle reasons or the
processes on the GPU, and needs MLflow in the measuring process). A run whose GPU
throttled or was shared, or whose machine was busy, gets a warning saying so.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import threading
import time
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Iterator, Optional, Sequence

import psutil

from specexp.core.notes import Note, NoteKind
from specexp.host.energy import (
    EnergyReading,
    EnergySource,
    integrated_power,
    open_counter,
)

# NVML's clock-throttle reason bits that slow a measurement down (nvml.h); the others
# (idle, application clocks, sync boost, display clocks) do not.
SLOWDOWNS = {
    0x4: "software power cap",
    0x8: "hardware slowdown",
    0x20: "software thermal slowdown",
    0x40: "hardware thermal slowdown",
    0x80: "hardware power brake",
}
# Cores other processes may use before the machine counts as busy: more than noise and
# specexp's own sampling, well under the one core a competing process holds.
BUSY_CORES = 0.3
BUSY = Note(
    NoteKind.busy_machine,
    f"busy machine: processes other than the server and specexp kept more than {BUSY_CORES} "
    "cores busy, with no core to spare (metrics cpu_other_cores, cpu_busy_cores)",
)


@dataclass(frozen=True)
class GpuSample:
    index: int
    sm_clock_mhz: float
    memory_clock_mhz: float
    power_w: float
    temperature_c: float
    utilization_pct: float
    memory_used_mib: float
    slowdowns: tuple[str, ...] = ()
    # Processes on this GPU other than the server's (pid, name).
    others: tuple[tuple[int, str], ...] = ()


@dataclass(frozen=True)
class Sample:
    time_unix: float
    busy_cores: float  # cores busy since the previous sample, all processes
    other_cores: float  # of those, not the server's or specexp's
    gpus: tuple[GpuSample, ...] = ()
    # The energy counter's cumulative joules (specexp.host.energy), where there is one.
    energy_j: Optional[float] = None


def load_nvml() -> Optional[ModuleType]:
    """NVML's Python binding (nvidia-ml-py), initialised; None without a driver."""
    try:
        nvml = importlib.import_module("pynvml")
        nvml.nvmlInit()
    except Exception:  # no package, no libnvidia-ml, no driver: no GPU figures
        return None
    return nvml


def read_gpus(nvml: Any, indices: Sequence[int], ours: set[int]) -> tuple[GpuSample, ...]:
    """One reading of each GPU in ``indices`` (NVML's physical indices)."""
    samples = []
    for index in indices:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        reasons = nvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle)
        processes = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
        samples.append(
            GpuSample(
                index=index,
                sm_clock_mhz=nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM),
                memory_clock_mhz=nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_MEM),
                power_w=nvml.nvmlDeviceGetPowerUsage(handle) / 1000,
                temperature_c=nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU),
                utilization_pct=nvml.nvmlDeviceGetUtilizationRates(handle).gpu,
                memory_used_mib=nvml.nvmlDeviceGetMemoryInfo(handle).used / 2**20,
                slowdowns=tuple(name for bit, name in SLOWDOWNS.items() if reasons & bit),
                others=tuple((p.pid, _process_name(p.pid)) for p in processes if p.pid not in ours),
            )
        )
    return tuple(samples)


def _process_name(pid: int) -> str:
    try:
        return psutil.Process(pid).name()
    except psutil.Error:
        return "?"  # another container's process: NVML sees it, psutil does not


def _tree_cpu_seconds(roots: Sequence[psutil.Process]) -> tuple[float, set[int]]:
    """CPU seconds used so far by ``roots`` and their descendants (each process once: the
    server is a root and specexp's child), and their pids."""
    processes: dict[int, psutil.Process] = {}
    for root in roots:
        with contextlib.suppress(psutil.Error):
            for process in [root, *root.children(recursive=True)]:
                processes[process.pid] = process
    seconds = 0.0
    for process in processes.values():
        with contextlib.suppress(psutil.Error):
            times = process.cpu_times()
            seconds += times.user + times.system
    return seconds, set(processes)


@dataclass
class Monitor:
    """Samples every ``interval_s`` from :meth:`start` to :meth:`stop`, in a daemon thread."""

    server_pid: Optional[int]
    gpu_indices: Sequence[int] = ()
    interval_s: float = 0.5
    samples: list[Sample] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="specexp-telemetry", daemon=True)
        self._nvml = load_nvml() if self.gpu_indices else None
        self._counter = open_counter(self._nvml, self.gpu_indices)
        self._counter_lock = threading.Lock()

    @property
    def energy_source(self) -> EnergySource:
        if self._counter is not None:
            return self._counter.source
        return EnergySource.nvml_power if self._nvml is not None else EnergySource.none

    def _energy_j(self) -> Optional[float]:
        if self._counter is None:
            return None
        with self._counter_lock:  # RAPL's unwrapping keeps state
            return self._counter.read()

    def energy_readings(self) -> list[EnergyReading]:
        """The energy meter's readings so far and one now (so that a run that just ended
        is bracketed); without a counter, the GPUs' power integrated."""
        if self._counter is None:
            powered = [s for s in self.samples if s.gpus]
            return integrated_power(
                [s.time_unix for s in powered], [sum(g.power_w for g in s.gpus) for s in powered]
            )
        readings = [
            EnergyReading(s.time_unix, s.energy_j) for s in self.samples if s.energy_j is not None
        ]
        now = self._energy_j()
        return [*readings, EnergyReading(time.time(), now)] if now is not None else readings

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        roots = [psutil.Process()]
        with contextlib.suppress(psutil.Error):
            if self.server_pid:
                roots.append(psutil.Process(self.server_pid))
        last_wall, last_busy = time.monotonic(), _busy_seconds()
        last_ours, _ = _tree_cpu_seconds(roots)
        while not self._stop.wait(self.interval_s):
            wall, busy = time.monotonic(), _busy_seconds()
            ours, pids = _tree_cpu_seconds(roots)
            elapsed = wall - last_wall
            gpus = read_gpus(self._nvml, self.gpu_indices, pids) if self._nvml else ()
            self.samples.append(
                Sample(
                    time_unix=time.time(),
                    busy_cores=(busy - last_busy) / elapsed,
                    other_cores=max(0.0, (busy - last_busy) - max(0.0, ours - last_ours)) / elapsed,
                    gpus=gpus,
                    energy_j=self._energy_j(),
                )
            )
            last_wall, last_busy, last_ours = wall, busy, ours

    def between(self, start_unix: float, end_unix: float) -> list[Sample]:
        """The samples taken from ``start_unix`` to one interval after ``end_unix`` (each
        sample covers the interval before it)."""
        return [s for s in self.samples if start_unix < s.time_unix <= end_unix + self.interval_s]


def _busy_seconds() -> float:
    times = psutil.cpu_times()
    return sum(times) - times.idle - getattr(times, "iowait", 0.0)


@contextlib.contextmanager
def monitoring(
    server_pid: Optional[int], gpu_indices: Sequence[int], interval_s: float
) -> Iterator[Optional[Monitor]]:
    """A running :class:`Monitor` (None when ``interval_s`` is 0: telemetry off)."""
    if interval_s <= 0:
        yield None
        return
    monitor = Monitor(server_pid, gpu_indices, interval_s)
    monitor.start()
    try:
        yield monitor
    finally:
        monitor.stop()


def summarize(samples: Sequence[Sample]) -> dict[str, float]:
    """Metrics of one run's samples: CPU means; per GPU clock, power and utilisation means,
    temperature and memory maxima."""
    if not samples:
        return {}
    metrics = {
        "cpu_busy_cores": sum(s.busy_cores for s in samples) / len(samples),
        "cpu_other_cores": sum(s.other_cores for s in samples) / len(samples),
    }
    readings: dict[int, list[GpuSample]] = {}
    for sample in samples:
        for gpu in sample.gpus:
            readings.setdefault(gpu.index, []).append(gpu)
    for index, gpus in readings.items():
        for name in ("sm_clock_mhz", "memory_clock_mhz", "power_w", "utilization_pct"):
            metrics[f"gpu{index}_{name}"] = sum(getattr(g, name) for g in gpus) / len(gpus)
        for name in ("temperature_c", "memory_used_mib"):
            metrics[f"gpu{index}_{name}_max"] = max(getattr(g, name) for g in gpus)
    return metrics


def warnings_for(samples: Sequence[Sample], cores: Optional[int] = None) -> list[Note]:
    """What made the run's machine unlike a quiet one: a busy CPU (other processes' work
    while less than a core of the ``cores`` the machine has stayed idle: with a core to
    spare, as on a GPU node, their work takes none from the server or the client), a
    throttled GPU, a GPU shared with another process."""
    notes: list[Note] = []
    cores = cores or os.cpu_count() or 1
    if samples:
        other = sum(s.other_cores for s in samples) / len(samples)
        busy = sum(s.busy_cores for s in samples) / len(samples)
        if other > BUSY_CORES and busy > cores - 1:
            notes.append(BUSY)
    slowdowns: dict[int, set[str]] = {}
    others: dict[int, set[tuple[int, str]]] = {}
    for sample in samples:
        for gpu in sample.gpus:
            slowdowns.setdefault(gpu.index, set()).update(gpu.slowdowns)
            others.setdefault(gpu.index, set()).update(gpu.others)
    for index in sorted(slowdowns):
        if slowdowns[index]:
            throttled = ", ".join(sorted(slowdowns[index]))
            notes.append(Note(NoteKind.gpu_throttled, f"GPU {index} throttled: {throttled}"))
        if others[index]:
            named = ", ".join(f"{name} (pid {pid})" for pid, name in sorted(others[index]))
            notes.append(
                Note(NoteKind.gpu_shared, f"GPU {index} shared with another process: {named}")
            )
    return notes
