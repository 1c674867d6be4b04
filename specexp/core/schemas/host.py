"""The host settings: what this machine lends to the servers of the jobs running on it."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Optional


class GpuInterconnect(StrEnum):
    nvlink = "nvlink"
    pcie = "pcie"


@dataclass
class HostConfig:
    """What this machine lends to the servers of jobs running on it at the same time."""

    # GPU ids to lease to servers; null: $CUDA_VISIBLE_DEVICES, else every GPU nvidia-smi lists.
    gpus: Optional[list[str]] = None
    # CPU cores to lease to CPU servers (each takes as many as it runs threads); null: the
    # cores this process may run on.
    cpus: Optional[list[int]] = None
    # Lock files of GPU, core and port leases; must be local to the host (node-local /tmp on
    # Slurm).
    lease_dir: str = "/tmp/specexp-leases"
    # How long a job waits for GPUs or cores that other jobs on the host hold.
    lease_wait_s: float = 86400.0
    # The GPUs' compute capability (e.g. "9.0" H100/H200, "10.0" B200, "12.0" RTX PRO 6000)
    # and how they are connected, so that what an engine decides by itself from them can be
    # predicted before launch; null: unknown (the dry run says what that leaves open).
    gpu_compute_capability: Optional[str] = None
    gpu_interconnect: Optional[GpuInterconnect] = None
