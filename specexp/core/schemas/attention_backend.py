"""The attention_backend config group: the attention backends config groups name."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class AttentionBackend(StrEnum):
    """Every attention backend a config group names; each engine supports a subset."""

    auto = "auto"  # passes no flag: the engine's own default stays in force
    triton = "triton"
    flashinfer = "flashinfer"
    fa3 = "fa3"
    fa4 = "fa4"
    trtllm_mha = "trtllm_mha"
    flashmla = "flashmla"
    torch_native = "torch_native"
    flash_attn = "flash_attn"
    no_flash_attn = "no_flash_attn"


@dataclass
class AttentionBackendConfig:
    name: AttentionBackend = AttentionBackend.auto
