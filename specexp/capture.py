"""What hardware a run measured on, recorded as tags so results are compared like for like."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from functools import lru_cache


@lru_cache(maxsize=1)
def hardware() -> dict[str, str]:
    """GPU model and count (via nvidia-smi when present), CPU model and core count."""
    tags = {"cpu_model": _cpu_model(), "cpu_count": str(os.cpu_count() or 0), "gpu_count": "0", "gpu_name": ""}
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=name,compute_cap", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=30)
            rows = [line.split(",") for line in out.stdout.strip().splitlines() if line.strip()]
            if out.returncode == 0 and rows:
                tags.update(gpu_count=str(len(rows)), gpu_name=rows[0][0].strip(),
                            gpu_compute_capability=rows[0][-1].strip())
        except (OSError, subprocess.TimeoutExpired):
            pass
    tags["hardware"] = (f"{tags['gpu_count']}x {tags['gpu_name']}" if tags["gpu_count"] != "0"
                        else f"CPU: {tags['cpu_model']} ({tags['cpu_count']} cores)")
    return tags


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
