"""vLLM's settings (``engine=vllm``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from specexp.core.schemas.engine import EngineConfig


@dataclass
class VLLMConfig(EngineConfig):
    name: str = "vllm"
    port: int = 0  # a free one at launch: two runs on one node never share a port
    ready_timeout_s: float = 1800.0
    # Requests the server runs at once, pinned for every arm (the same cap as SGLang's):
    # unset, vLLM picks it by device and entry point (arg_utils.py _set_default_args). With
    # it pinned, vLLM's default CUDA-graph sizes (min(2 x cap x (1 + drafted), 512) tokens,
    # config/vllm.py _set_cudagraph_sizes) cover every decode batch the cap allows in every
    # arm drafting up to 7 tokens.
    max_num_seqs: int = 64
    gpu_memory_utilization: Optional[float] = None
    seed: Optional[int] = None
