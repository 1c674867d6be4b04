"""The allreduce_backend config group: the collective implementation asked for."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class AllreduceBackend(StrEnum):
    auto = "auto"
    nccl = "nccl"
    custom = "custom"
    flashinfer_fusion = "flashinfer_fusion"
    torch_symm_mem = "torch_symm_mem"


@dataclass
class AllreduceBackendConfig:
    # "auto" passes no flag; the others ask for one collective implementation.
    name: AllreduceBackend = AllreduceBackend.auto
    # The reference story ran FlashInfer's fusion together with torch symmetric memory.
    torch_symm_mem: bool = False
