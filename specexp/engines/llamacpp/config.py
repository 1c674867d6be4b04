"""llama.cpp's settings (``engine=llamacpp``)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Optional

from specexp.core.schemas.engine import EngineConfig


class SplitMode(StrEnum):
    """How llama.cpp spreads one model over several GPUs (``--split-mode``)."""

    none = "none"  # one GPU only
    layer = "layer"  # whole layers and their KV per GPU, run one after another (pipelined)
    row = "row"  # weight rows split, results gathered on the main GPU
    tensor = "tensor"  # weights and KV split, partial sums all-reduced: tensor parallel


@dataclass
class LlamaCppConfig(EngineConfig):
    name: str = "llamacpp"
    ready_timeout_s: float = 60.0
    # Null: every core the host lends (host.cpus) but one, which the client measures from
    # (on two cores: 1, the advice for small machines).
    threads: Optional[int] = None
    # Context in tokens, split evenly over the slots (each share rounded up to 256 tokens).
    # Null: sized so that every slot holds a whole request (prompt + workload.max_tokens);
    # set, it must hold one too, or the configuration is refused before launch.
    ctx_size: Optional[int] = None
    # Server slots; null means one per concurrent stream.
    parallel_slots: Optional[int] = None
    seed: int = 0
    # Stream i is always served by slot i, so that a batch of N streams is slots 0..N-1.
    # llama.cpp batches only consecutive slot ids in one forward pass without a unified KV
    # cache (src/llama-batch.cpp split_equal); left to choose, it routes a request to the
    # slot whose cached prompt is most like it, else the least recently used one - slots
    # scattered by the runs before, and fewer streams per forward pass.
    pin_slots: bool = True
    # One KV buffer shared by every slot (--kv-unified), which batches any slots together;
    # idle slots' cells stay in it and widen every slot's attention until erased, so they
    # are erased before each run when workload.caches=none.
    kv_unified: bool = False
    # How one server spreads over its engine.gpus GPUs; null: tensor over several (the shape
    # of tensor parallel, partial sums all-reduced across GPUs every layer), llama.cpp's own
    # default on one.
    split_mode: Optional[SplitMode] = None
