"""Telemetry from recorded readings: NVML as read on an H200, and the warnings a throttled
GPU, a shared GPU and a busy machine give."""

from __future__ import annotations

import json
from pathlib import Path

from specexp.core.notes import Note, NoteKind
from specexp.host import telemetry
from specexp.host.capture import gpu_links, interconnect
from specexp.host.telemetry import GpuSample, Sample

READINGS = Path(__file__).parent / "readings"


class RecordedNvml:
    """NVML's Python binding answering from a reading recorded on a real GPU."""

    NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 1, 2, 0

    def __init__(self, reading: dict):
        self.reading = reading

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetClockInfo(self, handle: int, clock: int) -> int:
        return self.reading["clocks_mhz"]["sm" if clock == self.NVML_CLOCK_SM else "memory"]

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:
        return self.reading["power_mw"]

    def nvmlDeviceGetTemperature(self, handle: int, sensor: int) -> int:
        return self.reading["temperature_c"]

    def nvmlDeviceGetUtilizationRates(self, handle: int):
        return type("Utilization", (), {"gpu": self.reading["utilization_pct"]})

    def nvmlDeviceGetMemoryInfo(self, handle: int):
        return type("Memory", (), {"used": self.reading["memory_used_bytes"]})

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: int) -> int:
        return self.reading["throttle_reasons"]

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int):
        return [type("Process", (), {"pid": pid}) for pid in self.reading["compute_pids"]]


def test_an_h200_reading_under_load_becomes_a_sample_and_metrics():
    reading = json.loads((READINGS / "nvml_h200_serving.json").read_text())
    nvml = RecordedNvml(reading)
    (gpu,) = telemetry.read_gpus(nvml, [0], ours=set(reading["compute_pids"]))
    assert gpu.sm_clock_mhz == reading["clocks_mhz"]["sm"] > 0
    assert gpu.power_w == reading["power_mw"] / 1000
    assert gpu.memory_used_mib > 1024  # the served model's weights
    assert gpu.others == ()  # the only process on it was the server
    metrics = telemetry.summarize([Sample(0.0, 1.0, 0.0, (gpu,))])
    assert metrics["gpu0_sm_clock_mhz"] == gpu.sm_clock_mhz
    assert metrics["gpu0_temperature_c_max"] == gpu.temperature_c
    # The server alone on a GPU that did not slow down: nothing to warn of.
    assert [n.message for n in telemetry.warnings_for([Sample(0.0, 1.0, 0.0, (gpu,))])] == list(
        f"GPU 0 throttled: {', '.join(gpu.slowdowns)}" for _ in gpu.slowdowns[:1]
    )


def test_a_process_that_is_not_the_servers_is_named():
    reading = json.loads((READINGS / "nvml_h200_serving.json").read_text())
    nvml = RecordedNvml({**reading, "compute_pids": [*reading["compute_pids"], 4242]})
    (gpu,) = telemetry.read_gpus(nvml, [0], ours=set(reading["compute_pids"]))
    assert [pid for pid, _ in gpu.others] == [4242]
    (note,) = [
        n
        for n in telemetry.warnings_for([Sample(0.0, 1.0, 0.0, (gpu,))])
        if n.kind == NoteKind.gpu_shared
    ]
    assert "pid 4242" in note.message


def test_throttling_and_a_busy_machine_are_warned_of():
    throttled = GpuSample(0, 1200, 3201, 690.0, 87, 100, 40000, ("hardware thermal slowdown",))
    calm = GpuSample(0, 1980, 3201, 400.0, 60, 100, 40000)
    notes = telemetry.warnings_for(
        [Sample(0.0, 2.0, 1.0, (calm,)), Sample(0.5, 2.0, 1.0, (throttled,))], cores=2
    )
    assert Note(NoteKind.gpu_throttled, "GPU 0 throttled: hardware thermal slowdown") in notes
    assert telemetry.BUSY in notes
    # A quiet machine whose GPU ran at full clocks: no warning.
    assert telemetry.warnings_for([Sample(0.0, 1.0, 0.05, (calm,))], cores=2) == []
    # A third of a core of other work on a 16-core GPU node that kept 11 idle takes
    # nothing from the server (the H200 sweep flagged such a run).
    assert telemetry.warnings_for([Sample(0.0, 5.0, 0.33, (calm,))], cores=16) == []


def test_throttle_reason_bits_are_named_and_harmless_ones_ignored():
    reading = json.loads((READINGS / "nvml_h200_serving.json").read_text())
    # Idle (0x1) and application clocks (0x2) are not slowdowns; a power cap (0x4) is.
    nvml = RecordedNvml({**reading, "throttle_reasons": 0x1 | 0x2 | 0x4})
    (gpu,) = telemetry.read_gpus(nvml, [0], ours=set())
    assert gpu.slowdowns == ("software power cap",)


def test_gpu_links_are_read_from_nvidia_smi_topo():
    """Each pair of GPUs and its link: none on the H200 node as recorded (one GPU, its
    header underlined with terminal escapes); on four GPUs in NVLinked pairs joined over the
    sockets, the pairs and their links, and PCIe as what the slowest pair crosses."""
    recorded = (READINGS / "nvidia-smi-topo-h200.txt").read_text()
    assert gpu_links(recorded) == {}
    four = (
        "\tGPU0\tGPU1\tGPU2\tGPU3\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
        "GPU0\t X \tNV4\tSYS\tSYS\tPIX\t0-31\t0\t\tN/A\n"
        "GPU1\tNV4\t X \tSYS\tSYS\tNODE\t0-31\t0\t\tN/A\n"
        "GPU2\tSYS\tSYS\t X \tNV4\tSYS\t32-63\t1\t\tN/A\n"
        "GPU3\tSYS\tSYS\tNV4\t X \tSYS\t32-63\t1\t\tN/A\n"
        "NIC0\tPIX\tNODE\tSYS\tSYS\t X \n\nLegend:\n"
    )
    links = gpu_links(four)
    assert links == {
        "0-1": "NV4",
        "0-2": "SYS",
        "0-3": "SYS",
        "1-2": "SYS",
        "1-3": "SYS",
        "2-3": "NV4",
    }
    assert interconnect(links.values()) == "pcie"
    assert interconnect(["NV18"] * 28) == "nvlink"
