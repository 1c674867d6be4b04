"""SGLang's settings (``engine=sglang``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from specexp.core.schemas.checks import ConfigError
from specexp.core.schemas.engine import EngineConfig


@dataclass
class SGLangConfig(EngineConfig):
    name: str = "sglang"
    port: int = 30000
    # A real Kimi-K2.5 load takes about ten minutes.
    ready_timeout_s: float = 1800.0
    # Requests the server runs at once, pinned for every arm: left unset, SGLang caps
    # EAGLE-3, STANDALONE and NGRAM at 48 and sizes the baseline by memory (0.5.9
    # server_args.py _handle_speculative_decoding, 0.5.23 arg_groups/speculative_hook.py),
    # so arms above 48 streams would differ in capacity, not only in speculation.
    max_running_requests: int = 64
    # Batch sizes captured as CUDA graphs, pinned for every arm: left unset, SGLang captures
    # a different list with speculation than without (0.5.9 server_args.py
    # _generate_cuda_graph_batch_sizes, 0.5.23 arg_groups/cuda_graph_hook.py). This is its
    # speculative list up to the request cap: every batch the cap allows is captured.
    cuda_graph_batch_sizes: list[int] = field(
        default_factory=lambda: [*range(1, 9), *range(10, 33, 2), *range(40, 65, 4)]
    )
    mem_fraction_static: Optional[float] = None
    random_seed: Optional[int] = None
    enable_metrics: bool = True
    # SGLang's own code for the stack's release, run with specexp's interpreter where the
    # stack's interpreter is not here (its choices are predicted from it).
    sources: Optional[str] = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.cuda_graph_batch_sizes or min(self.cuda_graph_batch_sizes) < 1:
            raise ConfigError(
                "engine.cuda_graph_batch_sizes must list positive batch sizes, got "
                f"{self.cuda_graph_batch_sizes}"
            )
